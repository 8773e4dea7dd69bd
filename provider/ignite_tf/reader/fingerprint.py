"""Fingerprints of what a reader read: per read task, a row count and order-independent hashes.

Validation fingerprints every task it reads; the training's reads compute the same as they go and compare
(:mod:`ignite_tf.validation.fingerprints`). A task's fingerprint is

- ``rows``: the rows read;
- ``keys``: the sum (mod 2**64) of the splitmix64 hashes of their keys (``ignite_tf.reader.tasks.key_hash``);
- ``columns``: per value column, the sum (mod 2**32) of (low 32 bits of the key hash XOR the value's 32 bits).

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

COLUMN_MOD = 2**32
MASK_PREFIX = "?"  # the reader's NULL masks travel beside the columns; their data is already filled


def task_key(task: ReadTask) -> str:
    """How a fingerprint names its task: ``"17"`` for a whole partition, ``"17:lo:hi"`` for a key-hash slice."""
    return str(task.partition) if task.whole else f"{task.partition}:{task.hash_lo}:{task.hash_hi}"


def value_bits(values: np.ndarray) -> np.ndarray:
    """Each value as uint32: its float32 bits (strings: their CRC-32)."""
    values = np.ma.getdata(values)
    if values.dtype.kind in "OUS":
        return np.fromiter((zlib.crc32(str(v).encode("utf-8")) for v in values), np.uint32, len(values))
    if values.dtype != np.float32:
        values = values.astype(np.float32)
    return values.view(np.uint32)


def column_sum(key_bits: np.ndarray, values: np.ndarray) -> int:
    """The order-independent hash of one column's (key, value) pairs: the sum (mod 2**32) of
    ``key bits XOR value bits``.

    ``key_bits``: the low 32 bits of the keys' hashes. The XOR ties each value to its row (a value moved to
    another row changes the sum), and one changed value always changes the sum (its term changes mod 2**32).
    Two passes over 32-bit data: a 64-bit mix per value cost several times as much, and the whole
    fingerprint must stay within 5% of the reader's throughput (bench/ingest.py).
    """
    return int(np.bitwise_xor(value_bits(values), key_bits).sum(dtype=np.uint32))


def matrix_sums(key_bits: np.ndarray, matrix: np.ndarray) -> list[int]:
    """``column_sum`` of every column of a float32 matrix ``[rows, columns]``."""
    bits = matrix.view(np.uint32) if matrix.dtype == np.float32 else matrix.astype(np.float32).view(np.uint32)
    return [int(s) for s in np.bitwise_xor(bits, key_bits[:, None]).sum(axis=0, dtype=np.uint32)]


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
        hashed = hashed.astype(np.uint32)  # the low 32 bits, beside 32-bit values
        cols = acc["columns"]
        for name, values in chunk.items():
            if name == self.key_column or name.startswith(MASK_PREFIX):
                continue
            if name == STACKED:
                sums = zip(self.stack, matrix_sums(hashed, values), strict=True)
            else:
                sums = [(name, column_sum(hashed, values))]
            for column, value in sums:
                cols[column] = (cols.get(column, 0) + value) % COLUMN_MOD

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
        cols[name] = (cols.get(name, 0) + value) % COLUMN_MOD
    return {"rows": a["rows"] + b["rows"], "keys": (a["keys"] + b["keys"]) % 2**64, "columns": cols}


__all__ = ["Fingerprinter", "column_sum", "combine", "matrix_sums", "task_key", "value_bits"]
