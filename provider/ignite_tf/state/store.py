"""The cluster-state store: the typed records of :mod:`ignite_tf.state.records` and those kept beside them,
each written once over a ``KeyValueStore`` (:mod:`ignite_tf.state.kv`), whichever backend holds it.

What lives where (``Space``: one key space each, the keys inside it):

- ``clusters``: ``<id>``, the supervisor's ``ClusterState``;
- ``stops``: ``<id>``, when a stop was requested;
- ``claims``: ``<id>/<resume>``, who took the right to start supervisor number ``resume`` (``claim``), and when;
- ``epochs``: ``<id>/<n:06d>``, the chief's report of each epoch, and ``<id>/n``, how many there are; the
  held-out evaluation is the one report holding an ``evaluation`` key;
- ``reads``: ``<id>/<worker>``, the running total of what a worker read (``add_reads``; see
  :mod:`ignite_tf.reader.locality`);
- ``watches``: ``<id>/<watcher>``, how far an Airflow task try's trigger has logged the chief's output, so its
  next instance (a triggerer restart) continues there.

Each writer writes its own keys (the supervisor the cluster's record, the chief its epochs, each worker its
reads, each watcher its offset), so no two overwrite each other; what more than one process may write at once
(a claim, an epoch's number) goes through the compare-and-set.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from ignite_tf.contract import ENV_STATE_DIR, ENV_STATE_STORE
from ignite_tf.errors import ConfigError
from ignite_tf.home import HomeFolder
from ignite_tf.reader.locality import combine
from ignite_tf.state.files import FileKeyValueStore
from ignite_tf.state.ignite import IgniteKeyValueStore
from ignite_tf.state.kv import KeyValueStore
from ignite_tf.state.records import ClusterState

__all__ = ["EVALUATION", "IgniteStateStore", "LocalStateStore", "Space", "StateStore", "default_state_dir",
           "open_store", "store_from_env", "store_to_env"]

EVALUATION = "evaluation"


class Space(StrEnum):
    """The state store's key spaces (a folder each in a local store, a cache each on Ignite)."""

    CLUSTERS = "clusters"
    STOPS = "stops"
    CLAIMS = "claims"
    EPOCHS = "epochs"
    READS = "reads"
    WATCHES = "watches"


PER_CLUSTER = (Space.CLAIMS, Space.EPOCHS, Space.READS, Space.WATCHES)  # keys "<id>/..."


class StateStore:
    """Where cluster state lives, over the key-value store ``kv``. Every method is safe to call from any process."""

    def __init__(self, kv: KeyValueStore):
        self.kv = kv

    def describe(self) -> str:
        return self.kv.describe()

    def another(self) -> StateStore:
        """This store for another thread (``KeyValueStore.another``); close it when done."""
        kv = self.kv.another()
        return self if kv is self.kv else StateStore(kv)

    def close(self) -> None:
        """Release the backend's connections."""
        self.kv.close()

    # -- the cluster's record ---------------------------------------------------------------------------------
    def put(self, state: ClusterState) -> None:
        self.kv.put(Space.CLUSTERS, state.cluster_id, state.to_dict())

    def get(self, cluster_id: str, *, records: bool = True) -> ClusterState | None:
        """The cluster's state; with ``records`` (default) also its epochs, its evaluation and its workers'
        reads, each a read of its own (``records=False``: one read, for a poll of the state alone)."""
        data = self.kv.get(Space.CLUSTERS, cluster_id)
        if data is None:
            return None
        state = ClusterState.from_dict(data)
        if records:
            kept = self.epochs(cluster_id)
            state.epochs = [r for r in kept if EVALUATION not in r]
            state.evaluation = next((r[EVALUATION] for r in reversed(kept) if EVALUATION in r), None)
            state.reads = self.reads(cluster_id)
        return state

    def ids(self) -> list[str]:
        return self.kv.keys(Space.CLUSTERS)

    def require(self, cluster_id: str) -> ClusterState:
        state = self.get(cluster_id)
        if state is None:
            known = ", ".join(sorted(self.ids())[-10:]) or "none"
            raise ConfigError(f"no TensorFlow cluster with id {cluster_id!r} in {self.describe()} (known: {known})")
        return state

    def list(self) -> list[ClusterState]:
        states = [s for s in (self.get(i) for i in self.ids()) if s is not None]
        return sorted(states, key=lambda s: s.started_at)

    def delete(self, cluster_id: str) -> None:
        """The cluster's record and every record kept beside it."""
        self.kv.delete(Space.CLUSTERS, [cluster_id])
        self.kv.delete(Space.STOPS, [cluster_id])
        for space in PER_CLUSTER:
            self.kv.delete(space, self.kv.keys(space, f"{cluster_id}/"))

    # -- stop requests ----------------------------------------------------------------------------------------
    def request_stop(self, cluster_id: str) -> None:
        self.kv.put(Space.STOPS, cluster_id, time.time())

    def stop_requested(self, cluster_id: str) -> bool:
        return self.kv.get(Space.STOPS, cluster_id) is not None

    def clear_stop(self, cluster_id: str) -> None:
        """Forget a stop request: a cluster resumed by a later launch is not stopped by an earlier request."""
        self.kv.delete(Space.STOPS, [cluster_id])

    # -- claims -----------------------------------------------------------------------------------------------
    def claim(self, cluster_id: str, resume: int, owner: str, stale_after_s: float) -> bool:
        """Atomically take the right to start ``cluster_id``'s supervisor number ``resume`` (0: the first):
        True for one caller only, however many launch at once; a claim older than ``stale_after_s`` (a
        launcher that died before its supervisor recorded anything) may be taken over, by one caller."""
        key, mine = f"{cluster_id}/{int(resume)}", {"owner": owner, "time": time.time()}
        if self.kv.put_if_absent(Space.CLAIMS, key, mine):
            return True
        held = self.kv.get(Space.CLAIMS, key)
        if held is None:
            return False  # released meanwhile (the cluster deleted): its next launch claims again
        taken = held.get("time", 0) if isinstance(held, dict) else 0
        if time.time() - taken <= stale_after_s:
            return False
        return self.kv.replace_if_equals(Space.CLAIMS, key, held, mine)

    def release_claim(self, cluster_id: str, resume: int, owner: str) -> None:
        """Give back ``owner``'s claim on supervisor ``resume`` of ``cluster_id`` (its launch failed before the
        supervisor started): the next launch claims at once. A claim someone else holds is left as it is."""
        key = f"{cluster_id}/{int(resume)}"
        held = self.kv.get(Space.CLAIMS, key)
        if isinstance(held, dict) and held.get("owner") == owner:
            self.kv.replace_if_equals(Space.CLAIMS, key, held, {"owner": "", "time": 0})

    # -- epochs and the evaluation ----------------------------------------------------------------------------
    def add_epoch(self, cluster_id: str, metrics: dict[str, Any]) -> None:
        """Append the chief's report of an epoch. Its number is taken with put-if-absent, so a second writer
        (an earlier attempt's chief still ending) adds its report after, never over, this one."""
        count = f"{cluster_id}/n"
        n = int(self.kv.get(Space.EPOCHS, count) or 0)
        while not self.kv.put_if_absent(Space.EPOCHS, f"{cluster_id}/{n:06d}", metrics):
            n += 1
        while True:  # the count goes up to n + 1, never down
            held = self.kv.get(Space.EPOCHS, count)
            if held is not None and int(held) > n:
                return
            if (self.kv.put_if_absent(Space.EPOCHS, count, n + 1) if held is None
                    else self.kv.replace_if_equals(Space.EPOCHS, count, held, n + 1)):
                return

    def epochs(self, cluster_id: str) -> list[dict[str, Any]]:
        n = int(self.kv.get(Space.EPOCHS, f"{cluster_id}/n") or 0)
        values = self.kv.get_many(Space.EPOCHS, [f"{cluster_id}/{i:06d}" for i in range(n)])
        return [values[k] for k in sorted(values)]

    def set_evaluation(self, cluster_id: str, evaluation: dict[str, Any]) -> None:
        """Record the held-out evaluation; it travels with the epochs' records, as the one record holding an
        ``evaluation`` key, which ``get`` takes out of the epochs."""
        self.add_epoch(cluster_id, {EVALUATION: evaluation, "time": round(time.time(), 3)})

    # -- reads ------------------------------------------------------------------------------------------------
    def add_reads(self, cluster_id: str, worker: int, epoch: int, record: dict[str, Any]) -> None:
        """Add what worker ``worker`` read in ``epoch`` (a ``ignite_tf.reader.locality.measure`` record) to its
        running total. Each worker writes only its own key, so this read-add-write has a single writer."""
        key = f"{cluster_id}/{int(worker)}"
        before = self.kv.get(Space.READS, key)
        total = combine(before, record) or {}
        total.update({"worker": int(worker), "passes": int((before or {}).get("passes", 0)) + 1,
                      "last_epoch": {"epoch": int(epoch), **{k: v for k, v in record.items() if k != "by_node"}}})
        for name in ("by", "where"):
            if name in record:
                total[name] = record[name]
        # What differed from the validated rows (on_data_change: warn), kept over every epoch.
        changes = [*(before or {}).get("data_changes", []),
                   *({"epoch": int(epoch), **c} for c in (record.get("data_check") or {}).get("changes", []))]
        if changes:
            total["data_changes"] = changes
        self.kv.put(Space.READS, key, total)

    def reads(self, cluster_id: str) -> list[dict[str, Any]]:
        """Every worker's running total of reads, by worker index."""
        found = self.kv.get_many(Space.READS, self.kv.keys(Space.READS, f"{cluster_id}/"))
        return sorted(found.values(), key=lambda r: r.get("worker", 0))

    # -- watchers of the chief's output -----------------------------------------------------------------------
    def watch_offset(self, cluster_id: str, watcher: str) -> int:
        """How much of the chief's output ``watcher`` (an Airflow task's try watching the cluster) has logged."""
        return int(self.kv.get(Space.WATCHES, f"{cluster_id}/{watcher}") or 0)

    def set_watch_offset(self, cluster_id: str, watcher: str, offset: int) -> None:
        """Record ``watcher``'s offset, for the next instance of its trigger (a triggerer restart)."""
        self.kv.put(Space.WATCHES, f"{cluster_id}/{watcher}", int(offset))


class LocalStateStore(StateStore):
    """The state in files under ``state_dir`` (:mod:`ignite_tf.state.files`): this host's processes only."""

    def __init__(self, state_dir: str | Path):
        super().__init__(FileKeyValueStore(state_dir))
        self.dir = self.kv.root


class IgniteStateStore(StateStore):
    """The state in the project's system caches on the Ignite cluster ``conn`` reaches
    (:mod:`ignite_tf.state.ignite`)."""

    def __init__(self, conn):
        super().__init__(IgniteKeyValueStore(conn))
        self.conn = conn


# -- which store --------------------------------------------------------------------------------------------------
def default_state_dir() -> Path:
    return Path(os.environ.get(ENV_STATE_DIR, HomeFolder.of().clusters))


def open_store(conn=None, state_dir: str | Path | None = None) -> StateStore:
    """The Ignite store when a connection is given, else the local state directory."""
    if conn is not None:
        return IgniteStateStore(conn)
    return LocalStateStore(state_dir or default_state_dir())


def store_to_env(store: StateStore) -> dict[str, str]:
    """Tell a child process (supervisor, runtime) which store to use; the connection travels separately."""
    if isinstance(store.kv, FileKeyValueStore):
        return {ENV_STATE_STORE: "local", ENV_STATE_DIR: str(store.kv.root)}
    return {ENV_STATE_STORE: "ignite"}


def store_from_env(environ: Mapping[str, str] | None = None) -> StateStore | None:
    """The store ``store_to_env`` named (the Ignite one with the connection of ``IGNITE_TF_ADDRESSES``...), or
    None when the environment names none."""
    env = os.environ if environ is None else environ
    kind = env.get(ENV_STATE_STORE)
    if kind == "local":
        return LocalStateStore(env[ENV_STATE_DIR])
    if kind == "ignite":
        from ignite_tf.connection import IgniteConnectionConfig

        conn = IgniteConnectionConfig.from_env(env)
        return IgniteStateStore(conn) if conn else None
    return None
