#!/usr/bin/env bash
# Bundles what examples/gpu_check.sh needs on a GPU machine that has none of our Debian
# libraries and no network: the stripped `sg_trainer_cuda` and `shardguard` binaries, and
# every shared library they load that such a machine may lack, into .gpu/ (git-ignored by
# the .gitignore it holds, so it travels only when carried explicitly).
#
# Usage, here (after building build-cuda, see below):
#   bash examples/gpu_bundle.sh [BUILD_DIR]        # default: build-cuda
# then on the GPU machine, with .gpu carried (device tool: carry [".gpu"]):
#   bash examples/gpu_check.sh .gpu
#
# Build first:
#   cmake -S . -B build-cuda -DSHARDGUARD_WERROR=ON
#   cmake --build build-cuda -j2 --target sg_trainer_cuda shardguard
#
# Not bundled, expected on the GPU machine: glibc (libc, libm, libpthread, librt, libdl,
# ld-linux), libstdc++ and libgcc_s (the binaries need GLIBC_2.34 and GLIBCXX_3.4.29, i.e.
# glibc >= 2.34 and g++ >= 11's libstdc++: Ubuntu 22.04 or newer), libcuda (the driver;
# the CUDA runtime is linked statically) and libnccl.so.2 (gpu_check.sh takes PyTorch's,
# from python3's site-packages nvidia/nccl/lib). Everything else ldd lists (Boost.JSON,
# spdlog, fmt, toml++, xxhash as of this writing) is copied into .gpu/lib.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${1:-$ROOT/build-cuda}
OUT=$ROOT/.gpu
BINS=("$BUILD/examples/trainer_cuda/sg_trainer_cuda" "$BUILD/cli/shardguard")
# Libraries the GPU machine provides (or must provide itself): never bundled.
SYSTEM_RE='^(linux-vdso|ld-linux[^ ]*|libc|libm|libpthread|librt|libdl|libutil|libresolv|libstdc\+\+|libgcc_s|libnccl|libcuda|libnvidia-[^ ]*)\.so'

for b in "${BINS[@]}"; do
  [[ -x $b ]] || { echo "gpu_bundle: $b not built (see the header of $0)" >&2; exit 1; }
done

rm -rf "$OUT"
mkdir -p "$OUT/lib"
printf '*\n' > "$OUT/.gitignore"

for b in "${BINS[@]}"; do
  strip -o "$OUT/$(basename "$b")" "$b"
  # "libfoo.so.1 => /path/libfoo.so.1 (0x...)": copy the target under the name asked for.
  while read -r name arrow path _; do
    [[ $arrow == "=>" ]] || continue
    if [[ $path == "not" ]]; then
      echo "gpu_bundle: $(basename "$b") needs $name, which is not found here" >&2
      exit 1
    fi
    [[ $name =~ $SYSTEM_RE ]] && continue
    [[ -e $OUT/lib/$name ]] || cp -L "$path" "$OUT/lib/$name"
  done < <(ldd "$b")
done
strip --strip-unneeded "$OUT"/lib/*.so* 2>/dev/null || true
cp "$ROOT/examples/gpu_check.sh" "$OUT/"

echo "gpu_bundle: $OUT"
(cd "$OUT" && ls -l . lib)
du -sh "$OUT"
# Nothing left that only this machine has:
for b in "$OUT"/sg_trainer_cuda "$OUT"/shardguard; do
  echo "--- ldd $(basename "$b") with LD_LIBRARY_PATH=$OUT/lib"
  LD_LIBRARY_PATH="$OUT/lib" ldd "$b" | sed 's/ (0x[0-9a-f]*)//'
done
