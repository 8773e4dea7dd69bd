"""Who stops a cluster and what a trigger keeps: real Ignite (the state store), real clusters of user-script
processes, the real operator, sensor and trigger classes driven directly (the task context is the small
stand-in of ``tests.support.airflow.TaskContext``; whole runs through the real services are in
``tests/services``). Which executor a launch may run under needs no cluster."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest

from tests.support.airflow import TaskContext, ignite_connection_env, migrate_db
from tests.support.clusters import JOBS, assert_nothing_left
from tests.support.polling import wait_for
from tests.support.sql import create_table


@pytest.fixture(scope="module")
def cache(ignite_conn) -> str:
    name = f"own_{uuid.uuid4().hex[:8]}"
    client = ignite_conn.client()
    try:
        create_table(client, name, range(200))
    finally:
        client.close()
    return name


@pytest.fixture
def airflow_conn(ignite_conn, run_root, monkeypatch):
    migrate_db()
    for key, value in ignite_connection_env(ignite_conn).items():
        monkeypatch.setenv(key, value)
    return ignite_conn


def dag():
    from airflow.sdk import DAG

    return DAG("ignite_tf_test_ownership", schedule=None)


def line_operator(cache: str, lines: int, interval: float = 0.1, **kwargs):
    import sys

    from ignite_tf.operators.tensorflow import TFClusterOperator

    return TFClusterOperator(task_id=f"train_{uuid.uuid4().hex[:6]}", cache=cache, workers=1, poll_interval=0.2,
                             command=[sys.executable, str(JOBS / "linejob.py"), str(lines), str(interval)],
                             job_dir=str(JOBS), max_restarts=0, **kwargs)


def deferred(op, context):
    from airflow.sdk.exceptions import TaskDeferred

    with pytest.raises(TaskDeferred) as raised:
        op.execute(context)
    return raised.value


async def logged_lines(trigger, *, until: int | None = None) -> tuple[list[str], object]:
    """Run ``trigger`` and return the chief's lines it logged and its event; with ``until``, cancel it (as a
    killed triggerer would) once it has logged that many lines, and return no event."""
    from structlog.testing import capture_logs

    with capture_logs() as logs:
        task = asyncio.ensure_future(trigger.run().asend(None))
        while not task.done():
            if until is not None and sum(" line " in e["event"] for e in logs) >= until:
                task.cancel()
                break
            await asyncio.sleep(0.05)
        try:
            event = await task
        except asyncio.CancelledError:
            event = None
    return [e["event"] for e in logs if " line " in e["event"]], event


def test_a_new_trigger_instance_continues_the_log_where_the_last_one_stopped(cache, airflow_conn):
    from ignite_tf.cluster.api import make_launcher
    from ignite_tf.triggers.tf_cluster import TFClusterTrigger

    op = line_operator(cache, lines=60)
    context = TaskContext(dag(), f"manual__{uuid.uuid4().hex}")
    trigger = deferred(op, context).trigger
    classpath, kwargs = trigger.serialize()
    assert kwargs["owns_cluster"] is True and kwargs["watcher"].endswith(f"/{op.task_id}/-1/1")

    first, _ = asyncio.run(logged_lines(trigger, until=15))
    # What Airflow does after a triggerer restart: a new instance from the kwargs the task deferred with.
    second, event = asyncio.run(logged_lines(TFClusterTrigger(**kwargs)))
    assert event.payload["status"] == "success", event.payload
    chief = [line for line in make_launcher(airflow_conn).output(event.payload["cluster_id"])[0].splitlines()
             if " line " in line]
    assert len(chief) == 60 and first and second
    assert first + second == chief, "each of the chief's lines logged exactly once, in order"

    # Another watcher (a sensor, another try) has its own offset: it logs the whole output.
    other, _ = asyncio.run(logged_lines(TFClusterTrigger(**{**kwargs, "watcher": "another/watcher"})))
    assert other == chief
    state = make_launcher(airflow_conn).status(event.payload["cluster_id"])
    assert_nothing_left(state.cluster_id, state.run_dir)


def test_watch_offsets_are_per_watcher_and_go_with_the_cluster(tmp_path, airflow_conn):
    from ignite_tf.state import IgniteStateStore, LocalStateStore

    for store in (LocalStateStore(tmp_path / "state"), IgniteStateStore(airflow_conn)):
        cluster_id = f"c-{uuid.uuid4().hex[:8]}"
        assert store.watch_offset(cluster_id, "dag/manual__1+x:y/t/-1/1") == 0
        store.set_watch_offset(cluster_id, "dag/manual__1+x:y/t/-1/1", 120)
        store.set_watch_offset(cluster_id, "dag/manual__1+x:y/sensor/-1/1", 7)
        assert store.watch_offset(cluster_id, "dag/manual__1+x:y/t/-1/1") == 120
        assert store.watch_offset(cluster_id, "dag/manual__1+x:y/sensor/-1/1") == 7
        store.delete(cluster_id)
        assert store.watch_offset(cluster_id, "dag/manual__1+x:y/t/-1/1") == 0
        store.close()


def test_a_trigger_waits_out_a_state_store_outage_within_its_budget_and_names_one_past_it(cache, airflow_conn,
                                                                                           monkeypatch):
    """The trigger reaches Ignite through a link the test cuts (``tests.support.netfault``: connections reset,
    new ones refused, as when the node goes away); the cluster's own processes reach Ignite directly and go on."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    from ignite_tf.cluster.api import make_launcher
    from ignite_tf.state import Status
    from ignite_tf.triggers.tf_cluster import TFClusterTrigger
    from tests.support.netfault import CuttableLink

    launcher = make_launcher(airflow_conn)
    op = line_operator(cache, lines=200, interval=0.05, wait_for_completion=False)
    cluster_id = op.execute(TaskContext(dag(), f"manual__{uuid.uuid4().hex}"))["cluster_id"]
    with CuttableLink(airflow_conn.addresses[0]) as link, ThreadPoolExecutor(1) as triggerer:
        monkeypatch.setenv("AIRFLOW_CONN_IGNITE_VIA_LINK", json.dumps({"conn_type": "ignite", "host": link.address}))
        watch = {"cluster_id": cluster_id, "ignite_conn_id": "ignite_via_link", "poll_interval": 0.2}
        trigger = TFClusterTrigger(**watch, watcher="weather/1", outage_budget_s=120)
        watching = triggerer.submit(asyncio.run, logged_lines(trigger))
        wait_for(lambda: launcher.store.watch_offset(cluster_id, "weather/1") > 0, 120,
                 "the trigger logging the chief's first lines")
        link.cut()
        wait_for(lambda: launcher.status(cluster_id).status.final, 120,
                 "the cluster ending while its trigger cannot reach the store")
        assert not watching.done(), "the trigger gave up during an outage shorter than its budget"
        link.restore()
        lines, event = watching.result(timeout=120)
        assert event.payload["status"] == "success", event.payload
        chief = [line for line in launcher.output(cluster_id)[0].splitlines() if " line " in line]
        assert len(chief) == 200 and lines == chief, "each of the chief's lines logged exactly once, in order"

        # Past the budget the watch ends naming the outage; the cluster is neither touched nor called lost.
        held = line_operator(cache, lines=600, wait_for_completion=False)
        held_id = held.execute(TaskContext(dag(), f"manual__{uuid.uuid4().hex}"))["cluster_id"]
        link.cut()
        _, event = asyncio.run(logged_lines(TFClusterTrigger(**{**watch, "cluster_id": held_id}, outage_budget_s=2)))
        assert event.payload["status"] == "error"
        message = event.payload["message"]
        assert f"the state store of TensorFlow cluster {held_id} has not answered for" in message, message
        assert "outage budget is 2 s" in message, message
    assert launcher.status(held_id).status is Status.RUNNING, "an outage of the trigger's link stopped the cluster"
    launcher.stop(held_id)
    for done in (cluster_id, held_id):
        state = launcher.status(done)
        assert_nothing_left(done, state.run_dir)


def test_a_sensor_only_watches_and_the_launching_task_owns(cache, airflow_conn):
    from ignite_tf.cluster.api import make_launcher
    from ignite_tf.sensors.tf_cluster import TFClusterSensor
    from ignite_tf.state import Status

    launcher = make_launcher(airflow_conn)
    op = line_operator(cache, lines=600, wait_for_completion=False)
    context = TaskContext(dag(), f"manual__{uuid.uuid4().hex}")
    cluster_id = op.execute(context)["cluster_id"]
    wait_for(lambda: launcher.status(cluster_id).status is Status.RUNNING, timeout=120, what="cluster running")

    sensor = TFClusterSensor(task_id="watch", cluster_id=cluster_id, poll_interval=0.2)
    trigger = deferred(sensor, TaskContext(dag(), context["run_id"])).trigger
    assert trigger.serialize()[1]["owns_cluster"] is False
    asyncio.run(trigger.on_kill())  # the user cleared (or marked) the deferred sensor
    assert launcher.status(cluster_id).status is Status.RUNNING, "a sensor stopped the cluster it watches"

    # The launching task's trigger owns it: a user killing that task stops the cluster.
    owner = op.watch_trigger(context, cluster_id)
    asyncio.run(owner.on_kill())
    state = launcher.status(cluster_id)
    assert state.status is Status.STOPPED
    assert_nothing_left(cluster_id, state.run_dir)


def test_a_deferral_timeout_stops_the_cluster_the_task_launched(cache, airflow_conn):
    from airflow.sdk.bases.operator import TriggerFailureReason
    from airflow.sdk.exceptions import TaskDeferralTimeout

    from ignite_tf.cluster.api import make_launcher
    from ignite_tf.state import Status

    launcher = make_launcher(airflow_conn)
    op = line_operator(cache, lines=600, execution_timeout=timedelta(minutes=10))
    context = TaskContext(dag(), f"manual__{uuid.uuid4().hex}")
    defer = deferred(op, context)
    assert timedelta(minutes=9) < defer.timeout <= timedelta(minutes=10)
    cluster_id = context["ti"].xcoms["cluster_id"]
    wait_for(lambda: launcher.status(cluster_id).status is Status.RUNNING, timeout=120, what="cluster running")

    # Airflow resumes a timed-out deferral on a worker (a new process: the operator knows no cluster id yet).
    resumed = line_operator(cache, lines=600)
    resumed.task_id = op.task_id
    with pytest.raises(TaskDeferralTimeout):
        resumed.resume_execution("__fail__", {"error": TriggerFailureReason.TRIGGER_TIMEOUT}, context)
    state = launcher.status(cluster_id)
    assert state.status is Status.STOPPED
    assert_nothing_left(cluster_id, state.run_dir)


@pytest.mark.parametrize(("executor", "kwargs", "refused"), [
    ("KubernetesExecutor", {}, "deferrable=True"),
    ("airflow.providers.cncf.kubernetes.executors.kubernetes_executor.KubernetesExecutor", {}, "deferrable=True"),
    ("KubernetesExecutor", {"wait_for_completion": False}, "wait_for_completion=False"),
    ("aws_ecs:airflow.providers.amazon.aws.executors.ecs.ecs_executor.AwsEcsExecutor,LocalExecutor", {},
     "deferrable=True"),
    ("KubernetesExecutor", {"deferrable": False}, None),
    ("KubernetesExecutor", {"launcher": "kubernetes"}, None),
    ("KubernetesExecutor", {"executor": "LocalExecutor"}, None),
    ("LocalExecutor", {}, None),
    ("CeleryExecutor,KubernetesExecutor", {}, None),
])
def test_the_local_launcher_refuses_an_executor_whose_worker_ends_with_the_task(monkeypatch, executor, kwargs,
                                                                                  refused):
    from airflow.sdk.exceptions import AirflowFailException

    from ignite_tf.operators.tensorflow import TFClusterOperator

    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", executor)
    op = TFClusterOperator(task_id="train", cache="c", entry_point="m:f", **kwargs)
    context = TaskContext(dag(), "manual__1")
    if refused is None:
        op.pre_execute(context)
        return
    with pytest.raises(AirflowFailException) as failed:
        op.pre_execute(context)
    message = str(failed.value)
    for words in ("train: launcher='local'", refused, "KubernetesExecutor" if "Kube" in executor else "AwsEcsExecutor",
                  "launcher='kubernetes'", "training.launcher: kubernetes", "deferrable=False", "executor="):
        assert words in message, message


REFUSED_DAG = """
from airflow.sdk import DAG
from ignite_tf.operators.tensorflow import TFClusterOperator

with DAG("ignite_tf_test_refused_launch", schedule=None) as dag:
    TFClusterOperator(task_id="train", cache={cache!r}, entry_point="ignite_tf.models:tabular_classifier", retries=2)
"""


def test_a_refused_launch_fails_its_task_run_at_once_and_starts_nothing(cache, airflow_conn, monkeypatch, capfd):
    """A real task run (``dag.test()``: Airflow's task runner calls ``pre_execute``) under KubernetesExecutor."""
    import importlib.util
    import os
    from pathlib import Path

    from ignite_tf.cluster.api import make_launcher

    path = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / "test_refused_launch_dag.py"
    path.write_text(REFUSED_DAG.format(cache=cache))
    spec = importlib.util.spec_from_file_location(f"dag_{uuid.uuid4().hex}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    before = set(make_launcher(airflow_conn).store.ids())
    monkeypatch.setenv("AIRFLOW__CORE__EXECUTOR", "KubernetesExecutor")
    try:
        run = module.dag.test()
    finally:
        path.unlink()
    (ti,) = run.get_task_instances()
    assert ti.state == "failed" and ti.try_number == 1, (ti.state, ti.try_number)  # no retry: it would fail alike
    log = "".join(capfd.readouterr())  # dag.test() writes the task's log to the console
    assert "train: launcher='local' with deferrable=True" in log and "cannot work under KubernetesExecutor" in log
    assert set(make_launcher(airflow_conn).store.ids()) == before, "a refused launch started a cluster"


TIMED_OUT_DAG = """
import sys
from datetime import timedelta

from airflow.sdk import DAG
from ignite_tf.operators.tensorflow import TFClusterOperator

with DAG("ignite_tf_test_execution_timeout", schedule=None) as dag:
    TFClusterOperator(task_id="train", cache={cache!r}, command=[sys.executable, {linejob!r}, "900", "0.1"],
                      job_dir={jobs!r}, workers=1, deferrable=False, poll_interval=0.5,
                      execution_timeout=timedelta(seconds=15))
"""


def test_execution_timeout_stops_the_cluster_the_task_waits_for(cache, airflow_conn):
    """A real task run (``dag.test()``: Airflow's task runner enforces ``execution_timeout`` and calls
    ``on_kill``) of a task waiting in its worker for a 90 s training; the 15 s timeout leaves the launch of its one
    line-printing task (a second or two) ample time to end first."""
    import importlib.util
    import os
    from pathlib import Path

    from ignite_tf.cluster.api import make_launcher
    from ignite_tf.state import Status
    from tests.support.airflow import xcoms

    path = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / "test_execution_timeout_dag.py"
    path.write_text(TIMED_OUT_DAG.format(cache=cache, linejob=str(JOBS / "linejob.py"), jobs=str(JOBS)))
    spec = importlib.util.spec_from_file_location(f"dag_{uuid.uuid4().hex}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        run = module.dag.test()
    finally:
        path.unlink()
    (ti,) = run.get_task_instances()
    assert ti.state == "failed"
    cluster_id = xcoms(run.dag_id, run.run_id)[("train", -1, "cluster_id")]
    state = make_launcher(airflow_conn).status(cluster_id)
    assert state.status is Status.STOPPED, state.status
    assert_nothing_left(cluster_id, state.run_dir)
