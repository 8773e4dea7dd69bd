"""TFClusterTrigger: watch a TensorFlow cluster from the triggerer, with no worker slot held.

Polling only reads the state store and the chief's log, so it is idempotent and never starts anything: a
triggerer restart or a second copy of the trigger just watches the same cluster. The chief's output and the
per-epoch metrics are logged as they come (they appear in the task's log).

Two things outlive one trigger instance:

- **How far the chief's output was logged.** Airflow re-creates a trigger from the kwargs it was deferred with,
  so an offset kept in the trigger alone started over after a triggerer restart. The offset of each ``watcher``
  (one task try: its log is one file set) is kept in the state store as each poll's lines are logged, and
  the next instance of that watcher's trigger starts there. A poll's lines are logged once their offset is
  recorded, and a cancelled trigger (what Airflow does to a trigger it moves to another triggerer or stops)
  finishes both first: each line is logged exactly once. Only a triggerer killed outright in the moment
  between recording and logging loses that poll's lines from the task's log (at most once: a user reading
  the log is never shown a line twice; every line stays in the run's log, ``ignite-tf attach``).
- **Who owns the cluster.** Only the trigger of the task that launched the cluster (``owns_cluster``) stops it
  when a user kills the task (marks it failed/success or clears it: Airflow calls ``on_kill``); a sensor's
  trigger only watches.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import cached_property
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ignite_tf.connection import DEFAULT_CONN_ID
from ignite_tf.defaults import DEFAULT_OUTAGE_BUDGET_S, DEFAULT_POLL_INTERVAL
from ignite_tf.retries import acall
from ignite_tf.triggers.cluster_events import event_for, launcher_for

__all__ = ["TFClusterTrigger", "event_for", "launcher_for"]  # the helpers' old home


class TFClusterTrigger(BaseTrigger):
    """Fires once the cluster ``cluster_id`` has ended.

    :param cluster_id: the cluster to watch.
    :param ignite_conn_id: connection whose Ignite holds the cluster state (None: ``state_dir``).
    :param state_dir: local state directory when the state is not in Ignite.
    :param poll_interval: seconds between polls.
    :param offset: byte offset of the chief's output already logged.
    :param run_store_conn_id: the ``aws`` connection of an object-store run root (the chief's log is read there).
    :param watcher: who watches (``watcher_of``: the task try whose log gets the chief's output); its offset is
        kept in the state store for the next instance of this trigger. None: kept in this instance only.
    :param owns_cluster: True for the trigger of the task that launched the cluster: a user killing that task
        stops the cluster. False (a sensor): ``on_kill`` leaves the cluster running.
    :param outage_budget_s: seconds a poll may keep failing transiently (the state store or run store not
        answering: ``ignite_tf.retries``) before the watch ends with the outage named; the cluster is not touched.
    """

    def __init__(self, *, cluster_id: str, ignite_conn_id: str | None = DEFAULT_CONN_ID,
                 state_dir: str | None = None, poll_interval: float = DEFAULT_POLL_INTERVAL, offset: int = 0,
                 run_store_conn_id: str | None = None, watcher: str | None = None, owns_cluster: bool = False,
                 outage_budget_s: float = DEFAULT_OUTAGE_BUDGET_S):
        super().__init__()
        self.cluster_id = cluster_id
        self.ignite_conn_id = ignite_conn_id
        self.state_dir = state_dir
        self.poll_interval = poll_interval
        self.offset = offset
        self.run_store_conn_id = run_store_conn_id
        self.watcher = watcher
        self.owns_cluster = owns_cluster
        self.outage_budget_s = outage_budget_s

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{self.__class__.__module__}.{self.__class__.__name__}",
            {"cluster_id": self.cluster_id, "ignite_conn_id": self.ignite_conn_id, "state_dir": self.state_dir,
             "poll_interval": self.poll_interval, "offset": self.offset, "run_store_conn_id": self.run_store_conn_id,
             "watcher": self.watcher, "owns_cluster": self.owns_cluster, "outage_budget_s": self.outage_budget_s},
        )

    @cached_property
    def launcher(self):
        return launcher_for(self.ignite_conn_id, self.state_dir, self.run_store_conn_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        what = f"the state store of TensorFlow cluster {self.cluster_id}"
        try:
            offset = await acall(what, self._start_offset, budget_s=self.outage_budget_s, logger=self.log)
        except Exception as exc:  # noqa: BLE001 - a store down past the budget ends the watch, as in a poll
            yield self._watch_failed(exc)
            return
        while True:
            try:  # a store that does not answer is waited for, within the budget: the cluster goes on meanwhile
                state, alive, text, end = await acall(what, self._poll, offset, budget_s=self.outage_budget_s,
                                                      logger=self.log)
            except Exception as exc:  # noqa: BLE001 - an unknown cluster, or a store down past the budget
                yield self._watch_failed(exc)
                return
            if end != offset:
                offset = end
                await self._record_then_log(text, end)
            if not alive:
                yield TriggerEvent(event_for(state, self.launcher))
                return
            await asyncio.sleep(self.poll_interval)

    async def _record_then_log(self, text: str, end: int) -> None:
        """Record ``end`` for the next instance, then log the lines before it: each line once.

        Cancelled while recording (Airflow moving or stopping the trigger), it still finishes both; awaiting the
        recording's thread alone would let a cancel drop a recording not yet started while its lines were logged.
        """
        recording = asyncio.ensure_future(asyncio.to_thread(self._keep_offset, end))
        try:
            await asyncio.shield(recording)
        finally:
            if not recording.done():
                await recording
            for line in text.splitlines():
                self.log.info("%s", line)

    def _start_offset(self) -> int:
        """Where this watcher's previous trigger instance stopped logging (a triggerer restart), else ``offset``."""
        if self.watcher is None:
            return self.offset
        return max(self.offset, self.launcher.store.watch_offset(self.cluster_id, self.watcher))

    def _keep_offset(self, offset: int) -> None:
        self.offset = offset
        if self.watcher is not None:
            try:
                self.launcher.store.set_watch_offset(self.cluster_id, self.watcher, offset)
            except Exception as exc:  # noqa: BLE001 - losing the offset repeats lines after a restart, no more
                self.log.warning("could not record how far cluster %s's output was logged: %s", self.cluster_id, exc)

    def _poll(self, offset: int):
        state, alive = self.launcher.settled(self.cluster_id)
        text, offset = self.launcher.output(self.cluster_id, offset)
        return state, alive, text, offset

    def _watch_failed(self, exc: Exception) -> TriggerEvent:
        return TriggerEvent({"status": "error", "cluster_id": self.cluster_id, "message": str(exc), "tail": "",
                             "summary": {}})

    async def on_kill(self) -> None:
        if not self.owns_cluster:
            self.log.info("task killed by a user: it only watched TensorFlow cluster %s, which goes on",
                          self.cluster_id)
            return
        self.log.info("task killed by a user: stopping TensorFlow cluster %s", self.cluster_id)
        await asyncio.to_thread(self.launcher.stop, self.cluster_id)

