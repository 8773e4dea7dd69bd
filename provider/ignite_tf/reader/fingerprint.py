"""Fingerprints of what a reader read: per read task, a row count and order-independent hashes.

Validation fingerprints every task it reads; the training's reads compute the same as they go and compare
(:mod:`ignite_tf.validation.fingerprints`). A task's fingerprint is

- ``rows``: the rows read;
- ``keys``: the sum (mod 2**64) of the splitmix64 hashes of their keys (``ignite_tf.reader.tasks.key_hash``);
- ``columns``: per value column, the sum (mod 2**64) of a hash of (key hash, value).

Sums make it independent of the reading order (pages, failovers, a node answering out of order) and let the
fingerprints of a partition's slices add up to the partition's. A value is hashed as its float32 bits, the
form the model gets it in (a stacked matrix is float32, NULLs filled with NaN or 0 as the reader fills them),
so a column read on its own and the same column read into the matrix give the same hash. Strings hash by
CRC-32 of their UTF-8 bytes (stable across processes, unlike Python's ``hash``). This detects changes; it is
not a cryptographic digest.
"""

from __future__ import annotations

import zlib

import numpy as np

from ignite_tf.reader.binary import STACKED
from ignite_tf.reader.tasks import ReadTask, key_hash

_MIX = np.uint64(0xFF51AFD7ED558CCD)  # MurmurHash3's fmix64 constant: spreads a low-bit change upward
_SHIFT = np.uint64(29)
MASK_PREFIX = "?"  # the reader's NULL masks travel beside the columns; their data is already filled


def task_key(task: ReadTask) -> str:
    """How a fingerprint names its task: ``"17"`` for a whole partition, ``"17:lo:hi"`` for a key-hash slice."""
    return str(task.partition) if task.whole else f"{task.partition}:{task.hash_lo}:{task.hash_hi}"


def value_bits(values: np.ndarray) -> np.ndarray:
    """Each value as uint64 holding its float32 bits (strings: their CRC-32)."""
    values = np.ma.getdata(values)
    if values.dtype.kind in "OUS":
        return np.fromiter((zlib.crc32(str(v).encode("utf-8")) for v in values), np.uint64, len(values))
    return np.ascontiguousarray(values, np.float32).view(np.uint32).astype(np.uint64)


def column_sum(hashed_keys: np.ndarray, values: np.ndarray) -> int:
    """The order-independent hash of one column's (key, value) pairs."""
    h = (hashed_keys ^ value_bits(values)) * _MIX
    h ^= h >> _SHIFT
    return int(h.sum(dtype=np.uint64))


class Fingerprinter:
    """Fingerprints a reader's tasks as their rows go by; ``done`` holds those read to the end.

    :param key_column: the reader's key column.
    :param stack: the columns of the reader's stacked matrix, in matrix order.
    :param on_task: called with ``(task, fingerprint)`` when a task was read to the end (the training's check).
    """

    def __init__(self, key_column: str, stack: list[str] | None = None, on_task=None):
        self.key_column, self.stack, self.on_task = key_column, list(stack or []), on_task
        self.done: dict[str, dict] = {}
        self._open: dict[str, dict] = {}

    def add(self, task: ReadTask, chunk: dict) -> None:
        """Fold the rows of ``chunk`` (columns of one page, already filtered to the task) into ``task``'s."""
        keys = chunk[self.key_column]
        if not len(keys):
            return
        acc = self._open.setdefault(task_key(task), {"rows": 0, "keys": 0, "columns": {}})
        hashed = key_hash(keys)
        acc["rows"] += len(keys)
        acc["keys"] = (acc["keys"] + int(hashed.sum(dtype=np.uint64))) % 2**64
        cols = acc["columns"]
        for name, values in chunk.items():
            if name == self.key_column or name.startswith(MASK_PREFIX):
                continue
            pairs = zip(self.stack, values.T) if name == STACKED else [(name, values)]
            for column, data in pairs:
                cols[column] = (cols.get(column, 0) + column_sum(hashed, data)) % 2**64

    def finish(self, task: ReadTask) -> None:
        """``task`` was read to its end: its fingerprint is final."""
        key = task_key(task)
        fp = self._open.pop(key, {"rows": 0, "keys": 0, "columns": {}})
        self.done[key] = fp
        if self.on_task is not None:
            self.on_task(task, fp)


def combine(a: dict, b: dict) -> dict:
    """The fingerprint of the rows of both (disjoint rows: two slices of one partition)."""
    cols = dict(a["columns"])
    for name, value in b["columns"].items():
        cols[name] = (cols.get(name, 0) + value) % 2**64
    return {"rows": a["rows"] + b["rows"], "keys": (a["keys"] + b["keys"]) % 2**64, "columns": cols}


__all__ = ["Fingerprinter", "column_sum", "combine", "task_key", "value_bits"]
