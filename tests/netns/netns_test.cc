// Smoke tests of the network namespace fixture (tests/support/netns.h): real namespaces,
// veths, a bridge, TCP between them, partitions with iptables and with a link down, and a
// teardown that leaves nothing behind. Skips (with a warning) where namespaces are not
// permitted.
#include "tests/support/netns.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "tests/support/background.h"
#include "tests/support/temp_dir.h"

using namespace shardguard::testing;
using namespace std::chrono_literals;

namespace {

#define SG_NETNS_OR_SKIP()                               \
  do {                                                   \
    if (auto why = NetnsNetwork::unavailable_reason()) { \
      WARN("SKIPPED: " << *why);                         \
      return;                                            \
    }                                                    \
  } while (0)

constexpr int kPort = 7100;

std::string probe_bin() {
  const char* p = std::getenv("SG_TCP_PROBE");
  return p ? p : "tcp_probe";
}

// Exit code of `tcp_probe connect` from node `from` to node `to` (0 ok, 2 timed out, 1 other).
int connect_code(const NetnsNetwork& net, int from, int to, int timeout_ms, std::string* err) {
  auto r = net.exec(
      from,
      {probe_bin(), "connect", net.address(to), std::to_string(kPort), std::to_string(timeout_ms)},
      10s);
  REQUIRE(r.ok());
  if (err) *err = r->err;
  return r->exit_code;
}

// Retries until a connect succeeds (servers starting, a healed link coming back): bounded.
bool eventually_connects(const NetnsNetwork& net, int from, int to) {
  for (int i = 0; i < 50; ++i) {
    if (connect_code(net, from, to, 500, nullptr) == 0) return true;
    std::this_thread::sleep_for(100ms);
  }
  return false;
}

std::vector<std::string> root_links() {
  auto r = run_process({"ip", "-o", "link", "show"}, {}, 10s);
  REQUIRE(r.ok());
  std::vector<std::string> names;
  std::istringstream in(r->out);
  for (std::string line; std::getline(in, line);) {
    auto a = line.find(": "), b = line.find(':', a + 2);
    if (a != std::string::npos && b != std::string::npos)
      names.push_back(line.substr(a + 2, b - a - 2));
  }
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

TEST_CASE("netns: TCP between namespaces, cut by a partition, back after heal; nothing left",
          "[integration]") {
  SG_NETNS_OR_SKIP();
  const auto method = GENERATE(PartitionMethod::kIptablesDrop, PartitionMethod::kLinkDown);
  const bool drop = method == PartitionMethod::kIptablesDrop;
  INFO("partition by " << (drop ? "iptables DROP" : "link down"));
  const auto links_before = root_links();
  TempDir tmp;
  std::string base;
  std::vector<pid_t> servers;
  {
    auto created = NetnsNetwork::create({.nodes = 3, .octet2 = 213, .octet3 = 7});
    REQUIRE(created.ok());
    NetnsNetwork& net = **created;
    base = net.name(0).substr(0, net.name(0).rfind('-'));
    CHECK(net.address(0) == "10.213.7.1");
    CHECK(net.address(2) == "10.213.7.3");

    // Each node sees only its own address and loopback.
    auto addrs = net.exec(1, {"ip", "-o", "-4", "addr", "show"});
    REQUIRE(addrs.ok());
    CHECK(addrs->out.find("10.213.7.2/24") != std::string::npos);
    CHECK(addrs->out.find("127.0.0.1/8") != std::string::npos);
    CHECK(addrs->out.find("10.213.7.1/") == std::string::npos);

    for (int i = 0; i < 3; ++i) {
      auto pid = net.spawn(i, {probe_bin(), "serve", std::to_string(kPort)},
                           tmp / ("serve-" + std::to_string(i) + ".log"));
      REQUIRE(pid.ok());
      servers.push_back(*pid);
    }
    REQUIRE(eventually_connects(net, 1, 0));
    REQUIRE(eventually_connects(net, 0, 1));
    REQUIRE(eventually_connects(net, 2, 0));
    CHECK(net.pids_in(0).size() == 1);

    REQUIRE(net.partition(0, method).ok());
    CHECK(net.partitioned(0));
    CHECK_FALSE(net.partition(0, method).ok());  // twice is an error
    std::string err;
    const auto t0 = std::chrono::steady_clock::now();
    const int in_code = connect_code(net, 1, 0, 1000, &err);
    const auto waited = std::chrono::steady_clock::now() - t0;
    INFO("1 -> 0 while partitioned: exit " << in_code << ", " << err);
    if (drop) {
      CHECK(in_code == 2);  // packets vanish: the connect times out
      CHECK(waited >= 900ms);
    } else {
      CHECK(in_code != 0);  // no carrier: times out, or "no route" once ARP gives up
    }
    CHECK(connect_code(net, 0, 1, 1000, &err) != 0);  // the partitioned node cannot reach out
    CHECK(connect_code(net, 1, 2, 1000, &err) == 0);  // the others still can
    CHECK(connect_code(net, 2, 1, 1000, &err) == 0);

    REQUIRE(net.heal(0).ok());
    CHECK_FALSE(net.partitioned(0));
    CHECK_FALSE(net.heal(0).ok());
    CHECK(eventually_connects(net, 1, 0));
    CHECK(eventually_connects(net, 0, 2));
  }
  // Destroyed: no namespace of this run, no server process, the root namespace unchanged.
  for (const auto& ns : NetnsNetwork::existing_namespaces()) CHECK(ns.rfind(base, 0) != 0);
  for (pid_t p : servers) CHECK_FALSE(process_alive(p));
  CHECK(root_links() == links_before);
}

TEST_CASE("netns: the sweep removes what a dead run left and keeps a live run's namespaces",
          "[integration]") {
  SG_NETNS_OR_SKIP();
  // A pid that is certainly dead: a child that exited and was reaped.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  int st = 0;
  ::waitpid(dead, &st, 0);
  const std::string stale = std::string(NetnsNetwork::kPrefix) + std::to_string(dead) + "-1-0-n0";
  REQUIRE(run_process({"ip", "netns", "add", stale}, {}, 10s)->exit_code == 0);
  TempDir tmp;
  // A process still running inside the stale namespace: the sweep kills it too.
  auto sleeper =
      spawn_process({"ip", "netns", "exec", stale, "sleep", "60"}, {}, tmp / "sleep.log", SIGKILL);
  REQUIRE(sleeper.ok());
  REQUIRE(eventually(
      [&] {
        auto r = run_process({"ip", "netns", "pids", stale}, {}, 10s);
        return r.ok() && !r->out.empty();
      },
      5s));

  auto live = NetnsNetwork::create({.nodes = 1, .octet2 = 213, .octet3 = 8});  // sweeps first
  REQUIRE(live.ok());
  auto names = NetnsNetwork::existing_namespaces();
  CHECK(std::find(names.begin(), names.end(), stale) == names.end());
  CHECK(wait_exit(*sleeper, 5s));

  NetnsNetwork::sweep_stale();  // a live run is left alone
  names = NetnsNetwork::existing_namespaces();
  CHECK(std::find(names.begin(), names.end(), (*live)->name(0)) != names.end());
  CHECK(std::find(names.begin(), names.end(), (*live)->hub()) != names.end());
}
