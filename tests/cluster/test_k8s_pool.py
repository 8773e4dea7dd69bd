"""Warm pools (``kubernetes.warm_pool``) without a cluster: the setting, the credentials' verifier, the state
store's mail that hands a pool pod to one cluster (files and real Ignite caches), and the pool runtime (what a
pool pod runs) as a local process waiting on a real (file) state store: ending by itself when nobody took it in
time, or running the task it was handed in-process with the go's environment, working folder and job folder.
Simulated: nothing is a pod here and the preload (TensorFlow's import) is left out; the pod path runs in
tests/cluster/test_k8s_training.py (a second cluster on the first one's pool) and bench/k8s_startup.py
--warm-pool."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid

import pytest

from ignite_tf.cluster.k8s import pool
from ignite_tf.cluster.k8s.settings import KubernetesSettings
from ignite_tf.cluster.state import IgniteStateStore, LocalStateStore
from ignite_tf.contract import ENV_STATE_DIR, ENV_STATE_STORE
from ignite_tf.errors import ConfigError
from tests.support.polling import wait_for

WAITER = """import sys

from ignite_tf.cluster.k8s import pool
from ignite_tf.cluster.state import store_from_env


class Reads:
    \"\"\"The state store, saying the first two times it read each entry: an entry read twice is one the pool
    runtime kept waiting past.\"\"\"

    def __init__(self, store):
        self.store, self.seen = store, {}

    def mail(self, key):
        got = self.store.mail(key)
        seen = "none" if got is None else ",".join(sorted(got))
        self.seen[seen] = self.seen.get(seen, 0) + 1
        if self.seen[seen] <= 2:
            print(f"READ {seen} x{self.seen[seen]}", flush=True)
        return got

    def __getattr__(self, name):
        return getattr(self.store, name)


record = pool.wait_for_go(Reads(store_from_env()), sys.argv[1], float(sys.argv[2]))
print('NOT TAKEN' if record is None else 'TAKEN', flush=True)
if record is not None:
    pool.become(record)
"""
PROBE = """import os, sys
print("ARGV", sys.argv[1:], "CWD", os.getcwd(), "CLUSTER", os.environ.get("IGNITE_TF_CLUSTER_ID"),
      "GONE", os.environ.get("IGNITE_TF_POOL_UNTIL"), flush=True)
sys.exit(4)
"""


def test_the_setting():
    assert KubernetesSettings.parse(None).warm_pool == 0
    assert KubernetesSettings.parse({"warm_pool": 120}).to_dict()["warm_pool"] == 120
    for bad in (True, -1, "10m"):
        with pytest.raises(ConfigError, match="kubernetes.warm_pool: seconds >= 0"):
            KubernetesSettings.parse({"warm_pool": bad})


def test_the_verifier_matches_the_same_credentials_only_and_holds_none_of_them():
    env = {"IGNITE_TF_PASSWORD": "s3cret-pass", "AWS_SECRET_ACCESS_KEY": "k3y"}
    given = pool.verifier(env)
    assert pool.verifies(dict(reversed(env.items())), given)
    assert not pool.verifies({**env, "IGNITE_TF_PASSWORD": "other"}, given)
    assert not pool.verifies({**env, "EXTRA": "1"}, given)
    assert not pool.verifies(env, "garbage")
    assert "s3cret" not in given and "k3y" not in given
    assert pool.verifier(env) != given  # salted: one pool's digest says nothing about another's


@pytest.mark.parametrize("kind", ["local", "ignite"])
def test_one_poster_wins_a_key_and_only_its_record_is_replaced(kind, tmp_path, ignite_conn):
    """Eight claimers race for one pool pod: one reservation wins; it is replaced by its go only while it is
    still the record under the key; removed, the key is free again (real Ignite caches for ``ignite``)."""
    store = LocalStateStore(tmp_path / "state") if kind == "local" else IgniteStateStore(ignite_conn)
    key = pool.mail_key(uuid.uuid4().hex)
    try:
        won, barrier = [], threading.Barrier(8)

        def claim(i: int) -> None:
            mine = LocalStateStore(tmp_path / "state") if kind == "local" else IgniteStateStore(ignite_conn)
            barrier.wait()
            if mine.post(key, {"reserved": f"c{i}"}):
                won.append(i)
            mine.close()

        threads = [threading.Thread(target=claim, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(won) == 1, won
        reserved = {"reserved": f"c{won[0]}"}
        assert store.mail(key) == reserved
        assert not store.replace_mail(key, {"reserved": "someone else"}, {"go": 1})
        assert store.replace_mail(key, reserved, {"go": {"set": {}}})
        assert store.mail(key) == {"go": {"set": {}}}
        assert not store.post(key, {"closed": 1.0})
        assert store.replace_mail(key, {"go": {"set": {}}}, None)
        assert store.mail(key) is None
        assert store.post(key, {"closed": 2.0})
    finally:
        store.replace_mail(key, store.mail(key) or {}, None)
        store.close()


def _pool_runtime(tmp_path, key: str, until: float) -> subprocess.Popen:
    """The pool runtime's wait and task (``pool.wait_for_go``, ``pool.become``) as a local process on a file
    state store, its output in ``pool.log``: what a pool pod runs, without the pod."""
    env = {**os.environ, ENV_STATE_STORE: "local", ENV_STATE_DIR: str(tmp_path / "state"),
           "PYTHONPATH": str(tmp_path / "job")}
    with open(tmp_path / "pool.log", "w") as out:
        return subprocess.Popen([sys.executable, "-c", WAITER, key, str(until)], env=env, text=True, stdout=out,
                                stderr=subprocess.STDOUT)


def test_the_pool_runtime_as_a_local_process_on_a_file_store_closes_its_entry_and_ends_when_not_taken(tmp_path):
    """The pool runtime (a local process, not a pod) that nobody takes before its end closes its entry in the
    (file) state store and ends; a claim after that fails."""
    store = LocalStateStore(tmp_path / "state")
    key = pool.mail_key("pod-a")
    proc = _pool_runtime(tmp_path, key, time.time() + 1.0)
    proc.wait(timeout=60)
    out = (tmp_path / "pool.log").read_text()
    assert proc.returncode == 0 and "NOT TAKEN" in out, out
    assert "closed" in store.mail(key)
    assert not store.post(key, {"reserved": "late"}), "a pool runtime that stopped waiting cannot be taken"


def test_the_pool_runtime_as_a_local_process_on_a_file_store_runs_a_taken_task_with_the_gos_environment(tmp_path):
    """The pool runtime (a local process, not a pod) waits past an empty entry and a reservation, then takes the
    go from the (file) state store: its variables set and unset, its working folder made, the job folder
    importable; the task module (a probe, from the job folder) runs in the waiting process and its exit status
    is the process's."""
    store = LocalStateStore(tmp_path / "state")
    job = tmp_path / "job"
    job.mkdir()
    (job / "probe_task.py").write_text(PROBE)
    key = pool.mail_key("pod-b")
    proc = _pool_runtime(tmp_path, key, time.time() + 120)

    def log() -> str:
        return (tmp_path / "pool.log").read_text()

    def waited_past(seen: str) -> None:
        wait_for(lambda: f"READ {seen} x2" in log() or proc.poll() is not None, 60,
                 f"the pool runtime to read its entry ({seen}) twice", seen=log)
        assert proc.poll() is None and "TAKEN" not in log(), log()

    try:
        waited_past("none")
        assert store.post(key, {"reserved": "c1"})
        waited_past("reserved")
        cwd = tmp_path / "runs" / "c1" / "tasks" / "worker-0"
        go = {"go": {"set": {"IGNITE_TF_CLUSTER_ID": "c1", "IGNITE_TF_JOB_DIR": str(job)},
                     "unset": ["IGNITE_TF_POOL_UNTIL"]},
              "argv": ["python", "-m", "probe_task", "--epochs", "3"], "cwd": str(cwd), "cluster_id": "c1"}
        assert store.replace_mail(key, {"reserved": "c1"}, go)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = log()
    assert proc.returncode == 4, out
    assert "TAKEN" in out and f"ARGV ['--epochs', '3'] CWD {cwd} CLUSTER c1 GONE None" in out, out
