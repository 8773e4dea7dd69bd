"""Worker side: this worker's slice of the cache, for an epoch, as a ``tf.data.Dataset``.

A training script needs no sharding code and no Ignite code::

    import ignite_tf.data
    for epoch, ds in ignite_tf.data.epochs(10, batch_size=64, label_column="label"):
        model.fit(ds, epochs=epoch + 1, initial_epoch=epoch)

or, porting a script that trains on ``tf.data.Dataset.from_tensor_slices(...).shuffle(n).repeat().batch(b)``::

    ds = ignite_tf.data.dataset(b, label_column="label", stack=True).repeat()

or one ``fit`` over every epoch's slice (the dataset built once, however many epochs)::

    ds = ignite_tf.data.epochs_dataset(64, range(10), each=lambda ds, e: ds.repeat().take(steps),
                                       label_column="label")
    model.fit(ds, epochs=10, steps_per_epoch=steps)

Every batch holds exactly ``batch_size`` rows unless ``drop_remainder=False`` (see ``dataset``). The label is
``label_column`` here as in the runtime and the pipeline spec; ``label=`` is its deprecated name.

The launcher sets ``IGNITE_TF_SHARD_PLAN`` (path of the ShardPlan JSON), ``IGNITE_TF_ADDRESSES`` and friends
(the connection; secrets only in the environment) and ``TF_CONFIG``. The worker's index comes from
``TF_CONFIG`` (``task.type == "worker"``), from a ``tf.distribute.InputContext`` of
``distribute_datasets_from_function`` (MultiWorkerMirroredStrategy) or from the ``worker=`` argument.
Outside a cluster (no TF_CONFIG, no plan) pass ``cache=`` and the one worker reads the whole cache.

These datasets run in the calling Python process (``from_generator``), which is what MultiWorkerMirroredStrategy
and single-process training need. Under ParameterServerStrategy the dataset function is traced on the
coordinator and runs on the workers, so async mode feeds workers from local files instead: a script on the
chief gets its ``dataset_fn`` from ``parameter_server_dataset_fn`` (each worker writes its own shard there).

Why blocks: Python work per batch (a generator step, a dict of column slices, stacking) cost more than a
training step of a small model. So Python hands tf.data a block of rows at a time (``BLOCK_ROWS``, or whole
shuffle units), with the features already decoded into one float32 matrix by the reader, and ``rebatch``
cuts it into batches in C++. A tf.data thread reads the next block while the model trains on the one before;
the reader keeps scans of the next partitions in flight meanwhile. Memory stays at about three blocks
(``max(block_rows, max(batch_size, shuffle_buffer))`` rows each) plus a few scan pages, however large the shard.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.contract import ENV_CACHE, ENV_SHARD_PLAN
from ignite_tf.defaults import DEFAULT_SHUFFLE_BUFFER
from ignite_tf.errors import ConfigError
from ignite_tf.plan.shards import Reshuffle, ShardPlan, WorkerShard
from ignite_tf.public_api import warn_deprecated
from ignite_tf.reader.ahead import HeadStart
from ignite_tf.reader.blocks import (
    BLOCK_ROWS,
    PREFETCH_BATCHES,
    block_shuffle,
    filled,
    group,
    rebatch,
    stack_columns,
)

# Blocks read ahead of the one being cut into batches.
BLOCKS_AHEAD = 1


def _label_renamed(function):
    """``label=`` keeps working until ``public_api.REMOVED_IN`` as the deprecated name of ``label_column=``."""

    @functools.wraps(function)
    def call(*args, **kwargs):
        if "label" in kwargs:
            if "label_column" in kwargs:
                raise TypeError(f"ignite_tf.data.{function.__name__}: give label_column= only (label= is its "
                                f"deprecated name)")
            warn_deprecated(f"{__name__}.{function.__name__}(label=)")
            kwargs["label_column"] = kwargs.pop("label")
        return function(*args, **kwargs)

    return call


def load_plan(plan: ShardPlan | str | Path | None = None, *, cache: str | None = None,
              conn: IgniteConnectionConfig | None = None) -> ShardPlan:
    """The plan passed in, the one named by ``IGNITE_TF_SHARD_PLAN``, or a one-worker plan over ``cache``."""
    if isinstance(plan, ShardPlan):
        return plan
    path = plan or os.environ.get(ENV_SHARD_PLAN)
    if path:
        return ShardPlan.load(path)
    cache = cache or os.environ.get(ENV_CACHE)
    if not cache:
        raise ConfigError(f"no shard plan: set {ENV_SHARD_PLAN} (the launcher does), pass plan=..., or pass "
                          f"cache=... to read a whole cache as a single worker")
    from ignite_tf.plan.partitions import PartitionMap

    return ShardPlan.build(PartitionMap.discover(_conn(conn), cache), 1, reshuffle=Reshuffle.NONE)


def worker_index(input_context=None) -> int:
    """This process's worker index: InputContext, then TF_CONFIG's worker task, else 0."""
    if input_context is not None:
        return int(input_context.input_pipeline_id)
    from ignite_tf.contract import read_tf_config

    task = read_tf_config().get("task") or {}
    if task.get("type") == "worker":
        return int(task.get("index", 0))
    return 0


def shard(epoch: int = 0, *, worker: int | None = None, plan=None, cache: str | None = None,
          conn: IgniteConnectionConfig | None = None, input_context=None) -> WorkerShard:
    """This worker's WorkerShard for ``epoch``."""
    plan = load_plan(plan, cache=cache, conn=conn)
    index = worker if worker is not None else worker_index(input_context)
    if input_context is not None and input_context.num_input_pipelines != plan.workers:
        raise ConfigError(f"the strategy runs {input_context.num_input_pipelines} input pipelines but the shard "
                          f"plan has {plan.workers} workers: plan as many shards as workers")
    return plan.shard(index, epoch)


def steps_per_epoch(batch_size: int, epoch: int = 0, *, plan=None) -> int:
    """Batches every worker can take in ``epoch``: the smallest shard decides (sync SGD needs equal steps)."""
    plan = load_plan(plan)
    return max(1, min(plan.rows_per_worker(epoch)) // batch_size)


def batches(epoch: int = 0, *, batch_size: int = 1024, worker: int | None = None, plan=None,
            cache: str | None = None, conn: IgniteConnectionConfig | None = None, columns: list[str] | None = None,
            shuffle_buffer: int = 0, seed: int | None = None, page_size: int = 1024,
            input_context=None) -> Iterator[dict[str, np.ndarray]]:
    """NumPy batches of this worker's shard for ``epoch``: every row, the last batch shorter (the same rows,
    in the same order, as the first pass of ``dataset(..., drop_remainder=False)``)."""
    yield from rebatch(blocks(epoch, batch_size=batch_size, worker=worker, plan=plan, cache=cache, conn=conn,
                               columns=columns, shuffle_buffer=shuffle_buffer, seed=seed, page_size=page_size,
                               input_context=input_context), batch_size)


def blocks(epoch: int = 0, *, batch_size: int = 1024, worker: int | None = None, plan=None,
           cache: str | None = None, conn: IgniteConnectionConfig | None = None, columns: list[str] | None = None,
           shuffle_buffer: int = 0, seed: int | None = None, page_size: int = 1024, block_rows: int = BLOCK_ROWS,
           stack: list[str] | None = None, input_context=None, layout: tuple | None = None, iteration: int = 0
           ) -> Iterator[dict[str, np.ndarray]]:
    """This worker's rows for ``epoch`` in blocks of about ``block_rows`` rows: cut into ``batch_size`` pieces,
    they are ``batches(...)``. Fewer, larger pieces cost less Python per row; memory holds one block.

    With ``shuffle_buffer``, rows are permuted within units of ``max(batch_size, shuffle_buffer)`` rows and a
    block is a whole number of units (one, when a unit is larger than ``block_rows``). ``stack``: numeric
    columns decoded straight into one float32 matrix ``block[ignite_tf.reader.partition.STACKED]`` (NULLs filled).
    ``layout``: a ``PartitionReader.layout`` of the cache, so the reader need not ask the cluster for it.
    ``iteration``: which pass over the shard this is. Pass 0 is shuffled by ``(seed, epoch, worker)``, a
    later pass by ``(seed, epoch, worker, iteration)``: a repeated dataset sees a new order every pass, as
    with tf.data's ``shuffle`` (and, with ``drop_remainder``, leaves out different rows each pass).
    """
    from ignite_tf.reader.partition import PartitionReader

    plan = load_plan(plan, cache=cache, conn=conn)
    my = shard(epoch, worker=worker, plan=plan, input_context=input_context)
    unit = max(batch_size, shuffle_buffer) if shuffle_buffer else max(batch_size, block_rows)
    pm = plan.partition_map
    # The plan's routes spare the reader asking the cluster every epoch; a stale route costs a forwarded
    # (or failed-over) scan, never a row.
    with PartitionReader(_conn(conn), pm.cache, columns=columns, batch_size=unit, page_size=page_size,
                         primaries=pm.primary_addresses(), backups=pm.backup_addresses(), stack=stack,
                         layout=layout, key_filter=plan.evaluation.training_filter(),
                         fingerprint=data_check(plan)) as reader:
        try:
            stream = _reported(reader.batches(my.read_tasks()), epoch)
            if not shuffle_buffer:
                yield from stream
                return
            rng = np.random.default_rng([plan.seed if seed is None else seed, epoch, my.worker]
                                        + ([iteration] if iteration else []))
            yield from group(block_shuffle(stream, rng), max(1, block_rows // unit))
        finally:
            report_reads(reader, plan, my.worker, epoch)


@_label_renamed
def dataset(batch_size: int = 1024, epoch: int = 0, *, label_column: str | None = None,
            features: list[str] | None = None,
            stack: bool = False, worker: int | None = None, plan=None, cache: str | None = None,
            conn: IgniteConnectionConfig | None = None, shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
            seed: int | None = None,
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

    part = _epoch_part(tf, batch_size, range(epoch, epoch + 1), label_column=label_column, features=features,
                       stack=stack, worker=worker, plan=plan, cache=cache, conn=conn, shuffle_buffer=shuffle_buffer,
                       seed=seed, page_size=page_size, include_key=include_key, block_rows=block_rows,
                       drop_remainder=drop_remainder, input_context=input_context)
    ds = part(epoch).with_options(_options(tf))
    return ds.prefetch(PREFETCH_BATCHES) if prefetch else ds


@_label_renamed
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
    part = _epoch_part(tf, batch_size, epochs, **kwargs)
    shaped = (lambda e: each(part(e), e)) if each else part
    if len(epochs) == 1:  # as cheap as one epoch's dataset: no flat_map function to trace
        ds = shaped(tf.constant(epochs[0], tf.int64))
    else:
        ds = tf.data.Dataset.range(epochs.start, epochs.stop, epochs.step).flat_map(shaped)
    ds = ds.with_options(_options(tf))
    return ds.prefetch(PREFETCH_BATCHES) if prefetch else ds


def _epoch_part(tf, batch_size: int, epochs: range, *, label_column: str | None = None,
                features: list[str] | None = None,
                stack: bool = False, worker: int | None = None, plan=None, cache: str | None = None,
                conn: IgniteConnectionConfig | None = None, shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
                seed: int | None = None,
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
    head = HeadStart.take(_ahead_key(plan, conn, first, index, batch_size, label_column, features, stack,
                                     shuffle_buffer, seed, page_size, block_rows, include_key))
    names, label_name, dtypes, layout = head.columns if head else \
        cache_columns(plan, conn, label_column, features, include_key)
    read_columns, decode_stack = _read_columns(plan, names, label_name, stack)
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
            block = {k: filled(v) for k, v in block.items()}
            if decode_stack:
                feats = block[STACKED]
            else:
                feats = stack_columns([block[n] for n in names]) if stack else {n: block[n] for n in names}
            yield (feats, block[label_name]) if label_name else feats

    if stack:
        feature_spec = tf.TensorSpec([None, len(names)], tf.float32)
    else:
        feature_spec = {n: tf.TensorSpec([None], _tf_dtype(tf, dtypes[n])) for n in names}
    signature = (feature_spec, tf.TensorSpec([None], _tf_dtype(tf, dtypes[label_name]))) if label_name \
        else feature_spec

    def part(epoch):
        ds = tf.data.Dataset.from_generator(generate, args=(epoch,), output_signature=signature)
        # One block read ahead (in a tf.data thread) while the model trains on the one before; rebatch cuts
        # blocks into batch_size rows in C++, carrying a block's remainder into the next batch.
        return ds.prefetch(BLOCKS_AHEAD).rebatch(batch_size, drop_remainder=drop_remainder)

    return part


def _options(tf):
    """The options of every dataset here (set on the outermost one: TF ignores them inside functions)."""
    options = tf.data.Options()
    # The plan already sharded the data: TF must not shard it again (it would drop rows).
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    # Nothing here needs tuning, and TF's tuning thread makes deleting an iterator (the end of every fit
    # over this dataset) wait for its next tick, at 1.3, 2.6, 5.1, 10.2, 20.5 ... s after the epoch began:
    # measured with TF 2.21, about one epoch in three (8.5 s lost after a 12 s epoch).
    options.autotune.enabled = False
    return options


@_label_renamed
def read_ahead(batch_size: int = 1024, epoch: int = 0, *, label_column: str | None = None,
               features: list[str] | None = None, stack: bool = False, worker: int | None = None, plan=None,
               conn: IgniteConnectionConfig | None = None, shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
               seed: int | None = None,
               page_size: int = 1024, block_rows: int = BLOCK_ROWS, include_key: bool = False,
               process: bool = False) -> None:
    """Start reading the first block of ``dataset(...)`` with the same arguments, in a background thread.

    For a process about to import TensorFlow (the import keeps one core busy for seconds while the other
    core and the Ignite nodes wait), or about to build its model and trace its training step: a first block
    of a small cache can scan every partition, a round trip each, and tf.data starts reading only when the
    traced step first asks. The next ``dataset`` call with the same ``plan`` and ``conn`` objects and the
    same arguments starts from that block (the call itself waits only for the columns; its first element
    waits for the block); nothing else is shared. If the read-ahead fails, the dataset reads as usual (and
    raises there). Without such a call the reader stays open until ``drop_read_ahead()`` or the process ends.

    :param process: read in a child Python process instead (``ignite_tf.reader.ahead``), which then reads the
        dataset's whole first pass and hands it over block by block: decoding there competes neither for
        this process's GIL nor with the import. The child ends with the pass, when the dataset is deleted,
        on ``drop_read_ahead()``, or at its next block once this process is gone.
    """
    plan = load_plan(plan, conn=conn)
    index = worker if worker is not None else worker_index()
    key = _ahead_key(plan, conn, epoch, index, batch_size, label_column, features, stack, shuffle_buffer, seed,
                     page_size, block_rows, include_key)
    args = (plan, conn, epoch, index, batch_size, label_column, features, stack, shuffle_buffer, seed, page_size,
            block_rows, include_key)
    if process:
        HeadStart.start_process(key, f"{__name__}:first_pass", args, keep=(plan, conn))
        return

    def first_block(head: HeadStart) -> None:
        head.columns, head.rest = first_pass(*args)
        head.ready.set()
        head.first = next(head.rest, None)

    HeadStart.start(key, first_block, keep=(plan, conn))


def first_pass(plan: ShardPlan, conn, epoch: int, index: int, batch_size: int, label_column: str | None,
               features: list[str] | None, stack: bool, shuffle_buffer: int, seed: int | None, page_size: int,
               block_rows: int, include_key: bool) -> tuple[tuple, Iterator[dict[str, np.ndarray]]]:
    """(``cache_columns``, the block stream) of ``dataset(...)``'s first pass: what a read-ahead reads."""
    columns = names, label_name, _, layout = cache_columns(plan, conn, label_column, features, include_key)
    read_columns, decode_stack = _read_columns(plan, names, label_name, stack)
    return columns, blocks(epoch, batch_size=batch_size, worker=index, plan=plan, conn=conn, columns=read_columns,
                           shuffle_buffer=shuffle_buffer, seed=seed, page_size=page_size, stack=decode_stack,
                           block_rows=block_rows, layout=layout)


def drop_read_ahead() -> None:
    """Close the readers of ``read_ahead`` calls that no ``dataset`` took."""
    HeadStart.drop_all()


def _ahead_key(plan, conn, epoch, index, batch_size, label_column, features, *rest) -> tuple:
    """What a ``dataset`` call must share with a ``read_ahead`` to start from its block (plan, conn: the objects)."""
    return (id(plan), id(conn), epoch, index, batch_size, label_column,
            tuple(features) if features is not None else None, *rest)


def _read_columns(plan: ShardPlan, names: list[str], label_name: str | None, stack: bool):
    """(columns the reader decodes, columns it stacks into one matrix) of a dataset of ``names``."""
    key = plan.partition_map.key_column
    read = [c for c in names + ([label_name] if label_name else []) if c != key]
    # The reader stacks value columns as it decodes (the key is not one: then stack here).
    return read, (names if stack and key not in names else None)


@_label_renamed
def epochs(n: int, *, start: int = 0, **kwargs) -> Iterator[tuple[int, object]]:
    """``(epoch, dataset)`` for epochs ``start .. n-1``: ``for epoch, ds in epochs(10, batch_size=64): ...``.

    ``kwargs`` go to ``dataset``: full batches unless ``drop_remainder=False``.
    """
    for epoch in range(start, n):
        yield epoch, dataset(epoch=epoch, **kwargs)


def parameter_server_dataset_fn(batch_size: int, epochs: int, *, label_column: str,
                                features: list[str] | None = None, shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
                                plan=None, conn: IgniteConnectionConfig | None = None, timeout_s: float = 600.0):
    """For a ParameterServerStrategy script: a ``dataset_fn`` whose every worker reads its own shard.

    The script's ``dataset_fn`` runs on the workers as a graph the chief traced once, so no Python reads Ignite
    there. This call (on the chief, after making the strategy) asks every worker to write its shard of epochs
    ``0 .. epochs-1`` to local files, reading Ignite itself (its own partitions, each epoch's assignment of the
    plan), and waits until all have; the ``dataset_fn`` returned reads them, on each worker its own::

        strategy = tf.distribute.ParameterServerStrategy(resolver)
        coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
        feed = ignite_tf.data.parameter_server_dataset_fn(64, epochs, label_column="label")
        per_worker_dataset = coordinator.create_per_worker_dataset(
            lambda: strategy.distribute_datasets_from_function(feed))

    or ``model.fit(tf.keras.utils.experimental.DatasetCreator(feed), epochs=..., steps_per_epoch=...)``.

    Elements are ``(features [batch_size, n_features] float32, label [batch_size])``: epoch 0's rows in
    batches, then epoch 1's ..., then again from epoch 0 (a worker faster than the others wraps around rather
    than run dry; async workers take steps at their own pace, so which batches train is the coordinator's
    choice). Each file holds a worker's whole shard once, in ``batch_size`` blocks (the last one shorter).
    The workers are the cluster's ``ignite-tf start --mode async`` starts (their serve loop answers: see
    ``ignite_tf.runtime.feed``); a worker restarted later finds its feed on disk. Disk per worker:
    ``epochs x shard rows x (n_features + 1) x 4`` bytes.

    :param batch_size: rows per batch on each worker (a global batch: under ParameterServerStrategy a
        worker's step takes one whole batch).
    :param epochs: epochs to write; each worker's feed holds its shard of each.
    :param label_column: the label column; the features: ``features`` or every other numeric column but the key.
    :param shuffle_buffer: rows shuffled together within a worker's shard, seeded by (plan seed, epoch, worker).
    :param timeout_s: the longest wait for the workers' feeds.
    :raises ConfigError: a non-numeric column, a plan whose workers differ from TF_CONFIG's, no strategy made
        yet, a worker that could not write its feed, or the timeout.
    """
    from ignite_tf.contract import read_tf_config
    from ignite_tf.reader.feed import ask_workers, feed_dataset_fn

    plan = load_plan(plan, conn=conn)
    names, label_name, dtypes, _ = cache_columns(plan, conn, label_column, features)
    wrong = [n for n in [*names, label_name] if np.dtype(dtypes[n]).kind not in "fiub"]
    if wrong:
        raise ConfigError(f"column(s) {wrong} of cache '{plan.partition_map.cache}' are not numeric: the workers' "
                          f"feeds hold float32 rows; pass features=[...] with numeric columns only")
    workers = len((read_tf_config().get("cluster") or {}).get("worker") or [])
    if workers != plan.workers:
        raise ConfigError(f"TF_CONFIG lists {workers} workers but the shard plan has {plan.workers}: run the script "
                          f"with `ignite-tf start --mode async`, which plans one shard per worker")
    request = {"batch_size": int(batch_size), "epochs": int(epochs), "label_column": label_name, "features": names,
               "shuffle_buffer": int(shuffle_buffer)}
    ask_workers(request, workers, timeout_s=timeout_s)
    return feed_dataset_fn(n_features=len(names), label_dtype=dtypes[label_name], epochs=int(epochs))


@_label_renamed
def evaluation_dataset(batch_size: int = 1024, *, label_column: str | None = None, features: list[str] | None = None,
                       plan=None, cache: str | None = None, conn: IgniteConnectionConfig | None = None):
    """The plan's held-out evaluation rows (``shard_plan.evaluation``; the same for every worker) as one pass of
    ``(features [b, n_features] float32, label)`` batches: ``model.evaluate(ds, return_dict=True)``."""
    from ignite_tf.evaluation.heldout import held_out_dataset

    plan = load_plan(plan, cache=cache, conn=conn)
    if not plan.evaluation.enabled:
        raise ConfigError("the shard plan holds no rows out for evaluation: set shard_plan.evaluation (ignite-tf "
                          "start --evaluation 0.1)")
    return held_out_dataset(plan, batch_size, label_column=label_column, features=features, conn=_conn(conn))


def report_evaluation(metrics: dict, *, rows: int | None = None, plan=None) -> dict | None:
    """Report a script's held-out metrics (one call, on the chief; other tasks: nothing): the cluster state, the
    page and the publish gate take them as the runtime's own evaluation."""
    from ignite_tf.evaluation.heldout import script_metrics

    return script_metrics(load_plan(plan), metrics, rows=rows)


# -- helpers ---------------------------------------------------------------------------------------------
def data_check(plan: ShardPlan):
    """The check of this worker's reads against what validation read (``plan.fingerprints``); False: none."""
    if not plan.fingerprints:
        return False
    from ignite_tf.validation.fingerprints import DataCheck, Fingerprints

    return DataCheck(Fingerprints.from_dict(plan.fingerprints["expected"]), plan.fingerprints.get("on_data_change"),
                     cache=plan.partition_map.cache)


def report_reads(reader, plan: ShardPlan, worker: int, epoch: int) -> dict | None:
    """Add what ``reader`` read (rows per serving Ignite node, the share from this worker's own host or
    Kubernetes node) to the cluster state of the cluster this process belongs to, if any. Never raises: a
    measurement must not fail the training. Returns the record (None when nothing was read)."""
    import logging

    from ignite_tf.cluster.state import store_from_env
    from ignite_tf.contract import ENV_CLUSTER_ID
    from ignite_tf.reader.locality import ENV_NODE_NAME

    if not reader.stats["rows_per_node"]:
        return None
    try:
        node = os.environ.get(ENV_NODE_NAME) or None
        ignite_nodes = (plan.placement or {}).get("ignite_nodes")
        if node and not ignite_nodes and os.environ.get(ENV_SHARD_PLAN):
            # The launcher records where the Ignite pods run once every worker pod is placed, after this
            # worker may have loaded the plan: read the plan's placement again.
            ignite_nodes = (ShardPlan.load(os.environ[ENV_SHARD_PLAN]).placement or {}).get("ignite_nodes")
        record = reader.locality(kubernetes_node=node, ignite_nodes=ignite_nodes)
        check = reader.fingerprints.on_task if reader.fingerprints is not None else None
        if check is not None:
            record["data_check"] = {"tasks_checked": check.checked, "changes": check.changes,
                                    "on_data_change": check.on_change.value}
        cluster_id, store = os.environ.get(ENV_CLUSTER_ID), store_from_env()
        if cluster_id and store is not None:
            try:
                store.add_reads(cluster_id, worker, epoch, record)
            finally:
                store.close()
        return record
    except Exception as exc:  # noqa: BLE001 - see the docstring
        logging.getLogger(__name__).warning("could not record the reads of epoch %d: %s", epoch, exc)
        return None


def _reported(stream: Iterator[dict], epoch: int) -> Iterator[dict]:
    """Each block read is progress for the supervisor's watchdog (see ``ignite_tf.contract``)."""
    from ignite_tf import contract

    for n, block in enumerate(stream, 1):
        contract.report(f"epoch {epoch + 1}: read block {n}")
        yield block


def _conn(conn: IgniteConnectionConfig | None) -> IgniteConnectionConfig:
    conn = conn or IgniteConnectionConfig.from_env()
    if conn is None:
        raise ConfigError("no Ignite connection: pass conn=... or set IGNITE_TF_ADDRESSES (the launcher does)")
    return conn


@_label_renamed
def cache_columns(plan: ShardPlan, conn, label_column: str | None, features: list[str] | None,
                  include_key: bool = False):
    """(feature names, label name, {column: dtype}, reader layout) of the plan's cache (see
    :func:`ignite_tf.reader.columns.cache_columns`)."""
    from ignite_tf.reader.columns import cache_columns as columns_of

    return columns_of(plan, _conn(conn), label_column, features, include_key=include_key)


def _tf_dtype(tf, dtype: np.dtype):
    return tf.string if np.dtype(dtype).kind in "OUS" else tf.as_dtype(np.dtype(dtype))
