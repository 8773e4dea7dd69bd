"""Per-epoch reporting of the worker runtime: a log line, the cluster state, TensorBoard scalars.

``train`` in :mod:`ignite_tf.runtime.train` gives ``fit`` an ``EpochReporter``'s callback. TensorFlow and tf_keras
are passed in (the runtime imports them), so importing this module imports neither.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ignite_tf import contract, timeline
from ignite_tf.contract import ENV_ATTEMPT

if TYPE_CHECKING:
    from ignite_tf.runtime.task import TaskInfo


def diverged_callback(tf_keras):
    """A callback that fails ``fit`` (``DivergedError``) at the end of an epoch whose loss is NaN or infinite.
    Put first: the epoch is then neither backed up nor reported, and no model is saved. (Keras' own
    ``TerminateOnNaN`` ends ``fit`` as if it had finished: the diverged model would be saved and offered for
    publishing.) Read once an epoch, where the logs are numbers already: per step would synchronise each step."""
    import math

    def check(epoch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            from ignite_tf.errors import DivergedError

            raise DivergedError(f"epoch {epoch + 1}: the loss is {float(loss)}: the training diverged (a learning "
                                f"rate too high, features not scaled, or a NaN or infinite feature); that epoch "
                                f"is not kept and no model is saved")

    return tf_keras.callbacks.LambdaCallback(on_epoch_end=check)


class EpochReporter:
    """On the chief, per epoch: a log line, the same dict to the cluster state, TensorBoard scalars.

    Every task keeps its last epoch's metrics in ``last``. ``callback(tf_keras)`` is what ``fit`` is given.
    TensorFlow 2.21 no longer installs the ``tensorboard`` package that Keras' TensorBoard callback needs,
    so the scalars are written with core ``tf.summary.write`` under the metadata TensorBoard's scalar
    plugin reads (``<tb_dir>/train``, tags ``epoch_loss``, ``epoch_accuracy``... as Keras names them).
    """

    HIDDEN = ("epoch", "epochs", "examples_per_s", "epoch_s", "steps", "attempt", "time")  # not in the log line
    NOT_SCALARS = ("epoch", "epochs", "steps", "attempt", "time")

    def __init__(self, tf, info: TaskInfo, epochs: int, steps: int, examples_per_step: int, tb_dir: Path):
        from tensorflow.core.framework import summary_pb2

        self.tf, self.info, self.epochs, self.steps = tf, info, epochs, steps
        self.examples_per_step, self.tb_dir = examples_per_step, tb_dir
        self.scalar = summary_pb2.SummaryMetadata(
            plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
            data_class=summary_pb2.DATA_CLASS_SCALAR)
        self.last: dict[str, Any] = {}
        self._t0 = time.monotonic()
        self._reports = self._writer = None
        self._epoch = 0
        self._stepped = False
        self._batch, self._batch_logs, self._ended = -1, None, -1  # the last batch seen, the last epoch ended
        self.epochs_run = 0  # epochs this task trained (a restart trains only those not backed up)
        if info.is_chief:
            from ignite_tf.state.reports import TaskReports

            self._reports = TaskReports.from_env()

    def callback(self, tf_keras):
        """This reporter as a tf_keras callback (after the backup's: an epoch is reported once it is backed up)."""
        return tf_keras.callbacks.LambdaCallback(
            on_train_begin=self.on_train_begin, on_train_end=self.on_train_end, on_epoch_begin=self.on_epoch_begin,
            on_epoch_end=self.on_epoch_end)

    def steps_callback(self, tf_keras):
        """Its step's part, a callback to put before the backup's, whose batch end may save on SIGTERM and end
        the task (``end_epoch_if_complete``). Batch logs stay tensors (``_supports_tf_logs``): reading them each
        step would synchronise every step."""
        return tf_keras.callbacks.LambdaCallback(on_train_batch_end=self.on_train_batch_end, _supports_tf_logs=True)

    def on_train_begin(self, logs=None):
        # The last callback: every other one's start (the backup's restore) is done.
        timeline.mark("train_begin", show=self.info.is_chief)
        if self.info.is_chief:
            self._writer = self.tf.summary.create_file_writer(str(self.tb_dir / "train"))

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()

    def on_epoch_begin(self, epoch, logs=None):
        if not self.epochs_run:
            timeline.mark("epoch_begin", show=self.info.is_chief)
        self._t0 = time.monotonic()
        contract.report(f"epoch {epoch + 1} began", force=True)
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if not self._stepped:
            self._stepped = True
            timeline.mark("first_step", show=self.info.is_chief)
        self._batch, self._batch_logs = batch, logs  # tensors: read only if the task ends at this step
        contract.report(f"epoch {self._epoch + 1} step {batch + 1}")

    def end_epoch_if_complete(self) -> None:
        """Called as the task ends after its save on SIGTERM (a step's backup): when that step was its epoch's
        last, the epoch is reported now, for ``on_epoch_end`` will not run and a restart resumes at the next
        epoch. The last batch's logs are the epoch's metrics (Keras' metrics accumulate over the epoch)."""
        if self._batch == self.steps - 1 and self._ended != self._epoch:
            self.on_epoch_end(self._epoch, self._batch_logs)

    def on_epoch_end(self, epoch, logs=None):
        self._ended = epoch
        seconds = time.monotonic() - self._t0
        self.last = metrics = self.metrics(epoch, logs, seconds)
        self.epochs_run += 1
        if not self.info.is_chief:
            return
        shown = " ".join(f"{k}={v:.4f}" for k, v in metrics.items() if k not in self.HIDDEN)
        print(f"epoch {epoch + 1}/{self.epochs} {shown} examples/s={metrics['examples_per_s']:.0f} "
              f"epoch_s={seconds:.1f}", flush=True)
        self.write_scalars(epoch, metrics)
        self.report_to_state(epoch, metrics)

    def metrics(self, epoch: int, logs: dict | None, seconds: float) -> dict[str, Any]:
        """The epoch's numbers: Keras' logs plus throughput, duration, steps, attempt and time."""
        metrics: dict[str, Any] = {"epoch": epoch + 1, "epochs": self.epochs}
        for key, value in (logs or {}).items():
            try:
                metrics[key] = round(float(value), 6)
            except (TypeError, ValueError):
                continue
        metrics.update({"examples_per_s": round(self.steps * self.examples_per_step / max(seconds, 1e-9), 1),
                        "epoch_s": round(seconds, 3), "steps": self.steps,
                        "attempt": int(os.environ.get(ENV_ATTEMPT, "0") or 0), "time": round(time.time(), 3)})
        return metrics

    def write_scalars(self, epoch: int, metrics: dict[str, Any]) -> None:
        if self._writer is None:
            return
        tf = self.tf
        with self._writer.as_default():
            for key, value in metrics.items():
                if key not in self.NOT_SCALARS:
                    tf.summary.write(f"epoch_{key}", tf.constant(value, tf.float32), step=epoch, metadata=self.scalar)
        self._writer.flush()

    def report_to_state(self, epoch: int, metrics: dict[str, Any]) -> None:
        if self._reports is None:
            return
        try:
            self._reports.epoch(metrics)
        except Exception as exc:  # noqa: BLE001 - metrics must never stop training
            print(f"warning: could not report epoch {epoch + 1} to {self._reports.describe()}: {exc}",
                  file=sys.stderr, flush=True)
