"""One cluster per id across launches, as an Airflow task instance's tries launch it: the identity (its clear
generation, not its try), re-attach, reuse of a success, resume, the claim that lets two launches start one
supervisor; stop by a request in the state store from another process; a supervisor lost by its heartbeat, the
same on every host. Real supervisors and task processes (tests/jobs/portjob.py), the session's Ignite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from types import SimpleNamespace

import pytest

from ignite_tf.cluster.api import make_launcher, start_cluster
from ignite_tf.operators.links import cluster_id_of, first_try_of
from ignite_tf.state import LOST_AFTER_S, ClusterState, LocalStateStore, Status
from tests.support.clusters import JOBS, PORTJOB, assert_nothing_left, cluster_processes
from tests.support.polling import wait_for

SUPERVISOR = "ignite_tf.cluster.supervision.processes"


def ti(try_number: int, max_tries: int | None, retries: int = 1, **key):
    """Airflow's runtime TaskInstance as far as the identity reads it (its own fields, its task's retries)."""
    fields = {"dag_id": "d", "run_id": "manual__1", "task_id": "train", "map_index": -1, **key}
    return SimpleNamespace(try_number=try_number, max_tries=max_tries, task=SimpleNamespace(retries=retries), **fields)


def test_identity_is_the_task_instance_and_its_clear_generation_not_the_try():
    # Created with retries=1: max_tries = 1. Tries 1 and 2 are one generation.
    assert first_try_of(ti(1, 1)) == first_try_of(ti(2, 1)) == 1
    assert cluster_id_of(ti(1, 1)) == cluster_id_of(ti(2, 1))
    # Cleared after try 2: Airflow sets max_tries = try_number + retries = 3; tries 3 and 4 are the next one.
    assert first_try_of(ti(3, 3)) == first_try_of(ti(4, 3)) == 3
    assert cluster_id_of(ti(3, 3)) == cluster_id_of(ti(4, 3)) != cluster_id_of(ti(2, 1))
    # Another run, task or map index: another cluster.
    assert cluster_id_of(ti(1, 1, run_id="manual__2")) != cluster_id_of(ti(1, 1))
    assert cluster_id_of(ti(1, 1, map_index=0)) != cluster_id_of(ti(1, 1, map_index=1))
    # No retries: every try is a generation of its own (Airflow clears with max_tries = try_number).
    assert first_try_of(ti(1, 0, retries=0)) == 1 and first_try_of(ti(2, 1, retries=0)) == 2
    # retries raised since the clear, or a stand-in without max_tries: within the tries made, never older.
    assert first_try_of(ti(2, 1, retries=5)) == 1 and first_try_of(ti(2, 9, retries=1)) == 2
    assert first_try_of(SimpleNamespace(try_number=4)) == 4


def test_the_operator_and_its_links_compute_the_same_id(tmp_path):
    from airflow.sdk import DAG

    from ignite_tf.operators.links import ClusterPageLink
    from ignite_tf.operators.tensorflow import TFClusterOperator

    with DAG("d", schedule=None):
        op = TFClusterOperator(task_id="train", cache="c", entry_point="m:f", retries=2)
    context = {"dag": SimpleNamespace(dag_id="d"), "run_id": "manual__1", "ti": ti(2, 2, retries=2)}
    key = ti(2, 2, retries=2)
    key.task = op
    assert op.cluster_id_for(context) == cluster_id_of(key)
    assert cluster_id_of(key) in ClusterPageLink().get_link(op, ti_key=key)
    with pytest.warns(DeprecationWarning, match="try_number"):
        assert op.cluster_id_for(context, try_number=7) == cluster_id_of(key)


def test_lost_is_judged_by_the_heartbeat_alone_on_any_host(tmp_path):
    launcher = make_launcher(None, store=LocalStateStore(tmp_path / "state"))
    # A pid that does not exist here, on another host: its fresh heartbeat says it runs.
    state = ClusterState("elsewhere", "c", "sync", str(tmp_path), supervisor_pid=2 ** 22 + 17,
                         supervisor_host="another-host", status=Status.RUNNING)
    launcher.store.put(state)
    assert launcher.is_alive(launcher.status("elsewhere"))
    # Our own pid, on this host: a heartbeat older than the limit says it is lost all the same.
    state.supervisor_pid, state.supervisor_host = os.getpid(), os.uname().nodename
    state.heartbeat = time.time() - LOST_AFTER_S - 1
    launcher.store.put(state)
    found, running = launcher.settled("elsewhere")
    assert not running and found.lost and not launcher.is_alive(found)
    # A supervisor pod records the longer allowance of its replacement: that late, it is not lost yet.
    from ignite_tf.cluster.k8s.supervisor import REPLACED_S

    state.lost_after_s = LOST_AFTER_S + REPLACED_S
    state.heartbeat = time.time() - LOST_AFTER_S - REPLACED_S + 5
    launcher.store.put(state)
    assert launcher.settled("elsewhere")[1] and not launcher.status("elsewhere").lost
    state.heartbeat = time.time() - LOST_AFTER_S - REPLACED_S - 1
    launcher.store.put(state)
    assert not launcher.settled("elsewhere")[1] and launcher.status("elsewhere").lost


def run(launcher, cache, conn, seconds: float, cluster_id: str, **kwargs):
    return start_cluster(cache, {"command": [*PORTJOB, str(seconds)], "job_dir": str(JOBS)}, conn=conn,
                         launcher=launcher, cluster_id=cluster_id, workers=1, **kwargs)


def supervisors(run_dir) -> list:
    return [p for p in cluster_processes("-", run_dir) if SUPERVISOR in " ".join(p.cmdline())]


def test_a_succeeded_cluster_is_reused_and_a_stopped_one_resumes(ignite_conn, data_cache, run_root, tmp_path):
    launcher = make_launcher(ignite_conn, store=LocalStateStore(tmp_path / "state"))
    first = run(launcher, data_cache, ignite_conn, 0.5, "reuse-me")
    done = launcher.wait("reuse-me", timeout=60)
    assert done.status is Status.SUCCEEDED
    again = run(launcher, data_cache, ignite_conn, 0.5, "reuse-me")
    assert again.supervisor_pid == first.supervisor_pid and again.status is Status.SUCCEEDED
    assert launcher.output("reuse-me")[0].count("worker-0 done") == 1, "a succeeded cluster trained again"

    running = run(launcher, data_cache, ignite_conn, 60, "resume-me")
    wait_for(lambda: launcher.status("resume-me").status is Status.RUNNING, what="cluster running")
    stopped = launcher.stop("resume-me")
    assert stopped.status is Status.STOPPED
    resumed = run(launcher, data_cache, ignite_conn, 60, "resume-me")
    assert resumed.supervisor_pid != running.supervisor_pid
    assert resumed.resumes == 1 and resumed.run_dir == running.run_dir
    # The earlier request to stop is not this supervisor's: it runs, its tasks in an attempt above the last.
    wait_for(lambda: launcher.status("resume-me").status is Status.RUNNING, what="resumed cluster running")
    wait_for(lambda: "worker-0 attempt 1 up" in launcher.output("resume-me")[0], what="attempt 1 of worker-0")
    assert "resumed (resume 1) from its checkpoints" in launcher.output("resume-me")[0]
    launcher.stop("resume-me")
    assert_nothing_left("resume-me", running.run_dir)


def test_two_launches_at_once_start_one_supervisor(ignite_conn, data_cache, run_root, tmp_path):
    launcher = make_launcher(ignite_conn, store=LocalStateStore(tmp_path / "state"))
    states: list = []
    go = threading.Barrier(3)

    def launch():
        go.wait()
        states.append(run(launcher, data_cache, ignite_conn, 60, "raced"))

    threads = [threading.Thread(target=launch) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(states) == 3 and len({s.supervisor_pid for s in states}) == 1, states
    wait_for(lambda: launcher.status("raced").status is Status.RUNNING, what="cluster running")
    assert len(supervisors(states[0].run_dir)) == 1
    launcher.stop("raced")
    assert_nothing_left("raced", states[0].run_dir)


def test_a_launch_that_fails_after_taking_the_claim_gives_it_back(ignite_conn, data_cache, run_root, tmp_path):
    """The retry of a launch that failed (here: its table is missing, found once the claim was taken) starts at
    once: the failed launch's claim does not hold it until the claim lapses (``claim_stale_s``)."""
    from ignite_tf.errors import CacheNotFoundError

    launcher = make_launcher(ignite_conn, store=LocalStateStore(tmp_path / "state"))
    launcher.claim_wait_s = 2  # a claim still held would fail the retry within this, not hold it for minutes
    with pytest.raises(CacheNotFoundError):
        run(launcher, "no_such_table", ignite_conn, 60, "failed-first")
    state = run(launcher, data_cache, ignite_conn, 60, "failed-first")
    wait_for(lambda: launcher.status("failed-first").status is Status.RUNNING, what="the retry's cluster running")
    launcher.stop("failed-first")
    assert_nothing_left("failed-first", state.run_dir)


def test_stop_from_another_process_is_a_request_not_a_signal(ignite_conn, data_cache, run_root, tmp_path):
    """``ignite-tf stop`` in a process of its own, whose os.kill and os.killpg fail the command if called: the
    supervisor reads the request from the state store and stops its tasks."""
    launcher = make_launcher(ignite_conn)  # the Ignite store, as the CLI's
    cid = f"stop-by-request-{uuid.uuid4().hex[:6]}"
    state = run(launcher, data_cache, ignite_conn, 60, cid)
    wait_for(lambda: launcher.status(cid).status is Status.RUNNING, what="cluster running")
    no_signals = ("import os, sys\n"
                  "def refuse(*a): raise SystemExit(f'signalled {a}')\n"
                  "os.kill = os.killpg = refuse\n"
                  "from ignite_tf.cli import main\n"
                  f"sys.exit(main(['stop', {cid!r}]))\n")
    env = {**os.environ, **ignite_conn.to_env()}
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", no_signals], env=env, capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"{cid} stopped"
    final = launcher.status(cid)
    assert final.status is Status.STOPPED and final.reason == "stopped on request"
    print(f"stop from another process took {took:.2f}s")
    assert_nothing_left(cid, state.run_dir)


def test_a_killed_supervisor_is_found_lost_by_ps_then_resumed(ignite_conn, data_cache, run_root):
    launcher = make_launcher(ignite_conn)  # the Ignite store, as the CLI's
    cid = f"lost-one-{uuid.uuid4().hex[:6]}"
    state = run(launcher, data_cache, ignite_conn, 120, cid)
    wait_for(lambda: launcher.status(cid).status is Status.RUNNING, what="cluster running")
    os.kill(state.supervisor_pid, signal.SIGKILL)
    assert_nothing_left(cid, state.run_dir, timeout=10)  # its tasks die with it
    wait_for(lambda: launcher.status(cid).lost, timeout=LOST_AFTER_S + 10, what="heartbeat to go stale")
    env = {**os.environ, **ignite_conn.to_env()}
    ps = subprocess.run([sys.executable, "-m", "ignite_tf.cli", "ps"], env=env, capture_output=True, text=True,
                        timeout=60)
    row = next(line.split() for line in ps.stdout.splitlines() if line.startswith(cid))
    assert row[4] == "lost" and row[-1] == "ago", ps.stdout  # listed without -a, with its heartbeat's age
    resumed = run(launcher, data_cache, ignite_conn, 120, cid)
    assert resumed.resumes == 1 and resumed.attempt == 1 and resumed.run_dir == state.run_dir
    wait_for(lambda: "worker-0 attempt 1 up" in launcher.output(cid)[0], what="attempt 1 of worker-0")
    assert "it had stopped: supervisor lost" in launcher.output(cid)[0]
    launcher.stop(cid)
    assert_nothing_left(cid, state.run_dir)


@pytest.fixture(scope="module")
def tabular(ignite_conn):
    from ignite_tf_dev import demo_data

    from ignite_tf.etl import load

    load(ignite_conn, "one_cluster_tabular", demo_data.tabular(2000, seed=1), key="id")
    return "one_cluster_tabular"


def test_a_stopped_training_resumes_from_its_checkpoints_not_from_epoch_0(ignite_conn, tabular, run_root, tmp_path):
    """Real TensorFlow: the cluster is stopped after two epochs (as on_kill or a timeout stops it), then launched
    again under its id (the retry): the new supervisor's tasks restore the run's backup and train the epochs
    left from the step where the stop saved them: every epoch is reported once."""
    launcher = make_launcher(ignite_conn, store=LocalStateStore(tmp_path / "state"))
    job = {"entry_point": "ignite_tf.models:tabular_classifier",
           "args": ["--epochs", "5", "--batch-size", "32", "--label-column", "label", "--learning-rate", "0.02"]}

    def launch():
        return start_cluster(tabular, job, conn=ignite_conn, launcher=launcher, cluster_id="resumed-training",
                             mode="sync", workers=2)

    first = launch()
    wait_for(lambda: len(launcher.store.epochs("resumed-training")) >= 2, timeout=400, what="2 epochs")
    assert launcher.stop("resumed-training").status is Status.STOPPED
    before = [e["epoch"] for e in launcher.store.epochs("resumed-training")]
    resumed = launch()
    assert resumed.resumes == 1 and resumed.run_dir == first.run_dir
    final = launcher.wait("resumed-training", timeout=600)
    assert final.status is Status.SUCCEEDED, launcher.tail("resumed-training", 40)
    reported = [e["epoch"] for e in final.epochs]
    assert sorted(set(reported)) == [1, 2, 3, 4, 5], reported
    assert reported[:len(before)] == before and all(e > max(before) for e in reported[len(before):]), reported
    assert "resuming at epoch" in launcher.output("resumed-training")[0]
    assert_nothing_left("resumed-training", final.run_dir)


def test_a_resume_finds_the_run_root_of_its_run_location():
    from ignite_tf.cluster.api import run_location_root
    from ignite_tf.errors import ConfigError

    assert run_location_root("s3://bucket/runs/c-1", "c-1") == "s3://bucket/runs"
    assert run_location_root("/srv/runs/c-1/", "c-1") == "/srv/runs"
    with pytest.raises(ConfigError, match="is not <run root>/c-2"):
        run_location_root("/srv/runs/c-1", "c-2")
