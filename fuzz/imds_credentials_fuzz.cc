// libFuzzer target: the IMDS instance-role credentials document (storage/s3/credentials.h)
// gets arbitrary bytes, as a broken or hostile metadata endpoint could answer. It must never
// crash; what it accepts must be usable in a signed request (non-empty printable ASCII, an
// expiration); what it refuses must say so briefly and the same way whatever the secrets were:
// swapping SecretAccessKey and Token for stand-ins of the same class (length, printable or
// not) must not change the message, so no message can carry a secret.
#include <boost/json/parse.hpp>
#include <boost/json/serialize.hpp>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "storage/s3/credentials.h"

using namespace shardguard::storage::s3;

namespace {

bool printable(std::string_view s) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (c < 0x21 || c > 0x7e) return false;
  return true;
}

std::string message_of(std::string_view doc) {
  auto r = parse_imds_credentials(doc);
  return r.ok() ? std::string() : r.error().message();
}

// Documents Boost.JSON reads as an object: the same one re-serialised, and with its secrets
// replaced, must fail (or pass) alike.
void check_secret_independence(std::string_view text) {
  boost::system::error_code ec;
  boost::json::value original = boost::json::parse(text, ec);
  if (ec || !original.is_object()) return;
  boost::json::value swapped = original;
  bool any = false;
  for (const char* name : {"SecretAccessKey", "Token"}) {
    boost::json::value* v = swapped.get_object().if_contains(name);
    if (v == nullptr || !v->is_string() || v->get_string().empty()) continue;
    std::string stand_in(v->get_string().size(), 'Z');
    if (!printable(v->get_string())) stand_in.back() = ' ';
    *v = stand_in;
    any = true;
  }
  if (!any) return;
  const std::string a = boost::json::serialize(original);
  const std::string b = boost::json::serialize(swapped);
  // Escapes make the two differ in length; keep both clear of the size limit.
  if (a.size() > kMaxImdsDocumentBytes / 2 || b.size() > kMaxImdsDocumentBytes / 2) return;
  if (message_of(a) != message_of(b)) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto c = parse_imds_credentials(text);
  if (c.ok()) {
    if (!printable(c->access_key_id) || !printable(c->secret_access_key) ||
        !printable(c->session_token) || !c->expiration.has_value()) {
      std::abort();
    }
  } else {
    const std::string& message = c.error().message();
    if (message.size() > 1024 || message.rfind("IMDS credentials: ", 0) != 0) std::abort();
  }
  check_secret_independence(text);
  return 0;
}
