"""A reader started before anyone asks for it: see ``ignite_tf.data.read_ahead``."""

from __future__ import annotations

import threading
from collections.abc import Iterator


class HeadStart:
    """One read-ahead: its thread, the cache's columns, the first block and the rest of the block stream.

    ``start(key, work)`` runs ``work(head)`` in a thread, which fills ``columns``, ``first`` and ``rest``;
    ``take(key)`` hands the head start over once, after its thread ended.
    """

    _pending: dict[tuple, HeadStart] = {}
    _lock = threading.Lock()

    def __init__(self, keep: tuple):
        self.keep = keep  # the plan and conn the key names by id: alive as long as this head start
        self.columns, self.first, self.rest, self.error = None, None, None, None
        self.thread: threading.Thread | None = None

    @classmethod
    def start(cls, key: tuple, work, keep: tuple) -> None:
        head = cls(keep)

        def run():
            try:
                work(head)
            except Exception as exc:  # noqa: BLE001 - the dataset call reads again and raises it there
                head.error = exc

        head.thread = threading.Thread(target=run, name="ignite-tf-read-ahead", daemon=True)
        with cls._lock:
            old = cls._pending.pop(key, None)
            cls._pending[key] = head
        if old is not None:
            old.close()
        head.thread.start()

    @classmethod
    def take(cls, key: tuple) -> HeadStart | None:
        """The head start for ``key``, read through its first block; None if there is none or it failed."""
        with cls._lock:
            head = cls._pending.pop(key, None)
        if head is None:
            return None
        head.thread.join()
        if head.error is not None:
            head.close()
            return None
        return head

    @classmethod
    def drop_all(cls) -> None:
        with cls._lock:
            heads, cls._pending = list(cls._pending.values()), {}
        for head in heads:
            head.close()

    def stream(self) -> Iterator[dict]:
        if self.first is not None:
            yield self.first
            self.first = None
            yield from self.rest

    def close(self) -> None:
        self.thread.join()
        if self.rest is not None:
            self.rest.close()  # the reader's connections
