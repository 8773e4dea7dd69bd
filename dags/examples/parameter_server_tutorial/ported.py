"""Parameter server training with a custom training loop: the shape of TensorFlow's tutorial, in one file.

The coordinator (this script, the ``chief`` task) makes a ParameterServerStrategy over the cluster in
TF_CONFIG, a ClusterCoordinator, a per-worker dataset from a ``dataset_fn`` through
``distribute_datasets_from_function``, and schedules ``step_fn`` closures on the workers, joining at the end
of every epoch. Workers and parameter servers run TF servers. CHANGES.md says what porting it to ignite-tf
changed.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # the tutorial's Keras 2 API (tf_keras)

import tensorflow as tf  # noqa: E402

import ignite_tf.data  # noqa: E402

NUM_EPOCHS = 3
STEPS_PER_EPOCH = 18
GLOBAL_BATCH_SIZE = 32

cluster_resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
NUM_PS = len(cluster_resolver.cluster_spec().as_dict().get("ps", []))
variable_partitioner = tf.distribute.experimental.partitioners.MinSizePartitioner(
    min_shard_bytes=(256 << 10), max_shards=NUM_PS)
strategy = tf.distribute.ParameterServerStrategy(cluster_resolver, variable_partitioner=variable_partitioner)
coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)


dataset_fn = ignite_tf.data.parameter_server_dataset_fn(GLOBAL_BATCH_SIZE, NUM_EPOCHS, label_column="y")


with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(1, activation="sigmoid")])
    model.build((None, 10))
    optimizer = tf.keras.optimizers.legacy.RMSprop(learning_rate=0.1)
    accuracy = tf.keras.metrics.Accuracy()


@tf.function
def step_fn(iterator):

    def replica_fn(batch_data, labels):
        with tf.GradientTape() as tape:
            pred = model(batch_data, training=True)
            per_example_loss = tf.keras.losses.BinaryCrossentropy(
                reduction=tf.keras.losses.Reduction.NONE)(tf.expand_dims(labels, -1), pred)
            loss = tf.nn.compute_average_loss(per_example_loss)
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        accuracy.update_state(labels, tf.cast(tf.greater(pred[:, 0], 0.5), tf.int64))
        return loss

    batch_data, labels = next(iterator)
    losses = strategy.run(replica_fn, args=(batch_data, labels))
    return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)


@tf.function
def per_worker_dataset_fn():
    return strategy.distribute_datasets_from_function(dataset_fn)


per_worker_dataset = coordinator.create_per_worker_dataset(per_worker_dataset_fn)
per_worker_iterator = iter(per_worker_dataset)

for epoch in range(NUM_EPOCHS):
    accuracy.reset_states()
    for _ in range(STEPS_PER_EPOCH):
        coordinator.schedule(step_fn, args=(per_worker_iterator,))
    coordinator.join()  # wait for this epoch's steps on all workers
    print(f"Finished epoch {epoch}, accuracy is {accuracy.result().numpy():f}.", flush=True)
