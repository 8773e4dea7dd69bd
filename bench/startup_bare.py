"""The bare TensorFlow program ``bench/startup.py`` times beside ignite-tf's clusters.

    TF_CONFIG=... python bench/startup_bare.py ROWS N_CLASSES MARK_FILE

What a user without ignite-tf would launch on each worker: import TensorFlow and tf_keras, create a
MultiWorkerMirroredStrategy from ``TF_CONFIG``, build the model ``ignite_tf.models.tabular_classifier``
builds (the same layers, written out here so this program imports nothing of ignite-tf), and ``fit`` it for
5 steps of batch 64 on this worker's share of ROWS random rows held in memory. Worker 0 writes
``time.time()`` into MARK_FILE when its first batch ends, as ``bench/startup_model.py`` does for the
runtime's chief. No Ignite, no supervisor, no shard plan: the difference from a cluster's first step is what
ignite-tf adds.
"""

from __future__ import annotations

import json
import os
import sys
import time


def main(argv: list[str]) -> int:
    rows, n_classes, mark = int(argv[0]), int(argv[1]), argv[2]
    import numpy as np
    import tensorflow as tf
    import tf_keras

    spec = json.loads(os.environ["TF_CONFIG"])
    index, workers = spec["task"]["index"], len(spec["cluster"]["worker"])
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(index)
    shard = rows // workers
    x = rng.normal(size=(shard, 16)).astype("float32")
    y = rng.integers(0, n_classes, size=shard)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64).with_options(options)
    with strategy.scope():
        model = tf_keras.Sequential([
            tf_keras.layers.InputLayer(input_shape=(16,)),
            tf_keras.layers.Dense(32, activation="relu"),
            tf_keras.layers.Dense(32, activation="relu"),
            tf_keras.layers.Dense(n_classes, activation="softmax"),
        ])
        model.compile(optimizer=tf_keras.optimizers.Adam(learning_rate=0.01),
                      loss="sparse_categorical_crossentropy", metrics=["accuracy"])

    class FirstStep(tf_keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == 0 and index == 0:
                with open(mark, "x") as f:
                    f.write(repr(time.time()))

    model.fit(data, epochs=1, steps_per_epoch=5, callbacks=[FirstStep()], verbose=0)
    sys.stdout.flush()
    os._exit(0)  # as the runtime ends: TensorFlow's exit handlers wait on a shutdown barrier


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
