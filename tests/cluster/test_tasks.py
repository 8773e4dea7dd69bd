"""What a task gets and what a user sees of it: the job's interpreter, an allowlisted environment, `ps` per
task, the CLI's default address. Real supervisors and task processes (tests/jobs/envjob.py dumps what it
sees), real Ignite nodes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest

from ignite_tf.cli import build_parser, connection
from ignite_tf.cluster.api import make_launcher, start_cluster
from ignite_tf.cluster.environment import minimal_env, needed_by_runtime, parse_env
from ignite_tf.cluster.spec import ClusterSpec, build_spec
from ignite_tf.connection import DEFAULT_ADDRESS
from ignite_tf.errors import ConfigError
from ignite_tf.state import LOST_AFTER_S, Status
from tests.support.clusters import JOBS, assert_nothing_left
from tests.support.polling import wait_for

DATA_ROWS = 500  # rows of data_cache
OTHER_SECRET = "postgres://etl:0ther-c0nn-s3cret@db.internal/warehouse"
VENV_BIN = str(Path(sys.executable).parent)
CLI = [sys.executable, "-m", "ignite_tf.cli"]


def seen_by(out: Path, task: str) -> dict:
    return json.loads((out / f"{task}.json").read_text())


def proc_environ(pid: int) -> bytes:
    return Path(f"/proc/{pid}/environ").read_bytes()


def test_env_option_parsing_and_allowlist():
    assert parse_env(["A", "B=1", "C=x=y", "A"]) == ({"B": "1", "C": "x=y"}, ("A",))
    assert parse_env({"B": "1"}) == ({"B": "1"}, ())
    for bad, message in (("1A", "not NAME or NAME=VALUE"), ("TF_CONFIG={}", "set by the launcher"),
                         ("A-B", "not NAME or NAME=VALUE")):
        with pytest.raises(ConfigError, match=message):
            parse_env([bad])
    with pytest.raises(ConfigError, match="a list of NAME"):
        parse_env("A")
    assert all(needed_by_runtime(n) for n in ("PATH", "HOME", "LC_ALL", "PYTHONPATH", "TF_CPP_MIN_LOG_LEVEL",
                                             "CUDA_VISIBLE_DEVICES", "IGNITE_TF_PASSWORD"))
    assert not any(needed_by_runtime(n) for n in ("AIRFLOW_CONN_X", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
                                                 "AWS_SECRET_ACCESS_KEY", "TF_VAR_db_password"))
    env = minimal_env({"PATH": f"/usr/bin:{VENV_BIN}", "AWS_SECRET_ACCESS_KEY": "k", "MINE": "m"}, ["MINE"])
    assert env == {"PATH": f"{VENV_BIN}:/usr/bin", "MINE": "m"}
    spec = build_spec(cluster_id="c1", cache="x", mode="sync", workers=1, run_dir="/r", job={},
                      env=["KEEP", "SET=v"])
    assert spec.env == {"SET": "v"} and spec.pass_env == ["KEEP"]
    assert ClusterSpec.from_dict(spec.to_dict()).pass_env == ["KEEP"]


def test_cli_job_python_is_ignite_tfs_and_gets_no_other_secret(ignite_conn, data_cache, tmp_path):
    """`.venv/bin/ignite-tf start ... python job.py` from a shell without the venv on PATH (item 3), whose
    environment holds another connection's secret that must not reach the task (item 7)."""
    out = tmp_path / "seen"
    shell = {"PATH": "/usr/bin:/bin", "HOME": os.environ["HOME"], **ignite_conn.to_env(),
             "IGNITE_TF_RUN_ROOT": str(tmp_path / "runs"), "AIRFLOW_CONN_OTHER": OTHER_SECRET,
             "TF_VAR_db_password": OTHER_SECRET, "KEEP_ME": "kept-value-7f3a", "TF_CPP_MIN_LOG_LEVEL": "2"}
    ignite_tf = str(Path(sys.executable).with_name("ignite-tf"))
    done = subprocess.run([ignite_tf, "start", "--workers", "1", "--id", "env-cli", "--env", "KEEP_ME",
                           "--env", "SET_ME=given", data_cache, str(JOBS), "python", "envjob.py", str(out), "0"],
                          env=shell, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout + done.stderr
    seen = seen_by(out, "worker-0")
    assert os.path.dirname(seen["executable"]) == VENV_BIN and seen["path"][0] == VENV_BIN
    assert seen["has_ignite_tf"]
    env = seen["environ"]
    assert env["KEEP_ME"] == "kept-value-7f3a" and env["SET_ME"] == "given"
    assert "AIRFLOW_CONN_OTHER" not in env and "TF_VAR_db_password" not in env
    assert not [k for k, v in env.items() if "0ther-c0nn-s3cret" in v]
    assert env["IGNITE_TF_ADDRESSES"] == ignite_conn.addresses_str  # the connection the task reads data with
    cluster = json.loads((tmp_path / "runs" / "env-cli" / "cluster.json").read_text())
    assert cluster["pass_env"] == ["KEEP_ME"] and cluster["env"] == {"SET_ME": "given"}
    assert "kept-value-7f3a" not in json.dumps(cluster)  # a passed value is never written down
    missing = subprocess.run([ignite_tf, "start", "--env", "NOT_SET_ANYWHERE", data_cache, str(JOBS), "python",
                              "envjob.py", str(out), "0"], env=shell, capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "NOT_SET_ANYWHERE not set in this environment" in missing.stderr


def test_ps_lists_tasks_then_shows_them_gone_after_the_supervisor_is_killed(ignite_conn, data_cache, run_root,
                                                                           tmp_path, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_OTHER", OTHER_SECRET)
    monkeypatch.setenv("KEEP_ME", "kept")
    out = tmp_path / "seen"
    launcher = make_launcher(ignite_conn)
    state = start_cluster(data_cache, {"command": [sys.executable, "envjob.py", str(out), "120"],
                                       "job_dir": str(JOBS)}, conn=ignite_conn, launcher=launcher, workers=2,
                          cluster_id="ps-tasks", env=["KEEP_ME"])
    wait_for(lambda: launcher.status("ps-tasks").status is Status.RUNNING, timeout=120, what="cluster running")
    cli_env = {**os.environ, **ignite_conn.to_env()}

    def ps(*args):
        return subprocess.run([*CLI, "ps", *args], env=cli_env, capture_output=True, text=True, timeout=120)

    shown = ps("ps-tasks")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("cluster ps-tasks: running, sync mode")
    assert f"run folder: {state.run_dir}" in lines and Path(state.run_dir).is_dir()
    header = next(i for i, line in enumerate(lines) if line.startswith("ROLE"))
    assert lines[header].split() == ["ROLE", "INDEX", "HOST", "PID", "STATE", "RESTARTS", "EXIT", "EPOCH", "LOG"]
    rows = [line.split() for line in lines[header + 1:]]
    assert [(r[0], r[1], r[4]) for r in rows] == [("worker", "0", "running"), ("worker", "1", "running")]
    for role, index, host, pid, _, restarts, exit_text, _, log in rows:
        assert host == "127.0.0.1" and restarts == "0" and exit_text == "-"
        assert psutil.Process(int(pid)).is_running() and Path(log).is_file()
        environ = proc_environ(int(pid))  # the task process itself, not what it chose to write
        assert b"AIRFLOW_CONN_OTHER" not in environ and b"0ther-c0nn-s3cret" not in environ
        assert b"KEEP_ME=kept\0" in environ
        assert seen_by(out, f"{role}-{index}")["environ"]["KEEP_ME"] == "kept"
    supervisor_env = proc_environ(state.supervisor_pid)
    assert b"AIRFLOW_CONN_OTHER" not in supervisor_env and b"0ther-c0nn-s3cret" not in supervisor_env

    os.kill(state.supervisor_pid, signal.SIGKILL)
    assert_nothing_left("ps-tasks", state.run_dir, timeout=30)
    # Lost once its heartbeat is older than the limit, judged from the state alone (as on any other host).
    wait_for(lambda: launcher.status("ps-tasks").lost, timeout=LOST_AFTER_S + 10, what="heartbeat to go stale")
    row = next(line for line in ps("-a").stdout.splitlines() if line.startswith("ps-tasks"))
    assert row.split()[3:5] == ["0/2", "lost"]
    assert next(line for line in ps().stdout.splitlines()
                if line.startswith("ps-tasks")).split()[3:5] == ["0/2", "lost"]
    lost = ps("ps-tasks").stdout.splitlines()
    assert lost[0].startswith("cluster ps-tasks: lost")
    assert [line.split()[4] for line in lost[-2:]] == ["gone", "gone"]

    unknown = ps("no-such-cluster")
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1
    assert "no TensorFlow cluster with id 'no-such-cluster'" in unknown.stderr
    assert launcher.stop("ps-tasks").reason == "supervisor lost"  # recorded stopped: no longer listed


def test_cli_default_address_is_the_thin_clients(monkeypatch):
    monkeypatch.delenv("IGNITE_TF_ADDRESSES", raising=False)
    assert DEFAULT_ADDRESS == "127.0.0.1:10800"
    assert connection(None).addresses == (("127.0.0.1", 10800),)
    monkeypatch.setenv("IGNITE_TF_ADDRESSES", "h1:1,h2:2")
    assert connection(None).addresses == (("h1", 1), ("h2", 2))
    assert "127.0.0.1:10800" in " ".join(build_parser().format_help().split())
    bare = {k: v for k, v in os.environ.items() if not k.startswith("IGNITE_TF_")}
    for command in ("ps", "start", "load"):
        helped = subprocess.run([*CLI, command, "-h"], env=bare, capture_output=True, text=True, timeout=60)
        assert helped.returncode == 0 and "127.0.0.1:10800" in " ".join(helped.stdout.split())
    # With no -c and no IGNITE_TF_ADDRESSES the CLI goes to 127.0.0.1:10800. The test holds that port with a
    # listener that hangs up on every connection (so no Ignite node can be there): the CLI connects to it,
    # gets no handshake, and its error names the address.
    with _hang_up_listener(DEFAULT_ADDRESS) as accepted:
        listed = subprocess.run([*CLI, "ps"], env=bare, capture_output=True, text=True, timeout=120)
    assert listed.returncode == 1, (listed.returncode, listed.stdout, listed.stderr)
    assert listed.stderr.startswith("ignite-tf ps: error: no Ignite node reachable at 127.0.0.1:10800 ("), listed.stderr
    assert accepted, "the CLI never connected to 127.0.0.1:10800"


@contextlib.contextmanager
def _hang_up_listener(address: str):
    """Listen on ``host:port`` and close every connection at once; yields the list of peers accepted.

    Fails (does not skip) when the port is taken: another process there, an Ignite node of ``make ignite-up``
    say, would decide what the CLI sees."""
    host, port = address.rsplit(":", 1)
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        server.bind((host, int(port)))
    except OSError as exc:
        server.close()
        pytest.fail(f"{address} is taken ({exc.strerror}): this test needs it free (stop the local Ignite node: "
                    f"make ignite-down)")
    server.listen(16)
    server.settimeout(0.1)
    accepted: list = []
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, peer = server.accept()
            except TimeoutError:
                continue
            accepted.append(peer)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield accepted
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


def test_operator_task_gets_named_variables_and_no_other_connection(ignite_conn, data_cache, run_root, monkeypatch,
                                                                     tmp_path):
    from airflow.sdk import DAG

    from ignite_tf.operators.tensorflow import TFClusterOperator
    from tests.support.airflow import SECRET, TaskContext, ignite_connection_env

    for key, value in ignite_connection_env(ignite_conn).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("AIRFLOW_CONN_OTHER", OTHER_SECRET)
    monkeypatch.setenv("KEEP_ME", "kept")
    out = tmp_path / "seen"
    with DAG(dag_id="ignite_tf_test_task_env", schedule=None) as dag:
        op = TFClusterOperator(task_id="train", cache=data_cache, command=["python", "envjob.py", str(out), "0"],
                               job_dir=str(JOBS), workers=1, max_restarts=0, deferrable=False, poll_interval=0.5,
                               env=["KEEP_ME", "SET_ME=given"])
    summary = op.execute(TaskContext(dag, "manual__task_env"))
    assert summary["status"] == "succeeded"
    env = seen_by(out, "worker-0")["environ"]
    assert env["KEEP_ME"] == "kept" and env["SET_ME"] == "given"
    assert not [k for k in env if k.startswith("AIRFLOW")]
    assert not [k for k, v in env.items() if "0ther-c0nn-s3cret" in v]
    assert env["IGNITE_TF_PASSWORD"] == SECRET  # the Ignite login the task needs, through its environment only
    assert_nothing_left(summary["cluster_id"], summary["run_dir"])
