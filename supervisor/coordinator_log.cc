#include "supervisor/coordinator_log.h"

#include "checkpoint/paths.h"
#include "storage/dir_store.h"

namespace shardguard::supervisor {

std::string coordinator_state_path(const std::string& checkpoint_dir) {
  return storage::Location::parse(checkpoint_dir)
      .value_or(storage::Location::directory(checkpoint_dir))
      .describe(checkpoint::meta_key(checkpoint::kCoordinatorStateName));
}

Status store_coordinator_state(storage::Store& store, CoordinatorState state, WallTime now) {
  state.written_unix_ms = to_unix_ms(now);
  SG_RETURN_IF_ERROR(store.put(checkpoint::meta_key(checkpoint::kCoordinatorStateName),
                               coordinator_state_to_json(state)));
  return {};
}

Result<std::optional<CoordinatorState>> load_coordinator_state(storage::Store& store) {
  const std::string key = checkpoint::meta_key(checkpoint::kCoordinatorStateName);
  auto text = store.read(key);
  if (!text.ok()) {
    if (text.error().code() == ErrorCode::kNotFound) return std::optional<CoordinatorState>{};
    return std::move(text).error();
  }
  auto s = parse_coordinator_state(*text);
  if (!s.ok()) return std::move(s).error().context(store.describe(key));
  return std::optional<CoordinatorState>(std::move(*s));
}

Status store_coordinator_state(Filesystem& fs, const std::string& checkpoint_dir,
                               CoordinatorState state, WallTime now) {
  storage::DirectoryStore store(fs, checkpoint_dir);
  return store_coordinator_state(store, std::move(state), now);
}

Result<std::optional<CoordinatorState>> load_coordinator_state(Filesystem& fs,
                                                               const std::string& checkpoint_dir) {
  storage::DirectoryStore store(fs, checkpoint_dir);
  return load_coordinator_state(store);
}

}  // namespace shardguard::supervisor
