#include "storage/http.h"

namespace shardguard::storage {

std::optional<std::string> HttpResponse::header(std::string_view lower_name) const {
  for (const auto& h : headers)
    if (h.name == lower_name) return h.value;
  return std::nullopt;
}

std::string describe_request(std::string_view method, std::string_view url) {
  // The query may carry a signature or an upload id: never in a message.
  const auto q = url.find('?');
  return std::string(method) + " " + std::string(url.substr(0, q));
}

}  // namespace shardguard::storage
