// Plays the Job controller, the JobSet controller and the kubelet for every pod of the
// examples: its hostname, the annotations the controllers put on it, and the environment
// its container gets (values, downward API fields, JOB_COMPLETION_INDEX). Then runs the
// placement probe (shardguard's agent/scheduler_env on that environment) and checks that
// pod k is node k and finds node 0 under the name DNS gives it.
"use strict";

const { spawnSync } = require("child_process");

const JS = "jobset.sigs.k8s.io/";
const INDEX = "batch.kubernetes.io/job-completion-index";

// Pods of an Indexed Job: hostname <job>-<i> (Job controller), DNS <hostname>.<subdomain>.
function indexedJobPods(job) {
  const spec = job.spec;
  const pods = [];
  for (let i = 0; i < spec.completions; i++) {
    pods.push({ rank: i, hostname: `${job.metadata.name}-${i}`, annotations: { [INDEX]: String(i) },
                index: i, template: spec.template, subdomain: spec.template.spec.subdomain });
  }
  return pods;
}

// Pods of a JobSet (controller v0.6+): hostname <jobset>-<rjob>-<jobIndex>-<podIndex>,
// subdomain network.subdomain or the JobSet's name, and its annotations on every pod.
function jobSetPods(js) {
  const subdomain = (js.spec.network && js.spec.network.subdomain) || js.metadata.name;
  const co = js.spec.coordinator;
  const pods = [];
  for (const rj of js.spec.replicatedJobs) {
    const replicas = rj.replicas || 1;
    const spec = rj.template.spec;
    for (let j = 0; j < replicas; j++) {
      for (let i = 0; i < spec.completions; i++) {
        const annotations = {
          [JS + "jobset-name"]: js.metadata.name,
          [JS + "replicatedjob-name"]: rj.name,
          [JS + "job-index"]: String(j),
          [JS + "replicatedjob-replicas"]: String(replicas),
          [JS + "restart-attempt"]: "0",
          [INDEX]: String(i),
        };
        if (co) annotations[JS + "coordinator"] =
            `${js.metadata.name}-${co.replicatedJob}-${co.jobIndex || 0}-${co.podIndex || 0}.${subdomain}`;
        pods.push({ rank: j * spec.completions + i, hostname: `${js.metadata.name}-${rj.name}-${j}-${i}`,
                    annotations, index: i, template: spec.template, subdomain });
      }
    }
  }
  return pods;
}

// The container's environment as the kubelet builds it; problems for fields it cannot fill.
function containerEnv(pod) {
  const c = pod.template.spec.containers[0];
  const env = { HOSTNAME: pod.hostname, KUBERNETES_SERVICE_HOST: "10.96.0.1", JOB_COMPLETION_INDEX: String(pod.index) };
  const problems = [];
  for (const v of c.env || []) {
    if (v.value !== undefined) env[v.name] = v.value;
    const ref = v.valueFrom && v.valueFrom.fieldRef && v.valueFrom.fieldRef.fieldPath;
    if (!ref) continue;
    const m = /^metadata\.annotations\['([^']+)'\]$/.exec(ref);
    if (!m) problems.push(`${v.name}: fieldPath ${ref} is not a pod annotation`);
    else if (pod.annotations[m[1]] === undefined) problems.push(`${v.name}: no controller sets the annotation ${m[1]}`);
    else env[v.name] = pod.annotations[m[1]];
  }
  return { env, problems };
}

// Runs the probe on each pod's environment; returns [problems, number of pods probed].
function probePods(where, pods, probeBin) {
  const out = [];
  const coordinator = `${pods.find((p) => p.rank === 0).hostname}.${pods[0].subdomain}`;
  for (const pod of pods) {
    const { env, problems } = containerEnv(pod);
    out.push(...problems.map((p) => `${where} pod ${pod.hostname}: ${p}`));
    const r = spawnSync(probeBin, [], { env, encoding: "utf8", timeout: 10000 });
    const fields = Object.fromEntries((r.stdout || "").trim().split("\n").map((l) => {
      const eq = l.indexOf("=");
      return [l.slice(0, eq), l.slice(eq + 1)];
    }));
    const port = env.SHARDGUARD_RDZV_PORT || "29400";
    const want = { node_rank: String(pod.rank), nnodes: env.SHARDGUARD_NNODES, rdzv: `${coordinator}:${port}`,
                   secret_file: env.SHARDGUARD_SECRET_FILE };
    if (r.status !== 0) {
      out.push(`${where} pod ${pod.hostname}: shardguard cannot place it: ${fields.error || r.stderr || r.error}`);
      continue;
    }
    for (const [k, v] of Object.entries(want)) {
      if (fields[k] !== v) out.push(`${where} pod ${pod.hostname}: ${k} is ${fields[k]}, expected ${v}`);
    }
  }
  return [out, pods.length];
}

module.exports = { indexedJobPods, jobSetPods, probePods, containerEnv };
