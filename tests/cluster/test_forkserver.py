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
from ignite_tf_dev import demo_data

from ignite_tf.cluster import forkserver
from ignite_tf.cluster.api import make_launcher, start_cluster
from ignite_tf.cluster.forkserver import ForkServer
from ignite_tf.errors import CacheNotFoundError, ConfigError
from ignite_tf.etl import load
from ignite_tf.plan.partitions import PartitionMap
from ignite_tf.runstore.layout import RunFolder
from ignite_tf.state import LocalStateStore, Status
from tests.support.clusters import assert_nothing_left, cluster_processes
from tests.support.polling import wait_for

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
    # A pod's command names the image's Python: any python* by its file name (the standby's test of a command).
    assert forkserver.module_of(["/usr/bin/python3.11", "-m", "m", "x"], python=None) == ("m", ["x"])
    assert forkserver.module_of(["/usr/bin/java", "-m", "m"], python=None) is None
    assert forkserver.module_of(["python", "train.py"], python=None) is None


EPOCHS = 8  # enough that the tasks still run when the cluster is seen RUNNING (their parents are read then)


@pytest.mark.parametrize("how", ["auto", "off"])
def test_training_tasks_are_forked_from_one_import_unless_off(how, ignite_conn, tmp_path, run_root, monkeypatch):
    """Two sync workers train for real; with the fork server both are children of one server process that
    imported TensorFlow, and it ends with the cluster; with ``off`` they are the supervisor's own children.
    The fork server starts while the shard plan is made: discovery here waits until it runs (the real
    discovery follows), and the tasks are then forked from that very server."""
    monkeypatch.setenv("IGNITE_TF_FORKSERVER", how)
    cache, cluster_id = "forkserver_train", f"forked-{how}"
    load(ignite_conn, cache, demo_data.tabular(1200, seed=3), key="id")
    early = []
    if how == "auto":
        discover = PartitionMap.discover

        def discover_once_the_server_runs(conn, cache, **kwargs):
            early.extend(wait_for(lambda: _forkservers(cluster_id), timeout=120, what="the fork server"))
            return discover(conn, cache, **kwargs)

        monkeypatch.setattr(PartitionMap, "discover", discover_once_the_server_runs)
    launcher = make_launcher(ignite_conn, store=LocalStateStore(tmp_path / "state"))
    state = start_cluster(cache, {"entry_point": "ignite_tf.models:tabular_classifier",
                                  "args": ["--epochs", str(EPOCHS), "--batch-size", "32", "--label-column", "label"]},
                          conn=ignite_conn, launcher=launcher, mode="sync", workers=2, cluster_id=cluster_id)
    wait_for(lambda: launcher.status(state.cluster_id).status is Status.RUNNING, timeout=300, what="running")
    running = launcher.status(state.cluster_id)
    parents = {psutil.Process(t.pid).ppid() for t in running.tasks}
    assert len(parents) == 1
    parent = psutil.Process(parents.pop())
    if how == "auto":
        assert parent.cmdline()[1:3] == ["-m", "ignite_tf.cluster.forkserver"]
        assert parent.ppid() == running.supervisor_pid
        assert [p.pid for p in early] == [parent.pid], "the server started before the plan forked the tasks"
    else:
        assert parent.pid == running.supervisor_pid
    final = launcher.wait(state.cluster_id, timeout=300)
    assert final.status is Status.SUCCEEDED, launcher.tail(state.cluster_id, 40)
    assert [e["epoch"] for e in launcher.store.epochs(state.cluster_id)][-1] == EPOCHS
    wait_for(lambda: not psutil.pid_exists(parent.pid) or parent.status() == psutil.STATUS_ZOMBIE, timeout=15,
             what="the fork server to end with its cluster")
    assert_nothing_left(state.cluster_id, final.run_dir)
    assert "failed" not in RunFolder(final.run_dir).supervisor_log.read_text(), "the preload hook worked"


def _forkservers(cluster_id: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if cmdline[1:3] == ["-m", "ignite_tf.cluster.forkserver"] and cluster_id in " ".join(cmdline):
            found.append(proc)
    return found


def test_a_launch_given_up_while_planning_leaves_nothing(ignite_conn, tmp_path, run_root, monkeypatch):
    """The supervisor and its fork server start while the shard plan is made; discovery then fails (no such
    cache): the error reaches the caller, and neither process nor any recorded state is left."""
    launcher = make_launcher(ignite_conn, store=LocalStateStore(tmp_path / "state"))
    discover, seen = PartitionMap.discover, []

    def discover_once_the_server_runs(conn, cache, **kwargs):
        seen.extend(wait_for(lambda: _forkservers("given-up"), timeout=120, what="the fork server"))
        return discover(conn, cache, **kwargs)

    monkeypatch.setattr(PartitionMap, "discover", discover_once_the_server_runs)
    with pytest.raises(CacheNotFoundError, match="no_such_cache"):
        start_cluster("no_such_cache", {"entry_point": "ignite_tf.models:tabular_classifier", "args": []},
                      conn=ignite_conn, launcher=launcher, mode="sync", workers=2, cluster_id="given-up")
    assert seen, "the fork server was running while the plan was made"
    assert launcher.find("given-up") is None, "no state was recorded"
    run_dir = RunFolder.of("given-up", tmp_path / "runs").path
    wait_for(lambda: not cluster_processes("given-up", run_dir), timeout=15,
             what="the supervisor and its server to end")
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in seen)


def test_the_fork_server_started_for_a_draft_spec_suits_the_final_one(tmp_path):
    """The settings the server starts with (``settings_for``) leave out what differs between tasks, so a
    draft made before the plan (one worker) and the final spec (three) agree; a different environment or
    job does not. No process is started."""
    from ignite_tf.cluster.commands import task_command
    from ignite_tf.cluster.spec import build_spec
    from ignite_tf.cluster.supervision.processes import ProcessBackend

    def settings(workers, env=None, args=("--epochs", "1")):
        spec = build_spec(cluster_id="c1", cache="t", mode="sync", workers=workers, run_dir=str(tmp_path / "c1"),
                          job={"entry_point": "ignite_tf.models:tabular_classifier", "args": list(args)},
                          shard_plan_path=str(tmp_path / "plan.json"), env=env)
        return forkserver.settings_for(spec, ProcessBackend(spec, task_command).task_env, task_command)

    draft = settings(1)
    assert draft is not None and "TF_CONFIG" not in draft[0]
    assert draft[1] == (forkserver.HOOKS["ignite_tf.runtime"],
                        ["--entry-point", "ignite_tf.models:tabular_classifier", "--epochs", "1"])
    assert settings(3) == draft
    assert settings(3, env=["EXTRA=1"]) != draft
    assert settings(3, args=("--epochs", "2")) != draft
