// sg_metadata_emulator: the metadata emulator as a process, for the end-to-end demo and the
// supervisor tests. Prints "listening on http://127.0.0.1:PORT" once ready, serves until
// SIGTERM or SIGINT, and with --record FILE appends each request as a JSON line.
//
//   sg_metadata_emulator [--port P] [--scenario FILE] [--record FILE]
#include <signal.h>

#include <boost/json.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>

#include "tests/agent/metadata_emulator.h"

using shardguard::testing::EmulatorScenario;
using shardguard::testing::MetadataEmulator;
using shardguard::testing::RecordedRequest;

namespace {

int usage(const std::string& why) {
  std::cerr << "sg_metadata_emulator: " << why
            << "\nusage: sg_metadata_emulator [--port P] [--scenario FILE] [--record FILE]\n";
  return 2;
}

std::string to_json_line(const RecordedRequest& r) {
  boost::json::object headers;
  for (const auto& [k, v] : r.headers) headers[k] = v;
  return boost::json::serialize(boost::json::object{{"at_ms", r.at_ms},
                                                    {"method", r.method},
                                                    {"target", r.target},
                                                    {"headers", std::move(headers)},
                                                    {"body", r.body},
                                                    {"status", r.status}}) +
         "\n";
}

}  // namespace

int main(int argc, char** argv) {
  int port = 0;
  std::string scenario_path, record_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return usage("missing value for " + arg);
    if (arg == "--port") {
      port = std::atoi(argv[++i]);
      if (port < 0 || port > 65535) return usage("bad port");
    } else if (arg == "--scenario") {
      scenario_path = argv[++i];
    } else if (arg == "--record") {
      record_path = argv[++i];
    } else {
      return usage("unknown argument " + arg);
    }
  }
  EmulatorScenario scenario;
  if (!scenario_path.empty()) {
    std::ifstream in(scenario_path);
    if (!in) return usage("cannot read " + scenario_path);
    std::stringstream text;
    text << in.rdbuf();
    auto parsed = shardguard::testing::parse_emulator_scenario(text.str());
    if (!parsed.ok()) return usage(scenario_path + ": " + parsed.error().message());
    scenario = std::move(parsed).value();
  }
  // Block the stop signals before any thread starts, then wait for them here.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  auto emulator = MetadataEmulator::start(std::move(scenario), static_cast<uint16_t>(port));
  if (!emulator.ok()) {
    std::cerr << "sg_metadata_emulator: " << emulator.error().message() << "\n";
    return 1;
  }
  std::mutex record_mu;
  std::ofstream record;
  if (!record_path.empty()) {
    record.open(record_path, std::ios::app);
    if (!record) return usage("cannot open " + record_path);
    (*emulator)->set_on_request([&](const RecordedRequest& r) {
      std::lock_guard lock(record_mu);
      record << to_json_line(r) << std::flush;
    });
  }
  std::cout << "listening on " << (*emulator)->base_url() << std::endl;
  int sig = 0;
  sigwait(&stop_signals, &sig);
  (*emulator)->stop();
  return 0;
}
