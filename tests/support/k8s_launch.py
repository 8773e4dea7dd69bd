"""Helpers for tests of the Kubernetes launcher on the local Kubernetes (fixtures in tests/support/k8s.py)."""

from __future__ import annotations

import json

from ignite_tf_dev.k8s import cluster as local_k8s

from ignite_tf.cluster.api import make_launcher, start_cluster
from ignite_tf.cluster.k8s import objects
from tests.support.polling import wait_for

SIMULATED_IMAGE = "simulated/never-pulled:1"
ON_SIMULATED = {local_k8s.NODE_KIND_LABEL: "simulated"}
# Pods "run" by kwok: on a simulated node, tolerating the taint that keeps every other pod off them.
SIMULATED_TOLERATIONS = [dict(local_k8s.SIMULATED_TOLERATION)]
GRACE_S = 2  # the clusters' grace period (supervision.grace_period_s): what a stopped simulated pod waits out


def use_local_k8s(monkeypatch, k8s_cluster) -> None:
    """Airflow's kubernetes_default connection -> the local cluster's kubeconfig (environment only)."""
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(
        {"conn_type": "kubernetes", "extra": {"kube_config_path": k8s_cluster.kubeconfig}}))


def simulated_settings(namespace: str, **extra) -> dict:
    """Task pods on the simulated nodes, from an image never pulled; the supervisor a detached process on this
    host (a supervisor pod runs the image's Python: tests/cluster/k8s/test_supervisor_pod.py)."""
    return {"namespace": namespace, "image": SIMULATED_IMAGE, "node_selector": dict(ON_SIMULATED),
            "tolerations": [dict(t) for t in SIMULATED_TOLERATIONS], "resources": {"limits": {"memory": "1Gi"}},
            "supervisor": "process", **extra}


def start(conn, cache, tmp_path, settings: dict, *, mode="sync", workers=2, command=("python", "train.py"),
          **kwargs):
    job_dir = tmp_path / "job"
    job_dir.mkdir(exist_ok=True)
    (job_dir / "train.py").write_text("print('simulated')\n")
    launcher = make_launcher(conn, kind="kubernetes", kubernetes=settings)
    kwargs.setdefault("startup_deadline_s", 120)
    # A kwok pod ignores SIGTERM: each stop and restart deleting it waits out its whole grace period (10 s).
    kwargs.setdefault("grace_period_s", GRACE_S)
    state = start_cluster(cache, {"command": list(command), "job_dir": str(job_dir)}, conn=conn, mode=mode,
                          workers=workers, run_root=tmp_path / "runs", launcher=launcher, **kwargs)
    return launcher, state


def cluster_pods(core, ns: str, cluster_id: str, live_only: bool = True) -> dict:
    """task name -> its newest pod."""
    pods = core.list_namespaced_pod(ns, label_selector=f"{objects.LABEL_CLUSTER}={cluster_id}").items
    out = {}
    for p in sorted(pods, key=lambda p: int(p.metadata.labels[objects.LABEL_ATTEMPT])):
        if live_only and (p.metadata.deletion_timestamp or p.status.phase in ("Succeeded", "Failed")):
            continue
        out[p.metadata.labels[objects.LABEL_TASK]] = p
    return out


def wait_running(core, ns, cluster_id, tasks: list[str], timeout=120, attempt: int | None = None) -> dict:
    def ready():
        pods = cluster_pods(core, ns, cluster_id)
        ok = all(t in pods and pods[t].status.phase == "Running"
                 and (attempt is None or pods[t].metadata.labels[objects.LABEL_ATTEMPT] == str(attempt))
                 for t in tasks)
        return pods if ok else None

    return wait_for(ready, timeout, f"pods {tasks} Running", poll=0.5)


def end_pod(core, ns, pod, code: int) -> None:
    """Make a simulated pod exit with ``code`` (kwok stage k8s/kwok/pod-exit.yaml)."""
    core.patch_namespaced_pod(pod.metadata.name, ns, {"metadata": {"annotations": {
        local_k8s.EXIT_CODE_ANNOTATION: str(code), local_k8s.RUN_FOR_ANNOTATION: "100ms"}}})


def wait_final(launcher, cluster_id, timeout=180):
    def done():
        state, alive = launcher.settled(cluster_id)
        return state if state.status.final and not alive else None

    return wait_for(done, timeout, f"cluster {cluster_id} to end", poll=0.5)
