// Hand-written events.jsonl lines for the timeline tests, a timeline fed with them, and one
// whole run written out by hand.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "supervisor/timeline.h"

namespace shardguard::supervisor {

// One events.jsonl line at `t` ms: `fields` is the rest of the JSON object ("" for none).
inline std::string L(int64_t t, const std::string& event, const std::string& fields = "") {
  return "{\"time_unix_ms\":" + std::to_string(t) + ",\"event\":\"" + event + "\"" +
         (fields.empty() ? "" : "," + fields) + "}";
}

inline Timeline feed(const std::vector<std::string>& lines, TimelineOptions o = {}) {
  Timeline t(std::move(o));
  for (const auto& l : lines) t.add_line(l);
  return t;
}

// A 2-rank run: attempt 0 commits step 100, is killed at step 200 (100 steps lost), attempt 1
// resumes from 100 and finishes at 300. Times in ms from 0.
inline std::vector<std::string> crash_and_relaunch() {
  return {
      L(0, "start", R"j("job_id":"j","nproc":2,"checkpoint_dir":"/c","first_attempt":0)j"),
      L(0, "node_joined", R"j("node":0,"address":"127.0.0.1","nodes":1)j"),
      L(100, "launch",
        R"j("attempt":0,"nproc":2,"nodes":"0","master_port":29500,"resume_step":-1,"resume_manifest":"")j"),
      L(200, "hello", R"j("attempt":0,"rank":0,"pid":11)j"),
      L(200, "hello", R"j("attempt":0,"rank":1,"pid":12)j"),
      L(1100, "ranks_ready", R"j("attempt":0,"seconds_since_launch":1.0)j"),
      L(3100, "checkpoint_committed",
        R"j("attempt":0,"step":100,"seconds":1E-1,"manifest":"/c/step-000000100/manifest.json")j"),
      L(5100, "rank_exit",
        R"j("attempt":0,"rank":1,"status":"killed by signal 9 (SIGKILL)","killed_by_us":false)j"),
      L(5100, "teardown", R"j("attempt":0,"why":"rank 1 killed by signal 9 (SIGKILL)")j"),
      L(5150, "rank_exit",
        R"j("attempt":0,"rank":0,"status":"killed by signal 9 (SIGKILL)","killed_by_us":true)j"),
      L(5200, "attempt_end",
        R"j("attempt":0,"class":"crash","detail":"rank 1 killed by signal 9 (SIGKILL)","seconds":5.1,"max_step":200,"lost_steps":100)j"),
      L(5200, "backoff", R"j("attempt":0,"seconds":5E-2,"why":"crash: restart 1 of 3")j"),
      L(5300, "launch",
        R"j("attempt":1,"nproc":2,"nodes":"0","master_port":29501,"resume_step":100,"resume_manifest":"/c/step-000000100/manifest.json")j"),
      L(5800, "ranks_ready", R"j("attempt":1,"seconds_since_launch":0.5)j"),
      L(7800, "checkpoint_committed",
        R"j("attempt":1,"step":200,"seconds":0.2,"manifest":"/c/step-000000200/manifest.json")j"),
      L(9800, "rank_exit",
        R"j("attempt":1,"rank":0,"status":"exited with code 0","killed_by_us":false)j"),
      L(9800, "teardown", R"j("attempt":1,"why":"every rank exited")j"),
      L(9900, "attempt_end",
        R"j("attempt":1,"class":"success","detail":"","seconds":4.6,"max_step":300,"lost_steps":0)j"),
      L(9900, "finish",
        R"j("state":"succeeded","exit_code":0,"attempts":2,"summary":"every rank exited 0")j"),
  };
}

}  // namespace shardguard::supervisor
