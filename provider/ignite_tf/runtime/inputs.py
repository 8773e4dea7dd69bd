"""Input pipelines of the worker runtime: the label's classes, the sync datasets, resume points.

Sync mode (MultiWorkerMirroredStrategy): every worker runs its own input pipeline, so it reads its shard
straight from Ignite with ``ignite_tf.data``; the epochs of one ``fit`` are chained, each epoch exactly
``steps`` batches long (all workers must take the same number of steps). Async mode (ParameterServerStrategy):
the workers' local feeds, ``ignite_tf.data.feed``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import ignite_tf.data as itd
from ignite_tf.data.feed import feed_columns as columns
from ignite_tf.data.feed import feed_dataset_fn
from ignite_tf.defaults import DEFAULT_SHUFFLE_BUFFER
from ignite_tf.errors import ConfigError
from ignite_tf.runtime import ending
from ignite_tf.runtime.start import is_coordinator
from ignite_tf.runtime.task import TaskInfo

__all__ = ["columns", "fit_dataset", "label_classes", "resume_point", "sync_dataset"]


def label_classes(plan, label: str, label_dtype, conn=None) -> int | None:
    """Classes of an integer label: ``MAX(label) + 1`` over the plan's cache, one SQL aggregate.

    None for a label that is not an integer, a cache without an SQL table, or no connection; the model
    function then needs ``n_classes`` from its model arguments.
    """
    from ignite_tf.connection import IgniteConnectionConfig, sql

    conn = conn or IgniteConnectionConfig.from_env()
    if conn is None or np.dtype(label_dtype).kind not in "iu":
        return None
    cache = plan.partition_map.cache
    client = conn.client()
    try:
        tables = sql(client, "SELECT SCHEMA_NAME, TABLE_NAME FROM SYS.TABLES WHERE CACHE_NAME = ?", [cache])
        if not tables:
            return None
        schema, table = tables[0]
        columns = sql(client, "SELECT COLUMN_NAME FROM SYS.TABLE_COLUMNS WHERE SCHEMA_NAME = ? AND TABLE_NAME = ?",
                      [schema, table])
        column = next((r[0] for r in columns if r[0].lower() == label.lower()), None)
        if column is None:
            return None
        (low, high), = sql(client, f'SELECT MIN("{column}"), MAX("{column}") FROM "{schema}"."{table}"')
    finally:
        client.close()
    if high is None:
        return None
    if low < 0:
        raise ConfigError(f"label {label!r} of cache '{cache}' holds {low}: class labels must be 0 .. n-1")
    return int(high) + 1


def sync_dataset(*, plan, batch_size: int, label: str, features: list[str] | None, epochs: int, steps: int,
                 start_epoch: int = 0, start_step: int = 0, shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
                 input_context=None,
                 conn=None):
    """This worker's batches for epochs ``start_epoch .. epochs-1``, exactly ``steps`` per epoch.

    Each epoch reads that epoch's assignment of the plan (reshuffled per epoch); a short shard is repeated
    and a long one cut so every worker takes the same number of steps. The first epoch skips
    ``start_step`` batches (resuming from a step-level backup).
    """
    import tensorflow as tf

    def each(ds, epoch):
        ds = ds.repeat().take(steps)
        if not start_step:
            return ds
        return ds.skip(tf.cast(tf.equal(epoch, start_epoch), tf.int64) * start_step)

    # One dataset for all the epochs, built once; an epoch's reader opens when the previous epoch ends.
    ds = itd.epochs_dataset(batch_size, range(start_epoch, epochs), each=each, label_column=label, features=features,
                            stack=True, plan=plan, conn=conn, shuffle_buffer=shuffle_buffer, prefetch=False,
                            input_context=input_context)
    return ds.prefetch(tf.data.AUTOTUNE)


def resume_point(backup_dir: str | Path, steps_per_epoch: int, *, step_level: bool = False) -> tuple[int, int]:
    """``(epoch, step)`` where ``fit`` will resume from ``BackupAndRestore(backup_dir)``; (0, 0) if no backup.

    Mirrors tf_keras' own rule (worker_training_state.py) so the input pipeline can start at the same
    epoch before ``fit`` restores the model.
    """
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(str(Path(backup_dir) / "chief"))
    if not latest:
        return 0, 0
    names = dict(tf.train.list_variables(latest))
    epoch_key = next((k for k in names if k.startswith("ckpt_saved_epoch")), None)
    batch_key = next((k for k in names if k.startswith("ckpt_saved_batch")), None)
    epoch = int(tf.train.load_variable(latest, epoch_key)) if epoch_key else -1
    batch = int(tf.train.load_variable(latest, batch_key)) if batch_key else -1
    if step_level:
        if batch < 0:
            return 0, 0
        return (epoch + 1, 0) if batch == steps_per_epoch - 1 else (epoch, batch + 1)
    return (epoch + 1, 0) if epoch >= 0 else (0, 0)


def fit_dataset(tf_keras, strat, info: TaskInfo, plan, *, batch_size: int, label: str, features: list[str],
                label_dtype, epochs: int, steps: int, start_epoch: int, start_step: int, shuffle_buffer: int):
    """What ``fit`` reads: the async chief the workers' feeds, every other trainer its own shard."""
    if is_coordinator(info):
        return tf_keras.utils.experimental.DatasetCreator(feed_dataset_fn(
            n_features=len(features), label_dtype=label_dtype, epochs=epochs, start_epoch=start_epoch))
    ending.quiet_device_datasets()
    return strat.distribute_datasets_from_function(lambda ctx: sync_dataset(
        plan=plan, batch_size=batch_size, label=label, features=features, epochs=epochs, steps=steps,
        start_epoch=start_epoch, start_step=start_step, shuffle_buffer=shuffle_buffer,
        input_context=ctx if info.type else None))
