"""Input for ParameterServerStrategy scripts: the workers write their shards to local feeds, which the
coordinator's ``dataset_fn`` reads on each worker (``ignite_tf.data.feed``)."""

from __future__ import annotations

from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.data.feed import ask_workers, feed_columns, feed_dataset_fn
from ignite_tf.data.plan import load_plan
from ignite_tf.defaults import DEFAULT_SHUFFLE_BUFFER
from ignite_tf.errors import ConfigError


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
    ``ignite_tf.data.feed``); a worker restarted later finds its feed on disk. Disk per worker:
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

    plan = load_plan(plan, conn=conn)
    names, label_name, label_dtype = feed_columns(plan, label_column, features, conn)
    workers = len((read_tf_config().get("cluster") or {}).get("worker") or [])
    if workers != plan.workers:
        raise ConfigError(f"TF_CONFIG lists {workers} workers but the shard plan has {plan.workers}: run the script "
                          f"with `ignite-tf start --mode async`, which plans one shard per worker")
    request = {"batch_size": int(batch_size), "epochs": int(epochs), "label_column": label_name, "features": names,
               "shuffle_buffer": int(shuffle_buffer)}
    ask_workers(request, workers, timeout_s=timeout_s)
    return feed_dataset_fn(n_features=len(names), label_dtype=label_dtype, epochs=int(epochs))

