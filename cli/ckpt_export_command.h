// `shardguard ckpt export`: a checkpoint as the Hugging Face safetensors layout that
// `from_pretrained` loads, over checkpoint/hf_export.h: the tensors selected by --include /
// --exclude globs, renamed by --rename-prefix FROM=TO, optionally cast with --dtype bf16.
#pragma once

namespace CLI {
class App;
}

namespace shardguard::cli {

// Registers `export` on the `ckpt` group; when it runs it stores its exit code in
// `*exit_code` (0, 2 for bad flags, 3 for an incomplete or corrupt checkpoint, 1 otherwise).
void add_ckpt_export_command(CLI::App& ckpt, int* exit_code);

}  // namespace shardguard::cli
