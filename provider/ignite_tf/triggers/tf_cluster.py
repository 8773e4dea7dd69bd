"""TFClusterTrigger: watch a TensorFlow cluster from the triggerer, with no worker slot held.

Polling only reads the state store and the chief's log, so it is idempotent and never starts anything: a
triggerer restart or a second copy of the trigger just watches the same cluster. The chief's output and the
per-epoch metrics are logged as they come (they appear in the task's log). ``on_kill`` (a user marking the
task failed/success or clearing it) stops the cluster.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import cached_property
from typing import Any

from airflow.triggers.base import BaseTrigger, TriggerEvent

from ignite_tf.connection import DEFAULT_CONN_ID
from ignite_tf.defaults import DEFAULT_POLL_INTERVAL
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
    """

    def __init__(self, *, cluster_id: str, ignite_conn_id: str | None = DEFAULT_CONN_ID,
                 state_dir: str | None = None, poll_interval: float = DEFAULT_POLL_INTERVAL, offset: int = 0,
                 run_store_conn_id: str | None = None):
        super().__init__()
        self.cluster_id = cluster_id
        self.ignite_conn_id = ignite_conn_id
        self.state_dir = state_dir
        self.poll_interval = poll_interval
        self.offset = offset
        self.run_store_conn_id = run_store_conn_id

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{self.__class__.__module__}.{self.__class__.__name__}",
            {"cluster_id": self.cluster_id, "ignite_conn_id": self.ignite_conn_id, "state_dir": self.state_dir,
             "poll_interval": self.poll_interval, "offset": self.offset, "run_store_conn_id": self.run_store_conn_id},
        )

    @cached_property
    def launcher(self):
        return launcher_for(self.ignite_conn_id, self.state_dir, self.run_store_conn_id)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        offset = self.offset
        while True:
            try:
                state, alive, text, offset = await asyncio.to_thread(self._poll, offset)
            except Exception as exc:  # noqa: BLE001 - an unknown cluster or unreachable store ends the watch
                yield TriggerEvent({"status": "error", "cluster_id": self.cluster_id, "message": str(exc),
                                    "tail": "", "summary": {}})
                return
            for line in text.splitlines():
                self.log.info("%s", line)
            if not alive:
                yield TriggerEvent(event_for(state, self.launcher))
                return
            await asyncio.sleep(self.poll_interval)

    def _poll(self, offset: int):
        state, alive = self.launcher.settled(self.cluster_id)
        text, offset = self.launcher.output(self.cluster_id, offset)
        return state, alive, text, offset

    async def on_kill(self) -> None:
        self.log.info("task killed by a user: stopping TensorFlow cluster %s", self.cluster_id)
        await asyncio.to_thread(self.launcher.stop, self.cluster_id)

