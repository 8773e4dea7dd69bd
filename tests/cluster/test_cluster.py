"""Launcher and supervisor mechanics with light user jobs (tests/jobs/portjob.py listens on its TF_CONFIG
port like a TF server and exits as told), against the real session Ignite cluster. Real TensorFlow
training through the same launcher is in tests/test_training.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from ignite_tf.cluster.api import make_launcher, start_cluster
from ignite_tf.cluster.commands import task_command
from ignite_tf.cluster.spec import ClusterSpec, Role, build_spec, cluster_id_from
from ignite_tf.errors import ConfigError
from ignite_tf.state import LOST_AFTER_S, ExitCode, LocalStateStore, Status
from tests.support.clusters import JOBS, PORTJOB, assert_nothing_left, cluster_processes
from tests.support.polling import wait_for


def run(cache, conn, job_args, **kwargs):
    launcher = make_launcher(conn)
    state = start_cluster(cache, {"command": [*PORTJOB, *job_args], "job_dir": str(JOBS)}, conn=conn,
                          launcher=launcher, **kwargs)
    return launcher, state


def test_spec_tf_config_and_env():
    spec = build_spec(cluster_id="c1", cache="x", mode="async", workers=2, ps=1, run_dir="/r",
                      job={"entry_point": "m:f"})
    roles = [(t.role, t.index) for t in spec.tasks]
    assert roles == [(Role.CHIEF, 0), (Role.WORKER, 0), (Role.WORKER, 1), (Role.PS, 0)]
    assert len({t.port for t in spec.tasks}) == 4
    cfg = spec.tf_config(spec.tasks[2])
    assert cfg["task"] == {"type": "worker", "index": 1}
    assert set(cfg["cluster"]) == {"chief", "worker", "ps"} and len(cfg["cluster"]["worker"]) == 2
    env = spec.task_env(spec.tasks[0])
    assert env["IGNITE_TF_MODE"] == "async" and env["IGNITE_TF_CHECKPOINT_DIR"] == "/r/checkpoints"
    assert ClusterSpec.from_dict(spec.to_dict()).to_dict() == spec.to_dict()
    sync = build_spec(cluster_id="c2", cache="x", mode="sync", workers=3, run_dir="/r", job={})
    assert [t.role for t in sync.tasks] == [Role.WORKER] * 3 and sync.chief.name == "worker-0"
    with pytest.raises(ConfigError, match="mode must be one of"):
        build_spec(cluster_id="c3", cache="x", mode="fast", workers=1, run_dir="/r", job={})
    with pytest.raises(ConfigError, match="cluster id"):
        build_spec(cluster_id="Bad Id", cache="x", mode="sync", workers=1, run_dir="/r", job={})
    a = cluster_id_from("dag", "manual__2026-01-01T00:00:00+00:00", "train", 1)
    assert a == cluster_id_from("dag", "manual__2026-01-01T00:00:00+00:00", "train", 1)
    assert a != cluster_id_from("dag", "manual__2026-01-01T00:00:00+00:00", "train", 2)


def test_async_servers_get_the_runtime_flags_of_the_chief_command():
    """Async: the chief runs the job; workers and ps serve. When the job's command is the runtime itself, its
    flags (--epochs & co) reach the servers, whose workers write the feed that chief reads; a user's own chief
    script gets plain TF servers (no flags, no feed); an entry point's args go to every task."""
    def commands(job):
        spec = build_spec(cluster_id="c1", cache="x", mode="async", workers=1, ps=1, run_dir="/r", job=job)
        return {t.name: task_command(spec, t)[1:] for t in spec.tasks}

    flags = ["--entry-point", "m:f", "--epochs", "3", "--batch-size", "8"]
    runtime_job = commands({"command": ["python", "-m", "ignite_tf.runtime", *flags], "job_dir": "."})
    assert runtime_job["chief-0"] == ["-m", "ignite_tf.runtime", *flags]
    assert runtime_job["worker-0"] == runtime_job["ps-0"] == ["-m", "ignite_tf.runtime", "--serve", *flags]
    script_job = commands({"command": ["python", "train.py", "--epochs", "3"], "job_dir": "."})
    assert script_job["chief-0"] == ["train.py", "--epochs", "3"]
    assert script_job["worker-0"] == script_job["ps-0"] == ["-m", "ignite_tf.runtime", "--serve"]
    entry = commands({"entry_point": "m:f", "args": ["--epochs", "2"]})
    assert entry["chief-0"] == ["-m", "ignite_tf.runtime", "--entry-point", "m:f", "--epochs", "2"]
    assert entry["worker-0"] == ["-m", "ignite_tf.runtime", "--serve", "--epochs", "2"]


def test_sync_failure_restarts_whole_cluster(ignite_conn, data_cache, run_root):
    launcher, state = run(data_cache, ignite_conn, ["2", "--fail-task", "worker-1", "--fail-attempt", "0"],
                          max_restarts=2, restart_policy="on-failure")
    final = launcher.wait(state.cluster_id, timeout=60)
    assert final.status is Status.SUCCEEDED and final.exit_code == ExitCode.SUCCEEDED
    assert final.restarts == 1
    assert all(t.restarts == 1 for t in final.tasks), "sync mode restarts every task together"
    out = launcher.output(state.cluster_id)[0]
    assert "worker-1 (pid" in out and "restarting the whole cluster" in out
    assert "worker-0 attempt 1 up" in out
    assert_nothing_left(state.cluster_id, final.run_dir)


def test_restarts_exhausted_and_user_failure_exit_codes(ignite_conn, data_cache, run_root):
    launcher, state = run(data_cache, ignite_conn, ["1", "--fail-task", "worker-0"], max_restarts=1,
                          restart_policy="on-failure")
    final = launcher.wait(state.cluster_id, timeout=60)
    assert final.status is Status.FAILED and final.exit_code == ExitCode.RESTARTS_EXHAUSTED
    assert "restarts exhausted (1/1)" in final.reason
    launcher, state = run(data_cache, ignite_conn, ["1", "--fail-task", "worker-0"], max_restarts=0)
    final = launcher.wait(state.cluster_id, timeout=60)
    assert final.exit_code == ExitCode.USER_CODE_FAILED and "exited with status 3" in final.reason
    assert_nothing_left(state.cluster_id, final.run_dir)


def test_async_worker_restarted_alone_and_ps_stopped_after_chief(ignite_conn, data_cache, run_root):
    launcher = make_launcher(ignite_conn)
    # Async: the chief runs the user job; workers and ps run a server (a job's own serve_command here,
    # the port job, so this mechanics test needs no TensorFlow).
    spec = build_spec(cluster_id="async-mech", cache=data_cache, mode="async", workers=2, ps=1,
                      run_dir=run_root / "async-mech", max_restarts=2,
                      job={"command": [*PORTJOB, "4"], "job_dir": str(JOBS), "serve_command": [*PORTJOB, "60"]})
    state = launcher.launch(spec)
    worker = wait_for(lambda: next((t for t in launcher.status(state.cluster_id).tasks
                                    if t.name == "worker-1" and t.state == "running"), None),
                      what="worker-1 running")
    ps_pid = next(t.pid for t in launcher.status(state.cluster_id).tasks if t.role == "ps")
    os.kill(worker.pid, signal.SIGKILL)
    final = launcher.wait(state.cluster_id, timeout=60)
    assert final.status is Status.SUCCEEDED
    tasks = {t.name: t for t in final.tasks}
    assert tasks["worker-1"].restarts == 1 and tasks["worker-0"].restarts == 0 and tasks["chief-0"].restarts == 0
    assert "restarting worker-1 alone" in launcher.output(state.cluster_id)[0]
    assert not psutil.pid_exists(ps_pid) or psutil.Process(ps_pid).status() == psutil.STATUS_ZOMBIE
    assert_nothing_left(state.cluster_id, final.run_dir)


def test_async_server_ending_early_ends_the_cluster_under_never(ignite_conn, data_cache, run_root):
    """Async servers that exit 0 while the chief still trains are failures for the restart policy like any
    other: under ``never`` the cluster ends, nothing is restarted (it used to restart them regardless)."""
    launcher = make_launcher(ignite_conn)
    spec = build_spec(cluster_id="async-early", cache=data_cache, mode="async", workers=1, ps=1,
                      run_dir=run_root / "async-early", max_restarts=2, restart_policy="never",
                      job={"command": [*PORTJOB, "30"], "job_dir": str(JOBS), "serve_command": [*PORTJOB, "1"]})
    state = launcher.launch(spec)
    final = launcher.wait(state.cluster_id, timeout=60)
    assert final.status is Status.FAILED and final.exit_code == ExitCode.USER_CODE_FAILED, final.reason
    assert final.restarts == 0 and all(t.restarts == 0 for t in final.tasks)
    assert "exited with status 0 before the chief finished" in final.reason and "'never'" in final.reason
    assert final.failures[-1]["kind"] == "ended before the chief"
    assert_nothing_left(state.cluster_id, final.run_dir)


def test_startup_deadline_leaves_nothing_running(ignite_conn, data_cache, run_root):
    launcher, state = run(data_cache, ignite_conn, ["30", "--no-listen", "worker-1"], startup_deadline_s=3,
                          max_restarts=2)
    final = launcher.wait(state.cluster_id, timeout=60)
    assert final.exit_code == ExitCode.STARTUP_DEADLINE and final.restarts == 0
    assert "start-up deadline of 3s passed; not up: worker-1" in final.reason
    assert_nothing_left(state.cluster_id, final.run_dir)


def test_supervisor_killed_takes_every_task_with_it(ignite_conn, data_cache, run_root):
    launcher, state = run(data_cache, ignite_conn, ["60"], workers=3)
    wait_for(lambda: launcher.status(state.cluster_id).status is Status.RUNNING, what="cluster running")
    tasks = [t.pid for t in launcher.status(state.cluster_id).tasks]
    assert all(psutil.pid_exists(p) for p in tasks)
    os.kill(state.supervisor_pid, signal.SIGKILL)
    started = time.monotonic()
    assert_nothing_left(state.cluster_id, state.run_dir, timeout=10)
    assert time.monotonic() - started < 10
    wait_for(lambda: not launcher.is_alive(launcher.status(state.cluster_id)), timeout=LOST_AFTER_S + 10,
             what="the supervisor to be found lost by its heartbeat")


def test_cli_detach_ps_attach_stop_from_separate_processes(ignite_conn, data_cache, run_root):
    cli = [sys.executable, "-m", "ignite_tf.cli"]
    cli_env = {**os.environ, **ignite_conn.to_env()}

    def ignite_tf(*args, timeout=60):
        return subprocess.run([*cli, *args], env=cli_env, capture_output=True, text=True, timeout=timeout)

    started = ignite_tf("start", "--detach", "--id", "cli-detached", data_cache, str(JOBS), "python",
                        "portjob.py", "60")
    assert started.returncode == 0, started.stderr
    assert started.stdout.strip() == "cli-detached"
    launcher = make_launcher(ignite_conn)
    wait_for(lambda: launcher.status("cli-detached").status is Status.RUNNING, what="detached cluster running")

    listed = ignite_tf("ps")
    row = next(line for line in listed.stdout.splitlines() if line.startswith("cli-detached"))
    assert data_cache in row and "sync" in row and "running" in row and "2/2" in row
    assert listed.stdout.splitlines()[0].split()[:3] == ["CLUSTER", "ID", "CACHE"]

    attach = subprocess.Popen([*cli, "attach", "--from-start", "cli-detached"], env=cli_env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        stopped = ignite_tf("stop", "cli-detached")
        assert stopped.returncode == 0 and "stopped" in stopped.stdout
        out, _ = attach.communicate(timeout=30)
    finally:
        attach.kill()
    assert "worker-0 attempt 0 up" in out and "stopped on request" in out
    assert attach.returncode == ExitCode.STOPPED
    assert "cli-detached" not in ignite_tf("ps").stdout
    assert "stopped" in next(line for line in ignite_tf("ps", "-a").stdout.splitlines() if "cli-detached" in line)
    assert_nothing_left("cli-detached", launcher.status("cli-detached").run_dir)


def test_cli_errors_are_one_line(ignite_conn, data_cache, run_root, tmp_path):
    cli = [sys.executable, "-m", "ignite_tf.cli"]
    cli_env = {**os.environ, **ignite_conn.to_env()}
    unknown = subprocess.run([*cli, "stop", "no-such-cluster"], env=cli_env, capture_output=True, text=True)
    assert unknown.returncode == 1
    assert unknown.stderr.count("\n") == 1 and "no TensorFlow cluster with id 'no-such-cluster'" in unknown.stderr
    down = {**os.environ, "IGNITE_TF_ADDRESSES": "127.0.0.1:1"}
    unreachable = subprocess.run([*cli, "ps"], env=down, capture_output=True, text=True)
    assert unreachable.returncode == 1 and unreachable.stderr.count("\n") == 1
    assert "no Ignite node reachable at 127.0.0.1:1" in unreachable.stderr
    bad = subprocess.run([*cli, "start", "--workers", "0", "c", "d", "e"], env=cli_env, capture_output=True, text=True)
    assert bad.returncode == 2 and "must be at least 1" in bad.stderr
    missing = subprocess.run([*cli, "start", "nope_cache", str(JOBS), "python", "x.py"], env=cli_env,
                             capture_output=True, text=True)
    assert missing.returncode == 1 and "cache 'nope_cache' not found" in missing.stderr
    for command in ("start", "stop", "attach", "ps", "load"):
        version = subprocess.run([*cli, command, "-V"], capture_output=True, text=True)
        assert version.returncode == 0 and version.stdout.startswith("ignite-tf ")


def test_zip_job_dir(ignite_conn, data_cache, run_root, tmp_path):
    import zipfile

    archive = tmp_path / "job.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(JOBS / "portjob.py", "portjob.py")
    launcher = make_launcher(ignite_conn)
    state = start_cluster(data_cache, {"command": [sys.executable, "portjob.py", "0.5"], "job_dir": str(archive)},
                          conn=ignite_conn, launcher=launcher, workers=1)
    final = launcher.wait(state.cluster_id, timeout=60)
    assert final.status is Status.SUCCEEDED, launcher.tail(state.cluster_id)
    assert "worker-0 done" in launcher.output(state.cluster_id)[0]


def test_local_store_fallback_and_idempotent_launch(ignite_conn, data_cache, run_root, tmp_path):
    store = LocalStateStore(tmp_path / "state")
    launcher = make_launcher(ignite_conn, store=store)
    job = {"command": [*PORTJOB, "20"], "job_dir": str(JOBS)}
    first = start_cluster(data_cache, job, conn=ignite_conn, launcher=launcher, cluster_id="same-id", workers=1)
    second = start_cluster(data_cache, job, conn=ignite_conn, launcher=launcher, cluster_id="same-id", workers=1)
    assert second.supervisor_pid == first.supervisor_pid
    wait_for(lambda: launcher.status("same-id").status is Status.RUNNING, what="cluster running")
    assert len(cluster_processes("same-id", first.run_dir)) == 2  # one supervisor + one task, not two clusters
    assert (tmp_path / "state" / "clusters" / "same-id").is_file()
    launcher.stop("same-id")
    assert_nothing_left("same-id", first.run_dir)
