"""The state store on both backends: its one primitive (the key-value operations, the compare-and-set under
contention), a claim with one winner, the records round-trip, the task side's reports, and the Ignite caches'
configuration.

The same tests run on each backend: ``TestFiles`` (a folder of this test's) and ``TestIgnite`` (the session's
real 2-node Ignite cluster, through ``ignite_conn``; nothing mocked). A class per backend, not a parametrised
fixture, so each test's tier follows from the fixtures it uses (tests/support/tiers.py): the files' tests are in
``make check``, the Ignite ones are not.
"""

from __future__ import annotations

import threading
import time
import uuid

import pytest

from ignite_tf.contract import ENV_CLUSTER_ID
from ignite_tf.errors import ConfigError
from ignite_tf.state import ClusterState, LocalStateStore, Status, TaskState, TaskStatus, store_to_env
from ignite_tf.state.files import FileKeyValueStore
from ignite_tf.state.ignite import BACKUPS, CACHE_PREFIX, IgniteKeyValueStore
from ignite_tf.state.reports import TaskReports
from ignite_tf.state.store import IgniteStateStore, Space, StateStore

SPACE = "kvtest"
THREADS, INCREMENTS = 8, 20


def race(n: int, work) -> list:
    """``work(i)`` in ``n`` threads let go at once; their results, by ``i``."""
    results: list = [None] * n
    errors: list[BaseException] = []
    start = threading.Barrier(n)

    def run(i: int) -> None:
        try:
            start.wait()
            results[i] = work(i)
        except BaseException as exc:  # noqa: BLE001 - failed in the test's thread, below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert not any(t.is_alive() for t in threads)
    return results


class Backend:
    """The tests every backend passes. A subclass gives ``make_kv`` (a new client of the same store each call, as
    separate processes would have) and ``environ`` (what the launcher tells a task about the store)."""

    @pytest.fixture
    def make_kv(self):
        raise NotImplementedError

    @pytest.fixture
    def environ(self):
        raise NotImplementedError

    @pytest.fixture
    def kv(self, make_kv):
        return make_kv()

    @pytest.fixture
    def prefix(self) -> str:
        return f"t{uuid.uuid4().hex[:8]}/"  # the Ignite caches outlive a test: keys of its own

    def test_each_primitive(self, kv, prefix):
        a, b, c = prefix + "a", prefix + "b", prefix + "c"
        assert kv.get(SPACE, a) is None
        kv.put(SPACE, a, {"n": 1})
        kv.put(SPACE, a, {"n": 2})
        assert kv.get(SPACE, a) == {"n": 2}
        assert kv.put_if_absent(SPACE, a, {"n": 3}) is False
        assert kv.put_if_absent(SPACE, b, [1, "x", 2.5, True]) is True
        assert kv.get(SPACE, b) == [1, "x", 2.5, True]
        assert kv.replace_if_equals(SPACE, a, {"n": 1}, {"n": 4}) is False
        assert kv.replace_if_equals(SPACE, a, {"n": 2}, {"n": 4}) is True
        assert kv.replace_if_equals(SPACE, c, {"n": 2}, {"n": 4}) is False  # absent: nothing to replace
        assert kv.get(SPACE, a) == {"n": 4} and kv.get(SPACE, c) is None
        assert sorted(kv.keys(SPACE, prefix)) == [a, b]
        assert kv.get_many(SPACE, [a, b, c]) == {a: {"n": 4}, b: [1, "x", 2.5, True]}
        kv.delete(SPACE, [a, c])
        assert kv.get(SPACE, a) is None and kv.keys(SPACE, prefix) == [b]

    def test_any_key_and_only_json_values(self, kv, prefix):
        odd = [prefix + "..", prefix + "dag/run manual__2025-01-01T00:00:00+00:00/task/-1/1", prefix + "é%@" * 90]
        for i, key in enumerate(odd):
            kv.put(SPACE, key, i)
        assert sorted(kv.keys(SPACE, prefix)) == sorted(odd)
        assert [kv.get(SPACE, key) for key in odd] == [0, 1, 2]
        assert kv.replace_if_equals(SPACE, odd[2], 2, 3) and kv.get(SPACE, odd[2]) == 3
        with pytest.raises(ConfigError, match="not JSON"):
            kv.put(SPACE, prefix + "set", {1, 2})
        with pytest.raises(ConfigError, match="None reads as a missing key"):
            kv.put(SPACE, prefix + "none", None)
        with pytest.raises(ConfigError, match="non-empty string"):
            kv.put(SPACE, "", 1)

    def test_compare_and_set_under_contention(self, make_kv, prefix):
        """8 clients increment one counter by read and replace-if-equals, retrying when another got there
        first: no increment is lost."""
        key = prefix + "counter"
        kvs = [make_kv() for _ in range(THREADS)]
        assert kvs[0].put_if_absent(SPACE, key, 0)

        def increment(i: int) -> int:
            tries = 0
            for _ in range(INCREMENTS):
                while True:
                    tries += 1
                    held = kvs[i].get(SPACE, key)
                    if kvs[i].replace_if_equals(SPACE, key, held, held + 1):
                        break
            return tries

        tries = race(THREADS, increment)
        assert kvs[0].get(SPACE, key) == THREADS * INCREMENTS
        assert sum(tries) >= THREADS * INCREMENTS
        for kv in kvs:
            kv.close()

    def test_one_of_two_claimants_wins(self, make_kv, prefix):
        """Two launchers claim each supervisor number at once: one wins. The claim of a launcher that died
        (older than ``stale_after_s``) is taken over by one of two as well."""
        stores = [StateStore(make_kv()), StateStore(make_kv())]
        cluster_id = prefix.rstrip("/")
        for resume in range(5):
            won = race(2, lambda i, r=resume: stores[i].claim(cluster_id, r, f"launcher-{i}", stale_after_s=60))
            assert sorted(won) == [False, True], (resume, won)
            assert stores[0].claim(cluster_id, resume, "late", stale_after_s=60) is False
            stores[0].kv.put(Space.CLAIMS, f"{cluster_id}/{resume}", {"owner": "dead", "time": time.time() - 100})
            won = race(2, lambda i, r=resume: stores[i].claim(cluster_id, r, f"taker-{i}", stale_after_s=60))
            assert sorted(won) == [False, True], (resume, won)
        stores[0].delete(cluster_id)
        assert stores[1].claim(cluster_id, 0, "after the delete", stale_after_s=60)
        for store in stores:
            store.close()

    def test_records_round_trip(self, kv, make_kv, prefix):
        store = StateStore(kv)
        cluster_id = prefix.rstrip("/")
        state = ClusterState(
            cluster_id=cluster_id, cache="digits", mode="sync", run_dir="s3://runs/x", status=Status.RUNNING,
            tasks=[TaskState("chief", 0, "h1", 2222, pid=7, state=TaskStatus.RUNNING),
                   TaskState("worker", 0, "h2", 2223, state=TaskStatus.FAILED, restarts=1, exit_code=-9)],
            failures=[{"task": "worker-0", "exit_code": -9, "action": "restarted"}],
            labels={"dag_id": "d", "run_id": "r"}, launcher={"kind": "kubernetes", "namespace": "n"}, attempt=2)
        store.put(state)
        assert store.get(cluster_id, records=False).to_dict() == state.to_dict()
        assert cluster_id in store.ids() and store.require(cluster_id).tasks[1].exit_text == "SIGKILL"

        writers = [StateStore(make_kv()), StateStore(make_kv())]
        race(2, lambda i: [writers[i].add_epoch(cluster_id, {"epoch": n, "by": i}) for n in range(5)])
        store.set_evaluation(cluster_id, {"rows": 10, "metrics": {"accuracy": 0.9}})
        for epoch in range(2):
            for worker in (1, 0):
                store.add_reads(cluster_id, worker, epoch, {"rows": 10, "local_rows": 10 * worker,
                                                            "by_node": {"n1": 10}})
        watcher = "dag/manual__2025-01-01T00:00:00+00:00/train/-1/" + "1" * 200
        store.set_watch_offset(cluster_id, watcher, 4096)
        store.request_stop(cluster_id)

        got = store.get(cluster_id)
        assert sorted((r["by"], r["epoch"]) for r in got.epochs) == [(i, n) for i in (0, 1) for n in range(5)]
        assert got.evaluation == {"rows": 10, "metrics": {"accuracy": 0.9}}
        assert [(r["worker"], r["rows"], r["passes"]) for r in got.reads] == [(0, 20, 2), (1, 20, 2)]
        assert got.measured_locality["rows"] == 40 and got.measured_locality["local_rows"] == 20
        assert store.watch_offset(cluster_id, watcher) == 4096 and store.watch_offset(cluster_id, "other") == 0
        assert store.stop_requested(cluster_id)
        store.clear_stop(cluster_id)
        assert not store.stop_requested(cluster_id)
        assert [s.cluster_id for s in store.list() if s.cluster_id == cluster_id] == [cluster_id]

        store.delete(cluster_id)
        assert store.get(cluster_id) is None and cluster_id not in store.ids()
        assert all(kv.keys(space, cluster_id) == [] for space in Space)
        with pytest.raises(ConfigError, match=f"no TensorFlow cluster with id '{cluster_id}'"):
            store.require(cluster_id)

    def test_a_task_reports_through_its_environment(self, kv, environ, prefix):
        cluster_id = prefix.rstrip("/")
        store = StateStore(kv)
        store.put(ClusterState(cluster_id=cluster_id, cache="c", mode="sync", run_dir="/r"))
        assert TaskReports.from_env({**environ, ENV_CLUSTER_ID: ""}) is None  # a script run by hand
        assert TaskReports.from_env({ENV_CLUSTER_ID: cluster_id}) is None  # no store named
        with TaskReports.from_env({**environ, ENV_CLUSTER_ID: cluster_id}) as reports:
            reports.epoch({"epoch": 1, "loss": 0.5})
            reports.reads(0, 0, {"rows": 3, "local_rows": 3, "by_node": {"n": 3}})
            reports.evaluation({"rows": 2})
        got = store.get(cluster_id)
        assert got.epochs == [{"epoch": 1, "loss": 0.5}] and got.evaluation == {"rows": 2}
        assert [r["rows"] for r in got.reads] == [3]
        store.delete(cluster_id)


class TestFiles(Backend):
    @pytest.fixture
    def make_kv(self, tmp_path):
        return lambda: FileKeyValueStore(tmp_path / "state")

    @pytest.fixture
    def environ(self, tmp_path):
        return store_to_env(LocalStateStore(tmp_path / "state"))

    def test_a_folder_per_space_a_file_per_key(self, kv, tmp_path):
        LocalStateStore(tmp_path / "state").put(ClusterState(cluster_id="c1", cache="c", mode="sync", run_dir="/r"))
        kv.put("watches", "c1/" + "w" * 300, 1)
        assert (tmp_path / "state" / "clusters" / "c1").is_file()
        names = sorted(p.name for p in (tmp_path / "state" / "watches").iterdir())
        assert names[0] == ".lock" and len(names) == 2 and len(names[1]) <= 200, names

class TestIgnite(Backend):
    @pytest.fixture
    def make_kv(self, ignite_conn):
        made: list[IgniteKeyValueStore] = []

        def make():
            made.append(IgniteKeyValueStore(ignite_conn))
            return made[-1]

        yield make
        for kv in made:
            kv.close()

    @pytest.fixture
    def environ(self, ignite_conn):
        return {**store_to_env(IgniteStateStore(ignite_conn)), **ignite_conn.to_env()}

    def test_the_caches_are_made_with_a_backup(self, ignite_conn, ignite_client, prefix):
        """Each state cache, as the store makes it, says (read back through pyignite) it keeps a backup and
        that writes return once the backup has them; the cluster records' cache keeps the name earlier releases
        gave it."""
        from pyignite.datatypes.cache_config import CacheMode, WriteSynchronizationMode
        from pyignite.datatypes.prop_codes import (
            PROP_BACKUPS_NUMBER,
            PROP_CACHE_MODE,
            PROP_WRITE_SYNCHRONIZATION_MODE,
        )

        store = IgniteStateStore(ignite_conn)
        try:
            for space in Space:
                store.kv.keys(space, prefix)  # makes the cache if missing
        finally:
            store.close()
        names = set(ignite_client.get_cache_names())
        assert "ignite_tf_sys_clusters" in names
        for space in Space:
            settings = ignite_client.get_cache(CACHE_PREFIX + space).settings
            assert settings[PROP_BACKUPS_NUMBER] >= BACKUPS >= 1, (space, settings)
            assert settings[PROP_CACHE_MODE] == CacheMode.PARTITIONED
            assert settings[PROP_WRITE_SYNCHRONIZATION_MODE] == WriteSynchronizationMode.FULL_SYNC

    def test_records_of_an_earlier_release_are_read(self, ignite_conn, ignite_client, prefix):
        """Earlier releases wrote the same caches with the same keys, their values JSON text made by hand (a stop's
        time, an epoch count, an offset as ``str``): the store reads them, and goes on from them."""
        import json

        cluster_id = prefix.rstrip("/")
        state = ClusterState(cluster_id=cluster_id, cache="c", mode="sync", run_dir="/r")
        old = {"clusters": {cluster_id: json.dumps(state.to_dict())}, "stops": {cluster_id: str(time.time())},
               "epochs": {f"{cluster_id}/000000": json.dumps({"epoch": 1}), f"{cluster_id}/n": "1"},
               "claims": {f"{cluster_id}/0": json.dumps({"owner": "old", "time": time.time() - 100})},
               "watches": {f"{cluster_id}/w": str(77)}}
        store = IgniteStateStore(ignite_conn)
        try:
            for space, entries in old.items():
                store.kv.keys(space, cluster_id)  # the cache made as the store makes it (FULL_SYNC: no stale read)
                cache = ignite_client.get_cache(CACHE_PREFIX + space)
                for key, value in entries.items():
                    cache.put(key, value)
            got = store.get(cluster_id)
            assert got.to_dict() == {**state.to_dict(), "epochs": [{"epoch": 1}]}
            assert store.stop_requested(cluster_id) and store.watch_offset(cluster_id, "w") == 77
            assert store.claim(cluster_id, 0, "new", stale_after_s=60)  # the old claim is stale: replaced
            store.add_epoch(cluster_id, {"epoch": 2})
            assert [r["epoch"] for r in store.epochs(cluster_id)] == [1, 2]
            store.delete(cluster_id)
            assert all(store.kv.keys(space, cluster_id) == [] for space in Space)
        finally:
            store.close()

    def test_a_cache_without_a_backup_is_named_in_a_warning(self, ignite_conn, ignite_client, caplog):
        """A state cache that exists is used as it is: one made with no backup still works, with a warning."""
        from pyignite.datatypes.prop_codes import PROP_BACKUPS_NUMBER, PROP_NAME

        space = f"nobackup{uuid.uuid4().hex[:6]}"
        ignite_client.create_cache({PROP_NAME: CACHE_PREFIX + space, PROP_BACKUPS_NUMBER: 0})
        kv = IgniteKeyValueStore(ignite_conn)
        try:
            with caplog.at_level("WARNING", logger="ignite_tf.state.ignite"):
                kv.put(space, "k", 1)
                assert kv.get(space, "k") == 1
        finally:
            kv.close()
        warned = [r.getMessage() for r in caplog.records if r.name == "ignite_tf.state.ignite"]
        assert len(warned) == 1 and f"{CACHE_PREFIX}{space} on Ignite at" in warned[0] and "0 backups" in warned[0]
