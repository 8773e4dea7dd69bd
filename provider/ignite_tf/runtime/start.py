"""How a task starts: TensorFlow's import, when it reads its first block ahead, and waiting for the leader."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import os
import sys
import time
from pathlib import Path

from ignite_tf.contract import Mode
from ignite_tf.errors import ConfigError
from ignite_tf.ports import listening
from ignite_tf.runtime.task import TaskInfo

ENV_READ_AHEAD = "IGNITE_TF_READ_AHEAD"
READ_AHEAD_MODES = ("auto", "process", "thread", "after", "off")
LEADER_WAIT_S = 60.0


def import_tf():
    """Import TensorFlow and tf_keras the way the runtime needs them (Keras 2 API through tf_keras), with
    Python's cyclic garbage collector paused: its passes over the ~300,000 objects the import creates took
    0.33 s of a 2 s import here, and the import leaves little garbage. pandas is not imported with them
    (``defer_pandas``)."""
    if "tensorflow" not in sys.modules:
        os.environ["TF_USE_LEGACY_KERAS"] = "1"
    elif os.environ.get("TF_USE_LEGACY_KERAS") != "1":
        print("warning: tensorflow was imported before TF_USE_LEGACY_KERAS=1 was set; the runtime uses tf_keras "
              "explicitly, but a model built with tf.keras (Keras 3) will fail under distribution",
              file=sys.stderr)
    collecting = gc.isenabled()
    gc.disable()
    try:
        with defer_pandas():  # TensorFlow imports tf_keras's internals when TF_USE_LEGACY_KERAS=1
            import tensorflow as tf
            import tf_keras  # noqa: F401
    finally:
        if collecting:
            gc.enable()
    return tf


class _PandasType(type):
    """``isinstance(x, pandas.Series)`` (or ``DataFrame``) without importing pandas: an object can only be
    one if pandas is loaded already."""

    def __instancecheck__(cls, obj):
        pandas = sys.modules.get("pandas")
        return pandas is not None and isinstance(obj, getattr(pandas, cls.__name__))

    def __subclasscheck__(cls, sub):
        pandas = sys.modules.get("pandas")
        return pandas is not None and issubclass(sub, getattr(pandas, cls.__name__))


class _PandasTypes:
    """What tf_keras's data adapter uses of the pandas module: the two types it recognises inputs by."""

    Series = _PandasType("Series", (), {})
    DataFrame = _PandasType("DataFrame", (), {})


PANDAS_USER = "tf_keras.src.engine.data_adapter"


@contextlib.contextmanager
def defer_pandas():
    """Import tf_keras (and TensorFlow, which imports it under ``TF_USE_LEGACY_KERAS=1``) inside this block
    without pandas: tf_keras's data adapter imports pandas only to recognise pandas inputs to ``fit``, 0.27 s
    of a 2 s import here, paid by every task that never sees a DataFrame. The adapter gets ``_PandasTypes``
    instead, so pandas inputs are still recognised once the program has imported pandas (a DataFrame cannot
    exist before). Nothing is changed when pandas is already imported or not installed, or when the adapter
    was imported before."""
    deferring = ("pandas" not in sys.modules and PANDAS_USER not in sys.modules
                 and importlib.util.find_spec("pandas") is not None)
    if not deferring:
        yield
        return
    sys.modules["pandas"] = None  # makes ``import pandas`` fail, for the adapter's try/except ImportError
    try:
        yield
    finally:
        if sys.modules.get("pandas", 0) is None:
            del sys.modules["pandas"]
    adapter = sys.modules.get(PANDAS_USER)
    if adapter is not None and getattr(adapter, "pd", 0) is None:
        adapter.pd = _PandasTypes


def read_ahead_plan(info: TaskInfo, backup_dir: Path, preloaded: bool = False) -> str | None:
    """When this task reads its first block ahead: ``"import-process"`` / ``"import-thread"`` (during the
    TensorFlow import), ``"after-import"`` (in a thread once TensorFlow is imported, while the strategy starts
    and the step is traced) or None: a resumed run (BackupAndRestore picks the epoch), the async chief (it
    reads the workers' feeds) and ``IGNITE_TF_READ_AHEAD=off``. ``auto`` reads after the import where the
    task is alone on its host or TensorFlow was imported before the task started (``preloaded``: forked from
    the fork server), else not at all: measured on 2 cores (docs/development/performance-log.md, "Start-up
    and input"), reading during the import slowed the import as much as it saved, and reading beside another
    task's import slowed that import and so the strategy's start.
    """
    how = read_ahead_mode()
    fresh = not (backup_dir.is_dir() and any(backup_dir.iterdir()))
    if how == "auto":
        how = "after" if preloaded or alone_on_host(info) else "off"
    if not fresh or is_coordinator(info) or how == "off":
        return None
    return "after-import" if how == "after" else f"import-{how}"


def read_ahead_mode() -> str:
    """``IGNITE_TF_READ_AHEAD``: ``auto`` (the default, see ``read_ahead_plan``), ``process`` or ``thread``
    (during the TensorFlow import), ``after`` (a thread once TensorFlow is imported) or ``off``."""
    how = os.environ.get(ENV_READ_AHEAD, "auto").strip().lower() or "auto"
    if how not in READ_AHEAD_MODES:
        raise ConfigError(f"{ENV_READ_AHEAD}={how!r}: use one of {', '.join(READ_AHEAD_MODES)}")
    return how


def alone_on_host(info: TaskInfo) -> bool:
    """Whether no other TensorFlow task of the cluster runs on this task's host (pods on other hosts and a
    task without TF_CONFIG count as alone)."""
    me = info.cluster.get(info.type or "", [])[info.index:info.index + 1] if info.type else []
    host = me[0].rsplit(":", 1)[0] if me else None
    return sum(1 for tasks in info.cluster.values() for address in tasks if address.rsplit(":", 1)[0] == host) <= 1


def is_coordinator(info: TaskInfo) -> bool:
    """The async chief: it trains on the workers' feeds through ParameterServerStrategy."""
    return info.mode is Mode.ASYNC and info.type == "chief"


def wait_for_leader(info: TaskInfo, timeout: float = LEADER_WAIT_S) -> bool:
    """Before a sync worker creates its strategy: wait until the coordination service's leader (the chief,
    else worker 0) accepts connections, so joining it never meets a closed port.

    gRPC retries a refused connection only after its initial reconnect backoff of 1 s: a worker that asked
    before the leader listened (tasks forked together race for it) reached the strategy 1 s late, and every
    worker with it. Returns whether the leader listened within ``timeout`` (else TensorFlow's own retries
    take over). The leader itself does not wait.
    """
    leader = (info.cluster.get("chief") or info.cluster.get("worker") or [None])[0]
    me = (info.cluster.get(info.type or "") or [])[info.index:info.index + 1]
    if leader is None or me == [leader]:
        return True
    host, port = leader.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if listening(int(port), host, timeout=1.0):
            return True
        time.sleep(0.01)
    return False
