"""A worker's rows as ``tf.data`` datasets: one epoch's (``dataset``), many epochs' in one (``epochs_dataset``),
one per epoch (``epochs``). Python hands tf.data whole blocks (``rows.blocks``); tf.data cuts them into batches."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.data.ahead import ahead_key
from ignite_tf.data.deprecated import label_renamed
from ignite_tf.data.plan import load_plan, shard, worker_index
from ignite_tf.data.rows import blocks, cache_columns, columns_to_read
from ignite_tf.defaults import DEFAULT_SHUFFLE_BUFFER
from ignite_tf.errors import ConfigError
from ignite_tf.reader.ahead import HeadStart
from ignite_tf.reader.blocks import BLOCK_ROWS, PREFETCH_BATCHES, filled, refuse_missing_labels, stack_columns

# Blocks read ahead of the one being cut into batches.
BLOCKS_AHEAD = 1


@label_renamed
def dataset(batch_size: int = 1024, epoch: int = 0, *, label_column: str | None = None,
            features: list[str] | None = None, stack: bool = False, worker: int | None = None, plan=None,
            cache: str | None = None, conn: IgniteConnectionConfig | None = None,
            shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER, seed: int | None = None,
            page_size: int = 1024, include_key: bool = False, prefetch: bool = True, block_rows: int = BLOCK_ROWS,
            drop_remainder: bool = True, input_context=None):
    """This worker's slice of the cache for ``epoch`` as a ``tf.data.Dataset``.

    Python reads the shard in blocks (see ``blocks``), one block ahead of the training step in a tf.data
    thread; tf.data cuts them into batches of exactly ``batch_size`` rows. Memory: about three blocks and
    one shuffle unit, however large the shard.

    Full batches by default (``drop_remainder=True``): this dataset feeds training, usually repeated
    (``.repeat()``, or one per epoch). A tutorial's ``ds.shuffle(n).repeat().batch(b)`` only ever yields
    full batches, and MultiWorkerMirroredStrategy needs them: it splits each batch among the replicas
    (evenly by rows when the batch size is static, which full batches make it; else each batch in equal
    parts), and the short batch ending a pass can leave a replica with no rows (Conv2D's gradient then
    fails with ``ReluGrad ... [0,26,26,32] != [0,28,28,1]``). The cost: each pass leaves out fewer than ``batch_size``
    rows of the shard, different rows every epoch and, with ``shuffle_buffer``, every pass of
    ``.repeat()``. ``drop_remainder=False`` keeps them in a short last batch, as ``tf.data``'s ``batch``
    does by default: for a single pass that must see every row (evaluation), not for sync training.

    :param batch_size: rows per element (per worker: the global batch is this times the workers).
    :param epoch: selects the plan's assignment (with reshuffle="epoch", a different slice every epoch).
    :param label_column: column yielded apart: elements are ``(features, label)`` (``label=``: its deprecated
        name).
    :param features: feature columns (default: every column but the key and the label).
    :param stack: features as one float32 matrix ``[batch, n_features]`` instead of a dict of columns.
    :param shuffle_buffer: rows shuffled together within the shard (0 = keep reading order); seeded by
        (seed, epoch, worker), so a restarted run sees the same order.
    :param prefetch: keep ``PREFETCH_BATCHES`` batches ready. tf.data's autotuning is off for this dataset
        (see the code: it delays the end of each epoch); stages you add with ``AUTOTUNE`` get TF's defaults,
        or turn it back on with ``ds.with_options(...)``.
    :param block_rows: rows per block handed from Python to tf.data (rounded to whole shuffle units).
    :param drop_remainder: True: every batch holds ``batch_size`` rows; False: the last batch of a pass may
        be shorter (see above).
    :param input_context: pass the ``tf.distribute.InputContext`` under ParameterServerStrategy.
    :raises ConfigError: with ``drop_remainder``, when the worker's planned shard holds fewer rows than one
        batch (the dataset would be empty).
    """
    import tensorflow as tf

    part = epoch_part(tf, batch_size, range(epoch, epoch + 1), label_column=label_column, features=features,
                       stack=stack, worker=worker, plan=plan, cache=cache, conn=conn, shuffle_buffer=shuffle_buffer,
                       seed=seed, page_size=page_size, include_key=include_key, block_rows=block_rows,
                       drop_remainder=drop_remainder, input_context=input_context)
    ds = part(epoch).with_options(options(tf))
    return ds.prefetch(PREFETCH_BATCHES) if prefetch else ds


@label_renamed
def epochs_dataset(batch_size: int, epochs: range, *, each=None, prefetch: bool = True, **kwargs):
    """``dataset(batch_size, epoch, **kwargs)`` for every epoch of ``epochs``, one after another, as one
    ``tf.data.Dataset``: one ``fit`` over many epochs, each epoch reading its own assignment of the plan.

    Built once for all the epochs: a chain of per-epoch datasets (``concatenate``) would trace each epoch's
    functions and look up the columns again before the first step, for a cost growing with the epochs.
    An epoch's reading starts when the epoch before it ends.

    :param epochs: a non-empty ``range`` of epoch numbers.
    :param each: ``each(ds, epoch) -> ds`` shapes an epoch's part (``epoch``: a scalar int64 tensor), e.g.
        ``lambda ds, e: ds.repeat().take(steps)`` for exactly ``steps`` batches every epoch.
    :param kwargs: as ``dataset``'s (``label_column``, ``stack``, ``plan``, ``shuffle_buffer`` ...).
    """
    import tensorflow as tf

    if not isinstance(epochs, range) or not epochs:
        raise ConfigError(f"epochs_dataset needs a non-empty range of epoch numbers (got {epochs!r}): e.g. "
                          f"range(10), or range(start_epoch, epochs) when resuming")
    part = epoch_part(tf, batch_size, epochs, **kwargs)
    shaped = (lambda e: each(part(e), e)) if each else part
    if len(epochs) == 1:  # as cheap as one epoch's dataset: no flat_map function to trace
        ds = shaped(tf.constant(epochs[0], tf.int64))
    else:
        ds = tf.data.Dataset.range(epochs.start, epochs.stop, epochs.step).flat_map(shaped)
    ds = ds.with_options(options(tf))
    return ds.prefetch(PREFETCH_BATCHES) if prefetch else ds


def epoch_part(tf, batch_size: int, epochs: range, *, label_column: str | None = None,
                features: list[str] | None = None, stack: bool = False, worker: int | None = None, plan=None,
                cache: str | None = None, conn: IgniteConnectionConfig | None = None,
                shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER, seed: int | None = None,
                page_size: int = 1024, include_key: bool = False, block_rows: int = BLOCK_ROWS,
                drop_remainder: bool = True, input_context=None):
    """``part(epoch)``: the batches of one of ``epochs``, ``epoch`` an int or a scalar tensor. The plan, this
    worker, the columns and a read-ahead of the first epoch are settled here, once for all the epochs."""
    plan = load_plan(plan, cache=cache, conn=conn)
    index = worker if worker is not None else worker_index(input_context)
    if drop_remainder:
        for epoch in epochs:
            planned = shard(epoch, worker=index, plan=plan, input_context=input_context).rows
            if planned < batch_size:
                raise ConfigError(f"worker {index}'s shard of cache '{plan.partition_map.cache}' holds {planned} "
                                  f"rows in epoch {epoch}, fewer than batch_size={batch_size}: with "
                                  f"drop_remainder=True it would yield no batch; use a smaller batch_size or "
                                  f"fewer workers, or pass drop_remainder=False")
    first = epochs[0]
    head = HeadStart.take(ahead_key(plan, conn, first, index, batch_size, label_column, features, stack, shuffle_buffer,
                                     seed, page_size, block_rows, include_key))
    names, label_name, dtypes, layout = head.columns if head else \
        cache_columns(plan, conn, label_column, features, include_key)
    read_columns, decode_stack = columns_to_read(plan, names, label_name, stack)
    key = plan.partition_map.key_column
    # tf.data calls generate() again for every pass of an epoch (``.repeat()``, each fit epoch)
    passes: dict[int, Iterator[int]] = {}

    def generate(epoch):
        from ignite_tf.reader.partition import STACKED

        epoch = int(epoch)
        iteration = next(passes.setdefault(epoch, itertools.count()))
        stream = head.blocks() if head and epoch == first and iteration == 0 else None
        if stream is None:
            stream = blocks(epoch, batch_size=batch_size, worker=index, plan=plan, conn=conn, columns=read_columns,
                            shuffle_buffer=shuffle_buffer, seed=seed, page_size=page_size, stack=decode_stack,
                            block_rows=block_rows, layout=layout, iteration=iteration)
        for block in stream:
            if label_name:
                refuse_missing_labels(block, label_name, key, plan.partition_map.cache)
            block = {k: filled(v) for k, v in block.items()}
            if decode_stack:
                feats = block[STACKED]
            else:
                feats = stack_columns([block[n] for n in names]) if stack else {n: block[n] for n in names}
            yield (feats, block[label_name]) if label_name else feats

    if stack:
        feature_spec = tf.TensorSpec([None, len(names)], tf.float32)
    else:
        feature_spec = {n: tf.TensorSpec([None], tf_dtype(tf, dtypes[n])) for n in names}
    signature = (feature_spec, tf.TensorSpec([None], tf_dtype(tf, dtypes[label_name]))) if label_name \
        else feature_spec

    def part(epoch):
        ds = tf.data.Dataset.from_generator(generate, args=(epoch,), output_signature=signature)
        # One block read ahead (in a tf.data thread) while the model trains on the one before; rebatch cuts
        # blocks into batch_size rows in C++, carrying a block's remainder into the next batch.
        return ds.prefetch(BLOCKS_AHEAD).rebatch(batch_size, drop_remainder=drop_remainder)

    return part


def options(tf):
    """The options of every dataset here (set on the outermost one: TF ignores them inside functions)."""
    options = tf.data.Options()
    # The plan already sharded the data: TF must not shard it again (it would drop rows).
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    # Nothing here needs tuning, and TF's tuning thread makes deleting an iterator (the end of every fit
    # over this dataset) wait for its next tick, at 1.3, 2.6, 5.1, 10.2, 20.5 ... s after the epoch began:
    # measured with TF 2.21, about one epoch in three (8.5 s lost after a 12 s epoch).
    options.autotune.enabled = False
    return options


@label_renamed
def epochs(n: int, *, start: int = 0, **kwargs) -> Iterator[tuple[int, object]]:
    """``(epoch, dataset)`` for epochs ``start .. n-1``: ``for epoch, ds in epochs(10, batch_size=64): ...``.

    ``kwargs`` go to ``dataset``: full batches unless ``drop_remainder=False``.
    """
    for epoch in range(start, n):
        yield epoch, dataset(epoch=epoch, **kwargs)


def tf_dtype(tf, dtype: np.dtype):
    return tf.string if np.dtype(dtype).kind in "OUS" else tf.as_dtype(np.dtype(dtype))

