"""Multi-worker training with Keras, laid out as in the TensorFlow tutorial.

One copy of this script runs on every worker, with TF_CONFIG describing the cluster; the
MultiWorkerMirroredStrategy averages the gradients of all workers at every step.
See CHANGES.md for where the data comes from and what porting to ignite-tf changed.
"""

import json
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Keras 2 API: Keras 3's fit fails under this strategy

import digits  # noqa: E402
import tensorflow as tf  # noqa: E402


def digits_dataset(batch_size):
    (x_train, y_train), _ = digits.load_data()
    x_train = (x_train / 16).astype("float32")
    y_train = y_train.astype("int64")
    return tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(10_000).repeat().batch(batch_size)


def build_and_compile_cnn_model():
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(64,)),
        tf.keras.layers.Reshape(target_shape=(8, 8, 1)),
        tf.keras.layers.Conv2D(16, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(64, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.SGD(learning_rate=0.1), metrics=["accuracy"])
    return model


per_worker_batch_size = 64
tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])

strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = digits_dataset(global_batch_size)

with strategy.scope():
    # Model building and compiling must happen within the strategy's scope.
    multi_worker_model = build_and_compile_cnn_model()

multi_worker_model.fit(multi_worker_dataset, epochs=3, steps_per_epoch=20)
