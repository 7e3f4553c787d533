#include "checkpoint/safetensors_json.h"

#include <boost/json/basic_parser_impl.hpp>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <unordered_set>
#include <vector>

#include "checkpoint/strict_json.h"

namespace shardguard::checkpoint::detail {
namespace json = boost::json;

std::string quoted(std::string_view name) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (char c : name.substr(0, 200)) {
    auto u = static_cast<uint8_t>(c);
    if (u < 0x20 || u == 0x7F) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xF];
    } else {
      out += c;
    }
  }
  if (name.size() > 200) out += "...";
  out += '\'';
  return out;
}

Error corrupt(std::string_view file, std::string_view what) {
  std::string message(file);
  message += ": ";
  message += what;
  return Error(ErrorCode::kCorrupt, std::move(message));
}

Error corrupt_tensor(std::string_view file, std::string_view name, std::string_view what) {
  return corrupt(file, "tensor " + quoted(name) + ": " + std::string(what));
}

namespace {

constexpr std::string_view kMetadataKey = "__metadata__";
// A tensor entry is at least this long in JSON ({"dtype":"U8","shape":[],"data_offsets":[0,0]}
// and its key): the most entries a header of N bytes can hold is N / this.
constexpr size_t kMinEntryBytes = 48;

Error duplicate_key(std::string_view file, std::string_view key) {
  std::string message = "header duplicate key ";
  append_json_string(message, key.substr(0, 200));  // keys can be huge; a prefix names it
  return corrupt(file, message);
}

// Builds the header from the parser's events. Only the shape the format defines is kept:
// the root object's entries (tensors, and __metadata__'s strings); values of fields no
// reader knows are walked (for their keys' uniqueness) and dropped.
class HeaderHandler {
 public:
  static constexpr std::size_t max_object_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_array_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_key_size = static_cast<std::size_t>(-1);
  static constexpr std::size_t max_string_size = static_cast<std::size_t>(-1);

  HeaderHandler(std::string_view file, SafetensorsHeader& out) : file_(file), out_(out) {}
  std::optional<Error>& error() { return error_; }

  bool on_document_begin(json::error_code&) { return true; }
  bool on_document_end(json::error_code&) { return true; }
  bool on_object_begin(json::error_code& ec) { return value(Kind::kObject, ec); }
  bool on_object_end(std::size_t, json::error_code& ec) { return end(ec); }
  bool on_array_begin(json::error_code& ec) { return value(Kind::kArray, ec); }
  bool on_array_end(std::size_t, json::error_code& ec) { return end(ec); }
  bool on_key_part(json::string_view s, std::size_t, json::error_code&) {
    key_.append(s.data(), s.size());
    return true;
  }
  bool on_key(json::string_view s, std::size_t, json::error_code& ec) {
    key_.append(s.data(), s.size());
    const bool ok = key(ec);
    key_.clear();
    return ok;
  }
  bool on_string_part(json::string_view s, std::size_t, json::error_code&) {
    str_.append(s.data(), s.size());
    return true;
  }
  bool on_string(json::string_view s, std::size_t, json::error_code& ec) {
    str_.append(s.data(), s.size());
    const bool ok = value(Kind::kString, ec);
    str_.clear();
    return ok;
  }
  bool on_number_part(json::string_view, json::error_code&) { return true; }
  bool on_int64(std::int64_t i, json::string_view, json::error_code& ec) {
    number_ = i >= 0 ? std::optional<uint64_t>(static_cast<uint64_t>(i)) : std::nullopt;
    return value(Kind::kNumber, ec);
  }
  bool on_uint64(std::uint64_t u, json::string_view, json::error_code& ec) {
    number_ = u;
    return value(Kind::kNumber, ec);
  }
  bool on_double(double, json::string_view, json::error_code& ec) {
    number_.reset();  // never a dimension or an offset
    return value(Kind::kNumber, ec);
  }
  bool on_bool(bool, json::error_code& ec) { return value(Kind::kOther, ec); }
  bool on_null(json::error_code& ec) { return value(Kind::kNull, ec); }
  bool on_comment_part(json::string_view, json::error_code&) { return true; }
  bool on_comment(json::string_view, json::error_code&) { return true; }

 private:
  enum class Kind : uint8_t { kObject, kArray, kString, kNumber, kNull, kOther };
  enum class Ctx : uint8_t { kRoot, kMetadata, kTensor, kShape, kOffsets, kSkip };
  // In an object: what the value after the last key is.
  enum class Field : uint8_t { kNone, kMetadata, kTensor, kDtype, kShape, kOffsets, kOther };
  enum : unsigned { kSeenDtype = 1, kSeenShape = 2, kSeenOffsets = 4 };

  struct Frame {
    Ctx ctx;
    Field field = Field::kNone;
    // Keys seen, for objects whose keys are not otherwise tracked (made on the first key).
    std::unique_ptr<std::unordered_set<std::string>> keys;
  };

  // The current tensor entry (entries never nest).
  struct Tensor {
    std::string name;
    unsigned seen = 0;
    bool dtype_is_string = false, shape_is_array = false, shape_bad = false;
    bool offsets_is_array = false, offsets_bad = false;
    std::string dtype;
    size_t offsets_count = 0;
    uint64_t offsets[2] = {0, 0};
  };

  bool fail(Error e, json::error_code& ec) {
    error_ = std::move(e);
    ec = boost::system::errc::make_error_code(boost::system::errc::invalid_argument);
    return false;
  }

  bool push(Ctx ctx) {
    stack_.push_back(Frame{ctx, Field::kNone, nullptr});
    return true;
  }
  // A container value that is walked and dropped.
  bool skip(Kind kind) {
    if (kind == Kind::kObject || kind == Kind::kArray)
      stack_.push_back(Frame{Ctx::kSkip, Field::kNone, nullptr});
    return true;
  }

  bool key(json::error_code& ec) {
    Frame& f = stack_.back();
    switch (f.ctx) {
      case Ctx::kRoot:
        if (key_ == kMetadataKey) {
          if (have_metadata_) return fail(duplicate_key(file_, key_), ec);
          have_metadata_ = true;
          f.field = Field::kMetadata;
        } else {
          // Repeated tensor names are found once the whole header is read.
          f.field = Field::kTensor;
          tensor_ = Tensor{};
          tensor_.name = key_;
        }
        return true;
      case Ctx::kMetadata:
        if (out_.metadata.contains(key_)) return fail(duplicate_key(file_, key_), ec);
        metadata_key_ = key_;
        return true;
      case Ctx::kTensor: {
        unsigned bit = 0;
        if (key_ == "dtype") {
          bit = kSeenDtype;
          f.field = Field::kDtype;
        } else if (key_ == "shape") {
          bit = kSeenShape;
          f.field = Field::kShape;
        } else if (key_ == "data_offsets") {
          bit = kSeenOffsets;
          f.field = Field::kOffsets;
        }
        if (bit != 0) {
          if (tensor_.seen & bit) return fail(duplicate_key(file_, key_), ec);
          tensor_.seen |= bit;
          return true;
        }
        f.field = Field::kOther;
        break;  // an unknown field: its key is tracked like any other object's
      }
      default:
        break;
    }
    if (!f.keys) f.keys = std::make_unique<std::unordered_set<std::string>>();
    if (!f.keys->insert(key_).second) return fail(duplicate_key(file_, key_), ec);
    return true;
  }

  bool value(Kind kind, json::error_code& ec) {
    if (stack_.empty()) {  // the document itself
      if (kind != Kind::kObject) return fail(corrupt(file_, "header is not a JSON object"), ec);
      return push(Ctx::kRoot);
    }
    Frame& f = stack_.back();
    switch (f.ctx) {
      case Ctx::kRoot:
        if (f.field == Field::kMetadata) {
          if (kind == Kind::kNull) return true;  // as the reference's Option<HashMap>
          if (kind != Kind::kObject)
            return fail(corrupt(file_, "__metadata__ is not a JSON object"), ec);
          return push(Ctx::kMetadata);
        }
        if (kind != Kind::kObject)
          return fail(corrupt_tensor(file_, tensor_.name, "entry is not a JSON object"), ec);
        return push(Ctx::kTensor);
      case Ctx::kMetadata:
        if (kind != Kind::kString)
          return fail(
              corrupt(file_, "__metadata__ value of " + quoted(metadata_key_) + " is not a string"),
              ec);
        if (out_.metadata.size() >= kMaxMetadataEntries)
          return fail(
              corrupt(file_, "__metadata__ has more than " + std::to_string(kMaxMetadataEntries) +
                                 " entries (this reader's limit)"),
              ec);
        out_.metadata.emplace(std::move(metadata_key_), std::move(str_));
        return true;
      case Ctx::kTensor:
        return tensor_field(f.field, kind);
      case Ctx::kShape:
        if (kind == Kind::kNumber && number_) {
          if (dims_.size() <= kMaxDims) dims_.push_back(*number_);
          return true;
        }
        tensor_.shape_bad = true;
        return skip(kind);
      case Ctx::kOffsets:
        if (kind == Kind::kNumber && number_) {
          if (tensor_.offsets_count < 2) tensor_.offsets[tensor_.offsets_count] = *number_;
        } else {
          tensor_.offsets_bad = true;
        }
        ++tensor_.offsets_count;
        return skip(kind);
      case Ctx::kSkip:
        return skip(kind);
    }
    return true;
  }

  bool tensor_field(Field field, Kind kind) {
    switch (field) {
      case Field::kDtype:
        tensor_.dtype_is_string = kind == Kind::kString;
        if (tensor_.dtype_is_string) tensor_.dtype = str_;
        return skip(kind);
      case Field::kShape:
        tensor_.shape_is_array = kind == Kind::kArray;
        dims_.clear();
        return tensor_.shape_is_array ? push(Ctx::kShape) : skip(kind);
      case Field::kOffsets:
        tensor_.offsets_is_array = kind == Kind::kArray;
        return tensor_.offsets_is_array ? push(Ctx::kOffsets) : skip(kind);
      default:
        return skip(kind);
    }
  }

  bool end(json::error_code& ec) {
    const Ctx ctx = stack_.back().ctx;
    stack_.pop_back();
    if (ctx != Ctx::kTensor) return true;
    auto entry = finish_tensor();
    if (!entry.ok()) return fail(std::move(entry).error(), ec);
    out_.tensors.push_back(std::move(entry).value());
    return true;
  }

  // Field checks in the order the format lists them, whatever order the JSON had.
  Result<TensorEntry> finish_tensor() {
    Tensor& t = tensor_;
    TensorEntry e;
    if (!(t.seen & kSeenDtype) || !t.dtype_is_string)
      return corrupt_tensor(file_, t.name, "\"dtype\" is missing or not a string");
    auto dtype = parse_dtype(t.dtype);
    if (!dtype.ok()) return corrupt_tensor(file_, t.name, dtype.error().message());
    e.dtype = *dtype;
    if (!(t.seen & kSeenShape) || !t.shape_is_array)
      return corrupt_tensor(file_, t.name, "\"shape\" is missing or not an array");
    if (t.shape_bad)
      return corrupt_tensor(file_, t.name, "\"shape\" holds a non-integer or negative dim");
    if (dims_.size() > kMaxDims)
      return corrupt_tensor(file_, t.name,
                            "\"shape\" has more than " + std::to_string(kMaxDims) +
                                " dimensions (this reader's limit)");
    e.shape.assign(dims_.begin(), dims_.end());  // exactly sized
    if (!(t.seen & kSeenOffsets) || !t.offsets_is_array || t.offsets_bad || t.offsets_count != 2)
      return corrupt_tensor(file_, t.name, "\"data_offsets\" is not two non-negative integers");
    e.begin = t.offsets[0];
    e.end = t.offsets[1];
    e.name = std::move(t.name);
    return e;
  }

  std::string_view file_;
  SafetensorsHeader& out_;
  std::optional<Error> error_;
  std::vector<Frame> stack_;
  std::string key_, str_;  // the parts of the key or string being read
  std::optional<uint64_t> number_;
  bool have_metadata_ = false;
  std::string metadata_key_;
  Tensor tensor_;
  std::vector<uint64_t> dims_;  // the current tensor's shape as read
};

// Tensor names are the root object's keys: no two may be equal. An open-addressing table of
// indices (4 bytes per slot, two slots per tensor) instead of a set of strings.
Status check_unique_names(const std::vector<TensorEntry>& tensors, std::string_view file) {
  size_t slots = 16;
  while (slots < tensors.size() * 2) slots <<= 1;
  constexpr uint32_t kEmpty = UINT32_MAX;
  std::vector<uint32_t> table(slots, kEmpty);
  const std::hash<std::string_view> hash;
  for (uint32_t i = 0; i < tensors.size(); ++i) {
    const std::string_view name = tensors[i].name;
    for (size_t s = hash(name) & (slots - 1);; s = (s + 1) & (slots - 1)) {
      if (table[s] == kEmpty) {
        table[s] = i;
        break;
      }
      if (tensors[table[s]].name == name) return duplicate_key(file, name);
    }
  }
  return {};
}

// About how many tensors the header holds, never more than it can: every entry has a
// "data_offsets" key. Reserving it avoids the vector's doubling (1.5x of the entries).
size_t expected_tensors(std::string_view text) {
  size_t n = 0;
  for (size_t at = text.find("data_offsets"); at != std::string_view::npos;
       at = text.find("data_offsets", at + 12))
    ++n;
  return std::min(n, text.size() / kMinEntryBytes + 1);
}

}  // namespace

Status parse_header_json(std::string_view text, std::string_view file, SafetensorsHeader& out) {
  json::parse_options options;
  options.max_depth = 128;  // as serde_json
  try {
    out.tensors.reserve(expected_tensors(text));
    json::basic_parser<HeaderHandler> parser(options, file, out);
    json::error_code ec;
    const std::size_t used = parser.write_some(false, text.data(), text.size(), ec);
    if (parser.handler().error()) return std::move(*parser.handler().error());
    if (!ec && used < text.size()) ec = json::error::extra_data;
    if (ec) return corrupt(file, "header not valid JSON: " + ec.message());
  } catch (const std::exception& e) {  // allocation failures
    return corrupt(file, std::string("header too large to parse: ") + e.what());
  }
  return check_unique_names(out.tensors, file);
}

}  // namespace shardguard::checkpoint::detail
