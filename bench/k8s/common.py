"""What the Kubernetes benches share: the local Kubernetes they run on, the real node's pod settings, the
containers' memory peaks read from the node's cgroups, and running one cluster through a launcher.

Every Kubernetes bench takes ``--kubeconfig FILE`` (default ``$KUBECONFIG``; else the local Kubernetes of
``ignite_tf_dev.k8s``, started when not running and stopped at the end) and ``--namespace`` (default
``default``). Its tasks run on the real node (``real-0``; the simulated nodes run no containers) in the
deployed shape: pod network, cluster DNS, the run root of ``IGNITE_TF_RUN_ROOT`` (an ``s3://`` URL when
``make k8s-up`` exported one; else a local folder, which only the local launcher can use). ``--host-network``
runs them in the one-machine shape instead (host network, no DNS, the run folder as a hostPath).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1]  # bench/
# issue 37: the Kubernetes launcher's first step (new pods) at most 1.5x the local one's
# (k8s/startup.py, k8s/deployed.py)
STARTUP_GOAL = 1.5
CGROUP_ROOT = Path("/sys/fs/cgroup")
TIMEOUT_S = 900.0


def add_k8s_arguments(parser) -> None:
    parser.add_argument("--kubeconfig", metavar="FILE", default=os.environ.get("KUBECONFIG"),
                        help="the running Kubernetes to use (default: $KUBECONFIG, else the local one, started if "
                             "not running)")
    parser.add_argument("--namespace", default="default", help="namespace of the tasks (default: default)")
    parser.add_argument("--host-network", action="store_true",
                        help="the one-machine shape: host network, no cluster DNS, the run folder as a hostPath")


@contextmanager
def kubernetes(kubeconfig: str | None, say=lambda _msg: None) -> Iterator[str]:
    """The kubeconfig of a running Kubernetes (started here, and stopped at the end, when none is given),
    made the ``kubernetes_default`` connection of this process."""
    from ignite_tf_dev.k8s import cluster as local_k8s

    layout = local_k8s.Layout()
    started = not kubeconfig and len(local_k8s.running(layout)) != len(local_k8s.COMPONENTS)
    try:
        if started:
            say("starting the local Kubernetes ...")
        kubeconfig = kubeconfig or str(local_k8s.up(3, layout))
        os.environ["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}})
        yield str(kubeconfig)
    finally:
        if started:
            local_k8s.down(layout)


def pod_settings(namespace: str, host_network: bool, **extra) -> dict:
    """``kubernetes`` settings that put the tasks on the real node; in the deployed shape they also name the
    Ignite pods (``ignite_selector``, ``ignite_namespace`` of ``make k8s-up``), which placement and the
    measured locality need to find each Ignite node's Kubernetes node."""
    from ignite_tf_dev.k8s import addons
    from ignite_tf_dev.k8s import cluster as local_k8s

    settings = {"namespace": namespace, "node_selector": {local_k8s.HOST_LABEL: "real-0"}}
    if host_network:
        settings.update(host_network=True, dns=False)
    else:
        settings.update(ignite_selector=addons.IGNITE_SELECTOR, ignite_namespace=addons.IGNITE_NAMESPACE)
    return {**settings, **extra}


def run_root(tmp: Path, kind: str) -> str:
    """Where a bench's runs live: ``IGNITE_TF_RUN_ROOT`` for pods (the deployed shape), a local folder else."""
    root = os.environ.get("IGNITE_TF_RUN_ROOT")
    return root if kind == "kubernetes" and root else str(tmp / "runs")


def job_dir_with(tmp: Path, name: str, *modules: str) -> Path:
    """A job folder holding copies of the named bench modules (paths under bench/; shipped to the tasks with the
    job, each by its own name)."""
    folder = tmp / name
    folder.mkdir(parents=True, exist_ok=True)
    for module in modules:
        shutil.copy(BENCH_DIR / module, folder / Path(module).name)
    return folder


# -- containers' memory on the node ------------------------------------------------------------------------
def container_cgroup(container_id: str) -> Path | None:
    """The cgroup folder of a container on this node (cgroup v2, or v1's memory hierarchy), by its id."""
    cid = container_id.split("://")[-1]
    for pattern in (f"kubepods*/**/*{cid}*", f"memory/kubepods*/**/*{cid}*", f"*/kubepods*/**/*{cid}*"):
        for folder in CGROUP_ROOT.glob(pattern):
            if (folder / "memory.peak").exists() or (folder / "memory.max_usage_in_bytes").exists():
                return folder
    return None


def cgroup_peak_mib(folder: Path) -> float | None:
    """The cgroup's peak memory: ``memory.peak`` (v2) or ``memory.max_usage_in_bytes`` (v1), in MiB."""
    for name in ("memory.peak", "memory.max_usage_in_bytes"):
        try:
            return int((folder / name).read_text()) / 2**20
        except (OSError, ValueError):
            continue
    return None


@dataclass
class PeakWatch:
    """Polls the memory peak of every container of a cluster's pods while they run (a container's cgroup
    goes with it, so its last reading before exit is its peak)."""

    core: object
    namespace: str
    cluster_id: str

    def __post_init__(self):
        self.peaks: dict[str, float] = {}  # "<task> (attempt N)" -> MiB
        self.cgroups: dict[str, Path] = {}
        self.estimates: dict[str, str] = {}

    def poll(self) -> None:
        from ignite_tf.cluster.k8s.objects import ANNOTATION_MEMORY, LABEL_CLUSTER, LABEL_TASK

        pods = self.core.list_namespaced_pod(self.namespace, label_selector=f"{LABEL_CLUSTER}={self.cluster_id}")
        for pod in pods.items:
            task = (pod.metadata.labels or {}).get(LABEL_TASK, pod.metadata.name)
            self.estimates[task] = (pod.metadata.annotations or {}).get(ANNOTATION_MEMORY, "")
            for status in pod.status.container_statuses or []:
                if status.container_id and pod.metadata.name not in self.cgroups:
                    folder = container_cgroup(status.container_id)
                    if folder is not None:
                        self.cgroups[pod.metadata.name] = folder
            folder = self.cgroups.get(pod.metadata.name)
            peak = cgroup_peak_mib(folder) if folder else None
            if peak is not None:
                self.peaks[task] = max(peak, self.peaks.get(task, 0.0))


class CgroupCpu:
    """Samples, in a thread, the CPU time and CFS throttling of the pods of each group (``groups``: name ->
    (namespace, label selector)) from their cgroups on this node (v1: ``cpuacct.usage`` and ``cpu.stat``; v2:
    ``cpu.stat``). ``cpu_during(spans)``: per group, the CPU its pods used together within those wall-clock
    spans (cores, averaged) and the periods they were throttled in (a CPU limit's CFS quota)."""

    def __init__(self, core, groups: dict[str, tuple[str, str]], every_s: float = 0.1):
        self.core, self.groups, self.every_s = core, groups, every_s
        # (group, pod) -> (wall, CPU-s, throttled)
        self.samples: dict[tuple[str, str], list[tuple[float, float, int]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="cgroup-cpu", daemon=True)

    def __enter__(self) -> CgroupCpu:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _folders(self) -> dict[tuple[str, str], Path]:
        found = {}
        for group, (namespace, selector) in self.groups.items():
            for pod in self.core.list_namespaced_pod(namespace, label_selector=selector).items:
                folder = pod_cgroup(pod.metadata.uid)
                if folder is not None:
                    found[group, pod.metadata.name] = folder
        return found

    def _run(self) -> None:
        folders: dict[tuple[str, str], Path] = {}
        listed = 0.0
        while not self._stop.wait(self.every_s):
            if time.monotonic() - listed > 1.0:  # new pods start meanwhile
                try:
                    folders, listed = self._folders(), time.monotonic()
                except Exception:  # noqa: BLE001 - the API server busy: the last list stands
                    pass
            for name, folder in folders.items():
                reading = cgroup_cpu(folder)
                if reading is not None:
                    self.samples.setdefault(name, []).append((time.time(), *reading))

    def cpu_during(self, spans: list[tuple[float, float]]) -> dict[str, dict[str, float]]:
        out = {group: {"cores": 0.0, "nr_throttled": 0} for group in self.groups}
        for (group, _pod), series in self.samples.items():
            wall = cpu = throttled = 0.0
            for a, b in spans:
                inside = [s for s in series if a <= s[0] <= b]
                if len(inside) >= 2:
                    wall += inside[-1][0] - inside[0][0]
                    cpu += inside[-1][1] - inside[0][1]
                    throttled += inside[-1][2] - inside[0][2]
            if wall > 0:
                out[group]["cores"] = round(out[group]["cores"] + cpu / wall, 3)
                out[group]["nr_throttled"] += int(throttled)
        return out


def pod_cgroup(uid: str) -> Path | None:
    """The CPU cgroup folder of a pod on this node (cgroup v1's cpu hierarchy, or v2), by its uid."""
    for qos in ("burstable/", "besteffort/", ""):
        for root in (CGROUP_ROOT / "cpu" / "kubepods", CGROUP_ROOT / "kubepods"):
            folder = root / f"{qos}pod{uid}"
            if (folder / "cpu.stat").exists():
                return folder
    return None


def cgroup_cpu(folder: Path) -> tuple[float, int] | None:
    """(CPU seconds used, periods throttled) of a CPU cgroup folder (v1 or v2)."""
    try:
        stat = dict(line.split() for line in (folder / "cpu.stat").read_text().splitlines())
        if "usage_usec" in stat:  # v2
            return int(stat["usage_usec"]) / 1e6, int(stat.get("nr_throttled", 0))
        acct = Path(str(folder).replace(f"{CGROUP_ROOT}/cpu/", f"{CGROUP_ROOT}/cpuacct/", 1)) / "cpuacct.usage"
        return int(acct.read_text()) / 1e9, int(stat.get("nr_throttled", 0))
    except (OSError, ValueError):
        return None


def core_v1():
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    return KubernetesHook(conn_id="kubernetes_default").core_v1_client


def wait_cluster(launcher, cluster_id: str, every=None, poll_s: float = 0.1, timeout: float = TIMEOUT_S):
    """Wait for the cluster to end, calling ``every()`` each poll; stop it on timeout or error."""
    t0 = time.monotonic()
    try:
        while True:
            if every is not None:
                try:
                    every()
                except Exception:  # noqa: BLE001 - a failed poll (pod gone between list and read) is retried
                    pass
            state = launcher.status(cluster_id)
            if state.status.final:
                return state
            if time.monotonic() - t0 > timeout:
                raise RuntimeError(f"cluster {cluster_id} still {state.status.value} after {timeout:.0f}s:\n"
                                   f"{launcher.tail(cluster_id, 30)}")
            time.sleep(poll_s)
    finally:
        if not launcher.status(cluster_id).status.final:
            launcher.stop(cluster_id)


def marked_lines(text: str, mark: str) -> list[dict]:
    """The JSON objects a bench's task printed after ``mark`` in its output."""
    return [json.loads(m.group(1)) for m in re.finditer(rf"^{re.escape(mark)} (\{{.*\}})$", text, re.M)]
