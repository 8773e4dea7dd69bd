"""A 2-worker MultiWorkerMirroredStrategy job reading through ignite_tf.data whose worker 1 raises mid-epoch
(from a Keras callback, as a bug in user code would). usage: raisejob.py [--hang]

--hang: worker 1 instead stops making progress (sleeps in a non-daemon thread's join) without exiting.
"""

import json
import os
import sys
import threading

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
import tensorflow as tf  # noqa: E402

import ignite_tf.data  # noqa: E402

hang = "--hang" in sys.argv
index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
strategy = tf.distribute.MultiWorkerMirroredStrategy()
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Dense(8, activation="relu"), tf.keras.layers.Dense(3)])
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True), optimizer="sgd")


class Fail(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if index == 1 and batch == 5:
            print(f"worker {index} failing on purpose", flush=True)
            if hang:
                stuck = threading.Thread(target=threading.Event().wait)  # never set
                stuck.start()
                stuck.join()
            raise RuntimeError("worker 1 failed on purpose mid-epoch")


model.fit(ignite_tf.data.dataset(32, label_column="label", stack=True, block_rows=64).repeat(), epochs=2,
          steps_per_epoch=20, callbacks=[Fail()], verbose=0)
