"""A stopped task stops, and no restart loses work: SIGTERM, the backup at the agreed step, the kept backup and
the attempt fence, with REAL processes (plain Python, TensorFlow tasks, the local launcher and its supervisor).

Each test prints the measured SIGTERM-to-exit times.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from ignite_tf.cluster.api import make_launcher, start_cluster
from ignite_tf.cluster.spec import build_spec
from ignite_tf.contract import STOPPED_EXIT_CODE, TASKBOOT_DIR, read_progress
from ignite_tf.plan.partitions import PartitionMap
from ignite_tf.plan.shards import ShardPlan
from ignite_tf.runstore import RunFolder
from ignite_tf.state import LocalStateStore, Status
from tests.runtime.test_runtime import LocalTasks, epochs_of, runtime_command, tabular  # noqa: F401 - fixture
from tests.runtime.test_training import cache, job  # noqa: F401 - fixture
from tests.support.clusters import assert_nothing_left
from tests.support.polling import wait_for

BOUND_S = 5.0  # generous: the contract's deadline is 2 s; the measured times are printed
REPO = Path(__file__).resolve().parents[2]


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def term_and_time(pid: int, timeout: float = 30.0) -> float:
    """SIGTERM ``pid``; seconds until it is gone."""
    started = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: gone(pid), timeout=timeout, poll=0.01, what=f"pid {pid} to end after SIGTERM")
    return time.monotonic() - started


# -- a user's script -----------------------------------------------------------------------------------------
def user_script(tmp_path: Path, body: str) -> list[str]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(body))
    return [sys.executable, str(script)]


def start_user(argv: list[str], tmp_path: Path, *, pid1: bool = False, env: dict | None = None):
    """``argv`` as a task gets it (taskboot first on PYTHONPATH); with ``pid1``, as the first process of a new
    PID namespace, as a pod's command is."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([TASKBOOT_DIR, str(REPO / "provider")]), **(env or {})}
    prefix = ["unshare", "--pid", "--fork", "--kill-child"] if pid1 else []
    out = open(tmp_path / "out.log", "w")
    proc = subprocess.Popen(prefix + argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    wait_for(lambda: "ready" in (tmp_path / "out.log").read_text(), timeout=30, what="the script to start")
    if not pid1:
        return proc, proc.pid
    return proc, psutil.Process(proc.pid).children()[0].pid  # pid 1 in its namespace


SLEEPER = """
    import time
    print("ready", flush=True)
    time.sleep(120)
    print("not stopped", flush=True)
"""


def can_unshare_pid() -> bool:
    if not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True).returncode == 0


@pytest.mark.parametrize("pid1", [False, True], ids=["process", "pid1"])
def test_a_user_script_stops_on_sigterm_promptly(tmp_path, pid1):
    if pid1 and not can_unshare_pid():
        pytest.skip("no PID namespace here (unshare --pid needs privileges); the process case still runs")
    proc, pid = start_user(user_script(tmp_path, SLEEPER), tmp_path, pid1=pid1)
    seconds = term_and_time(pid)
    print(f"user script{' as pid 1' if pid1 else ''}: SIGTERM to exit {seconds:.3f}s")
    proc.wait(timeout=10)
    assert seconds < BOUND_S
    out = (tmp_path / "out.log").read_text()
    assert "stop: SIGTERM" in out and "not stopped" not in out
    if not pid1:
        assert proc.returncode == STOPPED_EXIT_CODE


def test_a_checkpoint_that_does_not_finish_is_cut_at_the_deadline(tmp_path):
    """A task whose stop work never ends (a main thread stuck, say, in a collective) still ends: the watcher
    thread ends it at the deadline."""
    argv = user_script(tmp_path, """
        import time
        from ignite_tf import contract
        contract.handle_stop(on_stop=lambda: print("checkpoint started", flush=True))
        print("ready", flush=True)
        while True:
            time.sleep(0.1)
    """)
    proc, pid = start_user(argv, tmp_path, env={"IGNITE_TF_STOP_DEADLINE_S": "0.7"})
    seconds = term_and_time(pid)
    print(f"stop work that never ends: SIGTERM to exit {seconds:.3f}s (deadline 0.7s)")
    assert proc.wait(timeout=5) == STOPPED_EXIT_CODE
    assert 0.6 < seconds < BOUND_S
    out = (tmp_path / "out.log").read_text()
    assert "checkpoint started" in out and "no checkpoint within 0.7s" in out


@pytest.mark.parametrize("shell", [False, True], ids=["python", "shell"])
def test_a_pod_command_as_pid1_stops_on_sigterm_promptly(tmp_path, shell):
    """The pod's first process (``ignite_tf.cluster.k8s.entry``) as pid 1 of a PID namespace: a Python
    command becomes pid 1 and handles SIGTERM; any other command stays its child and gets it passed on."""
    if not can_unshare_pid():
        pytest.skip("no PID namespace here (unshare --pid needs privileges)")
    command = ["sh", "-c", "echo ready; sleep 120; echo not stopped"] if shell else user_script(tmp_path, SLEEPER)
    argv = [sys.executable, "-m", "ignite_tf.cluster.k8s.entry", str(tmp_path / "task"), "--", *command]
    proc, pid = start_user(argv, tmp_path, pid1=True)
    seconds = term_and_time(pid)
    print(f"pod command ({'shell' if shell else 'python'}) as pid 1: SIGTERM to exit {seconds:.3f}s")
    assert proc.wait(timeout=10) == STOPPED_EXIT_CODE  # unshare passes pid 1's status on
    assert seconds < BOUND_S
    assert "not stopped" not in (tmp_path / "out.log").read_text()


# -- runtime tasks -------------------------------------------------------------------------------------------
@pytest.fixture
def launcher(ignite_conn, run_root, tmp_path):
    return make_launcher(ignite_conn, store=LocalStateStore(tmp_path / "state"))


def _step_of_epoch(progress: Path) -> int:
    """The epoch a task's last progress report names a step of (0: none yet, or not a step)."""
    found = re.fullmatch(r"epoch (\d+) step \d+", (read_progress(progress) or {}).get("what", ""))
    return int(found.group(1)) if found else 0


def test_sync_worker_sigterm_saves_stops_and_the_restart_resumes(cache, ignite_conn, launcher):  # noqa: F811
    epochs = 6
    state = start_cluster(cache, job(epochs, 16), conn=ignite_conn, launcher=launcher, mode="sync", workers=2,
                          max_restarts=2)
    cid = state.cluster_id
    wait_for(lambda: len(launcher.store.epochs(cid)) >= 2, timeout=300, what="2 epochs")
    tasks = {t.name: t.pid for t in launcher.status(cid).tasks}
    # Into the next epoch, so that the backup on SIGTERM is of a step within an epoch: worker-1's progress
    # report names a step of an epoch after the 2 recorded (steps are reported at most once a second).
    progress = RunFolder(state.run_dir).progress("worker-1")
    wait_for(lambda: _step_of_epoch(progress) >= 3, timeout=120, poll=0.05, what="worker-1 at a step of epoch 3",
             seen=lambda: f"worker-1's progress: {read_progress(progress)}")
    started = time.monotonic()
    os.kill(tasks["worker-1"], signal.SIGTERM)
    wait_for(lambda: gone(tasks["worker-1"]), timeout=30, poll=0.01, what="worker-1 to end")
    victim_s = time.monotonic() - started
    wait_for(lambda: gone(tasks["worker-0"]), timeout=30, poll=0.01, what="worker-0 to end")
    peer_s = time.monotonic() - started
    print(f"sync worker-1 SIGTERM to exit {victim_s:.3f}s; its peer (the chief) {peer_s:.3f}s")
    final = launcher.wait(cid, timeout=600)
    out = launcher.output(cid)[0]

    assert final.status is Status.SUCCEEDED, launcher.tail(cid, 40)
    assert victim_s < BOUND_S and peer_s < BOUND_S
    assert final.restarts == 1, out
    assert "backup written at the agreed step" in out
    reported = [e["epoch"] for e in final.epochs]
    assert reported == list(range(1, epochs + 1)), reported  # each epoch once: nothing trained twice
    assert final.summary()["epochs"] == epochs  # what the registry records as epochs_run
    assert "resuming at epoch" in out
    assert_nothing_left(cid, final.run_dir)


def test_stop_ends_the_tasks_promptly(cache, ignite_conn, launcher):  # noqa: F811
    state = start_cluster(cache, job(100, 16), conn=ignite_conn, launcher=launcher, mode="sync", workers=2)
    cid = state.cluster_id
    wait_for(lambda: len(launcher.store.epochs(cid)) >= 1, timeout=300, what="the first epoch")
    pids = [t.pid for t in launcher.status(cid).tasks]
    started = time.monotonic()
    stopped = launcher.stop(cid)
    seconds = time.monotonic() - started
    print(f"ignite-tf stop: request to cluster stopped {seconds:.3f}s")
    assert stopped.status is Status.STOPPED
    assert all(gone(p) for p in pids)
    assert seconds < 2 * BOUND_S
    assert_nothing_left(cid, stopped.run_dir)


def test_an_older_attempt_never_makes_a_restart_train_again(tabular, ignite_conn, tmp_path):  # noqa: F811
    """Attempt 0 trains; attempt 1 starts beside it (a restart while the old pod is in its grace period): the
    old one ends at its next epoch without backing it up or reporting it, the new one resumes from the
    newest backup; attempt 2 starts after training finished (the backup is kept): it trains nothing."""
    state, cid, run, epochs = tmp_path / "state", "rt-fence", tmp_path / "run", 8
    plan = tmp_path / "plan.json"  # one worker per attempt: two attempts side by side on 2 cores
    ShardPlan.build(PartitionMap.discover(ignite_conn, tabular.cache), 1, seed=7).save(plan)
    command = runtime_command("ignite_tf.models:tabular_classifier", "--epochs", str(epochs), "--batch-size", "8")

    def attempt_tasks(n: int) -> LocalTasks:  # each attempt its own ports, one run folder
        return LocalTasks(build_spec(cluster_id=cid, cache=tabular.cache, mode="sync", workers=1, run_dir=run,
                                     job={}, shard_plan_path=str(plan)), ignite_conn, state, command)

    with attempt_tasks(0) as old, attempt_tasks(1) as new:
        old.start(attempt=0)
        wait_for(lambda: len(epochs_of(state, cid)) >= 2 or old.procs["worker-0"].poll() is not None,
                 timeout=420, what="2 epochs of attempt 0")
        assert len(epochs_of(state, cid)) < epochs, "attempt 0 ended too soon to test the fence"
        assert old.procs["worker-0"].poll() is None, old.logs()
        new.start(attempt=1)
        assert old.wait("worker-0", 300) == STOPPED_EXIT_CODE, old.logs()
        old_log = old.log("worker-0")
        assert new.wait("worker-0", 420) == 0, new.logs()
    assert "attempt 0 superseded by attempt 1" in old_log
    reported = epochs_of(state, cid)
    assert [m["epoch"] for m in reported] == list(range(1, epochs + 1)), reported
    assert {m["attempt"] for m in reported} == {0, 1}

    with attempt_tasks(2) as late:
        late.start(attempt=2)
        assert late.wait("worker-0", 300) == 0, late.logs()
        late_log = late.log("worker-0")
    assert "training already complete" in late_log
    assert len(epochs_of(state, cid)) == epochs  # nothing trained, nothing reported again
    assert (run / "checkpoints" / "model" / "saved_model.pb").exists()


def test_async_tasks_stop_on_sigterm_promptly(tabular, ignite_conn, tmp_path):  # noqa: F811
    state, cid = tmp_path / "state", "rt-async-stop"
    spec = build_spec(cluster_id=cid, cache=tabular.cache, mode="async", workers=2, ps=1, run_dir=tmp_path / "run",
                      job={}, shard_plan_path=tabular.plan_path)
    command = runtime_command("ignite_tf.models:tabular_classifier", "--epochs", "8", "--batch-size", "32")
    times = {}
    with LocalTasks(spec, ignite_conn, state, command) as tasks:
        tasks.start()
        wait_for(lambda: len(epochs_of(state, cid)) >= 1, timeout=480, what="the first epoch", seen=tasks.logs)
        # The parameter server last: a chief whose parameter server is gone fails by itself (the coordinator
        # raises UnavailableError at once), a race with the next SIGTERM here that a loaded machine loses.
        for name in ("worker-1", "chief-0", "worker-0", "ps-0"):
            times[name] = term_and_time(tasks.procs[name].pid)
            assert tasks.procs[name].wait(timeout=5) == STOPPED_EXIT_CODE, tasks.logs()
    print("async SIGTERM to exit: " + ", ".join(f"{n} {s:.3f}s" for n, s in times.items()))
    assert all(s < BOUND_S for s in times.values()), times


def test_a_save_on_sigterm_at_an_epochs_last_step_reports_that_epoch(tmp_path, monkeypatch):
    """The reporter's part of the end after the save on SIGTERM (``stopping._end_after_save`` calls it): that
    save at an epoch's last step ends the task before ``on_epoch_end``, and the restart resumes at the next epoch,
    so the epoch is reported then, with the last batch's logs (real TensorFlow tensors, a real file state store);
    at any other step nothing is, and an epoch already reported is not reported twice."""
    from ignite_tf.contract import ENV_CLUSTER_ID, Mode
    from ignite_tf.runtime.report import EpochReporter
    from ignite_tf.runtime.start import import_tf
    from ignite_tf.runtime.task import TaskInfo
    from ignite_tf.state import store_to_env

    tf = import_tf()
    store = LocalStateStore(tmp_path / "state")
    for key, value in {**store_to_env(store), ENV_CLUSTER_ID: "c-stop"}.items():
        monkeypatch.setenv(key, value)
    reporter = EpochReporter(tf, TaskInfo("worker", 0, Mode.SYNC, {"worker": ["a:1", "b:2"]}), epochs=5, steps=4,
                             examples_per_step=64, tb_dir=tmp_path / "tb")
    reporter.on_epoch_begin(2)
    reporter.on_train_batch_end(2, {"loss": tf.constant(0.5)})
    reporter.end_epoch_if_complete()  # the save came at step 3 of 4: the restart trains the rest of epoch 3
    assert store.epochs("c-stop") == []
    reporter.on_train_batch_end(3, {"loss": tf.constant(0.25), "accuracy": tf.constant(0.75)})
    reporter.end_epoch_if_complete()
    reporter.end_epoch_if_complete()
    (record,) = store.epochs("c-stop")
    assert (record["epoch"], record["loss"], record["accuracy"]) == (3, 0.25, 0.75), record
    reporter.on_epoch_begin(3)
    reporter.on_train_batch_end(3, {"loss": tf.constant(0.2)})
    reporter.on_epoch_end(3, {"loss": 0.2})  # ended normally, then a save on SIGTERM at that same step
    reporter.end_epoch_if_complete()
    assert [r["epoch"] for r in store.epochs("c-stop")] == [3, 4]
