"""A training task's side of a remote run store: its backup, model and TensorBoard events go there.

A task works in its local staging folder (TensorFlow writes files, not objects). With a remote run store
(``IGNITE_TF_RUN_STORE``), ``TaskSync``

- pulls ``checkpoints/backup/`` from the store before ``fit`` (``pull``), so a task restarted anywhere
  resumes from the newest backup of any attempt (``BackupAndRestore`` reads its local copy);
- pushes the chief's backup and TensorBoard events after each backup (``pushed_then``: the ``on_backup`` of
  ``runtime.stopping``), and the SavedModel, the events and the backup's final state at the end (``finish``);
- in a pod, copies the task's progress report to the store every ``mirror.EVERY_S`` (the supervisor cannot
  read a pod's disk).

Outside a cluster, or with a local run root, every call does nothing. A failed copy is reported and never
stops the training (the next epoch copies again).
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

from ignite_tf.contract import (
    ENV_PROGRESS_FILE,
    ENV_RUN_STORE,
    ENV_RUN_STORE_NO_BACKUP,
    ENV_RUN_STORE_PROGRESS,
)
from ignite_tf.runstore.mirror import EVERY_S
from ignite_tf.runstore.store import LAYOUT, RunStore, is_remote


class TaskSync:
    """The run store of this task (``store``; None: nothing to do), its backup and TensorBoard folders."""

    def __init__(self, store: RunStore | None, backup_dir: Path, tensorboard_dir: Path, is_chief: bool,
                 no_backup: bool = False):
        self.store, self.backup_dir, self.tensorboard_dir, self.is_chief = store, backup_dir, tensorboard_dir, is_chief
        self.no_backup = no_backup  # the supervisor found none when it started this task: nothing to pull
        self._seen: dict[str, dict[str, tuple]] = {"backup": {}, "tensorboard": {}}
        self._progress_stop = threading.Event()
        self._pushing: threading.Thread | None = None

    @classmethod
    def from_env(cls, backup_dir: str | Path, tensorboard_dir: str | Path, is_chief: bool,
                 environ=None) -> TaskSync:
        env = os.environ if environ is None else environ
        url = env.get(ENV_RUN_STORE, "")
        store = RunStore(url) if is_remote(url) else None
        sync = cls(store, Path(backup_dir), Path(tensorboard_dir), is_chief,
                   no_backup=bool(env.get(ENV_RUN_STORE_NO_BACKUP)))
        if store is not None and env.get(ENV_RUN_STORE_PROGRESS) and env.get(ENV_PROGRESS_FILE):
            sync._follow_progress(Path(env[ENV_PROGRESS_FILE]))
        return sync

    # -- before fit ------------------------------------------------------------------------------------------
    def pull(self) -> bool:
        """Bring the store's backup into the local backup folder; whether there was one."""
        if self.store is None or self.no_backup:
            return False
        try:
            found = self.store.get_dir(LAYOUT.backup, self.backup_dir)
        except Exception as exc:  # noqa: BLE001 - no backup read: the task starts from the beginning
            _warn(f"reading the backup from {self.store.path(LAYOUT.backup)} failed: {exc}")
            return False
        if found and self.is_chief:
            print(f"backup read from {self.store.path(LAYOUT.backup)}", flush=True)
        return found

    # -- while fit runs --------------------------------------------------------------------------------------
    def push_meanwhile(self) -> None:
        """``push`` in a thread: the first one makes the store's client (seconds of imports), which need not
        delay TensorFlow's import; the next ``push`` waits for it."""
        if self.store is None or not self.is_chief:
            return
        self._pushing = threading.Thread(target=self.push, name="ignite-tf-push", daemon=True)
        self._pushing.start()

    def push(self) -> None:
        """Copy the chief's backup and TensorBoard events (what changed) to the store."""
        if self.store is None or not self.is_chief:
            return
        pushing, self._pushing = self._pushing, None
        if pushing is not None and pushing is not threading.current_thread():
            pushing.join()
        for name, local, key in (("backup", self.backup_dir, LAYOUT.backup),
                                 ("tensorboard", self.tensorboard_dir, LAYOUT.tensorboard)):
            try:
                if local.is_dir() or self._seen[name]:  # a backup removed after success goes from the store too
                    self.store.put_dir(local, key, self._seen[name])
            except Exception as exc:  # noqa: BLE001 - the next epoch copies again
                _warn(f"copying {name} to {self.store.path(key)} failed: {exc}")

    def pushed_then(self, then=None):
        """A function pushing the backup, then calling ``then()`` if given: a backup reaches the store before
        the caller hears of it (``runtime.stopping``'s ``on_backup``)."""

        def push_then():
            self.push()
            if then is not None:
                then()

        return push_then

    # -- at the end ------------------------------------------------------------------------------------------
    def finish(self, model_dir: str | None) -> None:
        """Copy the SavedModel (the chief's ``model_dir``), the last events and the backup's final state."""
        self._progress_stop.set()
        if self.store is None or not self.is_chief:
            return
        self.push()
        if model_dir and Path(model_dir).is_dir():
            try:
                self.store.remove_dir(LAYOUT.model)  # a model of an earlier attempt must not mix with this one
                self.store.put_dir(model_dir, LAYOUT.model)
                print(f"model copied to {self.store.path(LAYOUT.model)}", flush=True)
            except Exception as exc:  # noqa: BLE001 - say so: publishing will not find it
                _warn(f"copying the model to {self.store.path(LAYOUT.model)} failed: {exc}")

    def _follow_progress(self, path: Path) -> None:
        key = LAYOUT.progress(path.stem)

        def loop():
            last = None
            while not self._progress_stop.wait(EVERY_S):
                try:
                    stamp = path.stat().st_mtime_ns
                    if stamp != last:
                        self.store.put_file(path, key)
                        last = stamp
                except Exception:  # noqa: BLE001,S112 - no report yet, or a store hiccup: next round
                    continue

        threading.Thread(target=loop, name="ignite-tf-progress", daemon=True).start()


def _warn(message: str) -> None:
    sys.stderr.write(f"[ignite-tf] {message}\n")
    sys.stderr.flush()
