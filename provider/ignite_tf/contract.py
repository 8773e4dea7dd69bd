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
  flushed and without Python's or TensorFlow's exit work;
- **a stop**: SIGTERM (a pod's deletion, a drain, ``ignite-tf stop``, a restart) ends a task within
  ``STOP_DEADLINE_S`` with ``STOPPED_EXIT_CODE`` (``handle_stop``: at once, or after a checkpoint the task
  writes in that time), also as a pod's pid 1, where a signal left at its default does nothing.

Importing it imports nothing beyond the standard library and ``ignite_tf.errors``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
import threading
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
ENV_RUN_STORE_NO_BACKUP = "IGNITE_TF_RUN_STORE_NO_BACKUP"
"""Set by a supervisor that found no backup in the run store when it started the task (every older attempt
had ended): the task starts fresh without asking the store."""
ENV_CODE = "IGNITE_TF_CODE"
"""What the launcher shipped of the user's code (``ignite_tf.runstore.code``), comma-separated, for errors."""
ENV_PRODUCTION_MODEL = "IGNITE_TF_PRODUCTION_MODEL"
"""``<registry root>/<model>``: the registry model whose production version the chief evaluates on the held-out
rows beside the new model (champion/challenger, ``ignite_tf.runtime.evaluation``); unset: none."""
ENV_TF_CONFIG = "TF_CONFIG"
PER_TASK_ENV = (ENV_TF_CONFIG, ENV_ATTEMPT, ENV_PROGRESS_FILE)
"""What differs between the environments of one cluster's tasks."""

# The state store the supervisor records to and the chief reports epochs to (``ignite_tf.state``).
ENV_STATE_STORE = "IGNITE_TF_STATE_STORE"
"""``local`` (JSON files in ``IGNITE_TF_CLUSTER_STATE``) or ``ignite`` (the connection's system caches)."""
ENV_STATE_DIR = "IGNITE_TF_CLUSTER_STATE"
STORE_ENV = (ENV_STATE_STORE, ENV_STATE_DIR)

TASKBOOT_DIR = str(Path(__file__).resolve().parent / "resources" / "taskboot")
"""Put first on every task's ``PYTHONPATH``: its ``sitecustomize`` ends a task at once on an uncaught exception
and makes SIGTERM end it (``handle_stop``)."""


def read_tf_config(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """This process's ``TF_CONFIG`` (the launcher sets it from ``ClusterSpec.tf_config``); {} outside a cluster."""
    raw = (os.environ if environ is None else environ).get(ENV_TF_CONFIG)
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"TF_CONFIG is not valid JSON ({exc.msg}); it is set by the launcher") from None


def is_chief(config: dict[str, Any] | None = None) -> bool:
    """Whether the task of ``config`` (default this process's ``TF_CONFIG``) is its cluster's chief: the ``chief``
    task, else worker 0 of a cluster without one, else the only process outside a cluster."""
    config = read_tf_config() if config is None else config
    cluster, task = config.get("cluster") or {}, config.get("task") or {}
    kind = task.get("type") if cluster else None
    if kind is None or kind == "chief":
        return True
    return kind == "worker" and int(task.get("index", 0)) == 0 and "chief" not in cluster


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


# -- infrastructure -------------------------------------------------------------------------------------------
UNAVAILABLE_EXIT_CODE = 75
"""A task that could not reach what it needs (Ignite, the state store, the object store) past the retries
exits with this status (``EX_TEMPFAIL`` of sysexits.h: "try again later"); the supervisor restarts it from the
last backup (a user script may use it too). Any other status below 128 is the task's own code failing."""


DATA_EXIT_CODE = 65
"""A task that found its rows cannot be trained on (changed since validation, a row without a label) exits with
this status (``EX_DATAERR`` of sysexits.h): never restarted, whatever the restart policy, and the Airflow task
fails without retries (``ignite_tf.faults``)."""


# -- a stop -------------------------------------------------------------------------------------------------
STOPPED_EXIT_CODE = 128 + signal.SIGTERM
"""A task ended by SIGTERM exits with this status (as a shell reports a process killed by it): retryable."""
ENV_STOP_DEADLINE = "IGNITE_TF_STOP_DEADLINE_S"
STOP_DEADLINE_S = 2.0
"""Seconds a task that writes a checkpoint on SIGTERM is given for it (``IGNITE_TF_STOP_DEADLINE_S``)."""


class _Stop:
    """This process's SIGTERM handling (one per process; rebuilt in a forked child, see ``handle_stop``)."""

    on_stop = None
    requested = threading.Event()
    # The signal handler (main thread) and the watcher thread both note the stop, and either may end the
    # process right after: whichever notes it second waits until the first has written the line. Reentrant:
    # a second SIGTERM may run the handler again inside the first.
    noting = threading.RLock()
    pid = 0  # the process whose watcher thread runs
    wake_fd = -1


def handle_stop(on_stop=None) -> bool:
    """Make SIGTERM end this task: at once, or, given ``on_stop`` (called in the main thread when the signal
    arrives: it starts a checkpoint and the task's own end), within ``STOP_DEADLINE_S`` at the latest.

    Python runs a signal handler in the main thread only between bytecodes, never while that thread waits
    inside TensorFlow (a collective whose peer is gone, a server's ``join``). So the signal also wakes a
    watcher thread (``signal.set_wakeup_fd``) that ends the task itself: at once, or at the deadline. Call
    it from the main thread, again after a library took SIGTERM over (TensorFlow's coordination service
    does, when a MultiWorkerMirroredStrategy is made) and in a forked child (threads do not survive a
    fork). Returns False where it cannot (not the main thread).
    """
    if threading.current_thread() is not threading.main_thread():
        return False
    _Stop.on_stop = on_stop
    signal.signal(signal.SIGTERM, _on_sigterm)
    if _Stop.pid != os.getpid():
        read, write = os.pipe()
        os.set_blocking(write, False)
        previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        if previous not in (-1, _Stop.wake_fd):  # someone else's (asyncio): theirs stays, the handler still runs
            signal.set_wakeup_fd(previous)
            os.close(read)
            os.close(write)
        else:
            _Stop.pid, _Stop.wake_fd = os.getpid(), write
            threading.Thread(target=_watch, args=(read,), name="ignite-tf-stop", daemon=True).start()
    return True


def stop_requested() -> bool:
    """Whether this task got SIGTERM."""
    return _Stop.requested.is_set()


def stop_deadline_s() -> float:
    raw = os.environ.get(ENV_STOP_DEADLINE)
    try:
        return float(raw) if raw else STOP_DEADLINE_S
    except ValueError:
        raise ConfigError(f"{ENV_STOP_DEADLINE}={raw!r}: expected seconds, e.g. {STOP_DEADLINE_S}") from None


def _on_sigterm(signum, frame) -> None:
    _note_stop()
    if _Stop.on_stop is None:
        _end_stopped()
    _Stop.on_stop()


def _watch(read: int) -> None:
    while True:
        try:
            data = os.read(read, 512)
        except InterruptedError:
            continue
        if signal.SIGTERM not in data:
            continue
        _note_stop()
        if _Stop.on_stop is not None:
            time.sleep(stop_deadline_s())
            print(f"stop: no checkpoint within {stop_deadline_s():.1f}s of SIGTERM; ending now", file=sys.stderr)
        _end_stopped()


def _note_stop() -> None:
    with _Stop.noting:
        if not _Stop.requested.is_set():
            print(f"stop: SIGTERM at {time.time():.3f}", file=sys.stderr, flush=True)
            _Stop.requested.set()


def _end_stopped() -> None:
    # No logging.shutdown here (exit_now's): the main thread may hold a logging lock while it waits.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream must not keep the process alive
            pass
    os._exit(STOPPED_EXIT_CODE)
