// C ABI: saving (shardguard.h, "save"): begin a writer, add tensors and chunks, set the rank
// and global state (and format 2's state trees), save (commit) and wait.
#include <boost/json/parse.hpp>

#include <memory>
#include <string>
#include <vector>

#include "hooks/c_api_internal.h"

using namespace shardguard;
using shardguard::checkpoint::Box;
using shardguard::checkpoint::DType;
using shardguard::hooks::capi::boundary;
using shardguard::hooks::capi::fail;
using shardguard::hooks::capi::from_status;

namespace {

std::string json_or_null(const char* text) { return text != nullptr ? text : "null"; }

std::vector<uint64_t> dims(const uint64_t* p, size_t n) {
  return p != nullptr ? std::vector<uint64_t>(p, p + n) : std::vector<uint64_t>();
}

// Checks the arguments common to add_tensor and add_chunk; returns the dtype.
Result<DType> check_add(const sg_writer* w, const char* name, const char* dtype, size_t ndim,
                        const uint64_t* shape, const void* data, size_t size) {
  if (w == nullptr || name == nullptr || dtype == nullptr)
    return Error(ErrorCode::kInvalid, "add tensor: NULL writer, name or dtype");
  if (ndim > 0 && shape == nullptr)
    return Error(ErrorCode::kInvalid, std::string("tensor '") + name + "': shape is NULL");
  if (data == nullptr && size != 0)
    return Error(ErrorCode::kInvalid, std::string("tensor '") + name + "': data is NULL");
  auto parsed = checkpoint::parse_dtype(dtype);
  if (!parsed.ok()) return std::move(parsed).error().context(std::string("tensor '") + name + "'");
  return *parsed;
}

std::span<const std::byte> bytes(const void* data, size_t size) {
  return {static_cast<const std::byte*>(data), size};
}

// The global state as set so far: created with the writer's step on first use.
checkpoint::GlobalState& global_of(sg_writer* w) {
  if (!w->global) {
    w->global.emplace();
    w->global->step = w->writer.options().step;
  }
  return *w->global;
}

Status refuse_unless_rank0(const sg_writer* w, const char* what) {
  if (w->writer.options().rank == 0) return {};
  return Error(ErrorCode::kInvalid, std::string("only rank 0 sets the ") + what + " (this is rank " +
                                        std::to_string(w->writer.options().rank) + ")");
}

}  // namespace

namespace shardguard::hooks::capi {

Status check_json(const char* text, const std::string& what) {
  boost::system::error_code ec;
  auto v = boost::json::parse(text, ec);
  if (ec) return Error(ErrorCode::kInvalid, what + " is not valid JSON: " + ec.message());
  if (!v.is_object()) return Error(ErrorCode::kInvalid, what + " must be a JSON object");
  return {};
}

}  // namespace shardguard::hooks::capi

extern "C" {

sg_status sg_client_begin_save(sg_client* client, uint64_t step, sg_writer** out) {
  return boundary("sg_client_begin_save", [&]() -> sg_status {
    if (client == nullptr || !client->client || out == nullptr)
      return fail(ErrorCode::kInvalid, "sg_client_begin_save: NULL argument");
    *out = new sg_writer(client->client->begin_save(step));
    return SG_OK;
  });
}

sg_status sg_writer_add_tensor(sg_writer* w, const char* name, const char* dtype, size_t ndim,
                               const uint64_t* shape, const void* data, size_t size) {
  return boundary("sg_writer_add_tensor", [&]() -> sg_status {
    auto dt = check_add(w, name, dtype, ndim, shape, data, size);
    if (!dt.ok()) return fail(dt.error());
    return from_status(w->writer.add_tensor(name, *dt, dims(shape, ndim), bytes(data, size)));
  });
}

sg_status sg_writer_add_chunk(sg_writer* w, const char* name, const char* dtype, size_t ndim,
                              const uint64_t* global_shape, const uint64_t* offsets,
                              const uint64_t* sizes, const void* data, size_t size) {
  return boundary("sg_writer_add_chunk", [&]() -> sg_status {
    auto dt = check_add(w, name, dtype, ndim, global_shape, data, size);
    if (!dt.ok()) return fail(dt.error());
    if (ndim > 0 && (offsets == nullptr || sizes == nullptr))
      return fail(ErrorCode::kInvalid,
                  std::string("tensor '") + name + "': offsets or sizes is NULL");
    Box box{dims(offsets, ndim), dims(sizes, ndim)};
    return from_status(w->writer.add_chunk(name, *dt, dims(global_shape, ndim), std::move(box),
                                           bytes(data, size)));
  });
}

sg_status sg_writer_set_rank_state(sg_writer* w, const void* rng, size_t rng_size,
                                   const char* data_position_json, const char* user_json) {
  return boundary("sg_writer_set_rank_state", [&]() -> sg_status {
    if (w == nullptr || (rng == nullptr && rng_size != 0))
      return fail(ErrorCode::kInvalid, "sg_writer_set_rank_state: NULL argument");
    checkpoint::RankState& st = w->rank_state;
    st.rng = rng_size > 0 ? std::string(static_cast<const char*>(rng), rng_size) : std::string();
    st.data_position = json_or_null(data_position_json);
    st.user = json_or_null(user_json);
    w->writer.set_rank_state(st);
    return SG_OK;
  });
}

sg_status sg_writer_set_rank_tree(sg_writer* w, const char* tree_json) {
  return boundary("sg_writer_set_rank_tree", [&]() -> sg_status {
    if (w == nullptr) return fail(ErrorCode::kInvalid, "sg_writer_set_rank_tree: NULL writer");
    if (tree_json != nullptr)
      if (auto st = hooks::capi::check_json(tree_json, "rank state tree"); !st.ok())
        return fail(st.error());
    w->rank_state.tree = tree_json != nullptr ? tree_json : "";
    w->writer.set_rank_state(w->rank_state);
    return SG_OK;
  });
}

sg_status sg_writer_set_global_state(sg_writer* w, uint64_t step, const char* lr_schedule_json,
                                     const char* user_json) {
  return boundary("sg_writer_set_global_state", [&]() -> sg_status {
    if (w == nullptr) return fail(ErrorCode::kInvalid, "sg_writer_set_global_state: NULL writer");
    if (auto st = refuse_unless_rank0(w, "global state"); !st.ok()) return fail(st.error());
    checkpoint::GlobalState& g = global_of(w);
    g.step = step;
    g.lr_schedule = json_or_null(lr_schedule_json);
    g.user = json_or_null(user_json);
    w->writer.set_global_state(g);
    return SG_OK;
  });
}

sg_status sg_writer_set_global_tree(sg_writer* w, const char* tree_json) {
  return boundary("sg_writer_set_global_tree", [&]() -> sg_status {
    if (w == nullptr) return fail(ErrorCode::kInvalid, "sg_writer_set_global_tree: NULL writer");
    if (auto st = refuse_unless_rank0(w, "global state tree"); !st.ok()) return fail(st.error());
    if (tree_json != nullptr)
      if (auto st = hooks::capi::check_json(tree_json, "global state tree"); !st.ok())
        return fail(st.error());
    checkpoint::GlobalState& g = global_of(w);
    g.tree = tree_json != nullptr ? tree_json : "";
    w->writer.set_global_state(g);
    return SG_OK;
  });
}

void sg_writer_free(sg_writer* writer) { delete writer; }

sg_status sg_client_save(sg_client* client, sg_writer* writer, const char* reason) {
  std::unique_ptr<sg_writer> owned(writer);  // consumed whatever happens
  return boundary("sg_client_save", [&]() -> sg_status {
    if (client == nullptr || !client->client || !owned)
      return fail(ErrorCode::kInvalid, "sg_client_save: NULL client or writer");
    if (!owned->device.empty())
      return fail(ErrorCode::kInvalid,
                  "sg_client_save: the writer has device tensors; save it with "
                  "sg_client_snapshot_device");
    std::optional<checkpoint::SaveReason> why;
    if (reason != nullptr) {
      auto parsed = checkpoint::parse_save_reason(reason);
      if (!parsed.ok()) return fail(parsed.error());
      why = *parsed;
    }
    return from_status(client->client->save(std::move(owned->writer), why));
  });
}

sg_status sg_client_wait(sg_client* client) {
  return boundary("sg_client_wait", [&]() -> sg_status {
    if (client == nullptr || !client->client)
      return fail(ErrorCode::kInvalid, "sg_client_wait: NULL client");
    return from_status(client->client->wait());
  });
}

sg_status sg_client_reserve(sg_client* client, uint64_t bytes) {
  return boundary("sg_client_reserve", [&]() -> sg_status {
    if (client == nullptr || !client->client)
      return fail(ErrorCode::kInvalid, "sg_client_reserve: NULL client");
    return from_status(client->client->reserve(bytes));
  });
}

}  // extern "C"
