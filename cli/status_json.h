// `shardguard status --json`: the machine form of the status page. One JSON object (format
// version 1); times are Unix milliseconds, durations seconds, GPU time GPU-seconds; numbers are
// written in fixed notation (never an exponent) and strings are escaped to pure ASCII, so the
// output is safe on a terminal too. Keys (absent values are null):
//
//   version (1), run_dir, events_path, state, finished, supervisor_alive, now_unix_ms,
//   first_unix_ms, last_unix_ms, records, skipped_lines,
//   attempt, nproc, step, step_source, steps_per_second, lost_steps, checkpoints,
//   last_checkpoint {step, time_unix_ms, age_seconds, attempt, seconds, manifest, emergency,
//   bytes}, restarts [{class, used, used_total, max, window_seconds, left}], notices
//   [{time_unix_ms, source, kind, reason, action, preemption, shortened, seconds_left}], goodput
//   {ratio, allocated_gpu_seconds, productive_gpu_seconds,
//            badput_gpu_seconds {recompute, restart, checkpoint, waiting}},
//   runs [{start_unix_ms, finish_unix_ms, last_unix_ms, job_id, nproc, state, exit_code, summary}],
//   attempts [{attempt, run, nproc, resume_step, launch_unix_ms, ready_unix_ms,
//              teardown_unix_ms, end_unix_ms, teardown_why, class, detail, max_step,
//              lost_steps, lost_seconds, training_seconds, checkpoint_seconds, checkpoints,
//              steps_per_second, backoff_seconds, restart_reason, gave_up}],
//   evidence [record], timeline [record] (the last `timeline_limit` records; 0: all)
// where a record is {"time_unix_ms":..., "event":..., <its fields as recorded>}.
// `--follow --json` then prints each new record as one line in the same record form.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <string>

#include "cli/run_dir_timeline.h"

namespace shardguard::cli {

std::string status_json(const std::string& run_dir, const RunDirTimeline& loaded,
                        const supervisor::TimelineView& view, size_t timeline_limit);

// One record as a JSON object on one line (no trailing newline).
std::string record_json(const supervisor::TimelineRecord& record);

}  // namespace shardguard::cli
