"""The contract between a supervisor and the tasks of its cluster: what each side may rely on of the other.

Both sides import this module and nothing of each other: the supervisor (``ignite_tf.cluster``: the launcher,
the supervision loop and its process and pod backends) and a task (``ignite_tf.runtime``, ``ignite_tf.data``,
a user's script). It holds

- **the environment** a task starts with: ``TF_CONFIG`` (``read_tf_config``), the ``ENV_*`` names below, the
  training ``Mode``, the state store a task reports epochs to (``STORE_ENV``), the ``taskboot`` folder first
  on ``PYTHONPATH`` (``TASKBOOT_DIR``: its ``sitecustomize`` ends a task at once on an uncaught exception);
- **progress reports**, the supervisor's watchdog's input: a task writes its last report, one small JSON
  object ``{"time", "what", "watch", "pid"}``, to the file named by ``IGNITE_TF_PROGRESS_FILE``
  (``report``, ``serving``) and the supervisor reads it (``read_progress``). The watchdog watches a task
  from its first report: a task that then reports nothing for ``progress_timeout_s`` is hung. ``serving``
  ends the watch (async workers and parameter servers only answer the chief, which reports for them).
  Outside a cluster (no ``IGNITE_TF_PROGRESS_FILE``) reporting does nothing;
- **the end of a task**: its exit status is its result (0: done; 1-127: its own code failed; a signal or a
  status >= 128: retryable, see ``ignite_tf.cluster.supervision``), and ``exit_now`` ends it with its output
  flushed and without Python's or TensorFlow's exit work.

Importing it imports nothing beyond the standard library and ``ignite_tf.errors``.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from ignite_tf.errors import ConfigError


class Mode(StrEnum):
    """How a cluster trains (``IGNITE_TF_MODE``, ``training.mode``, ``--mode``)."""

    SYNC = "sync"
    """MultiWorkerMirroredStrategy: workers only, worker 0 is the chief; all restart together."""
    ASYNC = "async"
    """ParameterServerStrategy: a chief (the coordinator), workers and parameter servers."""

    @classmethod
    def parse(cls, value: Mode | str, source: str = "mode") -> Mode:
        """``value`` as a Mode; an unknown one is a ConfigError naming ``source``."""
        try:
            return cls(value)
        except ValueError:
            raise ConfigError(f"{source} must be one of {[m.value for m in cls]} (got {value!r})") from None


# -- the environment of a task ------------------------------------------------------------------------------
# Besides TF_CONFIG and the Ignite connection (IGNITE_TF_ADDRESSES & co, ``ignite_tf.connection``).
ENV_CLUSTER_ID = "IGNITE_TF_CLUSTER_ID"
ENV_MODE = "IGNITE_TF_MODE"
ENV_RUN_DIR = "IGNITE_TF_RUN_DIR"
ENV_CHECKPOINT_DIR = "IGNITE_TF_CHECKPOINT_DIR"
ENV_TENSORBOARD_DIR = "IGNITE_TF_TENSORBOARD_DIR"
ENV_SHARD_PLAN = "IGNITE_TF_SHARD_PLAN"
ENV_CACHE = "IGNITE_TF_CACHE"
ENV_ATTEMPT = "IGNITE_TF_ATTEMPT"
"""How many times the whole cluster was restarted before this task started (0 at first)."""
ENV_PROGRESS_FILE = "IGNITE_TF_PROGRESS_FILE"
ENV_JOB_DIR = "IGNITE_TF_JOB_DIR"
"""A pod's job folder, put on ``PYTHONPATH`` by the pod's first process (a local task gets it there directly)."""
ENV_RUN_STORE = "IGNITE_TF_RUN_STORE"
"""The run's URL in a remote run store (``ignite_tf.runstore``): a task copies its backup, model and events
there; unset for a local run folder."""
ENV_RUN_STORE_PROGRESS = "IGNITE_TF_RUN_STORE_PROGRESS"
"""Set for a task whose disk the supervisor cannot read (a pod): it copies its progress report to the store."""
ENV_CODE = "IGNITE_TF_CODE"
"""What the launcher shipped of the user's code (``ignite_tf.runstore.code``), comma-separated, for errors."""
ENV_TF_CONFIG = "TF_CONFIG"
PER_TASK_ENV = (ENV_TF_CONFIG, ENV_ATTEMPT, ENV_PROGRESS_FILE)
"""What differs between the environments of one cluster's tasks."""

# The state store the supervisor records to and the chief reports epochs to (``ignite_tf.cluster.state``).
ENV_STATE_STORE = "IGNITE_TF_STATE_STORE"
"""``local`` (JSON files in ``IGNITE_TF_CLUSTER_STATE``) or ``ignite`` (the connection's system caches)."""
ENV_STATE_DIR = "IGNITE_TF_CLUSTER_STATE"
STORE_ENV = (ENV_STATE_STORE, ENV_STATE_DIR)

TASKBOOT_DIR = str(Path(__file__).resolve().parent / "resources" / "taskboot")
"""Put first on every task's ``PYTHONPATH``: its ``sitecustomize`` ends a task at once on an uncaught exception."""


def read_tf_config(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """This process's ``TF_CONFIG`` (the launcher sets it from ``ClusterSpec.tf_config``); {} outside a cluster."""
    raw = (os.environ if environ is None else environ).get(ENV_TF_CONFIG)
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"TF_CONFIG is not valid JSON ({exc.msg}); it is set by the launcher") from None


# -- progress reports ---------------------------------------------------------------------------------------
EVERY_S = 1.0  # at most one write a second
_last = 0.0


def report(what: str, *, force: bool = False) -> None:
    """Note that this task made progress (``what``: e.g. ``"epoch 2 step 40"``)."""
    global _last
    now = time.time()
    if not force and now - _last < EVERY_S:
        return
    _last = now
    _write_progress({"time": now, "what": what, "watch": True, "pid": os.getpid()})


def serving(what: str = "serving") -> None:
    """This task now only serves: the watchdog stops watching it."""
    _write_progress({"time": time.time(), "what": what, "watch": False, "pid": os.getpid()})


def _write_progress(record: dict) -> None:
    path = os.environ.get(ENV_PROGRESS_FILE)
    if not path:
        return
    try:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(record))
        os.replace(tmp, path)
    except OSError:  # progress reports must never stop training
        pass


def read_progress(path: str | Path) -> dict | None:
    """The last report in ``path``, or None when there is none (yet)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def silent_for(last: dict | None, now: float) -> float | None:
    """Seconds since a watched task's last report ``last``; None when it is not watched (no report yet, or
    it only serves)."""
    if not last or not last.get("watch"):
        return None
    return now - float(last["time"])


# -- the end of a task --------------------------------------------------------------------------------------
def exit_now(code: int = 0) -> None:
    """Flush this task's output and end the process without Python's or TensorFlow's exit work.

    Python's exit would join TensorFlow's threads and run its exit handlers, among them the coordination
    service's shutdown barrier: 10 s or more after a training that has nothing left to do.
    """
    try:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
