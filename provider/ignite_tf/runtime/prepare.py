"""A training task's first seconds: what it reads from Ignite while TensorFlow is imported.

TensorFlow's import keeps one core busy for seconds. Meanwhile a task reads its columns (the features' names,
the label's name and type), the label's classes (one SQL aggregate, only where the model function asks for
``n_classes``) and, where ``ignite_tf.runtime.start.read_ahead_plan`` says so, its first block of epoch 0. A
fork server (``ignite_tf.cluster.forkserver``) reads the columns and classes once before it forks
(``preload_inputs``); its tasks inherit them and skip those queries.
"""

from __future__ import annotations

import os
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from ignite_tf import timeline
from ignite_tf.contract import ENV_SHARD_PLAN
from ignite_tf.runtime.start import import_tf, read_ahead_plan
from ignite_tf.runtime.task import TaskInfo

__all__ = ["PLAN_WAIT_S", "Inputs", "import_tf_while_reading", "preload_inputs"]

PLAN_WAIT_S = 30.0
"""How long a fork server's preload waits for the shard plan's file (the launcher may still be making it)."""

# What ``preload_inputs`` read in the fork server, by (cache, label column, features): its forked tasks
# inherit it.
_PRELOADED: dict[tuple, tuple[tuple[list[str], str, Any], int | None]] = {}


class Inputs(NamedTuple):
    """The columns a training reads (``names``: the features, in order) and the label's classes (None: the
    model function does not ask, or the label is not an integer)."""

    names: list[str]
    label: str
    label_dtype: Any
    classes: int | None


def import_tf_while_reading(info: TaskInfo, plan, backup_dir: Path, label_column: str,
                            features: list[str] | None, batch_size: int, shuffle_buffer: int,
                            model_kwargs: dict[str, Any] | None) -> tuple[Any, Any, Inputs]:
    """(tf, tf_keras, the inputs), the reads done by modules imported first, so that the two threads never
    import side by side. ``backup_dir`` decides the read-ahead (a resumed task does not read epoch 0)."""
    import ignite_tf.data as itd
    import ignite_tf.reader.partition  # noqa: F401
    import ignite_tf.runtime.inputs  # noqa: F401

    ahead = read_ahead_plan(info, backup_dir, preloaded="tensorflow" in sys.modules)
    pool = ThreadPoolExecutor(1, thread_name_prefix="ignite-tf-prepare")
    try:
        shared = _PRELOADED.get(_preload_key(plan, label_column, features))
        prepared = _done(shared[0]) if shared else pool.submit(
            _read_columns, plan, label_column, features, batch_size, shuffle_buffer,
            {"import-process": True, "import-thread": "thread"}.get(ahead, False))
        classes = None if "n_classes" in (model_kwargs or {}) else _done(shared[1]) if shared else (
            pool.submit(lambda: _label_classes(plan, prepared.result())))
        tf = import_tf()
        import tf_keras

        names, label_name, label_dtype = prepared.result()
    finally:
        pool.shutdown(wait=False)  # the classes may still be counted: model_in_scope waits if it needs them
    if ahead == "after-import":  # read while the strategy starts, the model is built and its step traced
        itd.read_ahead(batch_size, 0, label_column=label_name, features=names, stack=True, plan=plan,
                       shuffle_buffer=shuffle_buffer)
    timeline.mark("tf_imported", show=info.is_chief)
    return tf, tf_keras, Inputs(names, label_name, label_dtype, classes)


def preload_inputs(label_column: str, features: list[str] | None, batch_size: int, shuffle_buffer: int) -> None:
    """In a fork server, before it forks: read the columns and the label's classes of this cluster's plan once.
    Waits up to ``PLAN_WAIT_S`` for the plan's file; a failure is left for each task to meet and report."""
    path = os.environ.get(ENV_SHARD_PLAN)
    deadline = time.monotonic() + PLAN_WAIT_S
    while path and not os.path.exists(path):
        if time.monotonic() > deadline:
            return  # each task loads the plan itself
        time.sleep(0.01)
    import ignite_tf.data as itd

    plan = itd.load_plan(None)
    found = _read_columns(plan, label_column, features, batch_size, shuffle_buffer, False)
    _PRELOADED[_preload_key(plan, label_column, features)] = (found, _label_classes(plan, found))


def _preload_key(plan, label_column: str, features: list[str] | None) -> tuple:
    return plan.partition_map.cache, label_column, tuple(features or ())


def _done(value):
    future = Future()
    future.set_result(value)
    return future


def _read_columns(plan, label_column: str, features: list[str] | None, batch_size: int, shuffle_buffer: int,
                  read_ahead: bool | str) -> tuple[list[str], str, Any]:
    """(feature names, label name, label dtype); with ``read_ahead`` (True: in a child process, ``"thread"``:
    in a thread) also starts reading this task's first block of epoch 0 (``ignite_tf.data.read_ahead``)."""
    import ignite_tf.data as itd
    from ignite_tf.runtime.inputs import columns

    names, label_name, label_dtype = columns(plan, label_column, features)
    if read_ahead:
        itd.read_ahead(batch_size, 0, label_column=label_name, features=names, stack=True, plan=plan,
                       shuffle_buffer=shuffle_buffer, process=read_ahead is True)
    return names, label_name, label_dtype


def _label_classes(plan, columns: tuple[list[str], str, Any]) -> int | None:
    from ignite_tf.runtime.inputs import label_classes

    _, label, label_dtype = columns
    return label_classes(plan, label, label_dtype)
