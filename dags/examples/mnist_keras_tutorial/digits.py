"""A synthetic, MNIST-like data set of 28x28 grey-scale digits (nothing is downloaded).

Nothing can be downloaded here, so this stand-in keeps MNIST's shapes and types: 28x28 uint8 images
(0..255) of the digits 0-9. Each image is one of ten hand-drawn 8x8 glyphs, upsampled 3x to 24x24 and
centred in 28x28 (MNIST centres its digits in a 20x20 box with a 4-pixel border), shifted by up to two
pixels, with a random stroke intensity and noise.

- ``load_data()`` mirrors ``tf.keras.datasets.mnist.load_data()``: ``x`` uint8 ``[n, 28, 28]``, ``y`` uint8;
- ``frame(n)`` is the same data as a table (``id``, ``p0..p783`` scaled to [0, 1] in row-major order,
  ``label``) to load into Ignite: ``python load_cache.py --addresses 127.0.0.1:10800 --cache digits``.
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
SIDE = 28
N_PIXELS = SIDE * SIDE
_SMALL = np.array([[[c == "#" for c in row] for row in g] for g in GLYPHS], dtype=np.float32)
# 8x8 -> 24x24 (each pixel a 3x3 block), then a 2-pixel border -> 28x28.
TEMPLATES = np.pad(_SMALL.repeat(3, axis=1).repeat(3, axis=2), ((0, 0), (2, 2), (2, 2)))


def images(n: int, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images (uint8, 0..255, shape ``[n, 28, 28]``) and their labels (uint8, 0..9)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n)
    out = np.empty((n, SIDE, SIDE), dtype=np.float32)
    shifts = rng.integers(-2, 3, size=(n, 2))
    strength = rng.uniform(150, 255, size=n).astype(np.float32)
    for i in range(n):
        out[i] = np.roll(TEMPLATES[labels[i]], tuple(shifts[i]), axis=(0, 1)) * strength[i]
    out += rng.normal(scale=40, size=out.shape).astype(np.float32)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8), labels.astype(np.uint8)


def load_data(n_train: int = 10_000, n_test: int = 2_000):
    """``((x_train, y_train), (x_test, y_test))`` like ``tf.keras.datasets.mnist.load_data()``."""
    return images(n_train, seed=0), images(n_test, seed=1)


def frame(n: int, *, seed: int = 0) -> pd.DataFrame:
    """The images as a table: ``id`` (int64), ``p0..p783`` (float32 in [0, 1]), ``label`` (int32)."""
    x, y = images(n, seed=seed)
    table = pd.DataFrame(x.reshape(n, N_PIXELS) / np.float32(255), columns=[f"p{i}" for i in range(N_PIXELS)])
    table.insert(0, "id", np.arange(n, dtype=np.int64))
    table["label"] = y.astype(np.int32)
    return table
