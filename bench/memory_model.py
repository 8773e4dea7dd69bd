"""Entry point of ``bench/k8s/memory.py``'s clusters: the tabular classifier, plus a report of the task's peak.

``memory_model:model`` returns ``ignite_tf.models.tabular_classifier(...)`` whose ``fit`` ends by printing
``BENCH_MEMORY {...}``: the task's peak resident set (``VmHWM``) and, inside a container, its cgroup's peak
(``memory.peak``, or cgroup v1's ``memory.max_usage_in_bytes``), as the task itself sees them. Its
``parameters`` attribute is ``tabular_classifier``'s, so the memory estimate counts this model too.
"""

from __future__ import annotations

import json
from pathlib import Path

from ignite_tf.models import tabular_classifier

MARK = "BENCH_MEMORY"


def _peaks() -> dict:
    out = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            out["rss_peak_mib"] = round(int(line.split()[1]) / 1024, 1)
    for name in ("memory.peak", "memory/memory.max_usage_in_bytes"):
        try:
            out["cgroup_peak_mib"] = round(int(Path("/sys/fs/cgroup", name).read_text()) / 2**20, 1)
            break
        except (OSError, ValueError):
            continue
    return out


def model(n_features: int = 16, n_classes: int | None = None, learning_rate: float = 0.01, hidden: int = 32,
          optimizer: str = "adam"):
    """The compiled tabular classifier whose ``fit`` reports the task's memory peak when it ends."""
    import tf_keras

    import ignite_tf.runtime

    built = tabular_classifier(n_features=n_features, n_classes=n_classes, learning_rate=learning_rate,
                               hidden=hidden, optimizer=optimizer)
    task = ignite_tf.runtime.task_info()

    class Peak(tf_keras.callbacks.Callback):
        def on_train_end(self, logs=None):
            print(f"{MARK} {json.dumps({'task': f'{task.type}-{task.index}', **_peaks()})}", flush=True)

    fit = built.fit

    def fit_reporting(*args, callbacks=None, **kwargs):
        return fit(*args, callbacks=[*(callbacks or []), Peak()], **kwargs)

    built.fit = fit_reporting
    return built


model.parameters = tabular_classifier.parameters
