// sg_fault_proxy: FaultProxy as a program, for shell-driven tests and the benchmark.
//
//   sg_fault_proxy --upstream HOST:PORT [--port-file FILE] [--rule SPEC]...
//
// Prints "listening http://127.0.0.1:PORT" (and writes PORT to FILE), then takes commands
// on stdin, one a line, each answered with one line ("error: ..." when it fails):
//   add SPEC          -> the rule id (SPEC as parse_fault_rule in fault_proxy.h reads it)
//   remove ID | release ID | clear | blackhole on|off   -> ok
//   applied ID        -> how many requests the rule was applied to
//   stats             -> "requests N connections N"
//   log               -> the request log, one line each, then "end"
//   quit              -> exits
// When stdin ends (e.g. `sg_fault_proxy ... &` in a script) it serves on until SIGTERM or
// SIGINT. Exit status 0 after quit or a signal, 2 for bad arguments, 1 if it cannot start.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tests/support/fault_proxy.h"

namespace {

using shardguard::testing::FaultProxy;
using shardguard::testing::parse_fault_rule;

volatile sig_atomic_t g_signalled = 0;

void on_signal(int) { g_signalled = 1; }

int usage(const std::string& why) {
  std::cerr << "sg_fault_proxy: " << why
            << "\nusage: sg_fault_proxy --upstream HOST:PORT [--port-file FILE] [--rule SPEC]...\n";
  return 2;
}

// Runs one command line; returns its answer, or nothing for quit.
std::optional<std::string> run_command(FaultProxy& proxy, const std::string& line) {
  std::istringstream in(line);
  std::string verb, arg;
  in >> verb >> arg;
  auto id = [&] { return std::atoi(arg.c_str()); };
  if (verb == "quit") return std::nullopt;
  if (verb == "add") {
    auto rule = parse_fault_rule(arg);
    if (!rule) return "error: " + rule.error().message();
    return std::to_string(proxy.add(std::move(rule).value()));
  }
  if (verb == "applied") return std::to_string(proxy.applied(id()));
  if (verb == "remove") {
    proxy.remove(id());
  } else if (verb == "release") {
    proxy.release(id());
  } else if (verb == "clear") {
    proxy.clear();
  } else if (verb == "blackhole" && (arg == "on" || arg == "off")) {
    proxy.set_blackhole(arg == "on");
  } else if (verb != "stats" && verb != "log") {
    return "error: unknown command '" + line + "'";
  }
  if (verb == "stats") {
    return "requests " + std::to_string(proxy.requests()) + " connections " +
           std::to_string(proxy.connections());
  }
  if (verb == "log") {
    std::string out;
    for (const auto& entry : proxy.request_log()) out += entry + "\n";
    return out + "end";
  }
  return std::string("ok");
}

}  // namespace

int main(int argc, char** argv) {
  std::string upstream, port_file;
  std::vector<std::string> rules;
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (i + 1 >= argc) return usage("'" + flag + "' needs a value");
    std::string value = argv[++i];
    if (flag == "--upstream")
      upstream = value;
    else if (flag == "--port-file")
      port_file = value;
    else if (flag == "--rule")
      rules.push_back(value);
    else
      return usage("unknown flag '" + flag + "'");
  }
  size_t colon = upstream.rfind(':');
  if (colon == std::string::npos) return usage("--upstream HOST:PORT is required");
  int upstream_port = std::atoi(upstream.c_str() + colon + 1);
  if (upstream_port <= 0 || upstream_port > 65535)
    return usage("bad upstream port in '" + upstream + "'");

  auto started = FaultProxy::start(upstream.substr(0, colon), static_cast<uint16_t>(upstream_port));
  if (!started) {
    std::cerr << "sg_fault_proxy: " << started.error().message() << "\n";
    return 1;
  }
  FaultProxy& proxy = **started;
  for (const auto& spec : rules) {
    auto rule = parse_fault_rule(spec);
    if (!rule) return usage(rule.error().message());
    proxy.add(std::move(rule).value());
  }
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);
  if (!port_file.empty()) {
    std::string tmp = port_file + ".tmp";
    FILE* f = std::fopen(tmp.c_str(), "w");
    if (f == nullptr || std::fprintf(f, "%u\n", proxy.port()) < 0 || std::fclose(f) != 0 ||
        std::rename(tmp.c_str(), port_file.c_str()) != 0) {
      std::cerr << "sg_fault_proxy: write port file '" << port_file << "' failed\n";
      return 1;
    }
  }
  std::cout << "listening " << proxy.endpoint() << std::endl;

  bool reading = true;
  std::string pending;
  while (!g_signalled) {
    pollfd p{reading ? STDIN_FILENO : -1, POLLIN, 0};
    if (::poll(&p, 1, 200) <= 0) continue;
    char chunk[4096];
    ssize_t n = ::read(STDIN_FILENO, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      reading = false;  // serve on until a signal
      continue;
    }
    pending.append(chunk, static_cast<size_t>(n));
    for (size_t eol; (eol = pending.find('\n')) != std::string::npos;) {
      std::string line = pending.substr(0, eol);
      pending.erase(0, eol + 1);
      if (line.empty()) continue;
      auto answer = run_command(proxy, line);
      if (!answer) return 0;
      std::cout << *answer << std::endl;
    }
  }
  return 0;
}
