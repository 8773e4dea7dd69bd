"""One cluster per task instance across its tries, with the real Airflow services (API server, scheduler with
LocalExecutor, DAG processor, triggerer): a YAML pipeline whose training has ``retries: 1`` loses its task
runner process to SIGKILL while its cluster trains. Airflow's retry must find that cluster while it still trains
(the same id: the identity is the task instance and its clear generation, not the try) and re-attach to it: its
epochs continue after the re-attach, none is trained twice, one cluster trains at any moment (sampled every
half second: live clusters of the run in the state store, and supervisor processes, whose tasks are their
children), the run succeeds and nothing is left. Nothing here is simulated: the kill is a real SIGKILL of
Airflow's task runner, and the scheduler learns of it the way it does in production, from the runner's missed
heartbeats (the services' timeout is 30 s: tests/support/airflow_services.py).
"""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime

import psutil

from tests.support.airflow_services import add_spec, wait_parsed
from tests.support.clusters import assert_nothing_left
from tests.support.polling import wait_for

DAG_ID = "ignite_tf_retry_reattach"
# The cluster must still train when try 2 starts: the scheduler fails try 1 once its heartbeat is 30 s old, and
# the retry's runner takes seconds to start. The kill comes at the first epoch; the 29 epochs left of 4000 rows
# (~2.5-5 s each here) outlast that about twice over.
EPOCHS, BATCH_SIZE, ROWS = 30, 16, 4000
SUPERVISOR = "ignite_tf.cluster.supervision.processes"
# The training waits in its worker (deferrable: false), so its task runner lives while the cluster trains.
SPEC = f"""\
dag_id: {DAG_ID}
cache: retry_reattach
source:
  generator: ignite_tf_dev.demo_data:tabular
  rows: {ROWS}
key: id
suite: ../expectations/tabular.yaml
retries: 0
training:
  workers: 2
  entry_point: ignite_tf.models:tabular_classifier
  epochs: {EPOCHS}
  batch_size: {BATCH_SIZE}
  label_column: label
  startup_deadline_s: 180
  deferrable: false
  retries: 1
  retry_delay: 1s
"""


def task_runner(ti_id: str) -> psutil.Process | None:
    """Airflow's task runner of a task instance: the process it titles ``airflow worker -- <ti id>``."""
    for proc in psutil.process_iter(["cmdline", "status"]):
        title = " ".join(proc.info["cmdline"] or [])
        if proc.info["status"] != psutil.STATUS_ZOMBIE and title.startswith("airflow worker --") and ti_id in title:
            return proc
    return None


def processes_titled(word: str) -> list[str]:
    return [" ".join(p.info["cmdline"] or [])[:160] for p in psutil.process_iter(["cmdline"])
            if word in " ".join(p.info["cmdline"] or [])]


def sample(launcher, run_id: str, runs: str) -> tuple[set[str], int]:
    """Now: the live clusters of the run in the state store, and the supervisor processes of runs under ``runs``
    (a cluster's tasks are its supervisor's children and die with it)."""
    live = {s.cluster_id for s in launcher.store.list()
            if s.labels.get("dag_id") == DAG_ID and s.labels.get("run_id") == run_id and launcher.is_alive(s)}
    supervisors = 0
    for proc in psutil.process_iter(["cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if proc.info["status"] != psutil.STATUS_ZOMBIE and SUPERVISOR in cmdline and runs in cmdline:
            supervisors += 1
    return live, supervisors


def test_killed_training_task_runner_is_retried_onto_its_running_cluster(airflow_services, ignite_conn):
    from ignite_tf.cluster.api import make_launcher

    svc, root = airflow_services
    add_spec(root, "retry_reattach.yaml", SPEC)
    wait_parsed(svc, DAG_ID)
    svc.request("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
    run_id = svc.request("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": None})["dag_run_id"]
    base = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}"
    launcher = make_launcher(ignite_conn)
    runs = str(root / "runs")

    killed, samples = None, []

    def run_ended() -> str | None:
        """One look: the run's state once it ended; meanwhile a sample, and the kill at the first epoch."""
        nonlocal killed
        state = svc.request("GET", base)["state"]
        if state in ("success", "failed"):
            return state
        samples.append(sample(launcher, run_id, runs))
        if killed is None:
            ti = svc.request("GET", f"{base}/taskInstances/train")
            clusters = [s for s in launcher.store.list() if s.labels.get("run_id") == run_id]
            if ti["state"] == "running" and clusters and clusters[0].epochs:
                runner = task_runner(ti["id"])
                assert runner is not None, (ti["id"], processes_titled("airflow"))
                os.kill(runner.pid, signal.SIGKILL)
                killed = (ti["try_number"], clusters[0].cluster_id, len(clusters[0].epochs), datetime.now().timestamp())
        return None

    state = wait_for(run_ended, timeout=900, poll=0.5, what=f"the end of run {run_id}")

    tis = {t["task_id"]: t for t in svc.request("GET", f"{base}/taskInstances")["task_instances"]}
    assert state == "success", ({k: t["state"] for k, t in tis.items()}, svc.log("scheduler").read_text()[-3000:])
    assert killed is not None and killed[0] == 1, "the task runner was never killed while its cluster trained"
    assert tis["train"]["try_number"] == 2, "the kill did not end try 1: no retry ran"

    # One cluster for the task instance, whose tries shared it; never two training at once.
    ours = [s for s in launcher.store.list() if s.labels.get("dag_id") == DAG_ID and s.labels.get("run_id") == run_id]
    assert [s.cluster_id for s in ours] == [killed[1]]
    assert all(len(live) <= 1 and supervisors <= 1 for live, supervisors in samples), \
        [s for s in samples if len(s[0]) > 1 or s[1] > 1][:5]
    assert any(supervisors == 1 for _, supervisors in samples)

    # Every epoch asked for was trained once, all in the first attempt: try 2 re-attached, it did not train again.
    final = launcher.status(killed[1])
    reported = [e["epoch"] for e in final.epochs]
    assert sorted(reported) == list(range(1, EPOCHS + 1)), reported
    assert final.resumes == 0 and final.status.value == "succeeded"
    assert {e["attempt"] for e in final.epochs} == {0}, [(e["epoch"], e["attempt"]) for e in final.epochs]
    result = svc.request("GET", f"{base}/taskInstances/train/xcomEntries/return_value?deserialize=true")["value"]
    assert result["cluster_id"] == killed[1] and result["epochs"] == EPOCHS, result

    # Try 2 took the live cluster: it said so while the cluster trained, and epochs went on after that.
    second_try = next((svc.home / "logs").rglob(f"run_id={run_id}/task_id=train/attempt=2.log"))
    said = second_try.read_text()
    reattached = f"re-attaching to TensorFlow cluster {killed[1]}, still running"
    took = [json.loads(line) for line in said.splitlines() if reattached in line]
    assert took, said[-3000:]
    looked = datetime.fromisoformat(took[0]["timestamp"]).timestamp()
    after = [e["epoch"] for e in final.epochs if e["time"] > looked]
    assert after, (f"no epoch after the re-attach at {looked - killed[3]:.1f} s after the kill: the retry started "
                   f"too late to see the cluster train", [(e["epoch"], e["time"] - killed[3]) for e in final.epochs])
    assert final.finished_at > looked
    assert_nothing_left(killed[1], final.run_dir)
