"""Units of reading: ``ReadTask`` (a partition, or a key-hash slice of one) and the key hash that slices it.

A ShardPlan deals ReadTasks to workers (with the rows it planned for each); readers read them. They live
with the reader, the lower of the two packages: the planner also reads (the key hashes it cuts small
partitions by), so ``plan`` imports ``reader`` and never the other way round.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from ignite_tf.errors import ConfigError

HASH_SPACE = 2**64


@dataclass(frozen=True)
class ReadTask:
    """One unit of reading: the rows of ``partition`` whose ``key_hash`` lies in ``[hash_lo, hash_hi)``.

    :param partition: partition number.
    :param hash_lo: lowest key hash kept (inclusive), in the uint64 space of :func:`key_hash`.
    :param hash_hi: first key hash not kept; the default ``2**64`` keeps the whole partition.
    :param rows: the rows a ShardPlan counted in it when planning (0: not counted); not part of what is read,
        so two tasks over the same rows are equal whatever they planned.
    """

    partition: int
    hash_lo: int = 0
    hash_hi: int = HASH_SPACE
    rows: int = field(default=0, compare=False)

    def __post_init__(self):
        if isinstance(self.partition, np.integer):  # keep the task JSON-able
            object.__setattr__(self, "partition", int(self.partition))
        object.__setattr__(self, "rows", int(self.rows))
        if not isinstance(self.partition, int) or isinstance(self.partition, bool) or self.partition < 0:
            raise ConfigError(f"ReadTask.partition must be a partition number >= 0 (got {self.partition!r})")
        if not 0 <= self.hash_lo < self.hash_hi <= HASH_SPACE:
            raise ConfigError(f"ReadTask of partition {self.partition}: need 0 <= hash_lo < hash_hi <= 2**64 "
                              f"(got [{self.hash_lo}, {self.hash_hi}))")

    @property
    def whole(self) -> bool:
        return self.hash_lo == 0 and self.hash_hi == HASH_SPACE

    def split(self, parts: int) -> list[ReadTask]:
        """``parts`` disjoint tasks whose union is this one (equal slices of the hash range)."""
        if parts < 1:
            raise ConfigError(f"ReadTask.split: parts must be >= 1 (got {parts})")
        step = (self.hash_hi - self.hash_lo) / parts
        bounds = [self.hash_lo + round(step * i) for i in range(parts)] + [self.hash_hi]
        return [ReadTask(self.partition, lo, hi) for lo, hi in itertools.pairwise(bounds) if lo < hi]

    def to_dict(self) -> dict:
        out = {"partition": self.partition, "hash_lo": self.hash_lo, "hash_hi": self.hash_hi}
        return {**out, "rows": self.rows} if self.rows else out

    @classmethod
    def from_dict(cls, data: dict) -> ReadTask:
        return cls(int(data["partition"]), int(data.get("hash_lo", 0)), int(data.get("hash_hi", HASH_SPACE)),
                   int(data.get("rows", 0)))

    @classmethod
    def coerce(cls, task: ReadTask | int | dict) -> ReadTask:
        if isinstance(task, ReadTask):
            return task
        return cls.from_dict(task) if isinstance(task, dict) else cls(int(task))


_GAMMA, _M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)


def key_hash(keys: np.ndarray) -> np.ndarray:
    """splitmix64 of int64 keys, as uint64: ``z = k + 0x9E3779B97F4A7C15; z = (z ^ z>>30) * 0xBF58476D1CE4E5B9;
    z = (z ^ z>>27) * 0x94D049BB133111EB; z ^ z>>31`` (all mod 2**64; Steele, Lea & Flood 2014).

    Stable across processes, platforms and versions, so a shard plan computed once splits the same way
    on every worker.

    :param keys: integer keys (any integer dtype; taken as int64).
    """
    # In place on one copy: a page's few hundred keys cost allocations more than arithmetic.
    z = np.array(keys, dtype=np.int64).view(np.uint64)
    z += _GAMMA
    t = np.right_shift(z, _S30, out=np.empty_like(z))
    z ^= t
    z *= _M1
    z ^= np.right_shift(z, _S27, out=t)
    z *= _M2
    z ^= np.right_shift(z, _S31, out=t)
    return z if z.ndim else z[()]


class HashFilter:
    """A reader's ``key_filter`` that decides by the keys' :func:`key_hash`: ``keep(hashes) -> bool array``.

    Called on keys it hashes them, as any key filter does. A reader that hashed a page's keys already (for a
    task's hash range or the fingerprint) hands it those hashes instead: each key is hashed once per read.
    """

    def __init__(self, keep):
        self.keep = keep

    def __call__(self, keys: np.ndarray) -> np.ndarray:
        return self.keep(key_hash(keys))
