"""Record-level cuts: how a ShardPlan splits partitions when there are fewer (non-empty) partitions than workers.

The plan reads the keys of the cache once (``read_key_hashes``: row count and sorted ``key_hash`` samples per
partition), orders each partition's rows by key hash and cuts the run of all rows into equal pieces; a piece is
a ReadTask over a key-hash range (``cut_piece``), and pieces of one partition split by the ring's wrap-around
are joined again (``merge_wraparound``).
"""

from __future__ import annotations

import numpy as np

from ignite_tf.plan.partitions import PartitionMap
from ignite_tf.reader.tasks import HASH_SPACE, ReadTask, key_hash


def merge_wraparound(assigned: list[list[ReadTask]]) -> list[list[ReadTask]]:
    """Join adjacent pieces of one partition that the ring's wrap-around split in two."""
    out = []
    for slices in assigned:
        merged: list[ReadTask] = []
        for s in slices:
            prev = merged[-1] if merged else None
            if prev and prev.partition == s.partition and prev.hash_hi == s.hash_lo:
                merged[-1] = ReadTask(s.partition, prev.hash_lo, s.hash_hi, prev.rows + s.rows)
            else:
                merged.append(s)
        out.append(merged)
    return out


MAX_CUT_POINTS = 4096


def _bound(cut: dict, rank: int) -> tuple[int, int]:
    """(hash, actual rank) of the cut point nearest to ``rank`` in a partition's hash order."""
    n, hashes = cut["rows"], cut["hashes"]
    if rank <= 0:
        return 0, 0
    if rank >= n:
        return HASH_SPACE, n
    m = len(hashes)
    # hashes[j] is the hash of the row of rank (j * n) // m (all rows when m == n).
    j = min(m - 1, max(1, round(rank * m / n)))
    return int(hashes[j]), (j * n) // m


def cut_piece(partition: int, cut: dict, a: int, b: int) -> ReadTask | None:
    """Rows of ranks ``[a, b)`` of a cut partition, None when the cut points leave no hash range between them."""
    lo, ra = _bound(cut, a)
    hi, rb = _bound(cut, b)
    return ReadTask(partition, lo, hi, rows=rb - ra) if lo < hi else None


def read_key_hashes(conn, partition_map: PartitionMap) -> dict[int, dict]:
    """Row count and sorted ``key_hash`` samples per partition (only used when partitions < workers).

    Up to MAX_CUT_POINTS samples are kept per partition: exact cuts for small partitions, and for big ones
    cuts within rows/MAX_CUT_POINTS of the ideal, which keeps shares within 1% for up to 40 workers.
    """
    from ignite_tf.reader.partition import PartitionReader

    out: dict[int, dict] = {}
    with PartitionReader(conn, partition_map.cache, batch_size=65536) as reader:
        for p in range(partition_map.partitions):
            parts = [key_hash(np.asarray(b[reader.key_column], dtype=np.int64)) for b in reader.batches([p])]
            hashes = np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.uint64)
            n = len(hashes)
            if n > MAX_CUT_POINTS:
                hashes = hashes[(np.arange(MAX_CUT_POINTS) * n) // MAX_CUT_POINTS]
            out[p] = {"rows": n, "hashes": [int(h) for h in hashes]}
    return out
