"""The held-out evaluation split: rows a shard plan reserves for evaluation, never trained on.

A row is held out when a stable hash of its key, salted by the split's seed, falls in the lowest ``fraction``
of the hash space: ``key_hash(key_hash(key) ^ seed) < fraction * 2**64`` (splitmix64, see
:func:`ignite_tf.reader.tasks.key_hash`). It depends on the key alone, so the same rows are held out in every run
and every retraining of the same table (two versions are compared on the same rows), a row added later is
assigned once and for all, and no read of the cache is needed to make the split. The seed decorrelates the split
from the key-hash ranges that cut partitions (those use ``key_hash(key)`` unsalted).

The readers apply it as a key filter (``PartitionReader(key_filter=...)``): training reads
``split.training_rows``, the evaluation ``split.evaluation_rows``. Validation reads whole partitions, so it
covers both sides.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ignite_tf.errors import ConfigError
from ignite_tf.reader.tasks import HASH_SPACE, HashFilter, key_hash

__all__ = ["EvaluationSplit"]


@dataclass(frozen=True)
class EvaluationSplit:
    """Rows held out for evaluation by a salted hash of their key.

    :param fraction: share of the rows held out, ``0 <= fraction < 1`` (0: no split, every row trains).
    :param seed: salt of the hash; another seed holds out other rows. Keep it fixed across runs so that
        versions are evaluated on the same rows.
    """

    fraction: float = 0.0
    seed: int = 0

    def __post_init__(self):
        try:
            fraction = float(self.fraction or 0.0)
        except (TypeError, ValueError):
            raise ConfigError(f"shard_plan.evaluation must be a number in [0, 1) (got {self.fraction!r})") from None
        if not math.isfinite(fraction) or not 0.0 <= fraction < 1.0:
            raise ConfigError(f"shard_plan.evaluation must be a number in [0, 1), the share of rows held out for "
                              f"evaluation (got {self.fraction!r}); e.g. 0.1")
        if isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer)):
            raise ConfigError(f"shard_plan.evaluation_seed must be an integer (got {self.seed!r})")
        object.__setattr__(self, "fraction", fraction)
        object.__setattr__(self, "seed", int(self.seed))

    @classmethod
    def parse(cls, value: EvaluationSplit | float | dict | None, seed: int | None = None) -> EvaluationSplit:
        """``value`` as a split: a split, a fraction (with ``seed``), a ``to_dict()``, or None (no split)."""
        if isinstance(value, EvaluationSplit):
            return value
        if isinstance(value, dict):
            return cls(value.get("fraction", 0.0), value.get("seed", 0) if seed is None else seed)
        return cls(value or 0.0, seed or 0)

    @property
    def enabled(self) -> bool:
        return self.fraction > 0.0

    @property
    def threshold(self) -> int:
        """Hashes below this are held out."""
        return min(HASH_SPACE - 1, int(self.fraction * HASH_SPACE))

    def held_out(self, keys: np.ndarray) -> np.ndarray:
        """Whether each key's row is held out for evaluation (a boolean array like ``keys``)."""
        return self.held_out_hashes(key_hash(keys))

    def held_out_hashes(self, hashes: np.ndarray) -> np.ndarray:
        """``held_out`` of the keys whose ``key_hash`` is ``hashes``."""
        salted = hashes ^ np.uint64(self.seed % HASH_SPACE)
        return key_hash(salted.view(np.int64)) < np.uint64(self.threshold)

    def training_rows(self, keys: np.ndarray) -> np.ndarray:
        """The key filter of training reads: rows not held out."""
        return ~self.held_out(keys)

    def evaluation_rows(self, keys: np.ndarray) -> np.ndarray:
        """The key filter of the evaluation read: the held-out rows."""
        return self.held_out(keys)

    def training_filter(self):
        """``key_filter`` for a reader that feeds training (None: no split, read every row)."""
        return HashFilter(lambda hashes: ~self.held_out_hashes(hashes)) if self.enabled else None

    def to_dict(self) -> dict[str, Any]:
        return {"fraction": self.fraction, "seed": self.seed, "by": "key hash"}

    def describe(self) -> str:
        return f"{self.fraction:.0%} of rows held out for evaluation (key hash, seed {self.seed})"
