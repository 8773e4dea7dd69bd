"""How a training task stops on SIGTERM, and why a restart never trains an epoch twice.

- **Stop**: every task ends within ``contract.STOP_DEADLINE_S`` of SIGTERM (``contract.handle_stop``). A sync
  worker (MultiWorkerMirroredStrategy) first writes a backup at the current step: saving is collective, so
  one worker cannot save alone; TensorFlow's ``PreemptionCheckpointHandler`` has every worker agree on the
  next step through the coordination service, save there and end (measured on 2 cores: 0.2-0.3 s from
  SIGTERM to both workers gone, either worker signalled). tf_keras offers it (``BackupAndRestore``'s
  ``save_before_preemption``) on GCP only, so ``backup_callbacks`` turns it on for any multi-worker
  cluster and makes its end the contract's (``STOPPED_EXIT_CODE``, retryable) instead of its exit 42 (a
  failure of the task's own code to the supervisor). The async chief (``ParameterServerStrategy``, which
  the handler does not support), its workers and parameter servers end at once: the chief's last epoch
  backup stands, and the workers and parameter servers hold nothing of their own.
- **Keep**: the backup outlives ``fit`` (``delete_checkpoint=False``). tf_keras deletes it at the end of
  training, so an attempt that finished while its restart started left the restart nothing to resume from
  (it trained every epoch again); kept, a restart finds training complete and trains nothing.
- **Fence**: each attempt's chief writes its attempt number beside the backup (``ATTEMPT_FILE``) before it
  restores; a task of an older attempt that is still running (a pod in its grace period) sees a newer
  number at its next epoch's end and ends before it backs up or reports that epoch.

- **Platform**: TensorFlow's handler asks, when it is made inside ``fit``, whether it runs on Google Cloud: an HTTP
  request to the metadata server, by a name a cluster's DNS may take seconds to refuse (2 s on the local
  Kubernetes, whose CoreDNS forwards it to an upstream it cannot reach: 2 s of every start and restart of a
  pod). ``probe_platform`` asks the same question in a thread from the task's start (a warm standby pod asks
  while it waits, in the runtime's ``preload``), and the handler takes that answer.

The backup stays a local folder here: a run store that keeps it elsewhere pulls it (with ``ATTEMPT_FILE``)
at the start of ``train``, before ``claim``, and pushes it after ``claim`` and after each backup
(``on_backup``, also called after the backup on SIGTERM).
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from ignite_tf import contract
from ignite_tf.contract import ENV_ATTEMPT, STOPPED_EXIT_CODE, Mode

if TYPE_CHECKING:
    from ignite_tf.runtime.task import TaskInfo

ATTEMPT_FILE = "attempt"
"""``<backup>/attempt``: the newest attempt that trains from this backup (written by its chief)."""


def this_attempt() -> int:
    return int(os.environ.get(ENV_ATTEMPT, "0") or 0)


def saves_on_stop(strat, info: TaskInfo) -> bool:
    """Whether this task writes a backup at the current step on SIGTERM (sync workers of a cluster)."""
    import tensorflow as tf

    return info.type is not None and isinstance(strat, tf.distribute.MultiWorkerMirroredStrategy)


def claim(backup_dir: Path, info: TaskInfo) -> None:
    """On the chief: record that this attempt now trains from ``backup_dir`` (older attempts end)."""
    if not info.is_chief:
        return
    backup_dir.mkdir(parents=True, exist_ok=True)
    if newest_attempt(backup_dir) < this_attempt():
        tmp = backup_dir / f".{ATTEMPT_FILE}.{os.getpid()}"
        tmp.write_text(str(this_attempt()))
        tmp.replace(backup_dir / ATTEMPT_FILE)


def newest_attempt(backup_dir: Path) -> int:
    try:
        return int((backup_dir / ATTEMPT_FILE).read_text().strip() or 0)
    except (OSError, ValueError):
        return -1


def backup_callbacks(tf_keras, strat, info: TaskInfo, backup_dir: Path, save_freq, on_backup=None,
                     on_stop_saved=None) -> list:
    """The callbacks, in order, that back up and restore ``fit`` (before any that reports an epoch):
    the fence, tf_keras' ``BackupAndRestore`` (kept after ``fit``; with the save on SIGTERM where
    ``saves_on_stop``) and the hook that takes that save's end over. ``on_backup()`` runs after each
    epoch's backup and after the backup on SIGTERM (a run store's push); ``on_stop_saved()`` after the backup
    on SIGTERM and its push (the reporter's ``end_epoch_if_complete``)."""
    preempt = saves_on_stop(strat, info)
    if preempt:
        _allow_save_before_preemption(strat)
        _mirror_chief_backup(backup_dir, strat, info)
    backup = tf_keras.callbacks.BackupAndRestore(str(backup_dir), save_freq=save_freq, delete_checkpoint=False,
                                                 save_before_preemption=preempt)
    return [_fence(tf_keras, backup_dir), backup, _after_backup(tf_keras, preempt, on_backup, on_stop_saved)]


def _mirror_chief_backup(backup_dir: Path, strat, info: TaskInfo) -> None:
    """On a sync worker other than the chief, copy the chief's backup into the folder this worker saves to.

    With the save on SIGTERM, tf_keras lets TensorFlow's handler restore, and the handler restores each
    worker from the folder it writes to: the chief's backup on the chief, a temporary folder elsewhere. The
    chief's restore then makes variables (broadcast to every worker) that the others do not, and the first
    step fails ("Collective instance ... expected ... data_type 9 but got ... data_type 1"). A copy of the
    chief's backup there restores every worker alike.
    """
    from tf_keras.src.distribute import distributed_file_utils

    chief = backup_dir / "chief"
    if info.is_chief or not chief.is_dir():
        return
    mine = Path(distributed_file_utils.write_dirpath(str(backup_dir), strat))
    shutil.rmtree(mine, ignore_errors=True)
    shutil.copytree(chief, mine)


def _allow_save_before_preemption(strat) -> None:
    """tf_keras enables ``save_before_preemption`` on GCP only (``support_on_demand_checkpoint_callback``);
    the handler it makes works on any MultiWorkerMirroredStrategy cluster with the coordination service.
    The handler's own question whether this is Google Cloud is answered by ``probe_platform``."""
    import tensorflow as tf
    from tensorflow.python.distribute.failure_handling import failure_handling_util
    from tf_keras.src.distribute import worker_training_state

    def supported(strategy) -> bool:
        return isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)

    worker_training_state.support_on_demand_checkpoint_callback = supported
    failure_handling_util.on_gcp = on_google_cloud


GCE_METADATA_ENV = "GCE_METADATA_IP"
"""TensorFlow's variable for the metadata server's address (default ``metadata.google.internal``)."""
METADATA_TIMEOUT_S = 5.0  # TensorFlow's own bound for the same request
_probe: dict[str, object] = {}


def probe_platform(info: TaskInfo | None = None) -> None:
    """Start asking, in a daemon thread, whether this task runs on Google Cloud, as TensorFlow's preemption
    handler asks (its metadata server answers ``instance/hostname``); a second call does nothing. Given the
    task's ``info``, only for a task whose handler will ask (a sync worker of a cluster)."""
    if info is not None and (info.type is None or info.mode is not Mode.SYNC):
        return
    if "answer" in _probe or _probe.get("pid") == os.getpid():  # a forked task asks again unless answered
        return
    # Imported here, not in the thread: a task forked while the thread held an import's lock would wait forever.
    import encodings.idna  # noqa: F401 - the host name's codec, imported on first use by getaddrinfo
    import urllib.request  # noqa: F401

    done = threading.Event()
    _probe.update(pid=os.getpid(), done=done)

    def ask() -> None:
        _probe["answer"] = _metadata_answers()
        done.set()

    threading.Thread(target=ask, name="ignite-tf-platform", daemon=True).start()


def on_google_cloud() -> bool:
    """The answer of ``probe_platform`` (started now if it was not), waiting for it if it is still asked."""
    probe_platform()
    if "answer" not in _probe:
        _probe["done"].wait(METADATA_TIMEOUT_S + 1)
    return bool(_probe.get("answer", False))


def _metadata_answers() -> bool:
    import urllib.request  # imported already (probe_platform): no import lock taken in the thread

    host = os.environ.get(GCE_METADATA_ENV, "metadata.google.internal")
    request = urllib.request.Request(f"http://{host}/computeMetadata/v1/instance/hostname",
                                     headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(request, timeout=METADATA_TIMEOUT_S) as response:
            return response.status == 200
    except (OSError, ValueError):  # urllib's URLError and timeouts are OSErrors
        return False


def _fence(tf_keras, backup_dir: Path):
    class Fence(tf_keras.callbacks.Callback):
        """Ends this task at an epoch's end, before its backup and report, once a newer attempt claimed the
        backup."""

        def on_epoch_end(self, epoch, logs=None):
            newest = newest_attempt(backup_dir)
            if newest > this_attempt():
                print(f"attempt {this_attempt()} superseded by attempt {newest}: ending before epoch {epoch + 1}'s "
                      f"backup", file=sys.stderr, flush=True)
                contract.exit_now(STOPPED_EXIT_CODE)

    return Fence()


def _after_backup(tf_keras, preempt: bool, on_backup, on_stop_saved=None):
    class AfterBackup(tf_keras.callbacks.Callback):
        """Takes over the end of the preemption save: the handler's own end raises SystemExit(42) inside
        ``fit``; this task ends with the contract's code once the save is written, and the handler's
        SIGTERM handler is called from the contract's (which keeps the deadline)."""

        def on_train_begin(self, logs=None):
            handler = getattr(self.model, "_preemption_handler", None) if preempt else None
            if handler is None:
                return
            handler._exit_fn = lambda: _end_after_save(on_backup, on_stop_saved)
            on_sigterm = handler._sigterm_handler_fn
            contract.handle_stop(on_stop=lambda: on_sigterm(15, None))

        def on_epoch_end(self, epoch, logs=None):
            if on_backup is not None:
                on_backup()

    return AfterBackup()


def _end_after_save(on_backup, on_stop_saved=None) -> None:
    print("stop: backup written at the agreed step; ending", file=sys.stderr, flush=True)
    try:
        if on_backup is not None:
            on_backup()  # the push first: an epoch is reported once its backup would survive a restart
        if on_stop_saved is not None:
            on_stop_saved()
    except Exception as exc:  # noqa: BLE001 - reported; the task ends all the same
        print(f"stop: after the backup: {exc}", file=sys.stderr, flush=True)
    finally:
        contract.exit_now(STOPPED_EXIT_CODE)
