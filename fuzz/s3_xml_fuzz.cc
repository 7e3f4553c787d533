// libFuzzer target: the S3 XML of storage/s3/s3_xml.h. The first byte chooses what the rest
// goes to: one of the answer parsers (which must never crash, and whose results must keep the
// header's promises), url_decode, or one of the two request bodies, built from the rest split
// at NUL bytes and read back through expat, where every key or ETag must come back unchanged.
#include <expat.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "storage/s3/s3_xml.h"

using namespace shardguard;
using namespace shardguard::storage::s3;

namespace {

void check(bool promise) {
  if (!promise) std::abort();
}

// Failures are refusals (kCorrupt) or an S3 <Error> document (kIo), nothing else.
template <typename T>
bool parsed(const Result<T>& r) {
  if (!r.ok()) {
    const ErrorCode code = r.error().code();
    check(code == ErrorCode::kCorrupt || code == ErrorCode::kIo);
    check(!r.error().message().empty());
  }
  return r.ok();
}

void check_key(std::string_view key) {
  check(!key.empty());
  check(key.find('\0') == std::string_view::npos);
}

void check_etag(std::string_view etag) {
  check(etag.size() < 2 || etag.front() != '"' || etag.back() != '"');
}

// The text of every `element` in `xml`, by expat alone; aborts when `xml` is not well-formed.
std::vector<std::string> texts_of(std::string_view xml, std::string_view element) {
  struct State {
    std::string_view element;
    bool inside = false;
    std::string text;
    std::vector<std::string> out;
  } state;
  state.element = element;
  XML_Parser p = XML_ParserCreate(nullptr);
  XML_SetUserData(p, &state);
  XML_SetElementHandler(
      p,
      [](void* u, const XML_Char* name, const XML_Char**) {
        auto* s = static_cast<State*>(u);
        if (s->element == name) s->inside = true, s->text.clear();
      },
      [](void* u, const XML_Char* name) {
        auto* s = static_cast<State*>(u);
        if (s->element == name) s->inside = false, s->out.push_back(s->text);
      });
  XML_SetCharacterDataHandler(p, [](void* u, const XML_Char* d, int n) {
    auto* s = static_cast<State*>(u);
    if (s->inside) s->text.append(d, static_cast<size_t>(n));
  });
  const bool ok = XML_Parse(p, xml.data(), static_cast<int>(xml.size()), XML_TRUE) == XML_STATUS_OK;
  XML_ParserFree(p);
  check(ok);
  return state.out;
}

std::vector<std::string> split_at_nul(std::string_view rest) {
  std::vector<std::string> out;
  for (size_t start = 0;;) {
    const size_t end = rest.find('\0', start);
    out.emplace_back(rest.substr(start, end - start));
    if (end == std::string_view::npos || out.size() > kMaxDeleteKeys) return out;
    start = end + 1;
  }
}

void delete_body(std::string_view rest, bool quiet) {
  const std::vector<std::string> keys = split_at_nul(rest);
  auto body = delete_objects_body(keys, quiet);
  if (!body.ok()) return check(body.error().code() == ErrorCode::kInvalid);
  check(texts_of(*body, "Key") == keys);
  check(texts_of(*body, "Quiet") == std::vector<std::string>{quiet ? "true" : "false"});
}

void complete_body(std::string_view rest) {
  std::vector<CompletedPart> parts;
  std::vector<std::string> want;
  uint32_t number = 0;
  for (std::string& etag : split_at_nul(rest)) {
    number += 1 + static_cast<uint32_t>(etag.size() % 3);  // ascending, with gaps
    std::string_view bare = etag;
    if (bare.size() >= 2 && bare.front() == '"' && bare.back() == '"')
      bare = bare.substr(1, bare.size() - 2);
    want.push_back("\"" + std::string(bare) + "\"");
    parts.push_back({number, std::move(etag)});
  }
  auto body = complete_multipart_body(parts);
  if (!body.ok()) return check(body.error().code() == ErrorCode::kInvalid);
  check(texts_of(*body, "ETag") == want);
  check(texts_of(*body, "PartNumber").size() == parts.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 12) {
    case 0:
      (void)parsed(parse_error(rest));
      break;
    case 1:
    case 2:
      if (auto r = parse_list_objects_v2(rest, data[0] % 12 == 2); parsed(r)) {
        check(r->contents.size() + r->common_prefixes.size() <= kMaxEntries);
        check(!r->is_truncated || !r->next_continuation_token.empty());
        for (const auto& o : r->contents) check_key(o.key), check_etag(o.etag);
        for (const auto& prefix : r->common_prefixes) check_key(prefix);
      }
      break;
    case 3:
      if (auto r = parse_initiate_multipart(rest); parsed(r)) check(!r->empty());
      break;
    case 4:
      if (auto r = parse_complete_multipart(rest); parsed(r)) check_etag(r->etag);
      break;
    case 5:
    case 6:
      if (auto r = parse_list_multipart_uploads(rest, data[0] % 12 == 6); parsed(r)) {
        check(r->uploads.size() <= kMaxEntries);
        check(!r->is_truncated || !r->next_key_marker.empty());
        for (const auto& u : r->uploads) check_key(u.key), check(!u.upload_id.empty());
      }
      break;
    case 7:
      if (auto r = parse_delete_result(rest); parsed(r)) {
        check(r->deleted.size() + r->errors.size() <= kMaxEntries);
        for (const auto& key : r->deleted) check_key(key);
        for (const auto& failure : r->errors) check_key(failure.key);
      }
      break;
    case 8:
      if (auto r = url_decode(rest); r.ok()) {
        check(r->find('\0') == std::string::npos);
        check(r->size() <= rest.size());
      } else {
        check(r.error().code() == ErrorCode::kCorrupt);
      }
      break;
    case 9:
    case 10:
      delete_body(rest, data[0] % 12 == 10);
      break;
    default:
      complete_body(rest);
  }
  return 0;
}
