#include "policies/signal_names.h"

#include <array>
#include <csignal>

namespace shardguard::policies {
namespace {

struct SignalName {
  int number;
  std::string_view name;
};

constexpr std::array<SignalName, 28> kSignals = {{
    {SIGHUP, "SIGHUP"},       {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"},   {SIGILL, "SIGILL"},
    {SIGTRAP, "SIGTRAP"},     {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},     {SIGFPE, "SIGFPE"},
    {SIGKILL, "SIGKILL"},     {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"},   {SIGUSR2, "SIGUSR2"},
    {SIGPIPE, "SIGPIPE"},     {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"},   {SIGCHLD, "SIGCHLD"},
    {SIGCONT, "SIGCONT"},     {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"},   {SIGTTIN, "SIGTTIN"},
    {SIGTTOU, "SIGTTOU"},     {SIGURG, "SIGURG"},   {SIGXCPU, "SIGXCPU"},   {SIGXFSZ, "SIGXFSZ"},
    {SIGVTALRM, "SIGVTALRM"}, {SIGPROF, "SIGPROF"}, {SIGWINCH, "SIGWINCH"}, {SIGSYS, "SIGSYS"},
}};

}  // namespace

std::string_view signal_name(int signal) {
  for (const auto& s : kSignals)
    if (s.number == signal) return s.name;
  return {};
}

std::optional<int> signal_number(std::string_view name) {
  for (const auto& s : kSignals)
    if (s.name == name) return s.number;
  return std::nullopt;
}

}  // namespace shardguard::policies
