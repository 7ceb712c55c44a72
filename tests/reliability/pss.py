"""The Kubernetes "restricted" Pod Security Standard as a table of pure checks on a pod spec, plus
the project's own rule for the root filesystem (read-only; writable emptyDirs only where mounted).

Rules as written in kubernetes.io/docs/concepts/security/pod-security-standards (baseline + restricted,
v1.25+). Each check takes the pod spec (a dict, as in a Deployment's template) and returns what is
wrong, [] when it holds; `violations(pod)` runs them all. No I/O.
"""
from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

Pod = dict[str, Any]

SAFE_SYSCTLS = {"kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.tcp_syncookies",
                "net.ipv4.ping_group_range", "net.ipv4.ip_unprivileged_port_start",
                "net.ipv4.ip_local_reserved_ports", "net.ipv4.tcp_keepalive_time",
                "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
                "net.ipv4.tcp_keepalive_probes"}
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}
# The one writable mount that is not an emptyDir, by design: spec.model.cache, the user's volume at
# HF_HOME, where the first pod downloads the weights for the others (builders/deployment.py).
WRITABLE_BY_DESIGN = {"model-cache"}
SELINUX_TYPES = {None, "", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}


def containers(pod: Pod) -> Iterator[dict[str, Any]]:
    """Every container the standard covers: containers, initContainers, ephemeralContainers."""
    for key in ("containers", "initContainers", "ephemeralContainers"):
        yield from pod.get(key) or ()


def _security(container: dict[str, Any]) -> dict[str, Any]:
    return container.get("securityContext") or {}


def _effective(pod: Pod, container: dict[str, Any], field: str) -> Any:
    """A container's setting, else the pod's (the container's wins, as in the kubelet)."""
    value = _security(container).get(field)
    return value if value is not None else (pod.get("securityContext") or {}).get(field)


def host_namespaces(pod: Pod) -> list[str]:
    return [f"{key} is true" for key in ("hostNetwork", "hostPID", "hostIPC") if pod.get(key)]


def privileged(pod: Pod) -> list[str]:
    return [f"{c['name']}: privileged" for c in containers(pod) if _security(c).get("privileged")]


def host_path_volumes(pod: Pod) -> list[str]:
    return [f"volume {v['name']}: hostPath" for v in pod.get("volumes") or () if "hostPath" in v]


def host_ports(pod: Pod) -> list[str]:
    return [f"{c['name']}: hostPort {p['hostPort']}" for c in containers(pod)
            for p in c.get("ports") or () if p.get("hostPort")]


def proc_mount(pod: Pod) -> list[str]:
    return [f"{c['name']}: procMount {_security(c)['procMount']}" for c in containers(pod)
            if _security(c).get("procMount") not in (None, "Default")]


def selinux(pod: Pod) -> list[str]:
    contexts = [("pod", (pod.get("securityContext") or {}).get("seLinuxOptions") or {})]
    contexts += [(c["name"], _security(c).get("seLinuxOptions") or {}) for c in containers(pod)]
    return [f"{who}: seLinuxOptions {options}" for who, options in contexts
            if options.get("type") not in SELINUX_TYPES or options.get("user") or options.get("role")]


def apparmor(pod: Pod) -> list[str]:
    profiles = [("pod", (pod.get("securityContext") or {}).get("appArmorProfile") or {})]
    profiles += [(c["name"], _security(c).get("appArmorProfile") or {}) for c in containers(pod)]
    return [f"{who}: appArmorProfile {p['type']}" for who, p in profiles
            if p.get("type") not in (None, "RuntimeDefault", "Localhost")]


def sysctls(pod: Pod) -> list[str]:
    return [f"sysctl {s['name']}" for s in (pod.get("securityContext") or {}).get("sysctls") or ()
            if s["name"] not in SAFE_SYSCTLS]


def volume_types(pod: Pod) -> list[str]:
    problems = []
    for volume in pod.get("volumes") or ():
        kinds = set(volume) - {"name"}
        if not kinds <= RESTRICTED_VOLUMES:
            problems.append(f"volume {volume['name']}: {sorted(kinds - RESTRICTED_VOLUMES)}")
    return problems


def privilege_escalation(pod: Pod) -> list[str]:
    return [f"{c['name']}: allowPrivilegeEscalation is not false" for c in containers(pod)
            if _security(c).get("allowPrivilegeEscalation") is not False]


def run_as_non_root(pod: Pod) -> list[str]:
    return [f"{c['name']}: runAsNonRoot is not true" for c in containers(pod)
            if _effective(pod, c, "runAsNonRoot") is not True]


def run_as_user(pod: Pod) -> list[str]:
    return [f"{c['name']}: runAsUser 0" for c in containers(pod) if _effective(pod, c, "runAsUser") == 0]


def seccomp(pod: Pod) -> list[str]:
    return [f"{c['name']}: seccompProfile {profile}" for c in containers(pod)
            if (profile := (_effective(pod, c, "seccompProfile") or {}).get("type"))
            not in ("RuntimeDefault", "Localhost")]


def capabilities(pod: Pod) -> list[str]:
    problems = []
    for c in containers(pod):
        caps = _security(c).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or ()):
            problems.append(f"{c['name']}: capabilities do not drop ALL")
        added = set(caps.get("add") or ()) - {"NET_BIND_SERVICE"}
        if added:
            problems.append(f"{c['name']}: adds {sorted(added)}")
    return problems


def read_only_root(pod: Pod) -> list[str]:
    """Not in the standard; the project's rule: read-only root, writes only to emptyDirs mounted
    where needed (every emptyDir is mounted; nothing else is mounted writable but the model cache)."""
    problems = [f"{c['name']}: readOnlyRootFilesystem is not true" for c in containers(pod)
                if _security(c).get("readOnlyRootFilesystem") is not True]
    empty_dirs = {v["name"] for v in pod.get("volumes") or () if "emptyDir" in v}
    mounted = {m["name"] for c in containers(pod) for m in c.get("volumeMounts") or ()
               if not m.get("readOnly")}
    problems += [f"writable mount of non-emptyDir volume {name}"
                 for name in sorted(mounted - empty_dirs - WRITABLE_BY_DESIGN)]
    problems += [f"emptyDir {name} is mounted nowhere" for name in sorted(empty_dirs - mounted)]
    return problems


RULES: dict[str, Callable[[Pod], list[str]]] = {
    # baseline
    "host-namespaces": host_namespaces, "privileged": privileged, "host-path": host_path_volumes,
    "host-ports": host_ports, "proc-mount": proc_mount, "selinux": selinux, "apparmor": apparmor, "sysctls": sysctls,
    # restricted
    "volume-types": volume_types, "privilege-escalation": privilege_escalation,
    "run-as-non-root": run_as_non_root, "run-as-user": run_as_user, "seccomp": seccomp,
    "capabilities": capabilities,
    # the project's
    "read-only-root": read_only_root,
}


def violations(pod: Pod) -> dict[str, list[str]]:
    """{rule: problems} for every rule that fails; {} when the pod meets them all."""
    return {name: found for name, check in RULES.items() if (found := check(pod))}
