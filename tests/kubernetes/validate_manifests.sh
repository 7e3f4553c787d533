#!/usr/bin/env bash
# ctest kubernetes_manifest_test: checks examples/kubernetes without a cluster.
#  1. the pods' job.toml through `shardguard run --check-config` (the real binary);
#  2. pod_security.py: every pod template against the restricted Pod Security Standard, with
#     a self-test on broken copies (Python 3 and PyYAML only: runs where npm cannot);
#  3. validate/validate.cjs: the Kubernetes OpenAPI schema (npm kubernetes-models), our
#     JobSet schema, our own checks, and each pod's kubelet environment placed by
#     agent/scheduler_env (sg_placement_probe), plus a self-test on broken copies.
# The npm packages (pinned by validate/package-lock.json) go into $SG_K8S_CACHE in the
# build tree, once per lock file; exit 77 (skipped) without node/npm or a registry.
set -euo pipefail
src=${SHARDGUARD_SOURCE_DIR:?} bin=${SHARDGUARD_BIN:?}
cache=${SG_K8S_CACHE:?} probe=${SG_PLACEMENT_PROBE:?}
examples=$src/examples/kubernetes
here=$src/tests/kubernetes/validate

"$bin" run --config "$examples/job.toml" --check-config -- true

# pod_security.py exits 77 without PyYAML; the node validator below checks the same rules.
pss="not checked (no python3 with PyYAML)"
# Debian's python3 has PyYAML (python3-yaml, which awscli of the test set pulls in); the
# python3 first on PATH may be another one.
py=/usr/bin/python3
[[ -x $py ]] || py=$(command -v python3 || true)
if [[ -n $py ]]; then
  rc=0
  "$py" "$src/tests/kubernetes/pod_security.py" "$examples"/*.yaml || rc=$?
  case $rc in
    0) pss=checked ;;
    77) ;;
    *) exit "$rc" ;;
  esac
fi

skip() {
  echo "SKIPPED: $* (job.toml passed --check-config, the Pod Security Standard $pss;" \
       "the manifests were not validated)"
  exit 77
}
command -v node >/dev/null || skip "node is not installed (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null || skip "npm is not installed (Debian: apt-get install npm)"

want=$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)
if [[ ! -d $cache/node_modules || "$(cat "$cache/.lock.sha256" 2>/dev/null)" != "$want" ]]; then
  rm -rf "$cache"
  mkdir -p "$cache"
  cp "$here/package.json" "$here/package-lock.json" "$cache/"
  echo "installing the validator's npm packages into $cache"
  if ! (cd "$cache" && npm_config_cache="$cache/.npm" timeout 300 \
        npm ci --ignore-scripts --no-audit --no-fund --loglevel=error); then
    rm -rf "$cache"
    skip "npm ci failed: no registry reachable?"
  fi
  echo "$want" >"$cache/.lock.sha256"
fi

node "$here/validate.cjs" --modules "$cache" --examples "$examples" --probe "$probe"
