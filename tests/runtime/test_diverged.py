"""A diverged training fails (``ignite_tf.runtime.report.diverged_callback``, first of the runtime's callbacks):
the epoch whose loss is NaN or infinite is neither backed up nor reported, and ``fit`` raises, so the task exits
with an error and saves no model. Keras' ``TerminateOnNaN`` would end ``fit`` as finished (the model saved)."""

from __future__ import annotations

import numpy as np
import pytest


def fit(features, tmp_path, epochs: int = 3):
    import tf_keras

    from ignite_tf.runtime.report import diverged_callback

    tf_keras.utils.set_random_seed(1)
    model = tf_keras.Sequential([tf_keras.Input((2,)), tf_keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    ended = []
    backup = tf_keras.callbacks.BackupAndRestore(str(tmp_path / "backup"), delete_checkpoint=False)
    after = tf_keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: ended.append(epoch))
    model.fit(features, np.zeros(len(features), np.float32), epochs=epochs, batch_size=16, verbose=0,
              callbacks=[diverged_callback(tf_keras), backup, after])
    return ended


def test_a_fit_whose_loss_is_not_finite_fails_before_its_epoch_is_kept(tmp_path):
    from ignite_tf.errors import DivergedError

    features = np.ones((64, 2), np.float32)
    features[37, 1] = np.inf  # one bad value: the first epoch's loss is not finite
    with pytest.raises(DivergedError, match=r"^epoch 1: the loss is (nan|inf): the training diverged"):
        fit(features, tmp_path)
    assert not list((tmp_path / "backup").rglob("*.index")), "the diverged epoch was backed up"


def test_a_finite_fit_goes_through(tmp_path):
    assert fit(np.ones((64, 2), np.float32), tmp_path) == [0, 1, 2]
