"""What a local Kubernetes needs from, and changes on, this host (used by :mod:`ignite_tf_dev.k8s.cluster`).

Debian packages (installed when missing), and the host settings the real node changes: the kubelet rewrites
a few sysctls, kube-proxy sets ``route_localnet``, the bridge CNI plugin turns on ``ip_forward`` and makes a
bridge, kubelet and kube-proxy add ``KUBE-*`` iptables chains and the CNI plugins ``CNI-*`` ones, the kubelet
makes ``kubepods`` cgroups, containerd mounts overlays, shm and network namespaces. ``save_host_state``
records the host before the start; ``restore_host`` puts back exactly that.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from ignite_tf.cluster.procs import kill_and_wait, pid_alive
from ignite_tf.errors import IgniteTFError

# command (or file) -> Debian package providing it
PACKAGES = {
    "etcd": "etcd-server",
    "containerd": "containerd",
    "runc": "runc",
    "/usr/lib/cni/bridge": "containernetworking-plugins",
    "iptables": "iptables",
    "debootstrap": "debootstrap",
    "openssl": "openssl",
    "cc": "gcc",
    "/usr/lib/x86_64-linux-gnu/libc.a": "libc6-dev",
}
SYSCTLS = ("vm.overcommit_memory", "vm.panic_on_oom", "kernel.panic", "kernel.panic_on_oops",
           "kernel.keys.root_maxkeys", "kernel.keys.root_maxbytes", "net.ipv4.conf.all.route_localnet",
           "net.ipv4.ip_forward", "net.bridge.bridge-nf-call-iptables", "net.bridge.bridge-nf-call-ip6tables",
           "net.netfilter.nf_conntrack_tcp_timeout_established", "net.netfilter.nf_conntrack_tcp_timeout_close_wait")
# Folders made outside the cluster's own despite its settings: the shims' sockets (containerd 1.6 hard-codes
# /run/containerd/s) and the kubelet's device-plugin folder (hard-coded too).
HOST_DIRS = ("/run/containerd", "/var/lib/kubelet")
IPTABLES_TABLES = ("filter", "nat", "mangle")
CHAIN_PREFIXES = ("KUBE-", "CNI-")
CGROUP_ROOT = Path("/sys/fs/cgroup")
# Process names of a local cluster, for leftover checks.
PROCESS_NAMES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubelet", "kube-proxy",
                 "kwok", "containerd", "containerd-shim-runc-v2")


def tail(path: Path | str, lines: int = 30) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _present(what: str) -> bool:
    return Path(what).exists() if what.startswith("/") else shutil.which(what) is not None


def ensure_packages() -> None:
    """Install the Debian packages that are missing (``apt-get update`` once first); needs root."""
    missing = sorted({pkg for what, pkg in PACKAGES.items() if not _present(what)})
    if not missing:
        return
    if os.geteuid() != 0:
        raise IgniteTFError(f"a local Kubernetes needs root, and the Debian packages {missing}: "
                            f"run as root, or `sudo apt-get install {' '.join(missing)}`")
    if shutil.which("apt-get") is None:
        raise IgniteTFError(f"missing {missing} and no apt-get here: install them with your package manager")
    print(f"installing Debian packages {' '.join(missing)} ...", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-q"],
                ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise IgniteTFError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}):\n{proc.stdout[-1500:]}"
                                f"{proc.stderr[-1500:]}")


def ctr(sock: Path, *args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["ctr", "-a", str(sock), *args], capture_output=True, text=True, timeout=600, **kwargs)


# -- containers ----------------------------------------------------------------------------------------
def remove_containers(sock: Path, containerd_pid: int) -> None:
    """Kill and delete every container (the shims outlive containerd otherwise). Images stay."""
    if not (containerd_pid and pid_alive(containerd_pid) and sock.exists()):
        return
    for ns in ("k8s.io", "default"):
        tasks = ctr(sock, "-n", ns, "tasks", "ls", "-q").stdout.split()
        for t in tasks:
            ctr(sock, "-n", ns, "tasks", "kill", "-s", "SIGKILL", t)
        deadline = time.monotonic() + 20
        for t in tasks:
            while ctr(sock, "-n", ns, "tasks", "delete", "-f", t).returncode != 0 and time.monotonic() < deadline:
                if t not in ctr(sock, "-n", ns, "tasks", "ls", "-q").stdout.split():
                    break
                time.sleep(0.3)
        for c in ctr(sock, "-n", ns, "containers", "ls", "-q").stdout.split():
            ctr(sock, "-n", ns, "containers", "delete", c)


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def kill_shims(sock: Path) -> None:
    """SIGKILL container shims left by our containerd (found by its socket on their command line)."""
    for pid in _pids():
        cmd = _cmdline(pid)
        if cmd and cmd[0].endswith("containerd-shim-runc-v2") and str(sock) in cmd:
            kill_and_wait(pid, signal.SIGKILL, 5)


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()]


def leftover_processes(home: Path) -> list[tuple[int, str]]:
    """Processes of a local cluster still alive: known names, or anything naming a file under ``home``."""
    found = []
    for pid in _pids():
        cmd = _cmdline(pid)
        if not cmd or not cmd[0] or not pid_alive(pid):
            continue
        name = Path(cmd[0]).name
        if name in PROCESS_NAMES or (name not in ("python", "python3") and any(str(home) in a for a in cmd)):
            found.append((pid, " ".join(cmd)[:160]))
    return found


# -- host settings -------------------------------------------------------------------------------------
def read_sysctls() -> dict[str, str]:
    out = {}
    for key in SYSCTLS:
        path = Path("/proc/sys") / key.replace(".", "/")
        if path.exists():
            out[key] = path.read_text().strip()
    return out


def iptables_chains() -> dict[str, list[str]]:
    """Our chains (``KUBE-*``, ``CNI-*``) per ``binary/table``."""
    out = {}
    for binary in ("iptables", "ip6tables"):
        if shutil.which(binary) is None:
            continue
        for table in IPTABLES_TABLES:
            rules = subprocess.run([binary, "-t", table, "-S"], capture_output=True, text=True).stdout
            out[f"{binary}/{table}"] = sorted(
                line.split()[1] for line in rules.splitlines()
                if line.startswith("-N ") and line.split()[1].startswith(CHAIN_PREFIXES))
    return out


def kubepods_cgroups() -> list[str]:
    return sorted(str(p) for p in CGROUP_ROOT.glob("*/kubepods*"))


def link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def snapshot() -> dict:
    """The host settings a local cluster may change, as they are now."""
    return {"sysctls": read_sysctls(), "iptables": iptables_chains(), "cgroups": kubepods_cgroups(),
            "dirs": [d for d in HOST_DIRS if Path(d).exists()]}


def save_host_state(path: Path) -> None:
    """Record the host before a start; kept until ``restore_host`` (a crashed cluster keeps the original)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(snapshot(), indent=2))


def mounts_under(root: Path) -> list[str]:
    """Mount points under ``root``, deepest first."""
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].encode().decode("unicode_escape")  # octal escapes such as \040
        if point == str(root) or point.startswith(f"{root}/"):
            points.append(point)
    return sorted(points, key=lambda p: p.count("/"), reverse=True)


def unmount_all(root: Path) -> None:
    for point in mounts_under(root):
        if subprocess.run(["umount", point], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", point], capture_output=True)


def _remove_chains(before: dict[str, list[str]]) -> None:
    for key, chains in iptables_chains().items():
        binary, table = key.split("/")
        ours = [c for c in chains if c not in before.get(key, [])]
        if not ours:
            continue
        rules = subprocess.run([binary, "-t", table, "-S"], capture_output=True, text=True).stdout.splitlines()
        for rule in rules:  # jumps into our chains from the built-in ones
            parts = rule.split()
            if parts[:1] == ["-A"] and parts[1] not in ours and any(c in parts for c in ours):
                subprocess.run([binary, "-t", table, "-D", *parts[1:]], capture_output=True)
        for chain in ours:
            subprocess.run([binary, "-t", table, "-F", chain], capture_output=True)
        for chain in ours:
            subprocess.run([binary, "-t", table, "-X", chain], capture_output=True)


def _remove_cgroups(before: list[str]) -> None:
    for top in kubepods_cgroups():
        if top in before:
            continue
        for d in sorted(Path(top).rglob("*"), key=lambda p: len(p.parts), reverse=True) + [Path(top)]:
            if d.is_dir():
                try:
                    d.rmdir()
                except OSError:
                    pass


def restore_host(state_file: Path, home: Path, bridge: str | None) -> None:
    """Undo what a start changed: mounts under ``home``, the pod bridge (None: leave bridges alone), iptables
    chains, cgroups, sysctls."""
    unmount_all(home)
    if not state_file.exists():  # nothing was started from this folder
        return
    if bridge and link_exists(bridge):
        subprocess.run(["ip", "link", "delete", bridge], capture_output=True)
    before = json.loads(state_file.read_text())
    _remove_chains(before["iptables"])
    _remove_cgroups(before["cgroups"])
    for d in HOST_DIRS:
        if d not in before.get("dirs", HOST_DIRS):
            shutil.rmtree(d, ignore_errors=True)
    now = read_sysctls()
    for key, value in before["sysctls"].items():
        if now.get(key) != value:
            Path("/proc/sys", key.replace(".", "/")).write_text(value)
    state_file.unlink()


def differences(before: dict) -> list[str]:
    """How the host now differs from a ``snapshot()`` taken earlier (empty: restored)."""
    now = snapshot()
    diffs = [f"sysctl {k}: {before['sysctls'].get(k)} -> {v}" for k, v in now["sysctls"].items()
             if before["sysctls"].get(k) != v]
    for key, chains in now["iptables"].items():
        extra = sorted(set(chains) - set(before["iptables"].get(key, [])))
        if extra:
            diffs.append(f"{key} chains {extra}")
    extra_cg = sorted(set(now["cgroups"]) - set(before["cgroups"]))
    if extra_cg:
        diffs.append(f"cgroups {extra_cg}")
    diffs += [f"folder {d} made" for d in now["dirs"] if d not in before.get("dirs", [])]
    return diffs
