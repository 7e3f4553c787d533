// sg_metadata_emulator: the metadata emulator as a process, for the end-to-end demo and the
// supervisor tests. Prints "listening on http://127.0.0.1:PORT" once ready, serves until
// SIGTERM or SIGINT, and with --record FILE appends each request as a JSON line.
//
//   sg_metadata_emulator [--port P] [--scenario FILE] [--record FILE] [--aws-role NAME]
//
//   --port P         listen on 127.0.0.1:P (0, the default: a free port, printed)
//   --scenario FILE  a scenario script (format: parse_emulator_scenario in metadata_emulator.h;
//                    "aws_role" sets the EC2 instance role's keys, expiry and rotation)
//   --record FILE    append each request, once answered, as a JSON line
//   --aws-role NAME  serve an EC2 instance role of that name (over the scenario's name), with
//                    the scenario's keys or the emulator's defaults
//   --help, -h       this text on stdout, exit 0
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

constexpr char kUsage[] =
    "usage: sg_metadata_emulator [--port P] [--scenario FILE] [--record FILE] [--aws-role NAME]\n"
    "  --port P         listen on 127.0.0.1:P (0, the default: a free port)\n"
    "  --scenario FILE  a scenario script (JSON: clouds, timelines, faults, azure_events,\n"
    "                   aws_role {name, access_key_id, secret_access_key, token,\n"
    "                   expires_after_s, rotate, code}, ...)\n"
    "  --record FILE    append each answered request as a JSON line\n"
    "  --aws-role NAME  serve an EC2 instance role of that name (IMDSv2 credentials)\n"
    "  --help, -h       this text\n"
    "Prints 'listening on http://127.0.0.1:PORT' once ready; stops on SIGTERM or SIGINT.\n";

int usage(const std::string& why) {
  std::cerr << "sg_metadata_emulator: " << why << "\n" << kUsage;
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
  std::string scenario_path, record_path, aws_role;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << kUsage;
      return 0;
    }
    if (arg != "--port" && arg != "--scenario" && arg != "--record" && arg != "--aws-role") {
      return usage("unknown argument " + arg);
    }
    if (i + 1 >= argc) return usage("missing value for " + arg);
    if (arg == "--port") {
      port = std::atoi(argv[++i]);
      if (port < 0 || port > 65535) return usage("bad port");
    } else if (arg == "--scenario") {
      scenario_path = argv[++i];
    } else if (arg == "--record") {
      record_path = argv[++i];
    } else if (arg == "--aws-role") {
      aws_role = argv[++i];
      if (aws_role.empty()) return usage("empty --aws-role");
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
  if (!aws_role.empty()) scenario.aws_role.name = aws_role;
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
