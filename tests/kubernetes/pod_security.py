#!/usr/bin/env python3
"""The restricted Pod Security Standard for every pod template of Kubernetes manifests.

    python3 pod_security.py FILE.yaml...

Run by validate_manifests.sh before the npm validator, so that it runs on machines without
node or a registry too: it needs only Python 3 and PyYAML (Debian: python3-yaml). The rules
are those of the API server's PodSecurity admission at level "restricted" (with baseline),
as checkPodSecurity in validate/checks.cjs has them: keep the two in step.

Then a self-test: broken copies of each pod template (root, privilege escalation, an added
capability, no seccomp, a host namespace, a hostPath volume, ...) must each be refused.
Exit 0 when every pod passes and every broken copy is refused, 1 otherwise, 77 (skipped)
without PyYAML.
"""
import copy
import sys

try:
    import yaml
except ImportError:
    print("SKIPPED: no PyYAML for python3 (Debian: apt-get install python3-yaml); "
          "the Pod Security Standard was not checked")
    sys.exit(77)

ALLOWED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                   "persistentVolumeClaim", "projected", "secret"}
SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range",
                "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
                "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout",
                "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"}
SELINUX_TYPES = {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
SECCOMP_TYPES = {"RuntimeDefault", "Localhost"}


def pod_templates(doc):
    """(name, pod spec) of each pod a workload object makes."""
    if not isinstance(doc, dict):
        return []
    kind, spec = doc.get("kind"), doc.get("spec") or {}
    name = f"{kind} {(doc.get('metadata') or {}).get('name')}"
    template = lambda s: ((s or {}).get("template") or {}).get("spec")  # noqa: E731
    if kind == "Pod":
        pods = [(name, spec)]
    elif kind in ("Job", "Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"):
        pods = [(name, template(spec))]
    elif kind == "CronJob":
        pods = [(name, template((spec.get("jobTemplate") or {}).get("spec")))]
    elif kind == "JobSet":
        pods = [(f"{name} {rj.get('name')}", template(template(rj)))
                for rj in spec.get("replicatedJobs") or []]
    else:
        pods = []
    return [(n, p) for n, p in pods if p is not None]


def check_pod(pod):
    """The restricted profile's complaints about one pod spec; [] when it passes."""
    out = []
    sc = pod.get("securityContext") or {}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(key) is True:
            out.append(f"{key} must not be true")
    for v in pod.get("volumes") or []:
        kind = next((k for k in v if k != "name"), None)
        if kind not in ALLOWED_VOLUMES:
            out.append(f"volume {v.get('name')}: {kind} volumes are not allowed")
    for s in sc.get("sysctls") or []:
        if s.get("name") not in SAFE_SYSCTLS:
            out.append(f"sysctl {s.get('name')} is not a safe one")

    def seccomp(ctx):
        return (ctx.get("seccompProfile") or {}).get("type")

    def selinux(ctx, who):
        o = ctx.get("seLinuxOptions") or {}
        if (o.get("type") or "") not in SELINUX_TYPES:
            out.append(f"{who} seLinuxOptions.type {o.get('type')} is not allowed")
        if o.get("user") or o.get("role"):
            out.append(f"{who} seLinuxOptions must not set user or role")

    if seccomp(sc) is not None and seccomp(sc) not in SECCOMP_TYPES:
        out.append(f"pod seccompProfile {seccomp(sc)}: RuntimeDefault or Localhost only")
    if sc.get("runAsUser") == 0:
        out.append("pod runAsUser must not be 0 (root)")
    if sc.get("runAsNonRoot") is False:
        out.append("pod runAsNonRoot must not be false")
    if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
        out.append("pod AppArmor must not be Unconfined")
    selinux(sc, "pod")
    containers = [*(pod.get("initContainers") or []), *(pod.get("containers") or []),
                  *(pod.get("ephemeralContainers") or [])]
    for c in containers:
        who = f"container {c.get('name')}"
        csc = c.get("securityContext") or {}
        if csc.get("privileged") is True:
            out.append(f"{who}: privileged must not be true")
        if csc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{who}: allowPrivilegeEscalation must be false")
        caps = csc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append(f"{who}: capabilities.drop must include ALL")
        for add in caps.get("add") or []:
            if add != "NET_BIND_SERVICE":
                out.append(f"{who}: capabilities.add {add}: NET_BIND_SERVICE only")
        non_root = csc.get("runAsNonRoot", sc.get("runAsNonRoot"))
        if non_root is not True:
            out.append(f"{who}: runAsNonRoot must be true (pod or container)")
        if csc.get("runAsUser") == 0:
            out.append(f"{who}: runAsUser must not be 0 (root)")
        profile = seccomp(csc) if seccomp(csc) is not None else seccomp(sc)
        if profile not in SECCOMP_TYPES:
            out.append(f"{who}: seccompProfile {profile or 'unset'}: RuntimeDefault or Localhost "
                       "(pod or container)")
        if csc.get("procMount", "Default") != "Default":
            out.append(f"{who}: procMount must be Default")
        if (csc.get("appArmorProfile") or {}).get("type") == "Unconfined":
            out.append(f"{who}: AppArmor must not be Unconfined")
        if (csc.get("windowsOptions") or {}).get("hostProcess"):
            out.append(f"{who}: hostProcess must not be true")
        selinux(csc, who)
        for p in c.get("ports") or []:
            if p.get("hostPort"):
                out.append(f"{who}: hostPort {p['hostPort']} is not allowed")
    return out


def first_container_sc(pod):
    return pod["containers"][0].setdefault("securityContext", {})


# Broken copies of a pod that must be refused, with a word of the expected complaint.
MUTATIONS = [
    ("a root pod", lambda p: p.setdefault("securityContext", {}).update(runAsUser=0),
     "pod runAsUser must not be 0"),
    ("a root container", lambda p: first_container_sc(p).update(runAsUser=0),
     "runAsUser must not be 0"),
    ("runAsNonRoot off", lambda p: first_container_sc(p).update(runAsNonRoot=False),
     "runAsNonRoot must be true"),
    ("privilege escalation allowed",
     lambda p: first_container_sc(p).pop("allowPrivilegeEscalation", None),
     "allowPrivilegeEscalation must be false"),
    ("capabilities kept", lambda p: first_container_sc(p).pop("capabilities", None),
     "capabilities.drop must include ALL"),
    ("a capability added",
     lambda p: first_container_sc(p).setdefault("capabilities", {}).update(add=["SYS_ADMIN"]),
     "capabilities.add SYS_ADMIN"),
    ("seccomp Unconfined",
     lambda p: first_container_sc(p).update(seccompProfile={"type": "Unconfined"}),
     "seccompProfile Unconfined"),
    ("a privileged container", lambda p: first_container_sc(p).update(privileged=True),
     "privileged must not be true"),
    ("the host's network", lambda p: p.update(hostNetwork=True), "hostNetwork"),
    ("the host's PIDs", lambda p: p.update(hostPID=True), "hostPID"),
    ("a hostPath volume",
     lambda p: p.setdefault("volumes", []).append({"name": "host", "hostPath": {"path": "/"}}),
     "hostPath volumes are not allowed"),
    ("a host port",
     lambda p: p["containers"][0].setdefault("ports", []).append(
         {"containerPort": 80, "hostPort": 80}), "hostPort 80"),
    ("an unsafe sysctl",
     lambda p: p.setdefault("securityContext", {}).setdefault("sysctls", []).append(
         {"name": "kernel.msgmax", "value": "1"}), "sysctl kernel.msgmax"),
]


def main(paths):
    problems, pods, caught, tried = [], 0, 0, 0
    for path in paths:
        with open(path, encoding="utf-8") as f:
            docs = list(yaml.safe_load_all(f))
        for name, pod in (t for d in docs for t in pod_templates(d)):
            pods += 1
            where = f"{path.rsplit('/', 1)[-1]} {name}"
            problems += [f"{where}: restricted Pod Security Standard: {p}" for p in check_pod(pod)]
            if not pod.get("containers"):
                continue
            for what, mutate, expect in MUTATIONS:
                tried += 1
                broken = copy.deepcopy(pod)
                mutate(broken)
                found = check_pod(broken)
                if any(expect in p for p in found):
                    caught += 1
                else:
                    problems.append(f'self-test: {where}: "{what}" was not refused with '
                                    f'"{expect}" (got: {" | ".join(found) or "nothing"})')
    if pods == 0:
        problems.append("no pod templates found in " + " ".join(paths))
    print(f"restricted Pod Security Standard: {pods} pod templates in {len(paths)} files; "
          f"self-test: {caught} of {tried} broken copies refused")
    for p in problems:
        print(f"PROBLEM {p}")
    return 0 if not problems else 1


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: pod_security.py FILE.yaml...")
    sys.exit(main(sys.argv[1:]))
