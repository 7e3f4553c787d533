// Schema validation of one manifest object: Kubernetes kinds against the OpenAPI schema
// compiled into the npm package kubernetes-models, the JobSet against our own schema
// (jobset-v1alpha2.schema.json; its CRD is not in kubernetes-models) with its Job
// templates against the OpenAPI schema again.
//
// kubernetes-models' validators accept fields the schema does not know (the API server's
// strict field validation refuses them), so every object is validated through a Proxy
// that records which properties the validator read: it reads each property its schema
// declares, and every key of a map, so a key nobody read is a field Kubernetes does not
// have, such as a misspelled `podFailurePolicies`.
"use strict";

const path = require("path");

const ROUTES = {
  "v1/Service": "IoK8sApiCoreV1Service",
  "v1/ConfigMap": "IoK8sApiCoreV1ConfigMap",
  "v1/PersistentVolumeClaim": "IoK8sApiCoreV1PersistentVolumeClaim",
  "batch/v1/Job": "IoK8sApiBatchV1Job",
};

// kubernetes-models compiles its validators without messages: say it from the keyword.
function explain(e) {
  if (e.message) return e.message;
  const p = e.params || {};
  if (e.keyword === "enum") return `must be one of the allowed values ${JSON.stringify(p.allowedValues)}`;
  if (e.keyword === "required") return `missing required field ${p.missingProperty}`;
  if (e.keyword === "type") return `must be of type ${p.type}`;
  return `${e.keyword} ${JSON.stringify(p)}`;
}

function make(modulesDir) {
  const load = (m) => require(path.join(modulesDir, "node_modules", m));
  // The compiled validators are not in the package's "exports": load them by file.
  const schemaFn = (name) =>
    load(path.join("kubernetes-models", "_schemas", name + ".js")).validate;
  const Ajv = load("ajv");
  const ajv = new Ajv({ allErrors: true, strict: true });
  const jobsetValidate = ajv.compile(require("./jobset-v1alpha2.schema.json"));

  // Runs `validate` on a Proxy of `obj`; returns schema errors and unknown fields, each
  // "<where><json path>: <what>".
  function strictly(validate, obj, where) {
    const read = new WeakMap();
    const wrap = (o) => {
      if (o === null || typeof o !== "object") return o;
      const keys = new Set();
      read.set(o, keys);
      return new Proxy(o, {
        get(t, k, r) {
          if (typeof k === "string") keys.add(k);
          return wrap(Reflect.get(t, k, r));
        },
        has(t, k) {
          if (typeof k === "string") keys.add(k);
          return Reflect.has(t, k);
        },
        ownKeys(t) {
          for (const k of Reflect.ownKeys(t)) if (typeof k === "string") keys.add(k);
          return Reflect.ownKeys(t);
        },
      });
    };
    const errors = [];
    if (!validate(wrap(obj))) {
      for (const e of validate.errors) errors.push(`${where}${e.instancePath || "/"}: ${explain(e)}`);
    }
    const walk = (o, at) => {
      if (o === null || typeof o !== "object") return;
      const keys = read.get(o);
      for (const k of Object.keys(o)) {
        if (!Array.isArray(o) && keys && !keys.has(k)) errors.push(`${where}${at}/${k}: unknown field`);
        walk(o[k], `${at}/${k}`);
      }
    };
    walk(obj, "");
    return errors;
  }

  function validateJobSet(doc, where) {
    const errors = [];
    if (!jobsetValidate(doc)) {
      for (const e of jobsetValidate.errors) {
        const what =
          e.keyword === "additionalProperties" ? `unknown field ${e.params.additionalProperty}` : e.message;
        errors.push(`${where}${e.instancePath || "/"}: ${what} (JobSet schema)`);
      }
    }
    const jobs = (doc.spec && doc.spec.replicatedJobs) || [];
    jobs.forEach((rj, i) => {
      if (rj && rj.template) {
        errors.push(...strictly(schemaFn("IoK8sApiBatchV1JobTemplateSpec"), rj.template,
                                `${where}/spec/replicatedJobs/${i}/template`));
      }
    });
    return errors;
  }

  // Every schema problem of `doc`, or [] when it is valid.
  return function validateObject(doc, where) {
    if (!doc || typeof doc !== "object") return [`${where}: not an object`];
    const route = `${doc.apiVersion}/${doc.kind}`;
    if (route === "jobset.x-k8s.io/v1alpha2/JobSet") return validateJobSet(doc, where);
    if (!ROUTES[route]) return [`${where}: no schema for ${route}`];
    return strictly(schemaFn(ROUTES[route]), doc, where);
  };
}

module.exports = { make };
