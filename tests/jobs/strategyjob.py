"""A user's training script of the first cluster release, written against ``ignite_tf.runtime.strategy()``.

Started by ``ignite-tf start --workers 2 CACHE tests/jobs python strategyjob.py`` over a table with a REAL column
F0 and an INT column LABEL (0-2): the strategy and this task's place come from ``ignite_tf.runtime``, the data
from ``ignite_tf.data``; each worker trains 2 steps and prints what it trained with.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Keras 2 API: Keras 3's fit fails under this strategy

import tensorflow as tf  # noqa: E402

import ignite_tf.data  # noqa: E402
import ignite_tf.runtime  # noqa: E402

strategy = ignite_tf.runtime.strategy()
task = ignite_tf.runtime.task_info()
data = ignite_tf.data.dataset(16, label_column="label", stack=True).repeat()

with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.InputLayer(input_shape=(1,)), tf.keras.layers.Dense(3)])
    model.compile(optimizer="sgd", loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

history = model.fit(data, epochs=1, steps_per_epoch=2, verbose=0)
kind = "MultiWorkerMirroredStrategy" if isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) else "another"
print(f"{task.type}-{task.index} trained {len(history.history['loss']) * 2} steps with {kind} strategy "
      f"({strategy.num_replicas_in_sync} replicas)", flush=True)
