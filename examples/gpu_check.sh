#!/usr/bin/env bash
# GPU check of sg_trainer_cuda under shardguard, for a machine with one NVIDIA GPU (H100 /
# H200), no network and none of our build's libraries. About 3 minutes, bounded to ~8.
#
# How to run:
#   here:           bash examples/gpu_bundle.sh          # strips binaries + libs into .gpu/
#   on the device:  bash examples/gpu_check.sh .gpu      # (device tool: carry [".gpu"])
#
# What it checks. sg_trainer_cuda's final weights must be bit-identical between its own
# runs, whatever the world size and number of interruptions (one thread block per row, a
# fixed summation order, no atomics: see examples/trainer_cuda/kernels.h). They are NOT
# compared with the CPU sg_trainer's (GPU fused multiply-add, another summation order).
#   1. reference: sg_trainer_cuda alone, N steps -> `shardguard ckpt inspect --hash`;
#   2. the same again: the hashes must be equal (run to run);
#   3. `shardguard run --nproc 1` on the GPU, SIGTERM to shardguard midway: emergency
#      checkpoint, exit 75; a second `shardguard run` resumes from it and finishes; its final
#      hashes must equal the reference.
#   4. snapshot stall: a 3 GiB state (weights + 2 Adam moments, 1 GiB each) checkpointed 4
#      times by an async client, once through the GPU snapshot path (--snapshot gpu: device
#      memory copied into pinned staging on the client's copy stream beside the next steps)
#      and once through the synchronous path (--snapshot host: the loop waits for a
#      device-to-host copy, then the client copies host memory into its staging). Prints each
#      run's "snapshot stall" line: the first and later checkpoints' extra time in the loop,
#      the copy's time and rate, the median step. The two runs' final weights must be
#      bit-identical (the snapshot path must save exactly what the synchronous one saves);
#      the stalls are reported, not judged (a NOTE says which path stalled less).
# With one GPU only world size 1 is exercised (NCCL refuses two ranks on one GPU); the
# partition independence rests on the kernel's design, per row.
# Prints PASS or FAIL (exit 0 / 1). Work files go to a fresh directory under /tmp (up to
# ~12 GiB during step 4).
#
# NCCL comes from the machine's PyTorch: libnccl.so.2 under python3's site-packages
# (nvidia/nccl/lib); set NCCL_LIB_DIR to use another. The CUDA runtime (libcudart.so.13) is
# in the bundle; the client's GPU snapshot path loads that same one (dlopen).
set -uo pipefail

B=$(cd "${1:-.gpu}" && pwd) || { echo "FAIL: no bundle dir ${1:-.gpu}"; exit 1; }
TRAINER=$B/sg_trainer_cuda
SG=$B/shardguard
START=$SECONDS
W=$(mktemp -d /tmp/sg-gpu-check.XXXXXX)
FAILS=()

fail() { FAILS+=("$*"); echo "FAIL: $*"; }
finish() {
  echo "=== ${SECONDS}s total, work files in $W"
  if ((${#FAILS[@]} == 0)); then echo "PASS"; exit 0; fi
  printf 'FAIL: %s\n' "${FAILS[@]}"
  exit 1
}

# ---- libraries -------------------------------------------------------------------------
if [[ -z ${NCCL_LIB_DIR:-} ]]; then
  for sp in $(python3 -c 'import site; print("\n".join(site.getsitepackages() + [site.getusersitepackages()]))' 2>/dev/null); do
    for cand in "$sp/nvidia/nccl/lib" "$sp"/nvidia/cu*/lib "$sp/torch/lib"; do
      if [[ -e $cand/libnccl.so.2 ]]; then NCCL_LIB_DIR=$cand; break 2; fi
    done
  done
fi
[[ -n ${NCCL_LIB_DIR:-} ]] || { fail "no libnccl.so.2 under python3's site-packages (set NCCL_LIB_DIR)"; finish; }
export LD_LIBRARY_PATH="$B/lib:$NCCL_LIB_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "=== NCCL from $NCCL_LIB_DIR"
for b in "$TRAINER" "$SG"; do
  if ldd "$b" | grep -q "not found"; then
    ldd "$b"
    fail "$(basename "$b") has unresolved libraries"
  fi
done
ldd "$TRAINER" | grep -E "nccl|cuda" || true
((${#FAILS[@]} == 0)) || finish
nvidia-smi -L 2>/dev/null || echo "(no nvidia-smi)"

# ---- helpers ---------------------------------------------------------------------------
# Small enough that the host-side data set takes well under a second, big enough to
# launch thousands of blocks per step.
TRAIN=(--steps 600 --rows 1024 --in-dim 128 --samples 2048 --batch 64 --lr 0.01 --warmup 50
       --log-every 100 --checkpoint-every 1000)

# wait_for PID SECONDS: the exit status of a background child, or 124 after killing it.
wait_for() {
  local pid=$1 limit=$2 t0=$SECONDS
  while kill -0 "$pid" 2>/dev/null; do
    if ((SECONDS - t0 >= limit)); then
      kill -TERM "$pid" 2>/dev/null; sleep 3; kill -KILL "$pid" 2>/dev/null
      wait "$pid" 2>/dev/null
      return 124
    fi
    sleep 0.1
  done
  wait "$pid"
}

hash_of() { "$SG" ckpt inspect --hash "$1" 2>&1; }

reference() {  # reference DIR: one plain run, no supervisor
  "$TRAINER" "${TRAIN[@]}" --checkpoint-dir "$1" > "$1.log" 2>&1 &
  wait_for $! 60
  local rc=$?
  sed -n '1,4p;$p' "$1.log"
  return $rc
}

# ---- 1 + 2: reference, twice -----------------------------------------------------------
echo "=== 1. reference run (sg_trainer_cuda alone)"
reference "$W/ref1"; rc=$?
((rc == 0)) || { cat "$W/ref1.log"; fail "reference run exited $rc"; finish; }
REF=$(hash_of "$W/ref1")
echo "$REF"
grep -q "^weight [0-9a-f]\{16\}$" <<<"$REF" || { fail "no weight hash in the reference"; finish; }

echo "=== 2. reference again (run-to-run determinism)"
reference "$W/ref2"; rc=$?
if ((rc != 0)); then cat "$W/ref2.log"; fail "second reference run exited $rc"
elif [[ $(hash_of "$W/ref2") != "$REF" ]]; then hash_of "$W/ref2"; fail "two plain runs differ"
else echo "same hashes"; fi

# ---- 3: under shardguard, SIGTERM midway, resume ---------------------------------------
echo "=== 3. shardguard run --nproc 1, SIGTERM midway, resume"
J=$W/job
mkdir -p "$J"
cat > "$J/job.toml" <<EOF
[job]
checkpoint_dir = "$J/ckpt"
run_dir = "$J/run"
[restart]
backoff_initial = "10ms"
[stop]
grace = "30s"
term_grace = "5s"
[checkpoint]
every_steps = 1000
EOF
RUN=("$SG" run --config "$J/job.toml" --nproc 1 -- "$TRAINER" "${TRAIN[@]}" --sleep-ms 15)
"${RUN[@]}" > "$J/shardguard-1.log" 2>&1 &
pid=$!
# Midway: once rank 0 has logged step 200 of 600 (about 3 s of 15 ms steps).
t0=$SECONDS
until grep -q "step 200 " "$J/run/attempt-000/rank-0.log" 2>/dev/null; do
  if ! kill -0 "$pid" 2>/dev/null || ((SECONDS - t0 > 45)); then break; fi
  sleep 0.1
done
kill -TERM "$pid" 2>/dev/null
wait_for "$pid" 45; rc=$?
tail -n 5 "$J/shardguard-1.log"
tail -n 4 "$J/run/attempt-000/rank-0.log" 2>/dev/null
if ((rc != 75)); then
  cat "$J/run/attempt-000/rank-0.log" 2>/dev/null
  fail "interrupted run exited $rc, expected 75 (emergency checkpoint, then stop)"
  finish
fi
"$SG" ckpt ls "$J/ckpt"
if ! "$SG" ckpt ls "$J/ckpt" | grep -q emergency; then fail "no emergency checkpoint listed"; fi

"${RUN[@]}" > "$J/shardguard-2.log" 2>&1 &
wait_for $! 60; rc=$?
tail -n 5 "$J/shardguard-2.log"
last_rank_log=$(ls -d "$J"/run/attempt-*/rank-0.log 2>/dev/null | tail -n 1)
grep -m1 "resumed at step" "$last_rank_log" 2>/dev/null
if ((rc != 0)); then
  cat "$last_rank_log" 2>/dev/null
  fail "resumed run exited $rc"
  finish
fi
GOT=$(hash_of "$J/ckpt")
echo "$GOT"
if [[ $GOT != "$REF" ]]; then
  fail "preempted + resumed run's final weights differ from the uninterrupted run's"
else
  echo "preempted + resumed == uninterrupted, bit for bit"
fi

# ---- 4: snapshot stall, GPU path against the synchronous one ----------------------------
echo "=== 4. snapshot stall: 3 GiB state, 4 async checkpoints, --snapshot gpu vs --snapshot host"
# 2048 rows x 131072 inputs = 1 GiB per tensor; 8 samples keep the host's data set (and its
# targets, computed on the CPU) to a few seconds.
SNAP=(--steps 300 --rows 2048 --in-dim 131072 --samples 8 --batch 8 --lr 0.001 --warmup 10
      --log-every 100 --checkpoint-every 75 --sleep-ms 20 --async)
declare -A SNAP_HASH
for mode in gpu host; do
  D=$W/snap-$mode
  "$TRAINER" "${SNAP[@]}" --snapshot "$mode" --checkpoint-dir "$D" > "$D.log" 2>&1 &
  wait_for $! 240; rc=$?
  grep -E "snapshot stall|GPU snapshots|error" "$D.log" | tail -n 3
  if ((rc != 0)); then
    tail -n 20 "$D.log"
    fail "--snapshot $mode run exited $rc"
    continue
  fi
  grep -q "snapshot stall ($mode)" "$D.log" || fail "--snapshot $mode printed no snapshot stall"
  SNAP_HASH[$mode]=$(hash_of "$D")
  rm -rf "$D"  # 4 x 3 GiB
done
if [[ -n ${SNAP_HASH[gpu]:-} && -n ${SNAP_HASH[host]:-} ]]; then
  if [[ ${SNAP_HASH[gpu]} == "${SNAP_HASH[host]}" ]]; then
    echo "final weights of --snapshot gpu == --snapshot host, bit for bit"
  else
    printf '%s\n--- vs ---\n%s\n' "${SNAP_HASH[gpu]}" "${SNAP_HASH[host]}"
    fail "the GPU snapshot path saved other bytes than the synchronous path"
  fi
  later() { grep -o "later median [0-9.]* ms" "$W/snap-$1.log" | grep -o "[0-9.]*"; }
  echo "NOTE: later checkpoints stall the loop $(later gpu) ms (gpu) vs $(later host) ms (host)"
fi
((SECONDS - START <= 480)) || fail "took $((SECONDS - START)) s, more than the ~8 min budget"
finish
