"""ignite-tf operators in real DAG runs: Airflow's metadata DB (SQLite), real Ignite nodes, real TF processes."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.airflow import SECRET, TaskContext, ignite_connection_env, migrate_db, xcoms
from tests.support.clusters import assert_nothing_left
from tests.support.polling import wait_for

DAGS = Path(__file__).resolve().parents[2] / "dags"


INFERENCE_DAG = """
from airflow.sdk import DAG
from ignite_tf.operators.inference import BatchInferenceOperator

with DAG(dag_id="ignite_tf_test_inference", schedule=None) as dag:
    BatchInferenceOperator.partial(
        task_id="score", registry_root={registry!r}, model="tabular_hw",
        input_cache="tabular_hw", output_cache="tabular_hw_scores", shards=3,
    ).expand(shard=[0, 1, 2])
"""


@pytest.fixture(scope="module")
def airflow_env(ignite_conn, tmp_path_factory):
    import shutil

    migrate_db()
    root = tmp_path_factory.mktemp("airflow-runs")
    # dag.test() runs what the DAG bundle (the session's dags folder, see conftest) holds: the repo's DAGs
    # plus this module's own.
    dags = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    shutil.copytree(DAGS, dags, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    (dags / "test_inference_dag.py").write_text(INFERENCE_DAG.format(registry=str(root / "registry")))
    patch = pytest.MonkeyPatch()
    for key, value in ignite_connection_env(ignite_conn).items():
        patch.setenv(key, value)
    patch.setenv("IGNITE_TF_RUN_ROOT", str(root / "runs"))
    patch.setenv("IGNITE_TF_REGISTRY", str(root / "registry"))
    patch.setenv("IGNITE_TF_DEMO_ROWS", "3000")
    yield root
    patch.undo()


def load_dag(path: Path, name: str = "dag"):
    spec = importlib.util.spec_from_file_location(f"dag_{uuid.uuid4().hex}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


@pytest.fixture(scope="module")
def handwritten_run(airflow_env):
    """One real run of the hand-written DAG: load, partitions, plan, validate x2, gate, train (deferred), publish."""
    dag = load_dag(Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / "tabular_handwritten.py")
    run = dag.test(run_conf={"epochs": 3, "workers": 2, "batch_size": 32, "learning_rate": 0.02})
    return dag, run, xcoms(dag.dag_id, run.run_id)


def test_handwritten_dag_runs_end_to_end(handwritten_run, airflow_env):
    from ignite_tf.registry.publish import ModelRegistry

    dag, run, values = handwritten_run
    assert run.state == "success", {ti.task_id: ti.state for ti in run.get_task_instances()}
    states = {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
    assert states[("validate", 0)] == states[("validate", 1)] == "success", "validation mapped over 2 shards"
    load = values[("load", -1, "return_value")]
    assert load["rows_in_cache"] == 3000
    plan = values[("shard_plan", -1, "plan")]
    assert plan["workers"] == 2 and values[("shard_plan", -1, "return_value")] == [0, 1]
    gate = values[("validation_gate", -1, "return_value")]
    assert gate["passed"] is True and Path(gate["files"]["json"]).exists()
    train = values[("train", -1, "return_value")]
    assert train["status"] == "succeeded" and train["epochs"] == 3, train
    assert train["metrics"]["loss"] < 1.0
    publish = values[("publish", -1, "return_value")]
    registry = ModelRegistry(airflow_env / "registry")
    assert publish["status"] == "production" and registry.production("tabular_hw") == publish["version"]
    meta = registry.metadata("tabular_hw", publish["version"])
    assert meta["context"]["dag_id"] == dag.dag_id and meta["data"]["rows"] == 3000
    assert_nothing_left(train["cluster_id"], train["run_dir"])


def test_chief_output_has_one_line_per_epoch(handwritten_run):
    _, _, values = handwritten_run
    assert values[("train", -1, "cluster_id")] == values[("train", -1, "return_value")]["cluster_id"]
    chief = (train_run_dir(handwritten_run) / "logs" / "worker-0.log").read_text()
    for epoch in (1, 2, 3):
        assert f"epoch {epoch}/3 loss=" in chief
    assert "all 2 tasks up" in chief and "succeeded: training finished" in chief


def train_run_dir(handwritten_run) -> Path:
    return Path(handwritten_run[2][("train", -1, "return_value")]["run_dir"])


def test_secrets_never_leak(handwritten_run, airflow_env):
    _, run, values = handwritten_run
    assert SECRET not in json.dumps(list(values.values()), default=str)
    home = Path(os.environ["AIRFLOW_HOME"])
    for folder in (home / "logs", airflow_env / "runs"):
        for path in folder.rglob("*"):
            if path.is_file() and path.stat().st_size < 50_000_000:
                assert SECRET.encode() not in path.read_bytes(), f"password found in {path}"
    spec = json.loads((train_run_dir(handwritten_run) / "cluster.json").read_text())
    assert SECRET not in json.dumps(spec), "TF_CONFIG / cluster spec must not hold secrets"


def direct_operator(**kwargs):
    from ignite_tf.operators.tensorflow import TFClusterOperator

    kwargs = {"epochs": 2, "batch_size": 32, "workers": 2, **kwargs}
    return TFClusterOperator(task_id=f"train_{uuid.uuid4().hex[:6]}", cache="tabular_hw",
                             entry_point="ignite_tf.models:tabular_classifier", **kwargs)


def run_trigger(trigger):
    async def first_event():
        return await trigger.run().asend(None)

    return asyncio.run(first_event())


def test_deferral_two_triggers_one_cluster(handwritten_run):
    from airflow.sdk.exceptions import TaskDeferred

    from ignite_tf.triggers.tf_cluster import TFClusterTrigger

    dag, _, _ = handwritten_run
    op = direct_operator()
    context = TaskContext(dag, f"manual__{uuid.uuid4().hex}")
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    trigger = deferred.value.trigger
    assert isinstance(trigger, TFClusterTrigger) and deferred.value.method_name == "execute_complete"
    cluster_id = context["ti"].xcoms["cluster_id"]
    from ignite_tf.cluster.api import make_launcher

    launcher = make_launcher(op.conn)
    first_supervisor = launcher.status(cluster_id).supervisor_pid
    assert first_supervisor
    # The same try again (a scheduler restart): no second cluster, the same supervisor.
    with pytest.raises(TaskDeferred):
        op.execute(context)
    assert launcher.status(cluster_id).supervisor_pid == first_supervisor
    # Two copies of the trigger (a triggerer restart, or two triggerers): both only watch.
    classpath, kwargs = trigger.serialize()
    assert classpath == "ignite_tf.triggers.tf_cluster.TFClusterTrigger"
    twin = TFClusterTrigger(**kwargs)

    async def both():
        return await asyncio.gather(trigger.run().asend(None), twin.run().asend(None))

    first, second = asyncio.run(both())
    assert first.payload["status"] == second.payload["status"] == "success"
    assert first.payload["cluster_id"] == second.payload["cluster_id"] == cluster_id
    result = op.execute_complete(context, first.payload)
    assert result["status"] == "succeeded" and result["restarts"] == 0
    final = launcher.status(cluster_id)
    assert final.supervisor_pid == first_supervisor, "a second supervisor took the cluster over"
    assert_nothing_left(cluster_id, final.run_dir)


def test_killing_the_task_stops_the_cluster(handwritten_run):
    from airflow.sdk.exceptions import TaskDeferred

    from ignite_tf.cluster.api import make_launcher
    from ignite_tf.state import Status

    dag, _, _ = handwritten_run
    op = direct_operator(epochs=50)
    context = TaskContext(dag, f"manual__{uuid.uuid4().hex}")
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    cluster_id = context["ti"].xcoms["cluster_id"]
    launcher = make_launcher(op.conn)
    wait_for(lambda: launcher.status(cluster_id).status is Status.RUNNING, timeout=120, what="cluster running")
    asyncio.run(deferred.value.trigger.on_kill())  # the user marked the deferred task failed
    state = launcher.status(cluster_id)
    assert state.status is Status.STOPPED
    assert_nothing_left(cluster_id, state.run_dir)

    # Not deferred: the worker's on_kill stops it.
    op2 = direct_operator(epochs=50, deferrable=False)
    context2 = TaskContext(dag, f"manual__{uuid.uuid4().hex}")
    import threading

    runner = threading.Thread(target=lambda: _swallow(op2.execute, context2), daemon=True)
    runner.start()
    cluster_id2 = wait_for(lambda: context2["ti"].xcoms.get("cluster_id"), timeout=120, what="cluster id")
    wait_for(lambda: launcher.status(cluster_id2).status is Status.RUNNING, timeout=120, what="cluster running")
    op2.on_kill()
    runner.join(timeout=60)
    state2 = launcher.status(cluster_id2)
    assert state2.status is Status.STOPPED
    assert_nothing_left(cluster_id2, state2.run_dir)


def _swallow(fn, *args):
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - the killed task's own failure is expected here
        pass


def test_sensor_fails_with_reason_and_tail(handwritten_run, ignite_conn, tmp_path):
    from airflow.sdk.exceptions import AirflowException

    from ignite_tf.cluster.api import make_launcher, start_cluster
    from ignite_tf.sensors.tf_cluster import TFClusterSensor
    from tests.support.clusters import JOBS, PORTJOB

    launcher = make_launcher(ignite_conn)
    state = start_cluster("tabular_hw", {"command": [*PORTJOB, "1", "--fail-task", "worker-0"], "job_dir": str(JOBS)},
                          conn=ignite_conn, launcher=launcher, workers=1, max_restarts=0)
    sensor = TFClusterSensor(task_id="watch", cluster_id=state.cluster_id, deferrable=False, poll_interval=0.5)
    launcher.wait(state.cluster_id, timeout=60)
    with pytest.raises(AirflowException, match="exited with status 3") as failed:
        sensor.poke({})
    assert "worker-0 failing on purpose" in str(failed.value)


def test_publish_gate_better_promoted_worse_kept_candidate(handwritten_run, airflow_env):
    from ignite_tf.operators.publish import PublishModelOperator
    from ignite_tf.registry.publish import ModelRegistry

    dag, run, values = handwritten_run
    training = dict(values[("train", -1, "return_value")])
    registry_root = str(airflow_env / "registry-gate")
    results = []
    for accuracy in (0.80, 0.90, 0.70):
        training["metrics"] = {**training["metrics"], "accuracy": accuracy}
        op = PublishModelOperator(task_id="publish_gate", registry_root=registry_root, model="gate_model",
                                  training=training, thresholds={"accuracy": (0.5, None)}, tolerance=0.01)
        context = TaskContext(dag, run.run_id)
        context["outlet_events"] = _OutletEvents()
        results.append(op.execute(context))
    assert [r["status"] for r in results] == ["production", "production", "candidate"]
    assert any("accuracy" in reason for reason in results[2]["reasons"])
    registry = ModelRegistry(registry_root)
    assert registry.production("gate_model") == results[1]["version"]
    assert len(registry.versions("gate_model")) == 3


class _OutletEvents(dict):
    """Stand-in for Airflow's outlet event accessor when calling ``execute`` directly."""

    def __missing__(self, asset):
        class _Event:
            extra: dict = {}

        self[asset] = _Event()
        return self[asset]


def test_publish_killed_midway_leaves_registry_consistent(handwritten_run, airflow_env):
    from ignite_tf.registry.publish import ModelRegistry

    _, _, values = handwritten_run
    run_dir = values[("train", -1, "return_value")]["run_dir"]
    root = airflow_env / "registry-crash"
    script = (
        "import sys; from ignite_tf.registry.publish import ModelRegistry, BlessingGate\n"
        f"ModelRegistry({str(root)!r}).publish('m', saved_model_dir={run_dir + '/checkpoints/model'!r}, "
        "metrics={'accuracy': float(sys.argv[1])}, gate=BlessingGate({'accuracy': (0.5, None)}))\n"
    )
    ok = subprocess.run([sys.executable, "-c", script, "0.8"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    crashed = subprocess.run([sys.executable, "-c", script, "0.9"], capture_output=True, text=True,
                             env={**os.environ, "IGNITE_TF_REGISTRY_CRASH_AT": "renamed"})
    assert crashed.returncode == 137
    registry = ModelRegistry(root)
    assert registry.production("m") in registry.versions("m")
    rerun = subprocess.run([sys.executable, "-c", script, "0.9"], capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert registry.production("m") == registry.versions("m")[-1]


def test_batch_inference_mapped_over_shards(handwritten_run, airflow_env, ignite_client):
    dag = load_dag(Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / "test_inference_dag.py")
    run = dag.test()
    assert run.state == "success"
    values = xcoms(dag.dag_id, run.run_id)
    scored = sum(v["rows_scored"] for k, v in values.items() if k[0] == "score" and k[2] == "return_value")
    assert scored == 3000
    with ignite_client.sql("SELECT COUNT(*) FROM tabular_hw_scores") as cursor:
        assert next(iter(cursor))[0] == 3000  # keys of a cache are unique: one prediction per row
    # Same keys as the input (both tables key on ID with the same affinity, so the join is collocated).
    with ignite_client.sql("SELECT COUNT(*) FROM tabular_hw h JOIN tabular_hw_scores s ON h.ID = s.ID") as cursor:
        assert next(iter(cursor))[0] == 3000
