// Validates examples/kubernetes (run by tests/kubernetes/validate_manifests.sh):
//   node validate.cjs --modules DIR --examples DIR --probe BIN
// 1. every object against its schema: the Kubernetes OpenAPI schema (npm kubernetes-models,
//    unknown fields refused as by the API server's strict validation) or, for the JobSet,
//    our own schema (jobset-v1alpha2.schema.json) with its Job templates against OpenAPI;
// 2. our own checks (checks.cjs, files.cjs): exit codes, grace arithmetic, secret, PID 1,
//    the restricted Pod Security Standard, and that Service, subdomain, ports, node counts,
//    job.toml and Containerfile agree;
// 3. the environment the kubelet gives each pod, through shardguard's placement (probe);
// 4. a self-test: each of a list of broken copies of the manifests must be refused.
// Prints what it checked; exit 0 when all holds, 1 with every problem otherwise.
"use strict";

const fs = require("fs");
const path = require("path");
const { make } = require("./openapi.cjs");
const { checkContainerfile } = require("./checks.cjs");
const { checkIndexedJobFile, checkJobSetFile, checkPvcFile } = require("./files.cjs");
const { indexedJobPods, jobSetPods, probePods } = require("./kubelet_env.cjs");

function parseArgs(argv) {
  const a = {};
  for (let i = 0; i + 1 < argv.length; i += 2) a[argv[i].replace(/^--/, "")] = argv[i + 1];
  for (const k of ["modules", "examples", "probe"]) {
    if (!a[k]) throw new Error(`usage: node validate.cjs --modules DIR --examples DIR --probe BIN (no --${k})`);
  }
  a.modules = path.resolve(a.modules);
  return a;
}

const args = parseArgs(process.argv.slice(2));
const yaml = require(path.join(args.modules, "node_modules", "js-yaml"));
const validateObject = make(args.modules);
const read = (f) => fs.readFileSync(path.join(args.examples, f), "utf8");

const raw = {
  indexed: read("indexed-job.yaml"),
  jobset: read("jobset.yaml"),
  pvc: read("checkpoint-pvc.yaml"),
};
const toml = read("job.toml");
const containerfile = checkContainerfile(read("Containerfile"));
const ctx = { toml, entrypointConfig: containerfile.config };
const load = (text) => yaml.loadAll(text);

// Schema and own checks of the three files (docs already parsed, possibly mutated).
function problemsOf(docs) {
  const out = [];
  const files = { indexed: "indexed-job.yaml", jobset: "jobset.yaml", pvc: "checkpoint-pvc.yaml" };
  for (const [key, list] of Object.entries(docs)) {
    list.forEach((d, i) => out.push(...validateObject(d, `${files[key]}#${i} ${d && d.kind}`)));
  }
  out.push(...checkIndexedJobFile(docs.indexed, raw.indexed, ctx));
  out.push(...checkJobSetFile(docs.jobset, raw.jobset, ctx));
  out.push(...checkPvcFile(docs.pvc));
  return out;
}

const docs = { indexed: load(raw.indexed), jobset: load(raw.jobset), pvc: load(raw.pvc) };
const problems = [...containerfile.problems, ...problemsOf(docs)];
const objects = Object.values(docs).reduce((n, l) => n + l.length, 0);
console.log(`schema + own checks: ${objects} objects in 3 manifests, job.toml, Containerfile`);

const [indexedProblems, indexedPods] = probePods("indexed-job.yaml", indexedJobPods(docs.indexed.find((d) => d.kind === "Job")), args.probe);
const [jobsetProblems, jobsetPods] = probePods("jobset.yaml", jobSetPods(docs.jobset[0]), args.probe);
problems.push(...indexedProblems, ...jobsetProblems);
console.log(`kubelet environments placed by shardguard: ${indexedPods} Indexed Job pods, ${jobsetPods} JobSet pods`);

// Broken copies that must be refused, with a word of the expected complaint.
const job = (d) => d.indexed.find((x) => x.kind === "Job");
const podOf = (spec) => spec.template.spec;
const jsJob = (d) => d.jobset[0].spec.replicatedJobs[0].template.spec;
const mutations = [
  ["no Ignore rule for exit 75", (d) => job(d).spec.podFailurePolicy.rules.splice(1, 1), "exit 75"],
  ["defaultMode 400 (a YAML 1.2 reading of 0400)", (d) => { podOf(job(d).spec).volumes[1].secret.defaultMode = 400; }, "defaultMode"],
  ["misspelled podFailurePolicy", (d) => {
    const s = job(d).spec; s.podFailurePolicies = s.podFailurePolicy; delete s.podFailurePolicy; }, "unknown field"],
  ["the Secret mounted into the container", (d) => {
    podOf(job(d).spec).containers[0].volumeMounts.find((m) => m.name === "secret").name = "secret-source"; },
   "must not mount the Secret"],
  ["the secret's copy group-readable", (d) => { podOf(job(d).spec).initContainers[0].command[2] = "0440"; }, "0400 or 0600"],
  ["the copy's emptyDir mounted whole", (d) => {
    delete podOf(job(d).spec).containers[0].volumeMounts.find((m) => m.name === "secret").subPath; }, "copy alone"],
  ["the copy made by another uid", (d) => {
    podOf(jsJob(d)).initContainers[0].securityContext.runAsUser = 1001; }, "owned by the container's uid"],
  ["grace not 2 x S + M", (d) => { podOf(job(d).spec).terminationGracePeriodSeconds = 90; }, "terminationGracePeriodSeconds"],
  ["exit codes out of order", (d) => { job(d).spec.podFailurePolicy.rules[0].onExitCodes.values = [78, 76]; }, "ascending"],
  ["an action Kubernetes does not have", (d) => { job(d).spec.podFailurePolicy.rules[1].action = "Ignored"; }, "allowed values"],
  ["completions above SHARDGUARD_NNODES", (d) => { job(d).spec.completions = 5; job(d).spec.parallelism = 5; }, "SHARDGUARD_NNODES"],
  ["Service selecting another Job", (d) => { d.indexed[0].spec.selector["batch.kubernetes.io/job-name"] = "other"; }, "selector"],
  ["JobSet action of a Job", (d) => { d.jobset[0].spec.failurePolicy.rules[0].action = "FailJob"; }, "JobSet schema"],
  ["JobSet field from a later controller", (d) => { d.jobset[0].spec.volumeClaimPolicies = []; }, "unknown field volumeClaimPolicies"],
  ["misspelled field in a JobSet's pod", (d) => { podOf(jsJob(d)).containers[0].imagePullPolcy = "Always"; }, "unknown field"],
  ["JobSet without onPodConditions status", (d) => { delete jsJob(d).podFailurePolicy.rules[2].onPodConditions[0].status; }, "status is required"],
  ["JobSet restarts on FailJob", (d) => { d.jobset[0].spec.failurePolicy.rules = []; }, "FailJobSet"],
  // The restricted Pod Security Standard (checkPodSecurity), on both manifests.
  ["a root pod", (d) => { podOf(job(d).spec).securityContext.runAsUser = 0; }, "pod runAsUser must not be 0"],
  ["runAsNonRoot off in a container", (d) => {
    podOf(jsJob(d)).containers[0].securityContext.runAsNonRoot = false; }, "runAsNonRoot must be true"],
  ["privilege escalation allowed", (d) => {
    delete podOf(job(d).spec).containers[0].securityContext.allowPrivilegeEscalation; }, "allowPrivilegeEscalation"],
  ["a capability added", (d) => {
    podOf(jsJob(d)).containers[0].securityContext.capabilities.add = ["SYS_ADMIN"]; }, "capabilities.add SYS_ADMIN"],
  ["capabilities kept", (d) => { delete podOf(job(d).spec).initContainers[0].securityContext.capabilities; },
   "capabilities.drop must include ALL"],
  ["seccomp Unconfined", (d) => { podOf(jsJob(d)).securityContext.seccompProfile.type = "Unconfined"; }, "seccompProfile"],
  ["a privileged init container", (d) => {
    podOf(job(d).spec).initContainers[0].securityContext.privileged = true; }, "privileged"],
  ["the host's network", (d) => { podOf(jsJob(d)).hostNetwork = true; }, "hostNetwork"],
  ["a hostPath volume", (d) => { podOf(job(d).spec).volumes.push({ name: "host", hostPath: { path: "/" } }); },
   "hostPath volumes are not allowed"],
];
let caught = 0;
for (const [name, mutate, expect] of mutations) {
  const copy = JSON.parse(JSON.stringify(docs));
  try {
    mutate(copy);
  } catch (e) {  // the manifests no longer have what the mutation changes
    problems.push(`self-test: "${name}" cannot be applied to these manifests: ${e.message}`);
    continue;
  }
  const found = problemsOf(copy);
  if (found.some((p) => p.includes(expect))) caught++;
  else problems.push(`self-test: "${name}" was not refused with "${expect}" (got: ${found.join(" | ") || "nothing"})`);
}
console.log(`self-test: ${caught} of ${mutations.length} broken copies refused`);

for (const p of problems) console.log(`PROBLEM ${p}`);
console.log(problems.length === 0 ? "manifests OK" : `${problems.length} problem(s)`);
process.exit(problems.length === 0 ? 0 : 1);
