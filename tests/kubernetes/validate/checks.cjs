// Our own checks of examples/kubernetes, beyond the schemas: what the manifests must do for
// shardguard (exit codes, grace, secret, PID 1) and that the pieces agree with each other
// (Service, subdomain, ports, node counts, job.toml, Containerfile). Each check returns a
// list of problems, "<where>: <what>"; [] when all is well.
"use strict";

const path = require("path");

// The Job controller's podFailurePolicy, as documented for batch/v1: rules in order, the
// first that matches decides; onExitCodes looks at the named container's non-zero exit
// code; onPodConditions at the pod's conditions; no match: Count (against backoffLimit).
function podFailureAction(policy, pod) {
  for (const rule of (policy && policy.rules) || []) {
    const codes = rule.onExitCodes;
    if (codes) {
      const named = !codes.containerName || codes.containerName === pod.container;
      const inSet = (codes.values || []).includes(pod.exitCode);
      const hit = codes.operator === "In" ? inSet : !inSet;
      if (named && pod.exitCode !== 0 && hit) return rule.action;
    }
    for (const c of rule.onPodConditions || []) {
      if ((pod.conditions || []).some((p) => p.type === c.type && p.status === (c.status || "True"))) {
        return rule.action;
      }
    }
  }
  return "Count";
}

// A duration of job.toml ("95s", "2m") in seconds; NaN for anything else.
function seconds(text) {
  const m = /^(\d+)(s|m)$/.exec(text || "");
  return m ? Number(m[1]) * (m[2] === "m" ? 60 : 1) : NaN;
}

// `key = "value"` of one [section] of job.toml (enough for the keys read here).
function tomlValue(toml, section, key) {
  let current = "";
  for (const line of toml.split("\n")) {
    const head = /^\s*\[([^\]]+)\]/.exec(line);
    if (head) current = head[1];
    const kv = /^\s*([A-Za-z_]+)\s*=\s*"([^"]*)"/.exec(line);
    if (kv && current === section && kv[1] === key) return kv[2];
  }
  return undefined;
}

const envValue = (container, name) => {
  const e = (container.env || []).find((v) => v.name === name);
  return e ? e.value : undefined;
};

// The Job spec of shardguard's pods, with `ctx` = {where, nodes, raw, toml, entrypoint}.
function checkJobSpec(spec, ctx) {
  const out = [];
  const bad = (what) => out.push(`${ctx.where}: ${what}`);
  const pod = (spec.template && spec.template.spec) || {};
  const containers = pod.containers || [];
  if (spec.completionMode !== "Indexed") bad("completionMode must be Indexed (the index is the node rank)");
  if (spec.parallelism !== spec.completions) bad("parallelism must equal completions: one pod per node, all at once");
  if (pod.restartPolicy !== "Never") bad("restartPolicy must be Never (podFailurePolicy needs it)");
  if (spec.podReplacementPolicy !== "Failed") bad("podReplacementPolicy must be Failed (one pod per index)");
  if (containers.length !== 1) bad(`one container expected, found ${containers.length}`);
  const c = containers[0] || {};

  const policy = spec.podFailurePolicy;
  const expect = [
    [{ exitCode: 75 }, "Ignore", "exit 75 (preempted) must not count against backoffLimit"],
    [{ exitCode: 76 }, "FailJob", "exit 76 (gave up) must fail the Job"],
    [{ exitCode: 78 }, "FailJob", "exit 78 (requeue will not help) must fail the Job"],
    [{ exitCode: 1 }, "Count", "exit 1 must count against backoffLimit"],
    [{ exitCode: 139 }, "Count", "a crash (139) must count against backoffLimit"],
    [{ exitCode: 137, conditions: [{ type: "DisruptionTarget", status: "True" }] }, "Ignore",
     "a pod killed by a disruption must not count"],
  ];
  for (const [p, want, why] of expect) {
    const got = podFailureAction(policy, { container: c.name, conditions: [], ...p });
    if (got !== want) bad(`podFailurePolicy: ${why} (got ${got})`);
  }
  for (const rule of (policy && policy.rules) || []) {
    const codes = rule.onExitCodes;
    if (!codes) continue;
    const v = codes.values || [];
    if (v.some((x, i) => i > 0 && x <= v[i - 1])) bad("onExitCodes.values must be ascending and unique");
    if (codes.operator === "In" && v.includes(0)) bad("onExitCodes: 0 is not allowed with In");
    if (codes.containerName && !containers.some((k) => k.name === codes.containerName))
      bad(`onExitCodes.containerName ${codes.containerName} is not a container of the pod`);
  }

  // terminationGracePeriodSeconds = 2 x S + M, with S and M as the comment states them.
  const s = /\bS = (\d+) s\b/.exec(ctx.raw), m = /\bM = (\d+) s\b/.exec(ctx.raw);
  const tgps = pod.terminationGracePeriodSeconds;
  if (!s || !m) bad("the comment must state S = <n> s (save time) and M = <n> s (margin)");
  else if (tgps !== 2 * Number(s[1]) + Number(m[1]))
    bad(`terminationGracePeriodSeconds ${tgps} is not 2 x S + M = ${2 * Number(s[1]) + Number(m[1])}`);
  const grace = seconds(tomlValue(ctx.toml, "stop", "grace"));
  const term = seconds(tomlValue(ctx.toml, "stop", "term_grace"));
  const margin = seconds(tomlValue(ctx.toml, "stop", "safety_margin"));
  if (!(grace + term < tgps)) bad(`job.toml [stop] grace + term_grace (${grace + term} s) must end before the kubelet's SIGKILL (${tgps} s)`);
  if (s && !(grace - margin >= 2 * Number(s[1]))) bad("job.toml [stop] grace - safety_margin must hold two saves (2 x S)");

  // The secret: owner-only, root-owned, no fsGroup turning it into 0440.
  const sc = pod.securityContext || {};
  if (sc.fsGroup !== undefined) bad("fsGroup makes the secret 0440, which shardguard refuses");
  const uid = (c.securityContext && c.securityContext.runAsUser) ?? sc.runAsUser;
  if (uid !== 0) bad("the pod must run as root (uid 0), the owner of the mounted secret");
  const vols = pod.volumes || [];
  const mounts = c.volumeMounts || [];
  const mountOf = (name) => mounts.find((x) => x.name === name);
  const secretVol = vols.find((v) => v.secret);
  if (secretVol && secretVol.secret.secretName !== "shardguard-secret")
    bad("the secret volume must use the Secret shardguard-secret (see the header's commands)");
  const secretFile = envValue(c, "SHARDGUARD_SECRET_FILE");
  if (!secretVol) bad("no secret volume");
  else {
    const modes = [secretVol.secret.defaultMode, ...(secretVol.secret.items || []).map((i) => i.mode)];
    if (modes[0] === undefined || modes.some((x) => x !== undefined && x !== 0o400 && x !== 0o600))
      bad(`secret defaultMode must be 256 (0400) or 384 (0600), got ${secretVol.secret.defaultMode}`);
    const mnt = mountOf(secretVol.name);
    if (!mnt || !mnt.readOnly) bad("the secret must be mounted read-only");
    const item = (secretVol.secret.items || [])[0];
    if (mnt && item && secretFile !== path.posix.join(mnt.mountPath, item.path))
      bad(`SHARDGUARD_SECRET_FILE ${secretFile} is not the mounted secret ${path.posix.join(mnt.mountPath, item.path)}`);
  }

  // The config the ENTRYPOINT reads, the checkpoint volume job.toml writes to.
  const cm = vols.find((v) => v.configMap && v.configMap.name === "shardguard-job");
  if (!cm || !mountOf(cm.name) || mountOf(cm.name).mountPath !== path.posix.dirname(ctx.entrypointConfig))
    bad(`the ConfigMap shardguard-job must be mounted at ${path.posix.dirname(ctx.entrypointConfig)}`);
  const pvc = vols.find((v) => v.persistentVolumeClaim);
  if (pvc && pvc.persistentVolumeClaim.claimName !== "shardguard-checkpoints")
    bad("the shared volume must be the claim shardguard-checkpoints (checkpoint-pvc.yaml)");
  const ckptDir = tomlValue(ctx.toml, "job", "checkpoint_dir") || "";
  if (!pvc || !mountOf(pvc.name) || !ckptDir.startsWith(mountOf(pvc.name).mountPath + "/"))
    bad(`job.toml checkpoint_dir ${ckptDir} must lie on the shared volume`);

  // Ranks per node = GPUs per node; node count = the pods.
  const args = c.args || [];
  const nproc = args[args.indexOf("--nproc-per-node") + 1];
  const gpus = (c.resources && c.resources.limits && c.resources.limits["nvidia.com/gpu"]) || 0;
  if (!args.includes("--") || args.indexOf("--") < args.indexOf("--nproc-per-node")) bad("args: --nproc-per-node N -- COMMAND");
  if (Number(nproc) !== Number(gpus)) bad(`--nproc-per-node ${nproc} is not the ${gpus} GPUs of the limits`);
  const nnodes = String(envValue(c, "SHARDGUARD_NNODES") || "").split(":").pop();
  if (Number(nnodes) !== ctx.nodes) bad(`SHARDGUARD_NNODES ${nnodes} is not the ${ctx.nodes} pods`);
  const port = Number(envValue(c, "SHARDGUARD_RDZV_PORT") || 29400);
  if (!(c.ports || []).some((p) => p.containerPort === port)) bad(`no containerPort ${port} (SHARDGUARD_RDZV_PORT)`);
  return out;
}

// The Containerfile: shardguard itself is PID 1 (exec form, no shell, no init in between).
function checkContainerfile(text) {
  const out = [];
  const line = /^ENTRYPOINT\s+(.*)$/m.exec(text);
  let entry = null;
  try {
    entry = line ? JSON.parse(line[1]) : null;
  } catch (e) {
    entry = null;
  }
  if (!Array.isArray(entry) || entry[0] !== "shardguard" || entry[1] !== "run")
    out.push('Containerfile: ENTRYPOINT must be the exec form ["shardguard", "run", ...] (PID 1)');
  const froms = [...text.matchAll(/^FROM\s+(\S+)/gm)].map((x) => x[1]);
  if (froms.length === 0 || froms.some((f) => f !== "debian:12")) out.push("Containerfile: build from debian:12 only");
  const stop = /^STOPSIGNAL\s+(\S+)/m.exec(text);
  if (stop && stop[1] !== "SIGTERM") out.push("Containerfile: the stop signal must be SIGTERM");
  const config = Array.isArray(entry) ? entry[entry.indexOf("--config") + 1] : undefined;
  return { problems: out, config: config || "" };
}

module.exports = { podFailureAction, checkJobSpec, checkContainerfile, tomlValue, envValue };
