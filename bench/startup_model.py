"""Entry point of ``bench/startup.py``'s clusters: the tabular classifier, plus a first-step marker.

``startup_model:model`` returns ``ignite_tf.models.tabular_classifier()`` whose ``fit`` also runs a callback
that, on the chief only, writes ``time.time()`` into the file named by ``IGNITE_TF_BENCH_FIRST_STEP`` when
the first training batch ends, and prints ``BENCH_FIRST_STEP <time>`` in its output. The runtime passes its
own callbacks to ``fit``; wrapping ``fit`` on the instance is how this one joins them without changing the
runtime.
"""

from __future__ import annotations

import os
import time

ENV_MARK = "IGNITE_TF_BENCH_FIRST_STEP"
LINE_MARK = "BENCH_FIRST_STEP"  # also printed, for a launcher whose run folder this host cannot read (pods)


def model(n_features: int = 16, n_classes: int | None = None, learning_rate: float = 0.01):
    """The compiled tabular classifier whose ``fit`` marks the chief's first step.

    :param n_features: input width (the runtime passes the number of feature columns).
    :param learning_rate: Adam's learning rate.
    """
    import tf_keras

    import ignite_tf.runtime
    from ignite_tf.models import tabular_classifier

    built = tabular_classifier(n_features=n_features, n_classes=n_classes, learning_rate=learning_rate)
    mark = os.environ.get(ENV_MARK)
    if not mark or not ignite_tf.runtime.task_info().is_chief:
        return built

    class FirstStep(tf_keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch != 0:
                return
            print(f"{LINE_MARK} {time.time()!r}", flush=True)
            try:
                # "x": a restarted attempt must not move the first step later.
                with open(mark, "x") as f:
                    f.write(repr(time.time()))
            except OSError:  # exists: a restart; missing folder: a run root this pod cannot see (the line has it)
                pass

    fit = built.fit

    def fit_with_marker(*args, callbacks=None, **kwargs):
        return fit(*args, callbacks=[*(callbacks or []), FirstStep()], **kwargs)

    built.fit = fit_with_marker
    return built
