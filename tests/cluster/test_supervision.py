"""Failing and hung tasks end their cluster in bounded time; only retryable failures are restarted
(issue 10, items 1 and 2). Real supervisor, real Ignite, real TensorFlow for the mid-epoch cases."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import pytest

from ignite_tf.cluster.api import make_launcher, start_cluster
from ignite_tf.state import ExitCode, Status
from tests.support.clusters import JOBS, PORTJOB, assert_nothing_left
from tests.support.polling import wait_for


@pytest.fixture
def launcher(ignite_conn, run_root):
    return make_launcher(ignite_conn)


def start(launcher, conn, cache, command, **kwargs):
    return start_cluster(cache, {"command": command, "job_dir": str(JOBS)}, conn=conn, launcher=launcher,
                         workers=kwargs.pop("workers", 2), **kwargs)


def test_import_failure_fails_fast_with_the_reason(launcher, ignite_conn, data_cache):
    state = start(launcher, ignite_conn, data_cache, [sys.executable, "importfail.py"], max_restarts=3)
    final = launcher.wait(state.cluster_id, timeout=120)
    assert final.status is Status.FAILED and final.exit_code == ExitCode.USER_CODE_FAILED
    assert final.restarts == 0 and all(t.restarts == 0 for t in final.tasks)
    assert "exited with status 1" in final.reason and "not retryable" in final.reason
    assert "restart_policy 'exit-code'" in final.reason
    last = final.failures[-1]
    assert last["exit_code"] == 1 and last["retryable"] is False and last["action"].startswith("not restarted")
    assert "ModuleNotFoundError" in launcher.output(state.cluster_id)[0]
    assert_nothing_left(state.cluster_id, final.run_dir)


def test_import_failure_restarted_under_on_failure(launcher, ignite_conn, data_cache):
    state = start(launcher, ignite_conn, data_cache, [sys.executable, "importfail.py"], max_restarts=1,
                  restart_policy="on-failure", workers=1)
    final = launcher.wait(state.cluster_id, timeout=120)
    assert final.exit_code == ExitCode.RESTARTS_EXHAUSTED and final.restarts == 1
    assert "restarts exhausted (1/1)" in final.reason
    assert [f["action"] for f in final.failures][0] == "restarted the cluster"
    assert_nothing_left(state.cluster_id, final.run_dir)


def test_sigkilled_task_restarted_under_default_policy(launcher, ignite_conn, data_cache):
    state = start(launcher, ignite_conn, data_cache, [*PORTJOB, "6"], max_restarts=2)
    victim = wait_for(lambda: next((t for t in launcher.status(state.cluster_id).tasks
                                    if t.name == "worker-1" and t.state == "running"), None), what="worker-1 up")
    os.kill(victim.pid, signal.SIGKILL)
    final = launcher.wait(state.cluster_id, timeout=120)
    assert final.status is Status.SUCCEEDED, final.reason
    assert final.restarts == 1
    assert final.failures[0]["signal"] == "SIGKILL" and final.failures[0]["retryable"] is True
    assert "worker-1" in final.failures[0]["task"]
    assert_nothing_left(state.cluster_id, final.run_dir)


def test_never_policy_does_not_restart_a_kill(launcher, ignite_conn, data_cache):
    state = start(launcher, ignite_conn, data_cache, [*PORTJOB, "20"], max_restarts=2, restart_policy="never",
                  workers=1)
    victim = wait_for(lambda: next((t for t in launcher.status(state.cluster_id).tasks
                                    if t.state == "running"), None), what="worker-0 up")
    os.kill(victim.pid, signal.SIGKILL)
    final = launcher.wait(state.cluster_id, timeout=60)
    assert final.exit_code == ExitCode.USER_CODE_FAILED and final.restarts == 0
    assert "killed by SIGKILL" in final.reason and "'never'" in final.reason
    assert_nothing_left(state.cluster_id, final.run_dir)


def test_silent_task_is_stopped_by_the_watchdog(launcher, ignite_conn, data_cache):
    state = start(launcher, ignite_conn, data_cache, [sys.executable, "silentjob.py"], max_restarts=0,
                  progress_timeout_s=3, workers=1)
    final = launcher.wait(state.cluster_id, timeout=120)
    assert final.exit_code == ExitCode.NO_PROGRESS, final.reason
    assert "worker-0" in final.reason and "made no progress" in final.reason
    assert "no progress from worker-0 (last: step 9" in launcher.output(state.cluster_id)[0]
    assert_nothing_left(state.cluster_id, final.run_dir)


@pytest.mark.parametrize("hang", [False, True], ids=["raises", "hangs"])
def test_tf_worker_failing_mid_epoch_ends_the_job(launcher, ignite_conn, data_cache, hang):
    """A 2-worker sync job whose worker 1 raises (or hangs) mid-epoch ends with the documented code."""
    command = [sys.executable, "raisejob.py", *(["--hang"] if hang else [])]
    # The watchdog counts from a task's first block read, so 15 s is far above one small step even on a busy
    # machine; a hung task ignores SIGTERM, so the grace period before SIGKILL is only waited out: 1 s.
    state = start(launcher, ignite_conn, data_cache, command, max_restarts=1, progress_timeout_s=15,
                  startup_deadline_s=300, grace_period_s=1)
    final = launcher.wait(state.cluster_id, timeout=540)
    assert final.status is Status.FAILED, launcher.tail(state.cluster_id, 40)
    out = launcher.output(state.cluster_id)[0]  # the chief's (worker-0's) output and the supervisor's events
    assert "worker 1 failing on purpose" in (Path(final.run_dir) / "logs" / "worker-1.log").read_text()
    if hang:
        # Retryable: restarted once, hung again, then the restarts were exhausted. Its peer waits for it in
        # a collective, so the silent tasks named include worker-0 and may include worker-1.
        assert final.exit_code == ExitCode.NO_PROGRESS and final.restarts == 1
        assert "no progress from" in out and "made no progress" in final.reason
    else:
        assert final.exit_code == ExitCode.USER_CODE_FAILED and final.restarts == 0
        assert "worker-1" in final.reason and "not retryable" in final.reason
    assert_nothing_left(state.cluster_id, final.run_dir)


def test_yaml_settings_reach_the_operator(tmp_path):
    """training.restart_policy / progress_timeout_s in a spec become the train task's arguments; bad ones
    are refused naming the field."""
    import yaml

    from ignite_tf.pipeline.factory import render
    from ignite_tf.pipeline.spec import SpecError, parse_spec

    spec_dir = Path(__file__).parents[2] / "dags" / "specs"
    doc = yaml.safe_load((spec_dir / "tabular_sync.yaml").read_text())
    doc["training"].update(restart_policy="on-failure", progress_timeout_s=90)
    doc.pop("inference", None)
    path = spec_dir / f".test-{tmp_path.name}.yaml"  # relative paths in the spec resolve next to it
    try:
        path.write_text(yaml.safe_dump(doc))
        train = next(t for t in render(parse_spec(path))[0].tasks if t.task_id == "train")
        assert train.kwargs["restart_policy"] == "on-failure" and train.kwargs["progress_timeout_s"] == 90
        doc["training"]["restart_policy"] = "sometimes"
        path.write_text(yaml.safe_dump(doc))
        with pytest.raises(SpecError, match="restart_policy"):
            parse_spec(path)
    finally:
        path.unlink(missing_ok=True)
