"""The toy data of both scripts: ten random features, a binary label linear in them.

``load_data(n)`` is the in-memory arrays the original script trains on (the tutorial makes its own small
data too); ``frame(n)`` is the same rows as a table (``id``, ``x0..x9``, ``y``) for an Ignite cache.
"""

from __future__ import annotations

import numpy as np

FEATURES = 10
WEIGHTS = np.linspace(-1.0, 1.0, FEATURES).astype("float32")


def load_data(n: int = 600, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    x = np.random.default_rng(seed).uniform(-1.0, 1.0, (n, FEATURES)).astype("float32")
    return x, (x @ WEIGHTS > 0).astype("int64")


def frame(n: int = 600, seed: int = 0):
    import pandas as pd

    x, y = load_data(n, seed)
    table = pd.DataFrame({f"x{j}": x[:, j] for j in range(FEATURES)})
    table.insert(0, "id", np.arange(n, dtype="int64"))
    table["y"] = y
    return table
