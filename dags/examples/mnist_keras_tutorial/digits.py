"""A synthetic, MNIST-like data set of 8x8 grey-scale digits (nothing is downloaded).

MNIST's 28x28 = 784 pixel columns are a lot for an SQL table, so this stand-in keeps MNIST's shape of the
problem (images of the digits 0-9, 10 classes) at 8x8 = 64 pixels, like scikit-learn's ``digits``: each
image is a hand-drawn 8x8 glyph, shifted by up to one pixel, with random stroke intensity and noise,
pixel values 0..16.

- ``load_data()`` mirrors ``tf.keras.datasets.mnist.load_data()`` (flat 64-pixel rows instead of 28x28);
- ``frame(n)`` is the same data as a table (``id``, ``p0..p63`` scaled to [0, 1], ``label``) to load into
  Ignite: ``python load_cache.py --addresses 127.0.0.1:10800 --cache digits``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

GLYPHS = [
    ["..####..", ".#....#.", ".#....#.", ".#....#.", ".#....#.", ".#....#.", ".#....#.", "..####.."],
    ["...##...", "..###...", "...##...", "...##...", "...##...", "...##...", "...##...", "..####.."],
    ["..####..", ".#....#.", "......#.", ".....#..", "....#...", "...#....", "..#.....", ".######."],
    ["..####..", ".#....#.", "......#.", "...###..", "......#.", "......#.", ".#....#.", "..####.."],
    [".....#..", "....##..", "...#.#..", "..#..#..", ".#...#..", ".######.", ".....#..", ".....#.."],
    [".######.", ".#......", ".#......", ".#####..", "......#.", "......#.", ".#....#.", "..####.."],
    ["..####..", ".#......", ".#......", ".#####..", ".#....#.", ".#....#.", ".#....#.", "..####.."],
    [".######.", "......#.", ".....#..", "....#...", "...#....", "...#....", "...#....", "...#...."],
    ["..####..", ".#....#.", ".#....#.", "..####..", ".#....#.", ".#....#.", ".#....#.", "..####.."],
    ["..####..", ".#....#.", ".#....#.", "..#####.", "......#.", "......#.", ".....#..", "..###..."],
]
TEMPLATES = np.array([[[c == "#" for c in row] for row in g] for g in GLYPHS], dtype=np.float32)
N_PIXELS = 64


def images(n: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` flat images (float32, 0..16, shape ``[n, 64]``) and their labels (int64, 0..9)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n)
    out = np.empty((n, 8, 8), dtype=np.float32)
    shifts = rng.integers(-1, 2, size=(n, 2))
    strength = rng.uniform(10, 16, size=n).astype(np.float32)
    for i in range(n):
        out[i] = np.roll(TEMPLATES[labels[i]], tuple(shifts[i]), axis=(0, 1)) * strength[i]
    out += rng.normal(scale=2.5, size=out.shape).astype(np.float32)
    return np.clip(np.rint(out), 0, 16).reshape(n, N_PIXELS), labels.astype(np.int64)


def load_data(n_train: int = 10_000, n_test: int = 2_000):
    """``((x_train, y_train), (x_test, y_test))`` like ``tf.keras.datasets.mnist.load_data()``."""
    return images(n_train, seed=0), images(n_test, seed=1)


def frame(n: int, *, seed: int = 0) -> pd.DataFrame:
    """The images as a table: ``id`` (int64), ``p0..p63`` (float32 in [0, 1]), ``label`` (int32)."""
    x, y = images(n, seed=seed)
    table = pd.DataFrame(x / np.float32(16), columns=[f"p{i}" for i in range(N_PIXELS)])
    table.insert(0, "id", np.arange(n, dtype=np.int64))
    table["label"] = y.astype(np.int32)
    return table
