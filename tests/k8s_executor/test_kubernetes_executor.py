"""A YAML pipeline under Airflow's KubernetesExecutor on the local Kubernetes: every task in a worker pod of
the task image, the training launched with the Kubernetes launcher and deferred, so that its worker pod ends
and is deleted while the cluster trains on under its supervisor pod; the host's triggerer watches it, a new
worker pod finishes the task, another publishes the model.

Real: the Airflow services on this host (API server, scheduler with KubernetesExecutor, DAG processor,
triggerer), the worker pods (Airflow's task runner in the task image on the real node, calling the execution
API at this host's address on the pods' network), the control plane, CoreDNS, the Ignite pods, TensorFlow in
the cluster's pods, the run root on the cluster's object store (s3proxy). Shortcut of the one-node dev cluster,
not simulated: the DAG folder, the task logs and the model registry reach the worker pods as a ``hostPath`` of
the test's folder (tests/support/airflow_k8s.py); a deployment uses a DAG bundle, remote logs and a registry
on object storage. Simulated: nothing.
"""

from __future__ import annotations

import json
import threading
import time
import uuid

import pytest
import yaml

from ignite_tf.cluster.api import make_launcher
from tests.cluster.k8s import test_training as training
from tests.support.airflow import SECRET, ignite_connection_env
from tests.support.airflow_k8s import (
    apply_launcher_rbac,
    create_connections_secret,
    kubernetes_executor_services,
)
from tests.support.airflow_services import REPO, wait_parsed
from tests.support.clusters import assert_nothing_left
from tests.support.polling import wait_for

pytestmark = pytest.mark.timeout(1800)
deployed = training.deployed  # namespace, Ignite pods, a fresh run root on the object store (a fixture)
# Long enough that the deferred worker pod is gone before the training ends (the scheduler deletes it some
# seconds after the deferral): 4 epochs of 1200 rows once ended first when the task pods' start got faster.
EPOCHS, ROWS = 10, 2400

PIPELINE = ("# airflow dag\nfrom ignite_tf.pipeline import load_dags\n\n"
            "airflow_dags = load_dags(__file__, 'specs/*.yaml', globals())\n")
# A training with the local launcher, deferred (the defaults): it cannot outlive a worker pod, so it is refused.
REFUSED = '''# airflow dag
from airflow.sdk import DAG

from ignite_tf.operators.tensorflow import TFClusterOperator

with DAG("{dag_id}", schedule=None):
    TFClusterOperator(task_id="train", cache="never_read", entry_point="ignite_tf.models:tabular_classifier")
'''


def write_dags(root, dag_id: str, ns: str, run_root: str, refused_dag_id: str) -> None:
    """The DAG folder: the three-line DAG file, the spec, its data file and validation suite; the refused DAG."""
    from ignite_tf_dev import demo_data
    from ignite_tf_dev.k8s import images

    dags = root / "dags"
    (dags / "specs").mkdir(parents=True)
    (dags / "expectations").mkdir()
    (dags / "expectations" / "tabular.yaml").write_text((REPO / "dags/expectations/tabular.yaml").read_text())
    demo_data.tabular(ROWS, seed=3).to_parquet(dags / "tabular.parquet", index=False)
    (dags / "pipelines.py").write_text(PIPELINE)
    (dags / "refused.py").write_text(REFUSED.format(dag_id=refused_dag_id))
    (dags / "specs" / "k8s_executor.yaml").write_text(yaml.safe_dump({
        "dag_id": dag_id, "cache": f"k8s_exec_{uuid.uuid4().hex[:6]}", "key": "id", "run_root": run_root,
        "source": {"path": "../tabular.parquet"}, "suite": "../expectations/tabular.yaml",
        "training": {"workers": 1, "entry_point": "ignite_tf.models:tabular_classifier", "epochs": EPOCHS,
                     "batch_size": 32, "learning_rate": 0.02, "label_column": "label", "startup_deadline_s": 600,
                     "launcher": "kubernetes", "kubernetes": {"namespace": ns, "image": images.task_image_ref()}},
        "publish": {"registry_root": str(root / "registry"), "model": "k8s_executor", "thresholds": {}}}))


def worker_pods(core, ns: str, dag_id: str, task_id: str | None = None) -> list:
    """KubernetesExecutor's worker pods in ``ns`` of a DAG (of one task), those being deleted left out."""
    selector = f"kubernetes_executor=True,dag_id={dag_id}" + (f",task_id={task_id}" if task_id else "")
    return [p for p in core.list_namespaced_pod(ns, label_selector=selector).items
            if not p.metadata.deletion_timestamp]


class TrainPods:
    """Samples, every half second, the worker pods of the task ``train`` and the training cluster: when the
    first one (the try that launched and deferred) was last seen, and the cluster's state at that moment."""

    def __init__(self, core, ns: str, launcher, dag_id: str):
        self.core, self.ns, self.launcher, self.dag_id = core, ns, launcher, dag_id
        self.first: str | None = None
        self.names: list[str] = []
        self.specs: list[str] = []  # each pod's, as the API server has it
        self.gone_at: tuple[float, int, str] | None = None  # (time, epochs then, cluster status then)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def cluster(self):
        return next((s for s in self.launcher.store.list() if s.labels.get("dag_id") == self.dag_id), None)

    def _run(self) -> None:
        while not self.stop.wait(0.5):
            try:
                pods = worker_pods(self.core, self.ns, self.dag_id, "train")
            except Exception:  # noqa: BLE001 - a sample missed; the next one counts
                continue
            live = [p.metadata.name for p in pods]
            for pod in pods:
                if pod.metadata.name not in self.names:
                    self.names.append(pod.metadata.name)
                    self.specs.append(json.dumps(pod.to_dict(), default=str))
            self.first = self.first or (self.names[0] if self.names else None)
            if self.first and self.first not in live and self.gone_at is None:
                state = self.cluster()
                self.gone_at = (time.time(), len(state.epochs) if state else -1,
                                state.status.value if state else "none")


def test_yaml_pipeline_under_kubernetes_executor(deployed, k8s_cluster, tmp_path):
    """Load, partitions, plan, validation and the gate each run in a worker pod; the training's worker pod
    launches the cluster (supervisor pod, task pod), defers and is deleted before the first epoch is recorded;
    the triggerer on this host follows the chief's output into the task's log; a later worker pod completes the
    task and the publish task's pod publishes the model, which loads and scores rows. Nothing of the cluster,
    and no worker pod, is left. Beside it, a DAG whose training has the local launcher, deferred, fails in its
    worker pod before anything starts, saying why and what to use, without a retry."""
    core, ns, conn, run_root, exports = deployed
    dag_id = f"ignite_tf_k8s_executor_{uuid.uuid4().hex[:4]}"
    refused_id = f"{dag_id}_local_refused"
    write_dags(tmp_path, dag_id, ns, run_root, refused_id)
    binding = apply_launcher_rbac(k8s_cluster.layout, ns)
    connections = ignite_connection_env(conn)
    store_env = {k: v for k, v in exports.items() if k.startswith("AWS_") and k != "AWS_ENDPOINT_URL"}
    create_connections_secret(core, ns, {**connections, **store_env})
    pod_env = {k: v for k, v in exports.items() if k in ("AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION")}
    svc = kubernetes_executor_services(tmp_path, ns, k8s_cluster.kubeconfig, {**connections}, pod_env)
    launcher = make_launcher(conn)
    watch = TrainPods(core, ns, launcher, dag_id)
    started = time.monotonic()
    try:
        svc.start()
        runs = {}
        for dag in (dag_id, refused_id):
            wait_parsed(svc, dag)
            svc.request("PATCH", f"/api/v2/dags/{dag}", {"is_paused": False})
            runs[dag] = svc.request("POST", f"/api/v2/dags/{dag}/dagRuns", {"logical_date": None})["dag_run_id"]
        run_id = runs[dag_id]
        base = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}"
        refused_base = f"/api/v2/dags/{refused_id}/dagRuns/{runs[refused_id]}"
        watch.thread.start()
        polled = {"state": "queued", "refused": "queued", "deferred": False}

        def both_ended() -> bool:
            polled["state"] = svc.request("GET", base)["state"]
            polled["refused"] = svc.request("GET", refused_base)["state"]
            if polled["state"] in ("success", "failed") and polled["refused"] in ("success", "failed"):
                return True
            tis = {t["task_id"]: t["state"] for t in svc.request("GET", f"{base}/taskInstances")["task_instances"]}
            polled["deferred"] = polled["deferred"] or tis.get("train") == "deferred"
            return False

        wait_for(both_ended, 1200, "both DAG runs to end", poll=1,
                 seen=lambda: f"{polled}\n{svc.log('scheduler').read_text()[-3000:]}")
        state, refused_state, seen_deferred = polled["state"], polled["refused"], polled["deferred"]
        ended = time.time()
        watch.stop.set()
        watch.thread.join(timeout=30)
        tis = {t["task_id"]: t for t in svc.request("GET", f"{base}/taskInstances")["task_instances"]}
        print(f"dag run {time.monotonic() - started:.0f}s; train pods {watch.names}; first gone {watch.gone_at}")
        assert state == "success", ({k: t["state"] for k, t in tis.items()},
                                    svc.log("scheduler").read_text()[-3000:])
        # The scheduler deletes each finished worker pod (delete_worker_pods), the last one too.
        wait_for(lambda: not worker_pods(core, ns, dag_id), 120, "the worker pods to be deleted by the scheduler")
        folder = svc.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / "task_id=train"
        worker_log = (folder / "attempt=1.log").read_text()
        trigger_log = "".join(f.read_text() for f in sorted(folder.glob("attempt=1.log.trigger.*.log")))
        refused_ti = svc.request("GET", f"{refused_base}/taskInstances/train")
        refused_log = (svc.home / "logs" / f"dag_id={refused_id}" / f"run_id={runs[refused_id]}" / "task_id=train"
                       / "attempt=1.log").read_text()
    finally:
        watch.stop.set()
        svc.stop()
        from kubernetes import client

        client.RbacAuthorizationV1Api(k8s_cluster.api).delete_cluster_role_binding(binding)
    pids, ports = svc.leftovers()
    assert not pids and not ports, f"Airflow left processes {pids} / listening ports {ports}"

    # The local launcher's deferred training, refused in its worker pod, which knows its executor.
    assert refused_state == "failed" and refused_ti["state"] == "failed", (refused_state, refused_ti)
    assert refused_ti["try_number"] == 1, refused_ti
    assert "cannot work under KubernetesExecutor" in refused_log and "launcher='kubernetes'" in refused_log, \
        refused_log[-3000:]
    assert not [s for s in launcher.store.list() if s.labels.get("dag_id") == refused_id]

    # The training was deferred, and its worker pod was gone while the cluster had yet to train.
    cluster = watch.cluster()
    assert seen_deferred and tis["train"]["try_number"] == 1, tis["train"]
    assert len(watch.names) >= 2, f"one worker pod launched, a later one completed: {watch.names}"
    assert not [s for s in watch.specs if SECRET in s], "the Ignite password is in a worker pod's spec"
    assert watch.gone_at is not None, "the launching worker pod was never seen gone"
    gone, epochs_then, status_then = watch.gone_at
    assert epochs_then < EPOCHS and status_then not in ("succeeded", "failed", "stopped"), watch.gone_at
    assert cluster.supervisor_host.startswith(f"pod/{ns}/"), cluster.supervisor_host
    final = launcher.status(cluster.cluster_id)
    assert final.status.value == "succeeded" and [e["epoch"] for e in final.epochs] == list(range(1, EPOCHS + 1))
    print(f"launching worker pod gone with {epochs_then} of {EPOCHS} epochs trained, {ended - gone:.0f}s before "
          f"the run ended")

    # The worker pods ran the task before and after the deferral; the triggerer on this host followed the
    # chief in between: its epoch lines are in the task's trigger log, each once.
    assert "Pausing task as DEFERRED" in worker_log and f"{cluster.cluster_id} succeeded" in worker_log
    for k in range(1, EPOCHS + 1):
        assert trigger_log.count(f"epoch {k}/{EPOCHS} ") == 1, (k, trigger_log[-3000:])
    assert "re-attaching" not in worker_log + trigger_log

    from ignite_tf.registry.publish import ModelRegistry

    (version,) = ModelRegistry(tmp_path / "registry").versions("k8s_executor")
    saved = tmp_path / "registry" / "k8s_executor" / version / "saved_model"
    assert len(training._predict(saved, training._feature_rows(4))) == 4
    metadata = json.loads((saved.parent / "metadata.json").read_text())
    assert metadata["context"]["cluster_id"] == cluster.cluster_id, metadata["context"]
    assert_nothing_left(cluster.cluster_id, k8s=(core, ns), timeout=120)
