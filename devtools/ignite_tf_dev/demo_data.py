"""The demo's synthetic table (``source.generator: ignite_tf_dev.demo_data:tabular`` in dags/specs; nothing is
downloaded). Development tooling, not in the provider's wheel; the old name ``ignite_tf.demo_data:tabular``
still works in a spec's ``generator`` for one release, with a DeprecationWarning.

``tabular(n)``: ``n`` rows of 16 float32 features and an int32 label in {0, 1, 2} drawn from a fixed linear
model with noise, so a small classifier learns it to a known accuracy. Deterministic for a given seed.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

N_FEATURES = 16
N_CLASSES = 3


def tabular(n: int, *, seed: int = 0, start_id: int = 0) -> pd.DataFrame:
    """A DataFrame with columns ``id`` (int64, unique), ``f0..f15`` (float32) and ``label`` (int32)."""
    rng = np.random.default_rng(seed)
    weights = np.random.default_rng(1234).normal(size=(N_FEATURES, N_CLASSES)).astype(np.float32)
    x = rng.normal(size=(n, N_FEATURES)).astype(np.float32)
    logits = x @ weights + rng.normal(scale=0.5, size=(n, N_CLASSES)).astype(np.float32)
    frame = pd.DataFrame(x, columns=[f"f{i}" for i in range(N_FEATURES)])
    frame.insert(0, "id", np.arange(start_id, start_id + n, dtype=np.int64))
    frame["label"] = logits.argmax(axis=1).astype(np.int32)
    return frame


def feature_columns() -> list[str]:
    return [f"f{i}" for i in range(N_FEATURES)]
