"""The fork server: real server processes forking real children (a small probe module here, TensorFlow
training in the last test). Nothing is simulated."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

from ignite_tf import demo_data
from ignite_tf.cluster import forkserver
from ignite_tf.cluster.api import make_launcher, start_cluster
from ignite_tf.cluster.forkserver import ForkServer
from ignite_tf.cluster.run_folder import RunFolder
from ignite_tf.cluster.state import LocalStateStore, Status
from ignite_tf.errors import ConfigError
from ignite_tf.etl.load import load
from tests.clusterutil import assert_nothing_left, wait_for

PROBE = textwrap.dedent('''
    """Reports what it got as JSON on stdout, then ends as argv[1] says: a status, a signal or an exception."""
    import json, os, signal, sys, time
    hook = sys.modules.get("fshook")
    print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "ppid": os.getppid(), "pgid": os.getpgid(0),
                      "secret": os.environ.get("PROBE_SECRET"), "common": os.environ.get("PROBE_COMMON"),
                      "preloaded": "json" in sys.modules, "name": open("/proc/self/comm").read().strip(),
                      "hooked": hook.SEEN if hook else None}),
          flush=True)
    how = sys.argv[1]
    if how == "sleep":
        time.sleep(600)
    if how == "raise":
        raise RuntimeError("probe failed on purpose")
    if how == "signal":
        os.kill(os.getpid(), signal.SIGKILL)
    sys.exit(int(how))
''')
HOOK = textwrap.dedent('''
    """The server's hook: what it keeps here, every task forked afterwards finds."""
    SEEN = []


    def preload(args):
        SEEN.extend(args)
        if args == ["fail"]:
            raise ValueError("hook failed on purpose")
''')


def _server(tmp_path, hook=None) -> ForkServer:
    (tmp_path / "mods").mkdir(exist_ok=True)
    (tmp_path / "mods" / "fsprobe.py").write_text(PROBE)
    (tmp_path / "mods" / "fshook.py").write_text(HOOK)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path / "mods"), "PROBE_COMMON": "c"}
    with open(tmp_path / "server.log", "ab") as log:
        return ForkServer(env, str(tmp_path), log, modules=("json",), hook=hook)


@pytest.fixture
def server(tmp_path):
    fs = _server(tmp_path)
    yield fs
    fs.close()
    assert fs.proc.poll() is not None


def _fork(fs: ForkServer, tmp_path, how: str, name: str = "worker-0", **env):
    cwd = tmp_path / name
    cwd.mkdir(exist_ok=True)
    log = tmp_path / f"{name}.log"
    task_env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path / "mods"), "PROBE_COMMON": "c", **env}
    return fs.start(name, "fsprobe", [how], env=task_env, cwd=str(cwd), log=str(log)), log


def _report(log) -> dict:
    return json.loads(log.read_text().splitlines()[0])


def test_a_forked_task_runs_as_its_own_process_with_its_environment(server, tmp_path):
    assert server.ready(60), "the server imports and says it is ready"
    task, log = _fork(server, tmp_path, "0", PROBE_SECRET="s3cret")
    assert task.wait(30) == 0
    got = _report(log)
    assert got["argv"] == ["0"] and got["cwd"] == str(tmp_path / "worker-0")
    assert got["ppid"] == server.proc.pid, "a child of the server, not of the supervisor"
    assert got["pgid"] == task.pid, "in its own process group, so the supervisor can signal it with its children"
    assert got["secret"] == "s3cret" and got["common"] == "c"
    assert got["preloaded"] and got["name"] == "tf worker-0" and got["hooked"] is None
    assert "PROBE_SECRET" not in psutil.Process(server.proc.pid).environ(), "the task's own variables stay its own"


def test_what_the_hook_keeps_every_forked_task_finds_and_a_failing_hook_is_only_reported(tmp_path):
    fs = _server(tmp_path, hook=("fshook:preload", ["columns", "classes"]))
    try:
        assert fs.ready(60)
        for name in ("a", "b"):
            task, log = _fork(fs, tmp_path, "0", name=name)
            assert task.wait(30) == 0
            assert _report(log)["hooked"] == ["columns", "classes"]
    finally:
        fs.close()
    (tmp_path / "f").mkdir()
    failing = _server(tmp_path / "f", hook=("fshook:preload", ["fail"]))
    try:
        assert failing.ready(60), "a failed hook does not keep the server from forking"
        task, log = _fork(failing, tmp_path / "f", "0")
        assert task.wait(30) == 0 and _report(log)["hooked"] == ["fail"]
    finally:
        failing.close()
    assert "fshook:preload failed (ValueError: hook failed on purpose)" in (tmp_path / "f" / "server.log").read_text()


def test_exit_statuses_signals_and_exceptions_reach_the_supervisor(server, tmp_path):
    assert server.ready(60)
    three, _ = _fork(server, tmp_path, "3", name="a")
    killed, _ = _fork(server, tmp_path, "signal", name="b")
    failed, failed_log = _fork(server, tmp_path, "raise", name="c")
    assert three.wait(30) == 3
    assert killed.wait(30) == -signal.SIGKILL
    assert failed.wait(30) == 1
    assert "RuntimeError: probe failed on purpose" in failed_log.read_text()
    again, _ = _fork(server, tmp_path, "0", name="d")
    assert again.wait(30) == 0, "the server goes on forking after its children failed"


def test_tasks_die_with_the_server_and_count_as_killed(server, tmp_path):
    assert server.ready(60)
    task, _ = _fork(server, tmp_path, "sleep")
    wait_for(lambda: task.pid and psutil.pid_exists(task.pid), timeout=10, what="the task")
    assert task.poll() is None
    server.proc.kill()
    wait_for(lambda: task.poll() is not None, timeout=10, what="the task to die with its server")
    assert task.returncode == -signal.SIGKILL and server.gone
    assert not server.ready(0)


def test_the_server_and_its_tasks_die_with_the_supervisor(tmp_path):
    """A stand-in supervisor (a real Python process) starts a server and a task, then gets SIGKILL."""
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "fsprobe.py").write_text(PROBE)
    script = textwrap.dedent(f'''
        import os, sys, time
        from ignite_tf.cluster.forkserver import ForkServer
        env = {{"PATH": os.environ["PATH"], "PYTHONPATH": {str(tmp_path / "mods")!r}}}
        fs = ForkServer(env, {str(tmp_path)!r}, sys.stderr, modules=("json",))
        assert fs.ready(60)
        task = fs.start("worker-0", "fsprobe", ["sleep"], env=env, cwd={str(tmp_path)!r},
                        log={str(tmp_path / "task.log")!r})
        print(fs.proc.pid, task.pid, flush=True)
        time.sleep(600)
    ''')
    sup = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        server_pid, task_pid = map(int, sup.stdout.readline().split())
        sup.kill()
        sup.wait()

        def gone(pid):
            return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        wait_for(lambda: gone(server_pid) and gone(task_pid), timeout=10, what="server and task to die")
    finally:
        sup.kill()
        sup.wait()


def test_forking_is_wanted_only_where_no_gpu_is_initialised_at_import(tmp_path, monkeypatch):
    monkeypatch.setattr(forkserver, "GPU_DEVICES", (str(tmp_path / "nvidia[0-9]*"),))
    assert forkserver.wanted({}) and forkserver.wanted({"IGNITE_TF_FORKSERVER": " Auto "})
    assert not forkserver.wanted({"IGNITE_TF_FORKSERVER": "off"})
    with pytest.raises(ConfigError, match="IGNITE_TF_FORKSERVER='sometimes': use one of auto, off"):
        forkserver.wanted({"IGNITE_TF_FORKSERVER": "sometimes"})
    (tmp_path / "nvidia0").touch()  # a host with a GPU device
    assert not forkserver.wanted({})
    assert not forkserver.wanted({"CUDA_VISIBLE_DEVICES": "0"})
    assert forkserver.wanted({"CUDA_VISIBLE_DEVICES": "-1"}) and forkserver.wanted({"CUDA_VISIBLE_DEVICES": ""})
    assert forkserver.module_of([sys.executable, "-m", "ignite_tf.runtime", "--serve"]) == ("ignite_tf.runtime",
                                                                                           ["--serve"])
    assert forkserver.module_of(["python", "train.py"]) is None
    assert forkserver.module_of(["/other/python", "-m", "ignite_tf.runtime"]) is None


@pytest.mark.parametrize("how", ["auto", "off"])
def test_training_tasks_are_forked_from_one_import_unless_off(how, ignite_conn, tmp_path, monkeypatch):
    """Two sync workers train for real; with the fork server both are children of one server process that
    imported TensorFlow, and it ends with the cluster; with ``off`` they are the supervisor's own children."""
    monkeypatch.setenv("IGNITE_TF_RUN_ROOT", str(tmp_path / "runs"))
    monkeypatch.setenv("IGNITE_TF_FORKSERVER", how)
    cache = "forkserver_train"
    load(ignite_conn, cache, demo_data.tabular(1200, seed=3), key="id")
    launcher = make_launcher(ignite_conn, store=LocalStateStore(tmp_path / "state"))
    state = start_cluster(cache, {"entry_point": "ignite_tf.models:tabular_classifier",
                                  "args": ["--epochs", "30", "--batch-size", "32", "--label-column", "label"]},
                          conn=ignite_conn, launcher=launcher, mode="sync", workers=2)
    wait_for(lambda: launcher.status(state.cluster_id).status is Status.RUNNING, timeout=300, what="running")
    running = launcher.status(state.cluster_id)
    parents = {psutil.Process(t.pid).ppid() for t in running.tasks}
    assert len(parents) == 1
    parent = psutil.Process(parents.pop())
    if how == "auto":
        assert parent.cmdline()[1:3] == ["-m", "ignite_tf.cluster.forkserver"]
        assert parent.ppid() == running.supervisor_pid
    else:
        assert parent.pid == running.supervisor_pid
    final = launcher.wait(state.cluster_id, timeout=300)
    assert final.status is Status.SUCCEEDED, launcher.tail(state.cluster_id, 40)
    assert [e["epoch"] for e in launcher.store.epochs(state.cluster_id)][-1] == 30
    wait_for(lambda: not psutil.pid_exists(parent.pid) or parent.status() == psutil.STATUS_ZOMBIE, timeout=15,
             what="the fork server to end with its cluster")
    assert_nothing_left(state.cluster_id, final.run_dir)
    assert "failed" not in RunFolder(final.run_dir).supervisor_log.read_text(), "the preload hook worked"
