"""Mirror: a background thread that copies a staging folder's growing files to the run store.

Each writer keeps its local file (a task's log, written by the process or the pod log follower) and the
mirror rewrites the changed ones as whole objects every ``every_s`` seconds and once more at the end, so a
reader of the store (``attach``, the Airflow task log) is at most that far behind. Object stores have no
append: rewriting a log costs its size per round, fine for logs of a training run.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path

from ignite_tf.runstore.store import RunStore

EVERY_S = 1.5


class Mirror:
    """Copy ``local/<sub>`` to ``store/<sub>`` for each ``sub`` in ``subs`` while running (``start``/``stop``)."""

    def __init__(self, store: RunStore, local: str | Path, subs: tuple[str, ...], every_s: float = EVERY_S):
        self.store, self.local, self.subs, self.every_s = store, Path(local), subs, every_s
        self._seen: dict[str, dict[str, tuple]] = {s: {} for s in subs}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._warned = False

    def start(self) -> Mirror:
        if self.store.remote and self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="ignite-tf-mirror", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            self.flush()

    def flush(self) -> None:
        """Copy what changed now."""
        with self._lock:
            for sub in self.subs:
                try:
                    self.store.put_dir(self.local / sub, sub, self._seen[sub])
                except Exception as exc:  # noqa: BLE001 - a store hiccup must not stop training; next round retries
                    if not self._warned:
                        self._warned = True
                        sys.stderr.write(f"[ignite-tf] copying {sub}/ to {self.store.url} failed: {exc}\n")

    def stop(self) -> None:
        """A last copy, then end the thread."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if self.store.remote:
            self.flush()
