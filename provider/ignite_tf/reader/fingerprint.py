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
_VIEW, _MATRIX, _CONVERT = range(3)  # how a column's value bits are had: a view, the matrix's, value_bits


def task_key(task: ReadTask) -> str:
    """How a fingerprint names its task: ``"17"`` for a whole partition, ``"17:lo:hi"`` for a key-hash slice."""
    return str(task.partition) if task.whole else f"{task.partition}:{task.hash_lo}:{task.hash_hi}"


def value_bits(values: np.ndarray) -> np.ndarray:
    """Each value as uint32: its float32 bits (strings: their CRC-32); any shape."""
    values = np.ma.getdata(values)
    if values.dtype.kind in "OUS":
        return np.fromiter((zlib.crc32(str(v).encode("utf-8")) for v in values.ravel()), np.uint32,
                           values.size).reshape(values.shape)
    if values.dtype != np.float32:
        values = values.astype(np.float32)
    return values.view(np.uint32)


def column_sums(key_bits: np.ndarray, columns: list[np.ndarray]) -> np.ndarray:
    """The order-independent hash of each column's (key, value) pairs: the sum (mod 2**32) of
    ``key bits XOR value bits`` over the rows.

    ``key_bits``: the low 32 bits of the keys' hashes; ``columns``: each column's ``value_bits`` (or float32
    values: the same bits), flat (a block of several columns: one after the other).
    The XOR ties each value to its row (a value moved to another row changes the sum), and one changed value
    always changes the sum (its term changes mod 2**32). All columns in three NumPy calls: a page holds a few
    hundred rows, so calls per column, not arithmetic, were what cost (the whole fingerprint must stay within
    5% of the reader's throughput: bench/ingest.py).
    """
    bits = np.concatenate(columns) if len(columns) > 1 else np.array(columns[0])
    bits = bits.view(np.uint32).reshape(-1, len(key_bits))
    return np.bitwise_xor(bits, key_bits, out=bits).sum(axis=1, dtype=np.uint32)


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
        self._layouts: dict[tuple, tuple[list, list[str]]] = {}

    def add(self, task: ReadTask, chunk: dict, hashes: np.ndarray | None = None) -> None:
        """Fold the rows of ``chunk`` (columns of one page, already filtered to the task) into ``task``'s;
        ``hashes``: their keys' ``key_hash``, where the reader has them already."""
        keys = chunk[self.key_column]
        if not len(keys):
            return
        # Every page of a reader has the same columns: what to do with each is worked out once.
        layout = self._layouts.get(tuple(chunk))
        if layout is None:
            layout = self._layouts[tuple(chunk)] = self._layout(chunk)
        how, names = layout
        key = task_key(task)
        acc = self._open.get(key)
        if acc is None:
            acc = self._open[key] = {"rows": 0, "keys": 0, "names": names, "sums": np.zeros(len(names), np.uint32)}
        hashed = key_hash(keys) if hashes is None else hashes
        acc["rows"] += len(keys)
        acc["keys"] = (acc["keys"] + int(hashed.sum(dtype=np.uint64))) % 2**64
        if names:
            # float32 as is, viewed as bits once, after the concatenation (a view per column cost more).
            parts = [chunk[name] if kind == _VIEW else chunk[name].T.ravel() if kind == _MATRIX else
                     value_bits(chunk[name]).view(np.float32) for name, kind in how]
            acc["sums"] += column_sums(hashed.astype(np.uint32), parts)  # uint32: wraps mod 2**32

    def _layout(self, chunk: dict) -> tuple[list[tuple[str, int]], list[str]]:
        how, names = [], []
        for name, values in chunk.items():
            if name == self.key_column or name.startswith(MASK_PREFIX):
                continue
            if name == STACKED:
                how.append((name, _MATRIX))
                names += self.stack
            else:
                how.append((name, _VIEW if values.dtype == np.float32 else _CONVERT))
                names.append(name)
        return how, names

    def finish(self, task: ReadTask) -> None:
        """``task`` was read to its end: its fingerprint is final."""
        key = task_key(task)
        acc = self._open.pop(key, None)
        fp = {"rows": 0, "keys": 0, "columns": {}} if acc is None else {
            "rows": acc["rows"], "keys": acc["keys"], "columns": dict(zip(acc["names"], acc["sums"].tolist(),
                                                                          strict=True))}
        self.done[key] = fp
        if self.on_task is not None:
            self.on_task(task, fp)


def combine(a: dict, b: dict) -> dict:
    """The fingerprint of the rows of both (disjoint rows: two slices of one partition)."""
    cols = dict(a["columns"])
    for name, value in b["columns"].items():
        cols[name] = (cols.get(name, 0) + value) % COLUMN_MOD
    return {"rows": a["rows"] + b["rows"], "keys": (a["keys"] + b["keys"]) % 2**64, "columns": cols}


__all__ = ["Fingerprinter", "column_sums", "combine", "task_key", "value_bits"]
