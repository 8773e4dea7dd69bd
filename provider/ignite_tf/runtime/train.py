"""The worker runtime: what every task of a TensorFlow cluster runs.

The launcher starts each task as ``python -m ignite_tf.runtime --entry-point module:function --epochs N
--batch-size B --label-column label`` with ``TF_CONFIG`` and the ``IGNITE_TF_*`` environment (see
``ignite_tf.cluster.spec``), in the task's own directory. The task's role decides what it does:

- sync mode (MultiWorkerMirroredStrategy): every worker trains; worker 0 is the chief;
- async mode (ParameterServerStrategy): the ``chief`` trains (it is the coordinator); each ``worker`` writes
  its shard into a local feed (see ``ignite_tf.data.feed``) and then serves; each ``ps`` serves.

``train`` builds the model from the entry point (a function returning a COMPILED tf_keras model, called
inside ``strategy.scope()``), trains it with ``BackupAndRestore`` (a restarted cluster resumes at the last
finished epoch) and a callback (``ignite_tf.runtime.report``) that, on the chief, prints one line per epoch,
reports it to the cluster state and writes it as TensorBoard scalars; then saves the model as a SavedModel in
``<checkpoint_dir>/model`` (the entry point and the SavedModel: ``ignite_tf.runtime.model``).

TensorFlow is imported inside functions only (``TF_USE_LEGACY_KERAS=1`` is set first: with Keras 3,
``fit`` under MultiWorkerMirroredStrategy fails).
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from ignite_tf import contract, timeline
from ignite_tf.contract import ENV_CHECKPOINT_DIR, ENV_CLUSTER_ID, ENV_TENSORBOARD_DIR, Mode
from ignite_tf.defaults import DEFAULT_BATCH_SIZE, DEFAULT_LABEL_COLUMN, DEFAULT_SHUFFLE_BUFFER
from ignite_tf.errors import ConfigError
from ignite_tf.faults import Cause, cause_of, described, exit_code_of
from ignite_tf.runstore.layout import RunFolder
from ignite_tf.runstore.sync import TaskSync
from ignite_tf.runtime import ending, stopping
from ignite_tf.runtime import evaluation as held_out
from ignite_tf.runtime.model import (
    build_model,
    checkpoints_through_chief,
    load_entry_point,
    model_in_scope,
    save_model,
    saved_metrics,
)
from ignite_tf.runtime.prepare import import_tf_while_reading, preload_inputs
from ignite_tf.runtime.report import EpochReporter, diverged_callback
from ignite_tf.runtime.start import import_tf, is_coordinator, wait_for_leader
from ignite_tf.runtime.task import TaskInfo, task_info


def strategy(mode: Mode | str | None = None):
    """The distribution strategy for this task.

    No TF_CONFIG: the default strategy. Sync: ``MultiWorkerMirroredStrategy()``. Async (chief only):
    ``ParameterServerStrategy(TFConfigClusterResolver())``. TensorFlow waits without limit for missing
    peers here; the supervisor enforces the start-up deadline.
    """
    info = task_info(mode)
    tf = import_tf()
    if info.type is None:
        return tf.distribute.get_strategy()
    if info.mode is Mode.SYNC:
        wait_for_leader(info)
        made = tf.distribute.MultiWorkerMirroredStrategy()
        contract.handle_stop()  # back from TensorFlow's coordination service, which only records a SIGTERM
        return made
    if info.type != "chief":
        raise ConfigError(f"task {info.type}-{info.index} serves in async mode: call serve(), not strategy(); "
                          f"only the chief creates the ParameterServerStrategy")
    # Fail fast on a lost worker so the coordinator reschedules its steps instead of waiting on gRPC.
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    made = tf.distribute.ParameterServerStrategy(resolver)
    contract.handle_stop()
    checkpoints_through_chief(tf)
    return made


def serve(*, epochs: int = 0, batch_size: int = DEFAULT_BATCH_SIZE, label_column: str = DEFAULT_LABEL_COLUMN,
          features: list[str] | None = None, shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER, join: bool = True):
    """Run this async worker's or parameter server's TF server (forever, unless ``join=False``).

    Given ``epochs``, an async worker first writes its feed (``./feed``, see ``ignite_tf.data.feed``) for as
    many epochs, so the runtime chief's dataset graph finds it when the server starts answering. That costs disk
    (``epochs x shard rows x (features + 1) x 4`` bytes) and start-up time before the server listens. Without
    ``epochs`` it is a TF server that also writes the feed a user's chief script asks for
    (``ignite_tf.data.parameter_server_dataset_fn``; a script bringing its own datasets asks for none).
    """
    info = task_info()
    if not info.serves:
        raise ConfigError(f"task {info.type}-{info.index} in {info.mode.value} mode trains, it does not serve: "
                          f"only async workers and ps tasks serve")
    answered = None
    if info.type == "worker":
        from ignite_tf.data.feed import answer_requests, prepare_feed

        answered = prepare_feed(info.index, epochs, batch_size=batch_size, label=label_column, features=features,
                                shuffle_buffer=shuffle_buffer, log=_log)
    contract.serving(f"serving {info.type}-{info.index}")  # the chief's progress stands for the cluster's
    os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")
    tf = import_tf()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    # The coordinator's closures need inter-op threads beyond one per core on small machines.
    config = tf.compat.v1.ConfigProto(inter_op_parallelism_threads=max(2, info.workers + 1))
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=info.type, task_index=info.index,
                                  protocol=resolver.rpc_layer or "grpc", config=config, start=True)
    contract.handle_stop()  # ends the task from the stop watcher while the main thread waits in join()
    _log(f"serving {info.type}-{info.index} at {server.target} (cwd {os.getcwd()})")
    if join and info.type == "worker" and epochs <= 0:
        answer_requests(info.index, answered=answered, log=_log)
    if join:
        server.join()
    return server


def train(entry_point, *, epochs: int, batch_size: int = DEFAULT_BATCH_SIZE,
          label_column: str = DEFAULT_LABEL_COLUMN, features: list[str] | None = None,
          learning_rate: float | None = None, steps_per_epoch: int | None = None,
          checkpoint_every_steps: int | None = None, shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
          model_kwargs: dict[str, Any] | None = None, checkpoint_dir: str | None = None,
          tensorboard_dir: str | None = None, plan=None, mode: Mode | str | None = None,
          on_backup=None) -> dict[str, Any]:
    """Train the entry point's model on this worker's data (sync workers, the async chief, or alone).

    :param entry_point: ``"module:function"`` (or the function) returning a compiled tf_keras model; it is
        passed ``learning_rate``, ``n_features``, ``n_classes`` (an integer label's largest value + 1) and
        ``model_kwargs`` where its signature accepts them; ``model_kwargs`` win over ``n_classes``.
    :param epochs: total epochs; a restarted cluster resumes after the last backed-up one.
    :param batch_size: rows per step per worker (sync: the global batch is this times the workers).
    :param label_column: the column the model predicts; features are every other column but the key, unless
        ``features``.
    :param steps_per_epoch: default: sync, the smallest shard over all epochs / batch_size; async, all
        rows / batch_size (steps of all workers together).
    :param checkpoint_every_steps: back up every N steps instead of every epoch (sync; PSS backs up per epoch).
    :param checkpoint_dir: default ``IGNITE_TF_CHECKPOINT_DIR``, else ``./checkpoints``: ``backup/`` holds
        BackupAndRestore's state, ``model/`` the trained SavedModel (written by the chief).
    :param tensorboard_dir: default ``IGNITE_TF_TENSORBOARD_DIR``, else ``./tensorboard``.
    :param on_backup: called after each backup, of an epoch or on SIGTERM (a run store's push of
        ``<checkpoint_dir>/backup``).
    :returns: ``{"start_epoch", "epochs", "epochs_run" (trained by this call), "metrics" (last epoch),
        "model_dir" (chief), "chief", "evaluation" (chief, with a held-out split: ``ignite_tf.runtime.evaluation``)}``.

    SIGTERM ends the task within ``contract.STOP_DEADLINE_S``, a sync worker after a backup at the current step;
    the backup is kept, so a restart of a finished training trains nothing (``ignite_tf.runtime.stopping``).
    """
    import ignite_tf.data as itd

    info = task_info(mode)
    stopping.probe_platform(info)  # beside the imports and the backup's read, not inside fit
    _check_task(info, epochs, batch_size)
    plan = itd.load_plan(plan)
    folders = _Folders.of(checkpoint_dir, tensorboard_dir)
    store_sync = _take_backup(info, folders)
    tf, tf_keras, inputs = import_tf_while_reading(info, plan, folders.backup, label_column, features, batch_size,
                                                   shuffle_buffer, model_kwargs)
    fn = load_entry_point(entry_point) if isinstance(entry_point, str) else entry_point
    strat = strategy(info.mode)
    timeline.mark("strategy_ready", show=info.is_chief)
    steps, examples_per_step, step_level = _steps(info, strat, plan, batch_size, epochs, steps_per_epoch,
                                                  checkpoint_every_steps)
    # A backup written on SIGTERM is of a step: tf_keras then resumes at the next step, as with step backups.
    start_epoch, start_step = _resume(folders.backup, steps, step_level or stopping.saves_on_stop(strat, info),
                                      epochs, info)
    offered = {**(model_kwargs or {}), "learning_rate": learning_rate, "n_features": len(inputs.names)}
    model = model_in_scope(fn, strat, inputs.classes, offered)  # adds n_classes to offered
    from ignite_tf.runtime.inputs import fit_dataset

    data = fit_dataset(tf_keras, strat, info, plan, batch_size=batch_size, label=inputs.label,
                       features=inputs.names, label_dtype=inputs.label_dtype, epochs=epochs, steps=steps,
                       start_epoch=start_epoch, start_step=start_step, shuffle_buffer=shuffle_buffer)
    reporter = EpochReporter(tf, info, epochs, steps, examples_per_step, folders.tensorboard)
    _fit(tf_keras, model, data, strat, info, folders, store_sync, reporter, epochs=epochs, steps=steps,
         checkpoint_every_steps=checkpoint_every_steps, on_backup=on_backup)
    model_info = {"entry_point": entry_point if isinstance(entry_point, str) else getattr(fn, "__qualname__", ""),
                  "features": inputs.names, "label": inputs.label, "label_dtype": str(inputs.label_dtype),
                  "epochs": epochs, "batch_size": batch_size, "mode": info.mode.value,
                  "metrics": reporter.last or saved_metrics(folders.checkpoints),
                  "cluster_id": os.environ.get(ENV_CLUSTER_ID), "saved_at": time.time()}
    model_dir, evaluation = _save_and_evaluate(model, fn, offered, info, plan, folders, store_sync, model_info,
                                               batch_size)
    return {"start_epoch": start_epoch, "epochs": epochs, "epochs_run": reporter.epochs_run,
            "metrics": reporter.last or model_info["metrics"], "model_dir": model_dir, "chief": info.is_chief,
            "evaluation": evaluation}


class _Folders(NamedTuple):
    """Where a training task keeps its files: ``checkpoints`` (``backup/``: BackupAndRestore's state,
    ``model/``: the SavedModel) and ``tensorboard``."""

    checkpoints: Path
    tensorboard: Path

    @classmethod
    def of(cls, checkpoint_dir: str | None, tensorboard_dir: str | None) -> _Folders:
        return cls(Path(checkpoint_dir or os.environ.get(ENV_CHECKPOINT_DIR) or "checkpoints").absolute(),
                   Path(tensorboard_dir or os.environ.get(ENV_TENSORBOARD_DIR) or "tensorboard").absolute())

    @property
    def backup(self) -> Path:
        return self.checkpoints / RunFolder.BACKUP


def _check_task(info: TaskInfo, epochs: int, batch_size: int) -> None:
    if info.serves:
        raise ConfigError(f"task {info.type}-{info.index} serves in async mode: run serve() there; the chief trains")
    if epochs < 1 or batch_size < 1:
        raise ConfigError(f"epochs and batch_size must be >= 1 (got epochs={epochs}, batch_size={batch_size})")


def _take_backup(info: TaskInfo, folders: _Folders) -> TaskSync:
    """The run's newest backup in place and this attempt's claim on it: an older attempt still running ends
    before its next backup (``stopping.claim``). The sync with an object-store run root (else no-ops)."""
    store_sync = TaskSync.from_env(folders.backup, folders.tensorboard, info.is_chief)
    store_sync.pull()  # its newest backup (with its attempt file), before anything here looks at the folder
    stopping.claim(folders.backup, info)
    store_sync.push_meanwhile()  # the claim, for an older attempt's pod that reads the store
    return store_sync


def _fit(tf_keras, model, data, strat, info: TaskInfo, folders: _Folders, store_sync: TaskSync,
         reporter: EpochReporter, *, epochs: int, steps: int, checkpoint_every_steps: int | None,
         on_backup) -> None:
    """``model.fit`` with its backups and reports. Backup first: an epoch is reported only once it would survive
    a restart (its steps are counted before)."""
    import ignite_tf.data as itd

    callbacks = [diverged_callback(tf_keras), reporter.steps_callback(tf_keras), *stopping.backup_callbacks(
        tf_keras, strat, info, folders.backup, checkpoint_every_steps or "epoch",
        on_backup=store_sync.pushed_then(on_backup), on_stop_saved=reporter.end_epoch_if_complete),
        reporter.callback(tf_keras)]
    timeline.mark("fit_start", show=info.is_chief)
    model.fit(data, epochs=epochs, steps_per_epoch=steps, callbacks=callbacks, verbose=0)
    itd.drop_read_ahead()  # one no dataset took (a resumed run, a plan it did not match)
    timeline.mark("fit_end", show=info.is_chief)


def _save_and_evaluate(model, fn, offered: dict[str, Any], info: TaskInfo, plan, folders: _Folders,
                       store_sync: TaskSync, model_info: dict[str, Any], batch_size: int) -> tuple[Any, Any]:
    """(model folder, held-out evaluation): the SavedModel written once (the chief; a rebuilt copy where the
    strategy's model cannot be saved), evaluated on the held-out rows, and pushed to the run store."""
    model_dir = ending.save_once(model, rebuild=lambda: build_model(fn, offered), info=info, log=_log,
                                 save=lambda m: save_model(m, folders.checkpoints, info, model_info))
    evaluation = held_out.after_training(plan, model_dir, batch_size=batch_size, log=_log)
    store_sync.finish(model_dir)
    timeline.mark("saved", show=info.is_chief)
    return model_dir, evaluation


def preload(argv: list[str]) -> None:
    """Called by the fork server (``ignite_tf.cluster.forkserver``) beside its TensorFlow import, with the
    runtime's arguments: the columns and the label's classes every training task reads first, read once
    (``ignite_tf.runtime.prepare.preload_inputs``); the tasks forked afterwards skip those queries."""
    args = build_parser().parse_args(argv)
    if args.serve or not args.entry_point:
        return
    stopping.probe_platform(task_info())  # a warm standby pod's (the fork server has no TF_CONFIG: its tasks ask)
    preload_inputs(args.label_column, _features(args.features), args.batch_size, args.shuffle_buffer)


def _features(text: str | None) -> list[str] | None:
    return [f.strip() for f in text.split(",") if f.strip()] if text else None


def _steps(info: TaskInfo, strat, plan, batch_size: int, epochs: int, steps_per_epoch: int | None,
           checkpoint_every_steps: int | None) -> tuple[int, int, bool]:
    """(steps per epoch, examples per step, whether backups are per step) of this task's ``fit``."""
    import ignite_tf.data as itd

    if is_coordinator(info):
        steps = steps_per_epoch or max(1, sum(plan.rows_per_worker(0)) // batch_size)
        return steps, batch_size, False  # tf_keras backs up PSS training per epoch only
    steps = steps_per_epoch or min(itd.steps_per_epoch(batch_size, e, plan=plan) for e in range(epochs))
    return steps, batch_size * strat.num_replicas_in_sync, bool(checkpoint_every_steps)


def _resume(backup_dir: Path, steps: int, step_level: bool, epochs: int, info: TaskInfo) -> tuple[int, int]:
    """(epoch, step) where ``fit`` resumes from BackupAndRestore's state in ``backup_dir`` ((0, 0): the start)."""
    from ignite_tf.runtime.inputs import resume_point

    start_epoch, start_step = resume_point(backup_dir, steps, step_level=step_level)
    if start_epoch >= epochs:
        _log(f"training already complete ({epochs} epochs backed up in {backup_dir}): nothing to train", info)
        return epochs - 1, 0  # fit restores the last epoch's backup and ends at once
    if start_epoch or start_step:
        _log(f"resuming at epoch {start_epoch + 1} step {start_step} from {backup_dir}", info)
    return start_epoch, start_step


def _log(message: str, info: TaskInfo | None = None) -> None:
    if info is None or info.is_chief or info.serves:
        print(message, flush=True)


def _model_arg(text: str) -> tuple[str, Any]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--model-arg {text!r}: expected key=value")
    try:
        return key, json.loads(value)
    except json.JSONDecodeError:
        return key, value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m ignite_tf.runtime", description=__doc__.splitlines()[0])
    parser.add_argument("--entry-point", help="module:function returning a compiled tf_keras model")
    parser.add_argument("--epochs", type=int,
                        help="epochs to train; an async worker writes its feed for as many (required to train)")
    parser.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE,
                        help=f"rows per step per worker (default {DEFAULT_BATCH_SIZE})")
    parser.add_argument("--label-column", "--label", dest="label_column", default=DEFAULT_LABEL_COLUMN,
                        help=f"the column the model predicts (default {DEFAULT_LABEL_COLUMN!r})")
    parser.add_argument("--features", help="comma-separated feature columns (default: all but key and label)")
    parser.add_argument("--learning-rate", type=float)
    parser.add_argument("--steps-per-epoch", type=int)
    parser.add_argument("--checkpoint-every-steps", type=int)
    parser.add_argument("--shuffle-buffer", type=int, default=DEFAULT_SHUFFLE_BUFFER)
    parser.add_argument("--model-arg", type=_model_arg, action="append", default=[], metavar="KEY=VALUE",
                        help="extra keyword argument of the model function (value parsed as JSON if it can be)")
    parser.add_argument("--serve", action="store_true",
                        help="only serve (async worker / ps); the default decides from TF_CONFIG's task type")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    # `kill -USR1 <task pid>` writes every thread's Python stack to the task's output: how to see where a
    # task that looks hung (a collective waiting for a peer, a read) is waiting.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    contract.handle_stop()  # SIGTERM ends the task, with or without the taskboot on its PYTHONPATH
    features = _features(args.features)
    contract.report("runtime started", force=True)  # watched from here: start-up counts toward the timeout
    try:
        info = task_info()
        timeline.replay(show=info.is_chief)  # the pod's first process's moments, if it was one
        timeline.mark("runtime_started", show=info.is_chief)
        if args.serve or info.serves:
            serve(epochs=args.epochs or 0, batch_size=args.batch_size, label_column=args.label_column,
                  features=features, shuffle_buffer=args.shuffle_buffer)
            return 0
        if not args.entry_point:
            raise ConfigError("--entry-point module:function is required for a task that trains")
        if args.epochs is None:
            raise ConfigError("--epochs N is required for a task that trains")
        train(args.entry_point, epochs=args.epochs, batch_size=args.batch_size, label_column=args.label_column,
              features=features, learning_rate=args.learning_rate, steps_per_epoch=args.steps_per_epoch,
              checkpoint_every_steps=args.checkpoint_every_steps, shuffle_buffer=args.shuffle_buffer,
              model_kwargs=dict(args.model_arg))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    except Exception as exc:
        cause = cause_of(exc)
        if cause is Cause.CODE:
            raise
        # Not the code's fault: a status that says which (``ignite_tf.faults``), and the error on one line that
        # the supervisor carries into the cluster's reason.
        print(f"error: {cause.value}: {described(exc)}", file=sys.stderr, flush=True)
        return exit_code_of(cause)
    return 0


def exit_with(code: int) -> None:
    """A task ends at once, its output flushed: TensorFlow's threads and exit handlers could otherwise hold it
    (see ``ignite_tf.runtime.ending``)."""
    contract.exit_now(code)
