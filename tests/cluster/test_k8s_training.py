"""Real TensorFlow training on the local Kubernetes' real node (kubelet + containerd + runc).

Real in every test: the control plane, the kubelet running the task image (imported, never pulled) in
containers, TensorFlow in them, the session's Ignite nodes the tasks read their shards from (through the
host network: the nodes listen on 127.0.0.1), the pod supervisor streaming the pods' logs into the run folder
(a hostPath volume), the model registry. Nothing is simulated; the cluster has no DNS add-on, so the task
names of TF_CONFIG resolve to 127.0.0.1 through the pods' host aliases (``kubernetes.dns: false``).
Small data and 1-2 epochs: each training takes minutes on the shared 2-core machine.
"""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path

import psutil
import pytest
import yaml

from ignite_tf.cli import main as cli_main
from ignite_tf.cluster.api import make_launcher
from ignite_tf.cluster.state import Status
from ignite_tf.registry.publish import BlessingGate, ModelRegistry
from tests.support.clusters import assert_nothing_left
from tests.support.k8s_launch import REAL_NODE, use_local_k8s
from tests.support.polling import wait_for

pytestmark = [pytest.mark.k8s, pytest.mark.timeout(3600)]

CACHE = "k8s_training"
RUNTIME = ["python", "-m", "ignite_tf.runtime", "--entry-point", "ignite_tf.models:tabular_classifier",
           "--batch-size", "32", "--label", "label", "--learning-rate", "0.02"]


@pytest.fixture(scope="module")
def cache(ignite_conn):
    from ignite_tf_dev import demo_data

    from ignite_tf.etl import load

    load(ignite_conn, CACHE, demo_data.tabular(1500, seed=3), key="id")
    return CACHE


@pytest.fixture
def kube(k8s_cluster, k8s_namespace, monkeypatch, ignite_conn, tmp_path, run_root):
    use_local_k8s(monkeypatch, k8s_cluster)
    monkeypatch.setenv("IGNITE_TF_ADDRESSES", ignite_conn.addresses_str)
    (tmp_path / "job").mkdir()
    return k8s_cluster.core, k8s_namespace


def _start(ns: str, tmp_path, cid: str, epochs: int, *extra: str) -> int:
    settings = json.dumps({"namespace": ns, **REAL_NODE})
    return cli_main(["start", "--launcher", "kubernetes", "--k8s", settings, "--workers", "2", "--id", cid,
                     "--startup-deadline", "900", *extra, CACHE, str(tmp_path / "job"), *RUNTIME,
                     "--epochs", str(epochs)])


def _publish(tmp_path, state) -> dict:
    run_dir = Path(state.run_dir)
    metrics = {k: v for k, v in state.last_epoch.items() if isinstance(v, int | float)}
    result = ModelRegistry(tmp_path / "registry").publish(
        "k8s_model", saved_model_dir=str(run_dir / "checkpoints" / "model"),
        checkpoint_dir=str(run_dir / "checkpoints" / "backup"), tensorboard_dir=str(run_dir / "tensorboard"),
        metrics=metrics, gate=BlessingGate(thresholds={"accuracy": (0.3, None)}))
    return result.to_dict()


def test_sync_training_through_ignite_tf_start(kube, ignite_conn, cache, tmp_path, capsys):
    """`ignite-tf start --launcher kubernetes`: 2 sync workers as pods on the real node read their shards
    from Ignite, train 2 epochs and save a SavedModel into the run folder; the chief's output streams to the
    CLI; after the pods are gone both workers' logs, the checkpoints and the TensorBoard files are in the run
    folder; the model passes the gate and is published; nothing of the cluster is left."""
    core, ns = kube
    cid = f"k8s-sync-{uuid.uuid4().hex[:6]}"
    code = _start(ns, tmp_path, cid, 2)
    out = capsys.readouterr().out
    launcher = make_launcher(ignite_conn)
    state = launcher.status(cid)
    assert code == 0 and state.status is Status.SUCCEEDED, out[-3000:]
    assert "memory estimate per task" in out and "placement (preferred)" in out
    run_dir = Path(state.run_dir)
    for task in ("worker-0", "worker-1"):
        assert (run_dir / "logs" / f"{task}.log").stat().st_size > 0
    assert (run_dir / "checkpoints" / "model" / "saved_model.pb").is_file()
    assert any((run_dir / "tensorboard").rglob("*tfevents*"))
    assert len(state.epochs) == 2
    assert _publish(tmp_path, state)["status"] == "production"
    assert_nothing_left(cid, k8s=(core, ns))
    assert all(t.host for t in state.tasks)


def test_async_training_through_ignite_tf_start(kube, ignite_conn, cache, tmp_path, capsys):
    """`ignite-tf start --launcher kubernetes --mode async` with the runtime as the command: a chief, 1 worker
    and 1 ps as pods on the real node; the worker gets the command's runtime flags, writes its shard from
    Ignite into its feed, the chief trains 1 epoch from it, the ps is stopped when the chief ends; the model is
    published and nothing of the cluster is left."""
    core, ns = kube
    cid = f"k8s-async-{uuid.uuid4().hex[:6]}"
    code = _start(ns, tmp_path, cid, 1, "--mode", "async", "--workers", "1", "--ps", "1")
    out = capsys.readouterr().out
    state = make_launcher(ignite_conn).status(cid)
    assert code == 0 and state.status is Status.SUCCEEDED, out[-3000:]
    assert sorted(t.name for t in state.tasks) == ["chief-0", "ps-0", "worker-0"]
    run_dir = Path(state.run_dir)
    assert "feed: worker 0 epoch 0" in (run_dir / "logs" / "worker-0.log").read_text()
    assert (run_dir / "logs" / "chief-0.log").stat().st_size > 0
    assert (run_dir / "checkpoints" / "model" / "saved_model.pb").is_file()
    assert _publish(tmp_path, state)["status"] in ("production", "candidate")
    assert_nothing_left(cid, k8s=(core, ns))


def test_killed_worker_container_restarts_from_checkpoint(kube, ignite_conn, cache, tmp_path, capsys):
    """Real: after epoch 1, worker-1's container process is killed with SIGKILL on the host (exit 137); the
    supervisor restarts the sync cluster as new pods, which resume from the checkpoint in the run folder
    (the hostPath volume) and finish; the restart and the exit are in the state."""
    core, ns = kube
    cid = f"k8s-kill-{uuid.uuid4().hex[:6]}"
    launcher = make_launcher(ignite_conn)
    import threading

    result = {}
    # 20 short epochs (0.3-1.4 s each here): with 3, the training once ended before the kill could land.
    runner = threading.Thread(target=lambda: result.setdefault("code", _start(ns, tmp_path, cid, 20)), daemon=True)
    runner.start()
    wait_for(lambda: launcher.find(cid) and len(launcher.store.epochs(cid)) >= 1, 900, "the first epoch", poll=0.2)
    victims = [p for p in psutil.process_iter(["pid"]) if _task_of(p) == (cid, "worker", 1)]
    assert victims, "worker-1's process not found on the host"
    os.kill(victims[0].pid, signal.SIGKILL)
    runner.join(timeout=1500)
    state = launcher.status(cid)
    assert result.get("code") == 0 and state.status is Status.SUCCEEDED, capsys.readouterr().out[-3000:]
    assert state.restarts == 1 and state.failures[0]["exit_code"] == 137
    assert "resuming at epoch" in (Path(state.run_dir) / "logs" / "worker-0.log").read_text()
    assert_nothing_left(cid, k8s=(core, ns))


def _task_of(proc) -> tuple | None:
    try:
        env = proc.environ()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    if "TF_CONFIG" not in env or "IGNITE_TF_CLUSTER_ID" not in env:
        return None
    task = json.loads(env["TF_CONFIG"])["task"]
    return env["IGNITE_TF_CLUSTER_ID"], task["type"], task["index"]


# mode -> the training's topology and the roles of its pods.
TOPOLOGY = {"async": ({"workers": 1, "ps": 1}, ["chief", "ps", "worker"]),
            "sync": ({"workers": 2}, ["worker", "worker"])}


@pytest.mark.parametrize("mode", sorted(TOPOLOGY))
def test_training_as_a_dag_run(kube, ignite_conn, tmp_path, monkeypatch, mode):
    """A YAML pipeline with `training.launcher: kubernetes` run with dag.test() on Airflow's DB: load, plan,
    validate, then the training's pods on the real node (async: a chief + 1 worker + 1 ps; sync: 2 workers)
    reading from Ignite, waited for in the trigger, and PublishModelOperator publishing the Kubernetes-trained
    model."""
    import importlib.util

    from airflow import settings

    from tests.support.airflow import ignite_connection_env, migrate_db

    core, ns = kube
    migrate_db()
    for key, value in ignite_connection_env(ignite_conn).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("K8S_TEST_NAMESPACE", ns)
    # dag.test() runs DAGs from the configured dags folder.
    folder = Path(settings.DAGS_FOLDER) / f"k8s_{uuid.uuid4().hex[:6]}"
    (folder / "specs").mkdir(parents=True)
    suite = Path(__file__).resolve().parents[2] / "dags" / "expectations" / "tabular.yaml"
    (folder / "specs" / "k8s.yaml").write_text(yaml.safe_dump({
        "dag_id": f"ignite_tf_k8s_{mode}", "cache": f"k8s_{mode}", "key": "id", "suite": str(suite),
        "source": {"generator": "ignite_tf_dev.demo_data:tabular", "rows": 1500, "seed": 2},
        "training": {"mode": mode, **TOPOLOGY[mode][0], "entry_point": "ignite_tf.models:tabular_classifier",
                     "epochs": 1, "batch_size": 32, "learning_rate": 0.02, "startup_deadline_s": 900,
                     "launcher": "kubernetes", "kubernetes": {"namespace": "${K8S_TEST_NAMESPACE}", **REAL_NODE}},
        "publish": {"registry_root": str(tmp_path / "registry"), "model": f"k8s_{mode}", "thresholds": {}}}))
    (folder / "pipelines.py").write_text("# airflow dag\nfrom ignite_tf.pipeline import load_dags\n\n"
                                         "airflow_dags = load_dags(__file__, 'specs/*.yaml', globals())\n")
    module_spec = importlib.util.spec_from_file_location(f"dags_{uuid.uuid4().hex}", folder / "pipelines.py")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    dag = getattr(module, f"ignite_tf_k8s_{mode}")
    run = dag.test()
    assert run.state == "success", {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
    registry = ModelRegistry(tmp_path / "registry")
    assert len(registry.versions(f"k8s_{mode}")) == 1
    spec = json.loads(next((tmp_path / "runs").glob("*/cluster.json")).read_text())
    assert sorted(t["role"] for t in spec["tasks"]) == TOPOLOGY[mode][1]
    assert_nothing_left(spec["cluster_id"], k8s=(core, ns))
