"""Streams of blocks: ``{column: array}`` dicts of rows, as the partition reader yields them, regrouped.

What ``ignite_tf.data`` does to the reader's blocks before tf.data sees them: fill nulls, shuffle within a
block, join blocks into larger ones, cut them into batches, stack columns into a matrix. Plain NumPy over the
reader's output (no Ignite, no TensorFlow), shared by the dataset API and the async feed
(``ignite_tf.data.feed``), so it sits with the reader and not inside ``ignite_tf.data``.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

# Rows per element handed from Python to tf.data, which cuts them into batches in C++ (``rebatch``).
BLOCK_ROWS = 16_384
# Batches ready ahead of the training step: cut from a block already in memory, a few are enough.
PREFETCH_BATCHES = 4


def filled(values: np.ndarray) -> np.ndarray:
    """``values`` without a mask: nulls filled with the reader's fill value for the dtype."""
    if isinstance(values, np.ma.MaskedArray):
        from ignite_tf.reader.binary import null_fill

        return values.filled(null_fill(values.dtype))
    return values


def refuse_missing_labels(block: dict[str, np.ndarray], label: str, key: str, cache: str) -> None:
    """Raise ``MissingLabelError`` naming the keys of ``block``'s rows whose ``label`` is NULL (a masked value,
    which ``filled`` would turn into 0) or NaN (a float NULL, or a NaN stored): a row without a label is never
    trained on as if it had one."""
    values = block[label]
    missing = np.ma.getmaskarray(values) if isinstance(values, np.ma.MaskedArray) else np.zeros(len(values), bool)
    if values.dtype.kind == "f":
        missing = missing | np.isnan(np.ma.getdata(values))
    if not missing.any():
        return
    from ignite_tf.errors import MissingLabelError

    keys = [k.item() if hasattr(k, "item") else k for k in np.asarray(block[key])[missing][:10]]
    raise MissingLabelError(
        f"{int(missing.sum())} row(s) read from cache {cache!r} have no {label!r} (NULL or NaN), keys "
        f"{keys}{' and more' if missing.sum() > len(keys) else ''}: give those rows a label or leave them out "
        f"of the table (a validation suite's expect_column_values_to_not_be_null on {label!r} stops the "
        f"pipeline before training)", keys)


def block_shuffle(stream: Iterator[dict], rng: np.random.Generator) -> Iterator[dict]:
    """Each block's rows in a random order of ``rng``."""
    # The reader yields blocks of shuffle_buffer rows; permuting each block in NumPy costs far less than a
    # per-row tf.data shuffle and keeps memory at one block.
    for block in stream:
        order = rng.permutation(len(next(iter(block.values()))))
        yield {k: v[order] for k, v in block.items()}


def group(stream: Iterator[dict], n: int) -> Iterator[dict]:
    """Concatenations of ``n`` consecutive blocks of ``stream`` (the last may hold fewer)."""
    if n == 1:
        yield from stream
        return
    held: list[dict] = []
    for block in stream:
        held.append(block)
        if len(held) == n:
            yield {k: concat_all([b[k] for b in held]) for k in held[0]}
            held = []
    if held:
        yield {k: concat_all([b[k] for b in held]) for k in held[0]}


def stack_columns(columns: list[np.ndarray]) -> np.ndarray:
    """Columns of equal length as one float32 matrix ``[rows, columns]``."""
    out = np.empty((len(columns[0]), len(columns)), np.float32)
    for j, values in enumerate(columns):
        out[:, j] = values
    return out


def rebatch(stream: Iterator[dict], batch_size: int) -> Iterator[dict]:
    """Blocks cut into ``batch_size`` rows, a block's remainder carried into the next (the last may be short)."""
    pending: dict | None = None
    for block in stream:
        if pending is not None:
            block = {k: concat_all([pending[k], block[k]]) for k in block}
            pending = None
        n = len(next(iter(block.values())))
        full = n - n % batch_size
        for i in range(0, full, batch_size):
            yield {k: v[i:i + batch_size] for k, v in block.items()}
        if full < n:
            pending = {k: v[full:] for k, v in block.items()}
    if pending is not None:
        yield pending


def concat_all(arrays: list[np.ndarray]) -> np.ndarray:
    """One array of ``arrays`` (masked if any is)."""
    if len(arrays) == 1:
        return arrays[0]
    if any(isinstance(a, np.ma.MaskedArray) for a in arrays):
        return np.ma.concatenate(arrays)
    return np.concatenate(arrays)
