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

from ignite_tf.contract import ENV_CACHE, ENV_SHARD_PLAN
from ignite_tf.data.ahead import drop_read_ahead, first_pass, read_ahead
from ignite_tf.data.datasets import BLOCKS_AHEAD, dataset, epochs, epochs_dataset
from ignite_tf.data.evaluation import evaluation_dataset, report_evaluation
from ignite_tf.data.parameter_server import parameter_server_dataset_fn
from ignite_tf.data.plan import load_plan, shard, steps_per_epoch, worker_index
from ignite_tf.data.rows import batches, blocks, cache_columns, data_check, report_reads
from ignite_tf.reader.blocks import BLOCK_ROWS, PREFETCH_BATCHES

__all__ = [
    "BLOCKS_AHEAD", "BLOCK_ROWS", "ENV_CACHE", "ENV_SHARD_PLAN", "PREFETCH_BATCHES", "batches", "blocks",
    "cache_columns", "data_check", "dataset", "drop_read_ahead", "epochs", "epochs_dataset", "evaluation_dataset",
    "first_pass", "load_plan", "parameter_server_dataset_fn", "read_ahead", "report_evaluation", "report_reads",
    "shard", "steps_per_epoch", "worker_index",
]
