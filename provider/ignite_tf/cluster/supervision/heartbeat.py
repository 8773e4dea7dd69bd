"""The supervisor's heartbeat, apart from the calls of its loop that can block.

Every reader on every host takes a cluster whose recorded heartbeat is older than ``LOST_AFTER_S`` for lost. A
loop that both supervised and beat stopped beating whenever one of its calls waited: a frozen Kubernetes API
server, a slow pod list, 64 log streams closing. Here the loop only hands its latest state over (``record``:
no I/O unless asked to write at once); a thread of its own, on a store connection of its own, writes that state
with a fresh heartbeat every ``HEARTBEAT_S``.

- One writer at a time, each writing the latest state handed over: an older state never overwrites a newer one.
- The thread beats only while the loop has come round within ``stall_s`` (the outage budget): a loop stuck
  longer than any outage it may wait out stops the heartbeat, and the cluster is lost, as it should be.
- A final state is written once, by the loop (``record(force=True)``), and the thread writes nothing after it:
  whoever saw it (a stop, a retry) may already run the cluster's next supervisor.
"""

from __future__ import annotations

import sys
import threading
import time

from ignite_tf.state import ClusterState, StateStore, Status

__all__ = ["HEARTBEAT_S", "Heartbeat"]

HEARTBEAT_S = 2.0


class Heartbeat:
    """Writes the latest state handed to ``record`` into ``store``, at once when forced, else within
    ``HEARTBEAT_S``; ``start``/``stop`` the thread that beats meanwhile."""

    def __init__(self, store: StateStore, stall_s: float):
        self.store, self.stall_s = store, stall_s
        self._own_store: StateStore | None = None  # the thread's connection (a thin client is one thread's)
        self._latest: dict | None = None
        self._written = 0.0  # time.monotonic() of the last write
        self._loop_seen = time.monotonic()
        self._lock = threading.Lock()  # one write at a time
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def record(self, state: ClusterState, force: bool = False) -> None:
        """Hand ``state`` over (the loop's thread); with ``force`` write it now, in this thread. Before the
        thread starts (or after it stopped), a state not written for ``HEARTBEAT_S`` is written here too."""
        self._latest = state.to_dict()
        self._loop_seen = time.monotonic()
        if force or (self._thread is None and time.monotonic() - self._written >= HEARTBEAT_S):
            self._write(self.store)

    def start(self) -> None:
        self._own_store = self.store.another()
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name="heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop beating (before the final state is written, and on a hand-over)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=HEARTBEAT_S * 5)
            self._thread = None
        if self._own_store is not None and self._own_store is not self.store:
            self._own_store.close()
        self._own_store = None

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S / 4):
            stuck = time.monotonic() - self._loop_seen > self.stall_s  # longer than any outage it waits out
            if not stuck and time.monotonic() - self._written >= HEARTBEAT_S:
                self._write(self._own_store, beat=True)

    def _write(self, store: StateStore, beat: bool = False) -> None:
        """Write the latest state handed over, with a fresh heartbeat; a beat writes no final state (the loop
        writes that, once) and nothing once stopped."""
        with self._lock:
            latest = self._latest
            if latest is None or (beat and (self._stop.is_set() or Status(latest["status"]).final)):
                return
            state = ClusterState.from_dict(latest)
            state.heartbeat = time.time()
            try:
                store.put(state)
            except Exception as exc:  # noqa: BLE001 - keep supervising; the store may come back
                sys.stdout.write(f"[ignite-tf] could not record state: {exc}\n")
            finally:
                self._written = time.monotonic()  # tried: the next try a heartbeat later, not at once
