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

// The restricted Pod Security Standard (kubernetes.io/docs/concepts/security/pod-security-
// standards, with its baseline), for a pod spec: what the API server's PodSecurity admission
// at level "restricted" refuses, field by field. tests/kubernetes/pod_security.py holds the
// same rules for machines without npm: keep the two in step.
const PSS_VOLUMES = ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                     "persistentVolumeClaim", "projected", "secret"];
const PSS_SYSCTLS = ["kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                     "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                     "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                     "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                     "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"];
const PSS_SELINUX_TYPES = ["", "container_t", "container_init_t", "container_kvm_t",
                           "container_engine_t"];

function checkPodSecurity(pod, where) {
  const out = [];
  const bad = (what) => out.push(`${where}: restricted Pod Security Standard: ${what}`);
  const sc = pod.securityContext || {};
  for (const k of ["hostNetwork", "hostPID", "hostIPC"]) if (pod[k] === true) bad(`${k} must not be true`);
  for (const v of pod.volumes || []) {
    const kind = Object.keys(v).find((k) => k !== "name");
    if (!PSS_VOLUMES.includes(kind)) bad(`volume ${v.name}: ${kind} volumes are not allowed`);
  }
  for (const s of sc.sysctls || []) if (!PSS_SYSCTLS.includes(s.name)) bad(`sysctl ${s.name} is not a safe one`);
  const seccomp = (ctx) => ctx.seccompProfile && ctx.seccompProfile.type;
  if (seccomp(sc) !== undefined && !["RuntimeDefault", "Localhost"].includes(seccomp(sc)))
    bad(`pod seccompProfile ${seccomp(sc)}: RuntimeDefault or Localhost only`);
  if (sc.runAsUser === 0) bad("pod runAsUser must not be 0 (root)");
  if (sc.runAsNonRoot === false) bad("pod runAsNonRoot must not be false");
  const selinux = (ctx, who) => {
    const o = ctx.seLinuxOptions || {};
    if (!PSS_SELINUX_TYPES.includes(o.type || "")) bad(`${who} seLinuxOptions.type ${o.type} is not allowed`);
    if (o.user || o.role) bad(`${who} seLinuxOptions must not set user or role`);
  };
  selinux(sc, "pod");
  const containers = [...(pod.initContainers || []), ...(pod.containers || []),
                      ...(pod.ephemeralContainers || [])];
  for (const c of containers) {
    const who = `container ${c.name}`;
    const csc = c.securityContext || {};
    if (csc.privileged === true) bad(`${who}: privileged must not be true`);
    if (csc.allowPrivilegeEscalation !== false) bad(`${who}: allowPrivilegeEscalation must be false`);
    const caps = csc.capabilities || {};
    if (!(caps.drop || []).includes("ALL")) bad(`${who}: capabilities.drop must include ALL`);
    for (const add of caps.add || []) {
      if (add !== "NET_BIND_SERVICE") bad(`${who}: capabilities.add ${add}: NET_BIND_SERVICE only`);
    }
    if ((csc.runAsNonRoot ?? sc.runAsNonRoot) !== true) bad(`${who}: runAsNonRoot must be true (pod or container)`);
    if (csc.runAsUser === 0) bad(`${who}: runAsUser must not be 0 (root)`);
    const profile = seccomp(csc) ?? seccomp(sc);
    if (!["RuntimeDefault", "Localhost"].includes(profile))
      bad(`${who}: seccompProfile ${profile ?? "unset"}: RuntimeDefault or Localhost (pod or container)`);
    if (csc.procMount !== undefined && csc.procMount !== "Default") bad(`${who}: procMount must be Default`);
    if (csc.appArmorProfile && csc.appArmorProfile.type === "Unconfined") bad(`${who}: AppArmor must not be Unconfined`);
    if (csc.windowsOptions && csc.windowsOptions.hostProcess) bad(`${who}: hostProcess must not be true`);
    selinux(csc, who);
    for (const p of c.ports || []) if (p.hostPort) bad(`${who}: hostPort ${p.hostPort} is not allowed`);
  }
  if (sc.appArmorProfile && sc.appArmorProfile.type === "Unconfined") bad("pod AppArmor must not be Unconfined");
  return out;
}

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

  // Not root, nothing privileged: the restricted Pod Security Standard.
  out.push(...checkPodSecurity(pod, ctx.where));

  // The secret: shardguard takes only an owner-only file (0400/0600) owned by its own uid or
  // root (net/secret.h). The kubelet mounts a Secret root-owned, unreadable for a non-root
  // uid, or with fsGroup group-readable (0440), which shardguard refuses: an init container
  // running as the container's uid copies it into a memory emptyDir as its own 0400 file,
  // and the container mounts only that file (subPath): the emptyDir itself is writable by
  // all (0777), and a secret reached through a directory others can write could be swapped.
  const sc = pod.securityContext || {};
  const uidOf = (k) => (k.securityContext && k.securityContext.runAsUser) ?? sc.runAsUser;
  const vols = pod.volumes || [];
  const volume = (name) => vols.find((v) => v.name === name) || {};
  const mounts = c.volumeMounts || [];
  const mountOf = (name) => mounts.find((x) => x.name === name);
  const secretVol = vols.find((v) => v.secret);
  const secretFile = envValue(c, "SHARDGUARD_SECRET_FILE") || "";
  if (!secretVol) bad("no secret volume");
  else {
    if (secretVol.secret.secretName !== "shardguard-secret")
      bad("the secret volume must use the Secret shardguard-secret (see the header's commands)");
    const modes = [secretVol.secret.defaultMode, ...(secretVol.secret.items || []).map((i) => i.mode)];
    if (modes[0] === undefined || modes.some((x) => x !== undefined && x !== 0o400 && x !== 0o600))
      bad(`secret defaultMode must be 256 (0400) or 384 (0600), got ${secretVol.secret.defaultMode}`);
    if (mountOf(secretVol.name))
      bad("the container must not mount the Secret itself (root-owned, 0440 with fsGroup: " +
          "refused); it reads the init container's copy");
    const item = (secretVol.secret.items || [])[0];
    const copier = (pod.initContainers || []).find((k) => (k.volumeMounts || []).some((m) => m.name === secretVol.name));
    if (!copier || !item) bad("an init container must copy the secret (one item) for the container's uid");
    else {
      const from = copier.volumeMounts.find((m) => m.name === secretVol.name);
      if (!from.readOnly) bad("the init container must mount the Secret read-only");
      const cmd = copier.command || [];
      const src = path.posix.join(from.mountPath, item.path);
      if (path.posix.basename(cmd[0] || "") !== "install" || cmd[1] !== "-m" || cmd.length !== 5 || cmd[3] !== src)
        bad(`init container ${copier.name}: command must be install -m MODE ${src} DEST`);
      else {
        if (cmd[2] !== "0400" && cmd[2] !== "0600")
          bad(`init container ${copier.name}: install -m ${cmd[2]}: the copy must be 0400 or 0600`);
        // DEST on a Memory emptyDir of the init container; the container mounts DEST alone.
        const dest = cmd[4];
        const to = (copier.volumeMounts || []).find((m) => dest.startsWith(m.mountPath + "/"));
        const there = to && mountOf(to.name);
        if (!to || !volume(to.name).emptyDir || volume(to.name).emptyDir.medium !== "Memory" || !there)
          bad(`the copy ${dest} must lie on a Memory emptyDir that the container mounts`);
        else if (there.subPath !== path.posix.relative(to.mountPath, dest))
          bad(`the container must mount the copy alone (subPath ${path.posix.relative(to.mountPath, dest)}), ` +
              "not the emptyDir, which everyone may write");
        else if (secretFile !== there.mountPath)
          bad(`SHARDGUARD_SECRET_FILE ${secretFile} is not the copy, mounted at ${there.mountPath}`);
        else if (!there.readOnly) bad("the container must mount the secret's copy read-only");
      }
      if (uidOf(copier) === undefined || uidOf(copier) !== uidOf(c))
        bad(`init container ${copier.name} runs as uid ${uidOf(copier)}, the container as uid ${uidOf(c)}: ` +
            "the copy must be owned by the container's uid");
    }
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

module.exports = { podFailureAction, checkJobSpec, checkPodSecurity, checkContainerfile, tomlValue, envValue };
