"""The model of a task: the user's entry point that builds it, and the SavedModel the chief leaves behind.

An entry point is ``"package.module:function"``, a function returning a COMPILED tf_keras model; it is
called with the keyword arguments its signature accepts (``learning_rate``, ``n_features``, ``n_classes``,
the model arguments), inside the strategy's scope. The trained model is saved as ``<checkpoint_dir>/model``
with ``ignite_tf_model.json`` (entry point, features, label, metrics ...) inside, which publishing reads.

TensorFlow is imported inside functions only (``ignite_tf.runtime.train`` decides when).
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

from ignite_tf.contract import Mode
from ignite_tf.errors import ConfigError
from ignite_tf.runstore.layout import RunFolder
from ignite_tf.runtime import ending
from ignite_tf.runtime.task import TaskInfo

MODEL_INFO = "ignite_tf_model.json"  # written inside the saved model directory

# Under ParameterServerStrategy each ps would write its own variables to the chief's path, which needs a folder
# the ps share; pods share none, so every checkpoint and SavedModel goes through the chief's CPU.
CHIEF_IO_DEVICE = "/job:chief/replica:0/task:0/device:CPU:0"


def load_entry_point(entry_point: str):
    """``"package.module:function"`` -> the function."""
    module_name, _, attr = str(entry_point).partition(":")
    if not module_name or not attr:
        raise ConfigError(f"entry point {entry_point!r} must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        from ignite_tf.runstore.code import import_hint

        raise ConfigError(f"entry point {entry_point!r}: cannot import {module_name!r} ({exc}); "
                          f"{import_hint(module_name)}") from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ConfigError(f"entry point {entry_point!r}: {module_name} has no function {attr!r}")
    return fn


def accepts(fn, name: str) -> bool:
    """Whether the model function takes the keyword argument ``name`` (by name or through ``**kwargs``)."""
    params = inspect.signature(fn).parameters
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def build_model(fn, offered: dict[str, Any]):
    """Call the model function with the keyword arguments it accepts, check it returns a compiled model."""
    import tf_keras

    kwargs = {k: v for k, v in offered.items() if v is not None and accepts(fn, k)}
    model = fn(**kwargs)
    name = getattr(fn, "__qualname__", fn)
    if not isinstance(model, tf_keras.Model):
        raise ConfigError(f"model function {name} returned {type(model).__name__}, not a tf_keras Model: build "
                          f"it with tf_keras (or tf.keras under TF_USE_LEGACY_KERAS=1)")
    if model.optimizer is None:
        raise ConfigError(f"model function {name} returned a model that is not compiled: call model.compile("
                          f"optimizer=..., loss=..., metrics=[...]) before returning it")
    if not model.built and offered.get("n_features"):
        model.build((None, offered["n_features"]))
    return model


def model_in_scope(fn, strat, classes, offered: dict[str, Any]):
    """The model function's compiled model, built in the strategy's scope; ``n_classes`` from the label
    (``classes``: a future of ``label_classes``) unless the model arguments give it."""
    if "n_classes" not in offered and accepts(fn, "n_classes"):
        offered["n_classes"] = classes.result()
    with strat.scope():
        return build_model(fn, offered)


def saved_metrics(checkpoint_dir: Path) -> dict[str, Any]:
    """The metrics of the model an earlier attempt saved (a restart that had nothing left to train)."""
    try:
        return json.loads((checkpoint_dir / RunFolder.MODEL / MODEL_INFO).read_text()).get("metrics") or {}
    except (OSError, ValueError):
        return {}


def save_model(model, checkpoint_dir: str | Path, info: TaskInfo, model_info: dict[str, Any]) -> str | None:
    """Save the model as ``<checkpoint_dir>/model`` (SavedModel, with ``ignite_tf_model.json`` inside).

    Under MultiWorkerMirroredStrategy saving is collective: every worker must call it, so the others
    save to a temporary directory and delete it. The chief writes to a temporary name and renames, so a
    reader never sees half a model.
    """
    started = time.monotonic()
    ckpt = Path(checkpoint_dir)
    ckpt.mkdir(parents=True, exist_ok=True)
    final = ckpt / RunFolder.MODEL
    if not info.is_chief:
        tmp = ckpt / f".model-{info.type}-{info.index}-{os.getpid()}"
        model.save(str(tmp), save_format="tf")
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    tmp = ckpt / f".model-tmp-{os.getpid()}"
    options = {}
    if info.mode is Mode.ASYNC:  # the variables live on the ps, which share no folder with the chief
        import tensorflow as tf

        options["options"] = tf.saved_model.SaveOptions(experimental_io_device=CHIEF_IO_DEVICE)
    model.save(str(tmp), save_format="tf", **ending.save_options(model), **options)
    (tmp / MODEL_INFO).write_text(json.dumps(model_info, default=str))
    old = ckpt / f".model-old-{os.getpid()}"
    if final.exists():
        final.replace(old)
    tmp.replace(final)
    shutil.rmtree(old, ignore_errors=True)
    print(f"model saved to {final} in {time.monotonic() - started:.1f}s", flush=True)  # the chief's output
    return str(final)


def checkpoints_through_chief(tf) -> None:
    """Make the async chief read and write every checkpoint itself (BackupAndRestore's included).

    Under ParameterServerStrategy TensorFlow runs each variable's save and restore on its parameter server,
    at the chief's path: that needs a folder the chief and the ps share. Pods share none when the run lives
    in an object store (each stages it in a folder of its own), and the ps failed with ``ckpt-1_temp; No such
    file or directory``. ``experimental_io_device`` routes the reads and writes through the chief; tf_keras'
    BackupAndRestore passes no options, hence the defaults set here, in the chief's process only.
    """
    chief = tf.train.CheckpointOptions(experimental_io_device=CHIEF_IO_DEVICE)
    save, restore = tf.train.CheckpointManager.save, tf.train.Checkpoint.restore

    def save_on_chief(self, *args, options=None, **kw):
        return save(self, *args, options=options or chief, **kw)

    def restore_on_chief(self, *args, options=None, **kw):
        return restore(self, *args, options=options or chief, **kw)

    tf.train.CheckpointManager.save, tf.train.Checkpoint.restore = save_on_chief, restore_on_chief
