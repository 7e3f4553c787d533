// The checks of each example file as a whole: which objects it holds and how they refer to
// each other (Service <-> pods, JobSet network and coordinator, the shared volume), then
// checkJobSpec() on the Job of shardguard's pods. `ctx` = {toml, entrypointConfig}.
"use strict";

const { checkJobSpec, envValue } = require("./checks.cjs");

const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;

function checkIndexedJobFile(docs, raw, ctx) {
  const out = [];
  const where = "indexed-job.yaml";
  const job = docs.find((d) => d && d.kind === "Job");
  const svc = docs.find((d) => d && d.kind === "Service");
  if (!job || !svc) return [`${where}: needs a Service and a Job`];
  const spec = job.spec || {};
  const pod = (spec.template && spec.template.spec) || {};
  const c = (pod.containers || [])[0] || {};
  out.push(...checkJobSpec(spec, { ...ctx, where: `${where} Job`, nodes: spec.completions, raw }));

  // Pod <index> is <job>-<index>.<service>: both parts DNS labels, the Service headless,
  // selecting this Job's pods, publishing them before they are Ready.
  const host = `${job.metadata.name}-${spec.completions - 1}`;
  if (!DNS_LABEL.test(host) || host.length > 63) out.push(`${where}: hostname ${host} is not a DNS label`);
  const s = svc.spec || {};
  if (s.clusterIP !== "None") out.push(`${where} Service: clusterIP must be None (headless)`);
  if (s.publishNotReadyAddresses !== true) out.push(`${where} Service: publishNotReadyAddresses must be true`);
  if (pod.subdomain !== svc.metadata.name) out.push(`${where}: the pods' subdomain must be the Service ${svc.metadata.name}`);
  if (envValue(c, "SHARDGUARD_RDZV_SERVICE") !== svc.metadata.name)
    out.push(`${where}: SHARDGUARD_RDZV_SERVICE must be the Service ${svc.metadata.name}`);
  // What the Job controller puts on its pods, besides the template's labels.
  const podLabels = {
    ...((spec.template.metadata && spec.template.metadata.labels) || {}),
    "batch.kubernetes.io/job-name": job.metadata.name,
    "job-name": job.metadata.name,
  };
  const sel = s.selector || {};
  if (Object.keys(sel).length === 0 || Object.entries(sel).some(([k, v]) => podLabels[k] !== v))
    out.push(`${where} Service: selector ${JSON.stringify(sel)} does not select the Job's pods`);
  const port = Number(envValue(c, "SHARDGUARD_RDZV_PORT") || 29400);
  if (!(s.ports || []).some((p) => p.port === port && (p.targetPort || p.port) === port))
    out.push(`${where} Service: no port ${port} (SHARDGUARD_RDZV_PORT)`);
  return out;
}

function checkJobSetFile(docs, raw, ctx) {
  const out = [];
  const where = "jobset.yaml";
  const js = docs.find((d) => d && d.kind === "JobSet");
  if (!js || docs.length !== 1) return [`${where}: needs exactly one JobSet`];
  const spec = js.spec || {};
  const rjobs = spec.replicatedJobs || [];
  if (rjobs.length !== 1) return [`${where}: one replicatedJob of node pods expected`];
  const rj = rjobs[0];
  const jobSpec = (rj.template && rj.template.spec) || {};
  const replicas = rj.replicas || 1;
  const pod = (jobSpec.template && jobSpec.template.spec) || {};
  const c = (pod.containers || [])[0] || {};
  out.push(...checkJobSpec(jobSpec, { ...ctx, where: `${where} ${rj.name}`, nodes: replicas * jobSpec.completions, raw }));

  const net = spec.network || {};
  if (net.enableDNSHostnames === false) out.push(`${where}: network.enableDNSHostnames must stay on`);
  if (net.publishNotReadyAddresses !== true) out.push(`${where}: network.publishNotReadyAddresses must be true`);
  if (pod.subdomain !== undefined) out.push(`${where}: leave the pods' subdomain to the JobSet controller`);
  const svc = envValue(c, "SHARDGUARD_RDZV_SERVICE");
  if (svc !== undefined && svc !== (net.subdomain || js.metadata.name))
    out.push(`${where}: SHARDGUARD_RDZV_SERVICE must be the JobSet's subdomain`);
  const co = spec.coordinator;
  if (!co || co.replicatedJob !== rj.name || (co.jobIndex || 0) !== 0 || (co.podIndex || 0) !== 0)
    out.push(`${where}: coordinator must be ${rj.name}, job 0, pod 0 (node rank 0)`);

  // The JobSet CRD (v0.6) embeds an older Job schema in which a pod condition's status is
  // required; the API server would refuse the JobSet without it.
  for (const rule of (jobSpec.podFailurePolicy && jobSpec.podFailurePolicy.rules) || []) {
    if ((rule.onPodConditions || []).some((pc) => pc.status === undefined))
      out.push(`${where}: onPodConditions[].status is required by the JobSet v0.6 CRD`);
  }

  // Exit 76/78 fail the child Job by its podFailurePolicy: that must fail the JobSet, not
  // restart it maxRestarts times.
  const rules = (spec.failurePolicy && spec.failurePolicy.rules) || [];
  const first = rules.find((r) => !r.onJobFailureReasons || r.onJobFailureReasons.length === 0 ||
                                  r.onJobFailureReasons.includes("PodFailurePolicy"));
  if (!first || first.action !== "FailJobSet")
    out.push(`${where}: a Job failed by its podFailurePolicy must fail the JobSet (FailJobSet)`);
  return out;
}

function checkPvcFile(docs) {
  const pvc = docs.find((d) => d && d.kind === "PersistentVolumeClaim");
  if (!pvc) return ["checkpoint-pvc.yaml: needs a PersistentVolumeClaim"];
  if (pvc.metadata.name !== "shardguard-checkpoints") return ["checkpoint-pvc.yaml: name it shardguard-checkpoints"];
  if (!((pvc.spec && pvc.spec.accessModes) || []).includes("ReadWriteMany"))
    return ["checkpoint-pvc.yaml: every node writes its shards: ReadWriteMany"];
  return [];
}

module.exports = { checkIndexedJobFile, checkJobSetFile, checkPvcFile };
