"""Warm standby pods (``kubernetes.standby``) without a cluster: the setting, which commands can wait warm, the
signed go record, and a real standby process waiting on a real state store (a file store, and the session's
Ignite cluster) until a go record signed with its cluster's key, refusing a forged one, then running the task's
module in-process as the record's attempt. Simulated: nothing is a pod here and the preload (TensorFlow's
import) is left out; the pod path runs in tests/cluster/k8s/test_training.py (a restart on the warm pods) and
bench/k8s/deployed.py --parts resume."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ignite_tf.cluster.k8s import standby
from ignite_tf.cluster.k8s.settings import KubernetesSettings
from ignite_tf.contract import ENV_RUN_STORE, ENV_STATE_DIR, ENV_STATE_STORE
from ignite_tf.errors import ConfigError
from ignite_tf.state import ClusterState, LocalStateStore, Status
from tests.support.polling import wait_for

PROBE = """import os, sys
print("ARGV", sys.argv[1:], "ATTEMPT", os.environ.get("IGNITE_TF_ATTEMPT"), "KEPT", os.environ.get("KEPT"),
      "KEY", os.environ.get("IGNITE_TF_CLUSTER_KEY"), flush=True)
sys.exit(3)
"""
WAITER = """import os

from ignite_tf.cluster.k8s import standby
from ignite_tf.state import store_from_env


class Reads:
    \"\"\"The state store, saying the first two times it read each go record: a go it read twice is one it kept
    waiting past.\"\"\"

    def __init__(self, store):
        self.store, self.seen = store, {}

    def get(self, cluster_id, **kwargs):
        state = self.store.get(cluster_id, **kwargs)
        go = (state.launcher or {}).get(standby.GO_KEY) if state is not None else None
        seen = "none" if not go else f"{go['generation']} {go['attempt']}"
        self.seen[seen] = self.seen.get(seen, 0) + 1
        if self.seen[seen] <= 2:
            print(f"READ {seen} x{self.seen[seen]}", flush=True)
        return state


key = os.environ.pop(standby.ENV_KEY)
attempt = standby.wait_for_go(2, os.environ["CLUSTER"], key, store=Reads(store_from_env()))
print('NO GO' if attempt is None else 'GO', flush=True)
if attempt is not None:
    standby.become(attempt, ['python', '-m', 'probe_task', '--epochs', '3'])
"""


def test_the_setting_and_which_tasks_can_wait_warm():
    assert KubernetesSettings.parse(None).standby is False
    assert KubernetesSettings.parse({"standby": True}).to_dict()["standby"] is True
    with pytest.raises(ConfigError, match="kubernetes.standby: true or false"):
        KubernetesSettings.parse({"standby": "yes"})
    runtime = ["python", "-m", "ignite_tf.runtime", "--entry-point", "m:f"]
    assert standby.command(runtime) == ["python", "-m", standby.MODULE, "--", *runtime]
    assert standby.command(["python", "train.py"]) is None  # a user command may set TensorFlow up itself
    assert [standby.generation_of(h) for h in ("worker-1", standby.hostname("worker-1", 12), "")] == [0, 12, 0]


def test_a_go_record_is_signed_for_one_cluster_generation_and_attempt():
    key, other = standby.new_key(), standby.new_key()
    assert key != other and len(bytes.fromhex(key)) == 32
    go = standby.go(key, "tf-a", 2, 5)
    assert set(go) == {"generation", "attempt", "mac"}  # nothing else: no environment, store, code or module
    assert standby.signed(go, key, "tf-a")
    assert not standby.signed(go, other, "tf-a")  # another cluster's key
    assert not standby.signed(go, key, "tf-b")  # another cluster's record replayed
    assert not standby.signed({**go, "attempt": 6}, key, "tf-a")
    assert not standby.signed({**go, "generation": 3}, key, "tf-a")
    assert not standby.signed({"generation": 2, "attempt": 5}, key, "tf-a")
    assert not standby.signed({**go, "mac": "zz"}, key, "tf-a")


KEY = standby.new_key()


def _waiter(tmp_path, cluster_id: str = "sb1", store_env: dict | None = None) -> subprocess.Popen:
    """The standby's wait and task as a process (its output in ``waiter.log``), its cluster's key in its
    environment as a pod has it from the Secret; ``store_env``: its state store (default: a file store)."""
    (tmp_path / "probe_task.py").write_text(PROBE)
    store_env = store_env or {ENV_STATE_STORE: "local", ENV_STATE_DIR: str(tmp_path / "state")}
    env = {**os.environ, **store_env, "CLUSTER": cluster_id, standby.ENV_KEY: KEY, "KEPT": "k",
           "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    with open(tmp_path / "waiter.log", "w") as out:
        return subprocess.Popen([sys.executable, "-c", WAITER], env=env, cwd=tmp_path, text=True, stdout=out,
                                stderr=subprocess.STDOUT)


def test_a_standby_takes_only_its_generations_go_signed_with_its_clusters_key(tmp_path):
    """A go record of an older generation is waited past; one for this generation written by another holder of
    the state store's connection (another process, with another key: it cannot know this cluster's) is refused
    and waited past, though it names the generation and an attempt; the one the supervisor signs is taken, and
    the task runs as that attempt with the environment the pod was made with, without the key. The state in a
    local folder; the forger another store over it."""
    _takes_only_its_signed_go(tmp_path, None, LocalStateStore(tmp_path / "state"), LocalStateStore(tmp_path / "state"))


def test_a_standby_on_the_ignite_store_refuses_a_go_forged_by_another_ignite_client(tmp_path, ignite_conn):
    """The same, with the state in the session's real Ignite caches and the forger another client of its own."""
    from ignite_tf.state import IgniteStateStore

    store_env = {ENV_STATE_STORE: "ignite", **ignite_conn.to_env()}
    _takes_only_its_signed_go(tmp_path, store_env, IgniteStateStore(ignite_conn), IgniteStateStore(ignite_conn))


def _takes_only_its_signed_go(tmp_path, store_env, store, forger) -> None:
    import uuid

    cluster_id = f"sb-{uuid.uuid4().hex[:8]}"
    state = ClusterState(cluster_id=cluster_id, cache="c", mode="sync", run_dir=str(tmp_path))
    store.put(state)
    proc = _waiter(tmp_path, cluster_id, store_env)

    def log() -> str:
        return (tmp_path / "waiter.log").read_text()

    def waited_past(seen: str) -> None:
        wait_for(lambda: f"READ {seen} x2" in log() or proc.poll() is not None, 60,
                 f"the standby to read the go record {seen} twice", seen=log)
        assert proc.poll() is None and "GO" not in log(), log()

    try:
        waited_past("none")
        state.launcher[standby.GO_KEY] = standby.go(KEY, cluster_id, 1, 1)
        store.put(state)
        waited_past("1 1")
        forged = forger.get(cluster_id)
        forged.launcher[standby.GO_KEY] = standby.go(standby.new_key(), cluster_id, 2, 7)
        forger.put(forged)
        waited_past("2 7")
        assert "a go record for generation 2 not signed with this cluster's key was refused" in log(), log()
        state.launcher[standby.GO_KEY] = standby.go(KEY, cluster_id, 2, 3)
        store.put(state)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        store.delete(cluster_id)
        store.close()
        forger.close()
    out = log()
    assert proc.returncode == 3, out
    assert "READ 2 3 x1\nGO\nARGV ['--epochs', '3'] ATTEMPT 3 KEPT k KEY None" in out, out


def test_a_standby_ends_when_the_cluster_ended_without_it(tmp_path):
    store = LocalStateStore(tmp_path / "state")
    store.put(ClusterState(cluster_id="sb1", cache="c", mode="sync", run_dir=str(tmp_path), status=Status.SUCCEEDED))
    proc = _waiter(tmp_path)
    proc.wait(timeout=60)
    out = (tmp_path / "waiter.log").read_text()
    assert proc.returncode == 0 and "NO GO" in out, out


HOOKED = """SEEN = []
def preload(args):
    SEEN.append(list(args))
    if "fail" in args:
        raise ValueError("hook failed on purpose")
"""


def test_a_standby_calls_its_modules_fork_server_hook_with_the_tasks_arguments(tmp_path, monkeypatch, capsys):
    """``warm`` calls the hook the fork server would call for the task's module (``forkserver.call_hook``), with
    the task's arguments; a failing hook is only reported (the task meets it again). The hook is a probe module
    named in ``forkserver.HOOKS`` for a probe task module."""
    from ignite_tf.cluster import forkserver

    (tmp_path / "standby_hook.py").write_text(HOOKED)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(forkserver.HOOKS, "probe_task", "standby_hook:preload")
    monkeypatch.delenv(ENV_RUN_STORE, raising=False)
    standby.warm(["python", "-m", "probe_task", "--epochs", "3"])
    standby.warm(["python", "-m", "probe_task", "fail"])
    import standby_hook

    assert standby_hook.SEEN == [["--epochs", "3"], ["fail"]]
    out = capsys.readouterr().out
    assert "standby: standby_hook:preload failed (ValueError: hook failed on purpose); the task does it itself" in out


@pytest.mark.parametrize("kind", ["local", "ignite"])
def test_a_poll_of_the_state_alone_leaves_the_records_out(kind, tmp_path, ignite_conn):
    """What a standby pod polls for its go (``get(records=False)``): the state as recorded, the go record in it,
    without the epochs and reads that a full ``get`` reads besides (real Ignite caches for ``ignite``)."""
    import uuid

    from ignite_tf.state import IgniteStateStore

    store = LocalStateStore(tmp_path / "state") if kind == "local" else IgniteStateStore(ignite_conn)
    cluster_id = f"sb-{uuid.uuid4().hex[:8]}"
    try:
        state = ClusterState(cluster_id=cluster_id, cache="c", mode="sync", run_dir=str(tmp_path))
        state.launcher[standby.GO_KEY] = standby.go(KEY, cluster_id, 1, 1)
        store.put(state)
        store.add_epoch(cluster_id, {"epoch": 1, "loss": 0.5, "time": time.time()})
        store.add_reads(cluster_id, 0, 1, {"rows": 10})
        alone, whole = store.get(cluster_id, records=False), store.get(cluster_id)
        assert alone.launcher[standby.GO_KEY]["generation"] == 1 and alone.epochs == [] and alone.reads == []
        assert [e["epoch"] for e in whole.epochs] == [1] and [r["worker"] for r in whole.reads] == [0]
    finally:
        store.delete(cluster_id)
        store.close()
