#include "storage/s3/s3_xml.h"

#include <algorithm>
#include <charconv>
#include <exception>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <new>
#include <optional>
#include <utility>

// Debian's libexpat is built with XML_DTD, but expat.h declares the billion-laughs guard
// (expat 2.4+) only when the includer defines XML_DTD as well.
#ifndef XML_DTD
#define XML_DTD
#endif
#include <expat.h>

namespace shardguard::storage::s3 {
namespace {

constexpr std::string_view kErrorRoot = "Error";
constexpr std::string_view kXmlHeader = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
constexpr std::string_view kS3Namespace = "http://s3.amazonaws.com/doc/2006-03-01/";

// ---------------------------------------------------------------------------------------------
// Text: messages, UTF-8, numbers.

// The code point at text[*at], moving *at past it; -1 for bytes that are not UTF-8 (overlong
// forms, surrogates and values above U+10FFFF included).
int32_t next_code_point(std::string_view text, size_t* at) {
  const auto b0 = static_cast<unsigned char>(text[*at]);
  size_t len = 1;
  int32_t cp = b0, min = 0;
  if (b0 >= 0x80) {
    if ((b0 & 0xE0) == 0xC0) {
      len = 2, cp = b0 & 0x1F, min = 0x80;
    } else if ((b0 & 0xF0) == 0xE0) {
      len = 3, cp = b0 & 0x0F, min = 0x800;
    } else if ((b0 & 0xF8) == 0xF0) {
      len = 4, cp = b0 & 0x07, min = 0x10000;
    } else {
      return -1;
    }
  }
  if (text.size() - *at < len) return -1;
  for (size_t i = 1; i < len; ++i) {
    const auto b = static_cast<unsigned char>(text[*at + i]);
    if ((b & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
  *at += len;
  return cp;
}

// `text` fit for a message: at most `max` bytes (cut at a character boundary), control
// characters and bytes that are not UTF-8 as \xNN. Servers choose these bytes, and a message
// must stay one readable line of UTF-8.
std::string clipped(std::string_view text, size_t max = 80) {
  bool cut = false;
  if (text.size() > max) {
    size_t end = max;
    while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
    text = text.substr(0, end);
    cut = true;
  }
  std::string out;
  for (size_t at = 0; at < text.size();) {
    const size_t start = at;
    const int32_t cp = next_code_point(text, &at);
    if (cp >= 0x20 && cp != 0x7f) {
      out.append(text.substr(start, at - start));
      continue;
    }
    static constexpr char kHex[] = "0123456789abcdef";
    const auto u = static_cast<unsigned char>(text[start]);
    out += "\\x";
    out += kHex[u >> 4];
    out += kHex[u & 15];
    at = start + 1;
  }
  if (cut) out += "...";
  return out;
}

std::string quoted(std::string_view text) { return "'" + clipped(text) + "'"; }

std::string tag(std::string_view name) { return "<" + clipped(name) + ">"; }

bool valid_utf8(std::string_view text) {
  for (size_t at = 0; at < text.size();)
    if (next_code_point(text, &at) < 0) return false;
  return true;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

Result<uint64_t> number(std::string_view element, const std::string& text) {
  uint64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc::result_out_of_range)
    return Error(ErrorCode::kCorrupt, tag(element) + " " + quoted(text) + " is out of range");
  if (ec != std::errc() || ptr != end)
    return Error(ErrorCode::kCorrupt, tag(element) + " " + quoted(text) + " is not a number");
  return value;
}

Result<bool> boolean(std::string_view element, const std::optional<std::string>& text) {
  if (!text) return Error(ErrorCode::kCorrupt, "no " + tag(element));
  if (*text == "true") return true;
  if (*text == "false") return false;
  return Error(ErrorCode::kCorrupt,
               tag(element) + " " + quoted(*text) + " is neither 'true' nor 'false'");
}

std::string_view unquoted(std::string_view etag) {
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"')
    return etag.substr(1, etag.size() - 2);
  return etag;
}

// ---------------------------------------------------------------------------------------------
// Reading: expat events to a Document, with the limits of the header.

using Path = std::vector<std::string>;  // local names of the open elements, the root first

// An element that has just closed.
struct Closed {
  const Path& path;   // its own name last
  std::string text;   // its character data, however many callbacks brought it
  bool had_children;  // it held elements, so `text` is not a value
};

// What one kind of answer keeps of its elements; an Error stops the parse.
class Document {
 public:
  virtual ~Document() = default;
  virtual Status open(const Path& path) { return ok_status(); }
  virtual Status close(Closed& closed) = 0;
};

// True when `path` is the root and then exactly `below`.
bool at(const Path& path, std::initializer_list<std::string_view> below) {
  if (path.size() != below.size() + 1) return false;
  size_t i = 1;
  for (const std::string_view name : below)
    if (path[i++] != name) return false;
  return true;
}

// Keeps a value once: a second copy in the same record, or one holding elements, is refused.
Status take(Closed& closed, std::optional<std::string>* field) {
  const Path& path = closed.path;
  if (closed.had_children)
    return Error(ErrorCode::kCorrupt, tag(path.back()) + " holds elements where a value belongs");
  if (field->has_value()) {
    std::string where = path.size() > 2 ? " in one " + tag(path[path.size() - 2]) : "";
    return Error(ErrorCode::kCorrupt, tag(path.back()) + " appears twice" + where);
  }
  *field = std::move(closed.text);
  return ok_status();
}

class ErrorDocument final : public Document {
 public:
  Status close(Closed& c) override {
    if (at(c.path, {"Code"})) return take(c, &code_);
    if (at(c.path, {"Message"})) return take(c, &message_);
    if (at(c.path, {"Resource"})) return take(c, &resource_);
    if (at(c.path, {"RequestId"})) return take(c, &request_id_);
    return ok_status();
  }
  ErrorBody body() && {
    return ErrorBody{std::move(code_).value_or(""), std::move(message_).value_or(""),
                     std::move(resource_).value_or(""), std::move(request_id_).value_or("")};
  }

 private:
  std::optional<std::string> code_, message_, resource_, request_id_;
};

// One parse: expat's callbacks land here through the user-data pointer.
struct ReadState {
  std::string_view root;
  Document* doc = nullptr;  // the call's, or &error_doc once the root turned out to be <Error>
  ErrorDocument error_doc;
  bool error_root = false;
  Path path;
  std::vector<bool> had_children;  // beside `path`
  std::string text;
  std::optional<Error> error;
  XML_Parser parser = nullptr;
};

void stop(ReadState* s, Error error) {
  if (!s->error) s->error = std::move(error);
  XML_StopParser(s->parser, XML_FALSE);
}

// Runs one callback's work; nothing may unwind through expat's C frames.
template <typename F>
void guarded(void* user, F&& step) {
  auto* s = static_cast<ReadState*>(user);
  if (s->error) return;  // expat may deliver a few more events after a stop
  try {
    Status status = step(s);
    if (!status.ok()) stop(s, std::move(status).error());
  } catch (const std::bad_alloc&) {
    stop(s, Error(ErrorCode::kInternal, "out of memory"));
  } catch (...) {
    stop(s, Error(ErrorCode::kInternal, "unexpected exception"));
  }
}

std::string_view local_name(const XML_Char* name) {
  const std::string_view full(name);
  const size_t colon = full.rfind(':');
  return colon == std::string_view::npos ? full : full.substr(colon + 1);
}

void XMLCALL on_start(void* user, const XML_Char* name, const XML_Char** /*attributes*/) {
  guarded(user, [name](ReadState* s) -> Status {
    if (s->path.size() >= static_cast<size_t>(kMaxDepth))
      return Error(ErrorCode::kCorrupt, "elements nested deeper than " + std::to_string(kMaxDepth));
    const std::string_view local = local_name(name);
    if (!s->path.empty()) {
      s->had_children.back() = true;
    } else if (local == kErrorRoot && s->root != kErrorRoot) {
      s->doc = &s->error_doc;
      s->error_root = true;
    } else if (local != s->root) {
      return Error(ErrorCode::kCorrupt,
                   "root element " + tag(local) + ", expected " + tag(s->root));
    }
    s->path.emplace_back(local);
    s->had_children.push_back(false);
    s->text.clear();
    return s->doc->open(s->path);
  });
}

void XMLCALL on_end(void* user, const XML_Char* /*name*/) {
  guarded(user, [](ReadState* s) -> Status {
    Closed closed{s->path, std::move(s->text), s->had_children.back()};
    s->text.clear();
    Status status = s->doc->close(closed);
    s->path.pop_back();
    s->had_children.pop_back();
    return status;
  });
}

void XMLCALL on_text(void* user, const XML_Char* data, int len) {
  guarded(user, [data, len](ReadState* s) -> Status {
    s->text.append(data, static_cast<size_t>(len));
    return ok_status();
  });
}

void XMLCALL on_doctype(void* user, const XML_Char*, const XML_Char*, const XML_Char*, int) {
  stop(static_cast<ReadState*>(user),
       Error(ErrorCode::kCorrupt, "a DOCTYPE declaration (answers must carry no DTD)"));
}

void XMLCALL on_entity(void* user, const XML_Char*, int, const XML_Char*, int, const XML_Char*,
                       const XML_Char*, const XML_Char*, const XML_Char*) {
  stop(static_cast<ReadState*>(user),
       Error(ErrorCode::kCorrupt, "an entity declaration (answers must carry no DTD)"));
}

Status read_xml(std::string_view xml, ReadState& s) {
  if (xml.size() > kMaxAnswerBytes)
    return Error(ErrorCode::kCorrupt, std::to_string(xml.size()) + " bytes, more than the " +
                                          std::to_string(kMaxAnswerBytes) + " allowed");
  const std::unique_ptr<XML_ParserStruct, decltype(&XML_ParserFree)> parser(
      XML_ParserCreate(nullptr), &XML_ParserFree);
  if (!parser) return Error(ErrorCode::kInternal, "out of memory (XML_ParserCreate)");
  XML_Parser p = parser.get();
  s.parser = p;
  XML_SetUserData(p, &s);
  XML_SetElementHandler(p, on_start, on_end);
  XML_SetCharacterDataHandler(p, on_text);
  // A DTD is refused where it starts, so no entity can ever be declared; the amplification
  // guard is the second line should that ever change.
  XML_SetStartDoctypeDeclHandler(p, on_doctype);
  XML_SetEntityDeclHandler(p, on_entity);
  XML_SetParamEntityParsing(p, XML_PARAM_ENTITY_PARSING_NEVER);
  XML_SetBillionLaughsAttackProtectionMaximumAmplification(p, 10.0f);
  XML_SetBillionLaughsAttackProtectionActivationThreshold(p, 1u << 20);
  const XML_Status status = XML_Parse(p, xml.data(), static_cast<int>(xml.size()), XML_TRUE);
  if (s.error) return *s.error;
  if (status != XML_STATUS_OK) {
    const XML_LChar* reason = XML_ErrorString(XML_GetErrorCode(p));
    return Error(ErrorCode::kCorrupt, "not well-formed XML at line " +
                                          std::to_string(XML_GetCurrentLineNumber(p)) + " column " +
                                          std::to_string(XML_GetCurrentColumnNumber(p)) + ": " +
                                          (reason != nullptr ? reason : "unknown expat error"));
  }
  return ok_status();
}

Error s3_error(const std::string& what, const ErrorBody& body) {
  std::string message =
      what + ": S3 error " + (body.code.empty() ? "(no code)" : clipped(body.code));
  if (!body.message.empty()) message += ": " + clipped(body.message, 300);
  if (!body.request_id.empty()) message += " (request id " + clipped(body.request_id) + ")";
  return Error(ErrorCode::kIo, std::move(message));
}

// Reads `xml`, the answer to `call`, into `doc`; an <Error> document is kIo, every other
// failure kCorrupt, each prefixed "<call> answer: ".
Status read_answer(std::string_view call, std::string_view xml, std::string_view root,
                   Document& doc) {
  ReadState s;
  s.root = root;
  s.doc = &doc;
  Status status = read_xml(xml, s);
  const std::string what = std::string(call) + " answer";
  if (!status.ok()) return std::move(status).error().context(what);
  if (s.error_root) return s3_error(what, std::move(s.error_doc).body());
  return ok_status();
}

// Runs a public function's body; an exception (std::bad_alloc) becomes kInternal.
template <typename T, typename F>
Result<T> no_throw(std::string_view what, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return Error(ErrorCode::kInternal, std::string(what) + ": " + e.what());
  } catch (...) {
    return Error(ErrorCode::kInternal, std::string(what) + ": unexpected exception");
  }
}

// Whether the answer says its keys are url-encoded.
Result<bool> declares_url(const std::optional<std::string>& encoding_type) {
  if (!encoding_type) return false;
  if (*encoding_type == "url") return true;
  return Error(ErrorCode::kCorrupt, "<EncodingType> " + quoted(*encoding_type) + " is not 'url'");
}

// A key (or prefix, or marker) as the answer sent it: never empty, decoded when `encoded`.
Result<std::string> key_text(std::string_view element, std::optional<std::string> raw,
                             std::string_view record, bool encoded) {
  if (!raw) return Error(ErrorCode::kCorrupt, tag(record) + " entry without " + tag(element));
  if (raw->empty()) return Error(ErrorCode::kCorrupt, "an empty " + tag(element));
  if (!encoded) return std::move(*raw);
  auto decoded = url_decode(*raw);
  if (!decoded.ok()) return std::move(decoded).error().context(tag(element));
  return decoded;
}

// Adds a record to `list` unless the answer already holds kMaxEntries.
template <typename List>
Status add_entry(List* list, size_t held) {
  if (held >= kMaxEntries)
    return Error(ErrorCode::kCorrupt, "more than " + std::to_string(kMaxEntries) + " entries");
  list->emplace_back();
  return ok_status();
}

// ---------------------------------------------------------------------------------------------
// The answers.

class ListObjectsDocument final : public Document {
 public:
  static constexpr std::string_view kRoot = "ListBucketResult";

  Status open(const Path& p) override {
    const size_t held = objects_.size() + prefixes_.size();
    if (at(p, {"Contents"})) return add_entry(&objects_, held);
    if (at(p, {"CommonPrefixes"})) return add_entry(&prefixes_, held);
    return ok_status();
  }

  Status close(Closed& c) override {
    const Path& p = c.path;
    if (p.size() == 3 && p[1] == "Contents") {
      Raw& o = objects_.back();
      if (p[2] == "Key") return take(c, &o.key);
      if (p[2] == "Size") return take(c, &o.size);
      if (p[2] == "ETag") return take(c, &o.etag);
      if (p[2] == "LastModified") return take(c, &o.last_modified);
    }
    if (at(p, {"CommonPrefixes", "Prefix"})) return take(c, &prefixes_.back());
    if (at(p, {"IsTruncated"})) return take(c, &is_truncated_);
    if (at(p, {"NextContinuationToken"})) return take(c, &next_token_);
    if (at(p, {"EncodingType"})) return take(c, &encoding_type_);
    return ok_status();
  }

  Result<ListObjectsResult> finish(bool url_requested) && {
    SG_ASSIGN_OR_RETURN(const bool encoded, declares_url(encoding_type_));
    const bool has_keys = !objects_.empty() || !prefixes_.empty();
    if (url_requested && !encoded && has_keys)
      return Error(ErrorCode::kCorrupt,
                   "the request asked for encoding-type=url and the answer has no "
                   "<EncodingType>url</EncodingType>, so its keys cannot be read safely");
    ListObjectsResult out;
    SG_ASSIGN_OR_RETURN(out.is_truncated, boolean("IsTruncated", is_truncated_));
    out.next_continuation_token = std::move(next_token_).value_or("");
    if (out.is_truncated && out.next_continuation_token.empty())
      return Error(ErrorCode::kCorrupt, "<IsTruncated> is true without <NextContinuationToken>");
    out.contents.reserve(objects_.size());
    for (Raw& raw : objects_) {
      ListedObject o;
      SG_ASSIGN_OR_RETURN(o.key, key_text("Key", std::move(raw.key), "Contents", encoded));
      if (!raw.size)
        return Error(ErrorCode::kCorrupt, "the <Contents> of " + quoted(o.key) + " has no <Size>");
      SG_ASSIGN_OR_RETURN(o.size, number("Size", *raw.size));
      o.etag = unquoted(raw.etag.value_or(""));
      o.last_modified = std::move(raw.last_modified).value_or("");
      out.contents.push_back(std::move(o));
    }
    out.common_prefixes.reserve(prefixes_.size());
    for (auto& raw : prefixes_) {
      SG_ASSIGN_OR_RETURN(auto prefix,
                          key_text("Prefix", std::move(raw), "CommonPrefixes", encoded));
      out.common_prefixes.push_back(std::move(prefix));
    }
    return out;
  }

 private:
  struct Raw {
    std::optional<std::string> key, size, etag, last_modified;
  };
  std::vector<Raw> objects_;
  std::vector<std::optional<std::string>> prefixes_;
  std::optional<std::string> is_truncated_, next_token_, encoding_type_;
};

class ListUploadsDocument final : public Document {
 public:
  static constexpr std::string_view kRoot = "ListMultipartUploadsResult";

  Status open(const Path& p) override {
    if (at(p, {"Upload"})) return add_entry(&uploads_, uploads_.size());
    return ok_status();
  }

  Status close(Closed& c) override {
    const Path& p = c.path;
    if (p.size() == 3 && p[1] == "Upload") {
      Raw& u = uploads_.back();
      if (p[2] == "Key") return take(c, &u.key);
      if (p[2] == "UploadId") return take(c, &u.upload_id);
      if (p[2] == "Initiated") return take(c, &u.initiated);
    }
    if (at(p, {"IsTruncated"})) return take(c, &is_truncated_);
    if (at(p, {"NextKeyMarker"})) return take(c, &next_key_marker_);
    if (at(p, {"NextUploadIdMarker"})) return take(c, &next_upload_id_marker_);
    if (at(p, {"EncodingType"})) return take(c, &encoding_type_);
    return ok_status();
  }

  Result<ListUploadsResult> finish(bool url_requested) && {
    SG_ASSIGN_OR_RETURN(const bool declared, declares_url(encoding_type_));
    ListUploadsResult out;
    SG_ASSIGN_OR_RETURN(out.is_truncated, boolean("IsTruncated", is_truncated_));
    if (next_key_marker_ && !next_key_marker_->empty()) {
      SG_ASSIGN_OR_RETURN(out.next_key_marker,
                          key_text("NextKeyMarker", std::move(next_key_marker_),
                                   "ListMultipartUploadsResult", declared));
    }
    out.next_upload_id_marker = std::move(next_upload_id_marker_).value_or("");
    if (out.is_truncated && out.next_key_marker.empty())
      return Error(ErrorCode::kCorrupt, "<IsTruncated> is true without <NextKeyMarker>");
    out.uploads.reserve(uploads_.size());
    for (Raw& raw : uploads_) {
      MultipartUpload u;
      SG_ASSIGN_OR_RETURN(u.key,
                          key_text("Key", std::move(raw.key), "Upload", url_requested || declared));
      if (!raw.upload_id || raw.upload_id->empty())
        return Error(ErrorCode::kCorrupt,
                     "the <Upload> of " + quoted(u.key) + " has no <UploadId>");
      u.upload_id = std::move(*raw.upload_id);
      u.initiated = std::move(raw.initiated).value_or("");
      out.uploads.push_back(std::move(u));
    }
    return out;
  }

 private:
  struct Raw {
    std::optional<std::string> key, upload_id, initiated;
  };
  std::vector<Raw> uploads_;
  std::optional<std::string> is_truncated_, next_key_marker_, next_upload_id_marker_,
      encoding_type_;
};

class DeleteDocument final : public Document {
 public:
  static constexpr std::string_view kRoot = "DeleteResult";

  Status open(const Path& p) override {
    const size_t held = deleted_.size() + failed_.size();
    if (at(p, {"Deleted"})) return add_entry(&deleted_, held);
    if (at(p, {"Error"})) return add_entry(&failed_, held);
    return ok_status();
  }

  Status close(Closed& c) override {
    if (at(c.path, {"Deleted", "Key"})) return take(c, &deleted_.back());
    if (c.path.size() == 3 && c.path[1] == "Error") {
      Raw& f = failed_.back();
      if (c.path[2] == "Key") return take(c, &f.key);
      if (c.path[2] == "Code") return take(c, &f.code);
      if (c.path[2] == "Message") return take(c, &f.message);
    }
    return ok_status();
  }

  Result<DeleteResult> finish() && {
    DeleteResult out;
    out.deleted.reserve(deleted_.size());
    for (auto& raw : deleted_) {
      SG_ASSIGN_OR_RETURN(auto key, key_text("Key", std::move(raw), "Deleted", false));
      out.deleted.push_back(std::move(key));
    }
    out.errors.reserve(failed_.size());
    for (Raw& raw : failed_) {
      DeleteResult::Failure f;
      SG_ASSIGN_OR_RETURN(f.key, key_text("Key", std::move(raw.key), "Error", false));
      f.code = std::move(raw.code).value_or("");
      f.message = std::move(raw.message).value_or("");
      out.errors.push_back(std::move(f));
    }
    return out;
  }

 private:
  struct Raw {
    std::optional<std::string> key, code, message;
  };
  std::vector<std::optional<std::string>> deleted_;
  std::vector<Raw> failed_;
};

// A root holding one value we keep: InitiateMultipartUploadResult/UploadId and
// CompleteMultipartUploadResult/ETag.
class OneValueDocument final : public Document {
 public:
  explicit OneValueDocument(std::string_view element) : element_(element) {}
  Status close(Closed& c) override {
    return at(c.path, {element_}) ? take(c, &value_) : ok_status();
  }
  std::optional<std::string>& value() { return value_; }

 private:
  std::string_view element_;
  std::optional<std::string> value_;
};

// ---------------------------------------------------------------------------------------------
// Writing.

// Appends `text` as XML character data. kInvalid (naming `what`) for bytes that are not UTF-8
// or a character XML 1.0 cannot carry even escaped; tab, LF and CR become references so that
// the server's end-of-line handling cannot change them.
Status append_escaped(std::string* out, std::string_view text, const std::string& what) {
  struct Reference {
    int32_t cp;
    std::string_view text;
  };
  static constexpr Reference kReferences[] = {{'&', "&amp;"},  {'<', "&lt;"},    {'>', "&gt;"},
                                              {'"', "&quot;"}, {'\'', "&apos;"}, {'\t', "&#9;"},
                                              {'\n', "&#10;"}, {'\r', "&#13;"}};
  for (size_t at = 0; at < text.size();) {
    const size_t start = at;
    const int32_t cp = next_code_point(text, &at);
    if (cp < 0) return Error(ErrorCode::kInvalid, what + " " + quoted(text) + " is not UTF-8");
    const Reference* ref = std::find_if(std::begin(kReferences), std::end(kReferences),
                                        [cp](const Reference& r) { return r.cp == cp; });
    if (ref != std::end(kReferences)) {
      *out += ref->text;
    } else if (cp < 0x20 || cp == 0xFFFE || cp == 0xFFFF) {
      return Error(ErrorCode::kInvalid,
                   what + " " + quoted(text) + " holds a character XML 1.0 cannot carry");
    } else {
      out->append(text.substr(start, at - start));
    }
  }
  return ok_status();
}

std::string open_root(std::string_view name) {
  std::string out(kXmlHeader);
  out += "<";
  out += name;
  out += " xmlns=\"";
  out += kS3Namespace;
  out += "\">";
  return out;
}

}  // namespace

Result<std::string> url_decode(std::string_view encoded) {
  return no_throw<std::string>("url_decode", [&]() -> Result<std::string> {
    std::string out;
    out.reserve(encoded.size());
    for (size_t i = 0; i < encoded.size(); ++i) {
      const char c = encoded[i];
      if (c != '%') {
        out += c == '+' ? ' ' : c;
        continue;
      }
      const int hi = i + 1 < encoded.size() ? hex_value(encoded[i + 1]) : -1;
      const int lo = i + 2 < encoded.size() ? hex_value(encoded[i + 2]) : -1;
      if (hi < 0 || lo < 0)
        return Error(ErrorCode::kCorrupt, "url-encoded " + quoted(encoded) +
                                              ": bad %-escape at byte " + std::to_string(i));
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    }
    if (out.find('\0') != std::string::npos)
      return Error(ErrorCode::kCorrupt, "url-encoded " + quoted(encoded) + " decodes to a NUL");
    if (!valid_utf8(out))
      return Error(ErrorCode::kCorrupt,
                   "url-encoded " + quoted(encoded) + " decodes to bytes that are not UTF-8");
    return out;
  });
}

Result<ErrorBody> parse_error(std::string_view xml) {
  return no_throw<ErrorBody>("S3 error document", [&]() -> Result<ErrorBody> {
    ErrorDocument doc;
    SG_RETURN_IF_ERROR(read_answer("S3 error", xml, kErrorRoot, doc));
    return std::move(doc).body();
  });
}

Result<ListObjectsResult> parse_list_objects_v2(std::string_view xml, bool url_encoded_keys) {
  return no_throw<ListObjectsResult>("ListObjectsV2 answer", [&]() -> Result<ListObjectsResult> {
    ListObjectsDocument doc;
    SG_RETURN_IF_ERROR(read_answer("ListObjectsV2", xml, ListObjectsDocument::kRoot, doc));
    auto out = std::move(doc).finish(url_encoded_keys);
    if (!out.ok()) return std::move(out).error().context("ListObjectsV2 answer");
    return out;
  });
}

Result<std::string> parse_initiate_multipart(std::string_view xml) {
  return no_throw<std::string>("CreateMultipartUpload answer", [&]() -> Result<std::string> {
    OneValueDocument doc("UploadId");
    SG_RETURN_IF_ERROR(
        read_answer("CreateMultipartUpload", xml, "InitiateMultipartUploadResult", doc));
    if (!doc.value() || doc.value()->empty())
      return Error(ErrorCode::kCorrupt, "CreateMultipartUpload answer: no <UploadId>");
    return std::move(*doc.value());
  });
}

Result<CompleteResult> parse_complete_multipart(std::string_view xml) {
  return no_throw<CompleteResult>(
      "CompleteMultipartUpload answer", [&]() -> Result<CompleteResult> {
        OneValueDocument doc("ETag");
        SG_RETURN_IF_ERROR(
            read_answer("CompleteMultipartUpload", xml, "CompleteMultipartUploadResult", doc));
        return CompleteResult{std::string(unquoted(doc.value().value_or("")))};
      });
}

Result<ListUploadsResult> parse_list_multipart_uploads(std::string_view xml,
                                                       bool url_encoded_keys) {
  return no_throw<ListUploadsResult>(
      "ListMultipartUploads answer", [&]() -> Result<ListUploadsResult> {
        ListUploadsDocument doc;
        SG_RETURN_IF_ERROR(
            read_answer("ListMultipartUploads", xml, ListUploadsDocument::kRoot, doc));
        auto out = std::move(doc).finish(url_encoded_keys);
        if (!out.ok()) return std::move(out).error().context("ListMultipartUploads answer");
        return out;
      });
}

Result<DeleteResult> parse_delete_result(std::string_view xml) {
  return no_throw<DeleteResult>("DeleteObjects answer", [&]() -> Result<DeleteResult> {
    DeleteDocument doc;
    SG_RETURN_IF_ERROR(read_answer("DeleteObjects", xml, DeleteDocument::kRoot, doc));
    auto out = std::move(doc).finish();
    if (!out.ok()) return std::move(out).error().context("DeleteObjects answer");
    return out;
  });
}

Result<std::string> complete_multipart_body(std::span<const CompletedPart> parts) {
  constexpr std::string_view kWhat = "CompleteMultipartUpload body";
  return no_throw<std::string>(kWhat, [&]() -> Result<std::string> {
    if (parts.empty()) return Error(ErrorCode::kInvalid, std::string(kWhat) + ": no parts");
    std::string out = open_root("CompleteMultipartUpload");
    uint32_t previous = 0;
    for (const CompletedPart& part : parts) {
      const std::string n = std::to_string(part.number);
      if (part.number < 1 || part.number > kMaxPartNumber)
        return Error(ErrorCode::kInvalid, std::string(kWhat) + ": part number " + n +
                                              " is outside 1.." + std::to_string(kMaxPartNumber));
      if (part.number <= previous)
        return Error(ErrorCode::kInvalid, std::string(kWhat) + ": part " + n + " follows part " +
                                              std::to_string(previous) + " (numbers must ascend)");
      previous = part.number;
      const std::string_view etag = unquoted(part.etag);
      if (etag.empty())
        return Error(ErrorCode::kInvalid, std::string(kWhat) + ": part " + n + " has no ETag");
      out += "<Part><PartNumber>" + n + "</PartNumber><ETag>\"";
      SG_RETURN_IF_ERROR(append_escaped(&out, etag, std::string(kWhat) + ": ETag of part " + n));
      out += "\"</ETag></Part>";
    }
    out += "</CompleteMultipartUpload>";
    return out;
  });
}

Result<std::string> delete_objects_body(std::span<const std::string> keys, bool quiet) {
  constexpr std::string_view kWhat = "DeleteObjects body";
  return no_throw<std::string>(kWhat, [&]() -> Result<std::string> {
    if (keys.empty()) return Error(ErrorCode::kInvalid, std::string(kWhat) + ": no keys");
    if (keys.size() > kMaxDeleteKeys)
      return Error(ErrorCode::kInvalid, std::string(kWhat) + ": " + std::to_string(keys.size()) +
                                            " keys, more than the " +
                                            std::to_string(kMaxDeleteKeys) + " S3 takes at once");
    std::string out = open_root("Delete");
    for (size_t i = 0; i < keys.size(); ++i) {
      if (keys[i].empty())
        return Error(ErrorCode::kInvalid,
                     std::string(kWhat) + ": key " + std::to_string(i) + " is empty");
      out += "<Object><Key>";
      SG_RETURN_IF_ERROR(
          append_escaped(&out, keys[i], std::string(kWhat) + ": key " + std::to_string(i)));
      out += "</Key></Object>";
    }
    out += quiet ? "<Quiet>true</Quiet>" : "<Quiet>false</Quiet>";
    out += "</Delete>";
    return out;
  });
}

}  // namespace shardguard::storage::s3
