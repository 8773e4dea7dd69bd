"""Deferred waits through the real Airflow services (API server, scheduler with LocalExecutor, DAG processor,
triggerer; the session's ``airflow_services``), on clusters of real user-script processes that print numbered
lines (``tests/jobs/linejob.py``: the log path is what is tested, so no TensorFlow is spent on it):

- the real triggerer process (its whole process session) SIGKILLed and started again while a training task is
  deferred: the run succeeds, and each of the chief's lines is in the task's log exactly once;
- the sensor's deferred paths: success, and failure with the cluster's reason and the chief's last lines;
- clearing the deferred sensor (Airflow calls its trigger's ``on_kill``) leaves the cluster running (its job
  holds its end until the test has checked that: ``linejob.py --hold``).
"""

from __future__ import annotations

import json
import sys
import uuid
from pathlib import Path

import pytest

from tests.support.airflow_services import wait_parsed
from tests.support.clusters import JOBS, assert_nothing_left
from tests.support.polling import wait_for
from tests.support.sql import create_table

TRAIN_DAG, SENSOR_DAG = "ignite_tf_test_triggerer_restart", "ignite_tf_test_sensor"
BUSY = (OSError,)  # a REST call timing out on a loaded machine means "not yet" while polling (URLError is one too)

DAGS = """
from airflow.sdk import DAG
from ignite_tf.operators.tensorflow import TFClusterOperator
from ignite_tf.sensors.tf_cluster import TFClusterSensor

JOB = [{python!r}, {linejob!r}, "{{{{ params.lines }}}}", "{{{{ params.interval }}}}", "{{{{ params.status }}}}",
       "--hold={{{{ params.hold }}}}"]
PARAMS = {{"lines": 40, "interval": 0.25, "status": 0, "hold": ""}}

with DAG({train!r}, schedule=None, params=PARAMS):
    TFClusterOperator(task_id="train", cache={cache!r}, command=JOB, job_dir={jobs!r}, workers=1, max_restarts=0,
                      poll_interval=1)

with DAG({sensor!r}, schedule=None, params=PARAMS):
    start = TFClusterOperator(task_id="start", cache={cache!r}, command=JOB, job_dir={jobs!r}, workers=1,
                              max_restarts=0, wait_for_completion=False)
    watch = TFClusterSensor(task_id="watch", cluster_id="{{{{ ti.xcom_pull(task_ids='start', key='cluster_id') }}}}",
                            poll_interval=1)
    start >> watch
"""


@pytest.fixture(scope="module")
def services(airflow_services, ignite_conn):
    svc, root = airflow_services
    cache = f"watch_{uuid.uuid4().hex[:8]}"
    client = ignite_conn.client()
    try:
        create_table(client, cache, range(200))
    finally:
        client.close()
    (root / "dags" / "test_watching_dags.py").write_text(DAGS.format(
        python=sys.executable, linejob=str(JOBS / "linejob.py"), jobs=str(JOBS), cache=cache, train=TRAIN_DAG,
        sensor=SENSOR_DAG))
    for dag_id in (TRAIN_DAG, SENSOR_DAG):
        wait_parsed(svc, dag_id)
        svc.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
    return svc, root


def trigger_run(svc, dag_id: str, **conf) -> str:
    return svc.request("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})["dag_run_id"]


def ti_state(svc, dag_id: str, run_id: str, task_id: str) -> str | None:
    return svc.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")["state"]


def wait_run(svc, dag_id: str, run_id: str, timeout: float = 400) -> str:
    def ended():
        state = svc.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]
        return state if state in ("success", "failed") else None

    return wait_for(ended, timeout, f"run {run_id} of {dag_id} to end", poll=1, errors=BUSY,
                    seen=lambda: svc.log("scheduler").read_text()[-2000:])


def run_story(svc, dag_id: str, run_id: str) -> str:
    """What a failed run's assertion shows: each task's state and try, the end of each log of the run, and
    the triggerer's."""
    tis = svc.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
    lines = [f"{ti['task_id']}: {ti['state']} (try {ti['try_number']})" for ti in tis]
    for path in sorted((svc.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}").rglob("*.log*")):
        lines += [f"--- {path.name}", *events(path)[-8:]]
    return "\n".join([*lines, "--- triggerer", svc.log("triggerer").read_text()[-2000:]])


def task_logs(svc, dag_id: str, run_id: str, task_id: str, pattern: str) -> list[Path]:
    folder = svc.home / "logs" / f"dag_id={dag_id}" / f"run_id={run_id}" / f"task_id={task_id}"
    return sorted(folder.glob(pattern), key=lambda p: int(p.name.split(".")[-2]) if "trigger" in p.name else 0)


def events(path: Path) -> list[str]:
    """The events of a JSON-lines task log (a line cut short by a kill is skipped: if it was the chief's, the
    comparison below misses it)."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(str(json.loads(line).get("event", "")))
        except ValueError:
            continue
    return out


def chief_lines(texts: list[str]) -> list[str]:
    return [t for t in texts if " line " in t and t.startswith(("worker-0 ", "chief-0 "))]


def test_a_killed_and_restarted_triggerer_logs_each_chief_line_once(services, ignite_conn):
    from ignite_tf.cluster.api import make_launcher

    svc, _ = services
    run_id = trigger_run(svc, TRAIN_DAG, lines=80, interval=0.25)
    trigger_logs = lambda: task_logs(svc, TRAIN_DAG, run_id, "train", "attempt=1.log.trigger.*.log")  # noqa: E731
    wait_for(lambda: ti_state(svc, TRAIN_DAG, run_id, "train") == "deferred", 300, "the training task deferred",
             poll=1, errors=BUSY)
    wait_for(lambda: trigger_logs() and len(chief_lines(events(trigger_logs()[0]))) >= 10, 120,
             "the triggerer logging the chief's lines", poll=0.5)
    svc.kill("triggerer")
    logged_before_kill = len(chief_lines(events(trigger_logs()[0])))
    assert ti_state(svc, TRAIN_DAG, run_id, "train") == "deferred"
    svc.restart("triggerer")

    assert wait_run(svc, TRAIN_DAG, run_id) == "success", svc.log("triggerer").read_text()[-3000:]
    result = svc.request("GET", f"/api/v2/dags/{TRAIN_DAG}/dagRuns/{run_id}/taskInstances/train/"
                                "xcomEntries/return_value?deserialize=true")["value"]
    launcher = make_launcher(ignite_conn)
    chief = chief_lines(launcher.output(result["cluster_id"])[0].splitlines())
    assert len(chief) == 80
    files = trigger_logs()
    assert len(files) == 2, f"one trigger log per triggerer: {files}"
    per_triggerer = [chief_lines(events(f)) for f in files]
    assert len(per_triggerer[0]) >= logged_before_kill and per_triggerer[1], [len(x) for x in per_triggerer]
    assert per_triggerer[0] + per_triggerer[1] == chief, "each chief line exactly once in the task's log"
    state = launcher.status(result["cluster_id"])
    assert_nothing_left(state.cluster_id, state.run_dir)


def test_clearing_the_deferred_sensor_leaves_the_cluster_running_and_it_then_succeeds(services, ignite_conn):
    from ignite_tf.cluster.api import make_launcher

    svc, _ = services
    launcher = make_launcher(ignite_conn)
    hold = svc.home / f"release_{uuid.uuid4().hex}"  # the job runs until the test has seen the clear leave it
    run_id = trigger_run(svc, SENSOR_DAG, lines=20, interval=0.25, hold=str(hold))
    try:
        wait_for(lambda: ti_state(svc, SENSOR_DAG, run_id, "watch") == "deferred", 300, "the sensor deferred",
                 poll=1, errors=BUSY)
        cluster_id = svc.request("GET", f"/api/v2/dags/{SENSOR_DAG}/dagRuns/{run_id}/taskInstances/start/"
                                        "xcomEntries/cluster_id?deserialize=true")["value"]
        assert not launcher.status(cluster_id).status.final
        # "deferred" is the task's state, set before the triggerer has taken the trigger: a clear in between
        # removes a trigger that never ran (no on_kill to see). Clear once it runs: it has logged a chief line.
        wait_for(lambda: any(chief_lines(events(p)) for p in task_logs(svc, SENSOR_DAG, run_id, "watch",
                                                                        "attempt=1.log.trigger.*.log")),
                 120, "the sensor's trigger to run (a chief line in its log)", poll=1)

        svc.request("POST", f"/api/v2/dags/{SENSOR_DAG}/clearTaskInstances",
                    {"dry_run": False, "only_failed": False, "task_ids": ["watch"], "dag_run_id": run_id})
        on_kill = "it only watched TensorFlow cluster"
        wait_for(lambda: any(on_kill in p.read_text(errors="replace") for p in (svc.home / "logs").rglob("*.log")
                             if f"run_id={run_id}" in str(p)) or on_kill in svc.log("triggerer").read_text(), 120,
                 "the sensor's trigger killed by the clear (on_kill)", poll=1)
        assert not launcher.status(cluster_id).status.final, "clearing the sensor stopped the cluster it watches"
    finally:
        hold.touch()

    assert wait_run(svc, SENSOR_DAG, run_id) == "success", run_story(svc, SENSOR_DAG, run_id)
    watch = svc.request("GET", f"/api/v2/dags/{SENSOR_DAG}/dagRuns/{run_id}/taskInstances/watch")
    assert watch["try_number"] == 2, watch  # the cleared try, then the one that saw the cluster succeed
    result = svc.request("GET", f"/api/v2/dags/{SENSOR_DAG}/dagRuns/{run_id}/taskInstances/watch/"
                                "xcomEntries/return_value?deserialize=true")["value"]
    assert result["status"] == "succeeded" and result["cluster_id"] == cluster_id
    # The second try's log has the chief's whole output: each try is a watcher of its own.
    second = [line for p in task_logs(svc, SENSOR_DAG, run_id, "watch", "attempt=2.log.trigger.*.log")
              for line in chief_lines(events(p))]
    assert second == chief_lines(launcher.output(cluster_id)[0].splitlines())
    state = launcher.status(cluster_id)
    assert_nothing_left(cluster_id, state.run_dir)


def test_the_deferred_sensor_fails_with_the_reason_and_the_chiefs_last_lines(services, ignite_conn):
    svc, _ = services
    run_id = trigger_run(svc, SENSOR_DAG, lines=20, interval=0.5, status=3)
    states = []

    def watch_ended() -> bool:
        state = ti_state(svc, SENSOR_DAG, run_id, "watch")
        if not states or states[-1] != state:
            states.append(state)
        return state in ("success", "failed")

    wait_for(watch_ended, 400, "the sensor's task to end", poll=0.5, errors=BUSY, seen=lambda: f"states: {states}")
    assert states[-1] == "failed" and "deferred" in states, states
    assert wait_run(svc, SENSOR_DAG, run_id) == "failed"
    assert ti_state(svc, SENSOR_DAG, run_id, "start") == "success"
    text = "".join(p.read_text(errors="replace") for p in task_logs(svc, SENSOR_DAG, run_id, "watch", "attempt=1.log"))
    assert "exited with status 3" in text and "worker-0 line 0020/20" in text, text[-3000:]
