#!/usr/bin/env bash
# ctest packaging_systemd_security_test (issue 26): the systemd units of packaging/, configured
# the way cmake --install configures them (cmake/install_generated.cmake.in), offline:
#  1. `systemd-analyze verify` of both units: no unknown or misspelled directive (systemd
#     ignores those with a warning, which would silently drop a piece of the sandbox);
#  2. `systemd-analyze security --offline=yes` of the agent's unit: the overall exposure must
#     stay below 5 (it was 9.4 UNSAFE before the unit was sandboxed);
#  3. the few directives without which the agent cannot drain a run, so that a lower score is
#     never bought by breaking it (see the comments in shardguard-agent.service.in).
# Exit 77 (skipped) without systemd-analyze or where it lacks --offline (systemd < 250).
# Run by hand: bash tests/packaging/systemd_security_test.sh
set -euo pipefail
src=${SHARDGUARD_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
max_exposure=5.0

skip() {
  echo "SKIPPED: $*"
  exit 77
}
command -v systemd-analyze >/dev/null || skip "systemd-analyze is not installed (Debian: systemd)"
systemd-analyze security --help 2>&1 | grep -q -- '--offline' ||
  skip "systemd-analyze $(systemd-analyze --version | head -1 | cut -d' ' -f2) has no --offline"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# ExecStart= must name an executable for verify: a stand-in for the installed binary.
mkdir -p "$work/bin" "$work/units"
printf '#!/bin/sh\nexit 0\n' >"$work/bin/shardguard"
chmod 0755 "$work/bin/shardguard"
configure() {  # template -> unit, the placeholders as install_generated.cmake.in sets them
  sed -e "s|@SG_BINDIR@|$work/bin|g" \
      -e 's|@SG_DOCDIR@|/usr/share/doc/shardguard|g' \
      -e 's|@SG_EXAMPLES@|/usr/share/shardguard/examples|g' "$1" >"$2"
  if grep -n '@[A-Z_]*@' "$2"; then
    echo "FAIL: $(basename "$1"): placeholders the install step does not set"
    exit 1
  fi
}
agent=$work/units/shardguard-agent.service
job=$work/units/shardguard-job@example.service   # an instance: verify loads no templates
configure "$src/packaging/shardguard-agent.service.in" "$agent"
configure "$src/packaging/shardguard-job@.service.in" "$job"

failed=0
fail() {
  echo "FAIL: $*"
  failed=1
}

# 1. verify: the exit status catches a bad ExecStart= or section; the output catches keys
# systemd would ignore ("Unknown key ..., ignoring"). Lines about other units (the targets
# these pull in) are not ours to judge.
for unit in "$agent" "$job"; do
  name=$(basename "$unit")
  if ! out=$(systemd-analyze verify --man=no "$unit" 2>&1); then
    fail "systemd-analyze verify $name: exit $?"
  fi
  ours=$(grep -F -e "$name" -e "$unit" <<<"$out" || true)
  if [[ -n $ours ]]; then
    fail "systemd-analyze verify $name complains:"
    echo "$ours"
  else
    echo "verify $name: OK"
  fi
done

# 2. The exposure score of the agent's unit: "→ Overall exposure level for NAME: 1.9 OK 🙂".
report=$(systemd-analyze security --offline=yes "$agent" 2>&1) || true
score=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9][0-9.]*\).*/\1/p' <<<"$report")
if [[ -z $score ]]; then
  echo "$report"
  fail "no overall exposure level in the output of systemd-analyze security"
elif awk -v s="$score" -v m="$max_exposure" 'BEGIN { exit !(s >= m) }'; then
  echo "$report"
  fail "shardguard-agent.service: exposure $score, must be below $max_exposure"
else
  echo "security shardguard-agent.service: exposure $score (below $max_exposure)"
fi

# 3. What the agent needs, whatever the score says. The last assignment of a key wins; an
# absent key is systemd's default (every capability, every address family), which is fine.
has() { grep -qE "^$1=" "$agent"; }
value() { grep -E "^$1=" "$agent" | tail -1 | cut -d= -f2- || true; }
if has User || has DynamicUser; then
  fail "User=/DynamicUser=: the runs' sockets accept the job's uid and root only"
fi
if has CapabilityBoundingSet && [[ " $(value CapabilityBoundingSet) " != *" CAP_DAC_OVERRIDE "* ]]
then
  fail "CapabilityBoundingSet= must keep CAP_DAC_OVERRIDE (other users' 0600 sockets)"
fi
case $(value ProtectHome) in
  yes | tmpfs) fail "ProtectHome=yes/tmpfs hides run directories in homes; use read-only" ;;
esac
[[ "$(value PrivateNetwork)" != yes ]] || fail "PrivateNetwork=yes cuts off the metadata service"
[[ "$(value PrivateUsers)" != yes ]] || fail "PrivateUsers=yes: other users' sockets unreachable"
if has RestrictAddressFamilies; then
  for family in AF_UNIX AF_INET AF_INET6; do
    [[ " $(value RestrictAddressFamilies) " == *" $family "* ]] ||
      fail "RestrictAddressFamilies= must allow $family"
  done
fi

if [[ $failed -ne 0 ]]; then
  exit 1
fi
echo "systemd units OK"
