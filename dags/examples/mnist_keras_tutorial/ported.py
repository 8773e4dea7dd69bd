"""Multi-worker training with Keras: the TensorFlow tutorial's script, in one file.

One copy of this script runs on every worker, with TF_CONFIG describing the cluster; the
MultiWorkerMirroredStrategy averages the gradients of all workers at every step. The model, the
strategy and fit are the tutorial's; CHANGES.md says where the data comes from and what porting changed.
"""

import json
import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Keras 2 API: Keras 3's fit fails under this strategy

import tensorflow as tf  # noqa: E402

import ignite_tf.data  # noqa: E402


def mnist_dataset(batch_size):
    return ignite_tf.data.dataset(batch_size, label_column="label", stack=True).repeat()


def build_and_compile_cnn_model():
    model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(784,)),
        tf.keras.layers.Reshape(target_shape=(28, 28, 1)),
        tf.keras.layers.Conv2D(32, 3, activation="relu"),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation="relu"),
        tf.keras.layers.Dense(10),
    ])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  optimizer=tf.keras.optimizers.SGD(learning_rate=0.001), metrics=["accuracy"])
    return model


per_worker_batch_size = 64
tf_config = json.loads(os.environ["TF_CONFIG"])
num_workers = len(tf_config["cluster"]["worker"])

strategy = tf.distribute.MultiWorkerMirroredStrategy()

global_batch_size = per_worker_batch_size * num_workers
multi_worker_dataset = mnist_dataset(global_batch_size)

with strategy.scope():
    # Model building and compiling must happen within the strategy's scope.
    multi_worker_model = build_and_compile_cnn_model()

multi_worker_model.fit(multi_worker_dataset, epochs=3, steps_per_epoch=70)

# --- optional, beyond the tutorial: held-out evaluation (shard_plan.evaluation; see CHANGES.md) ---
if ignite_tf.data.load_plan().evaluation.enabled:
    held_out = ignite_tf.data.evaluation_dataset(global_batch_size, label_column="label")
    ignite_tf.data.report_evaluation(multi_worker_model.evaluate(held_out, return_dict=True))
# --- end of the held-out evaluation ---
