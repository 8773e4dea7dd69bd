"""RunFolder: the files of one TensorFlow cluster run, named in one place (locally, and in a run store).

Every part of ignite-tf that writes or reads a run's files (the launcher, the supervisor, the spec's task
environment, the runtime that saves the model, the publish operator) takes its paths from here::

    <run root>/<cluster id>/
        cluster.json            the ClusterSpec the supervisor runs
        k8s.json                the pod backend's settings (namespace, image...), for a Kubernetes run
        shard_plan.json         the ShardPlan the workers read by
        job/                    a zipped job, unpacked
        code.zip                the user's code shipped by the launcher (``ignite_tf.runstore.code``)
        code/                   code.zip unpacked where the tasks run (first on their PYTHONPATH)
        validation.json         validation results (a DAG run's folder)
        logs/<task>.log         each task's output (the chief's is the job's output)
        logs/supervisor.log     the supervisor's own output
        progress/<task>.json    each task's last progress report (the watchdog's input)
        tasks/<task>/           each runtime task's working directory (async workers' feeds)
        checkpoints/backup/     BackupAndRestore's state (a restarted cluster resumes from it)
        checkpoints/model/      the trained SavedModel, written by the chief
        tensorboard/            TensorBoard event files
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ignite_tf.home import HomeFolder

ENV_RUN_ROOT = "IGNITE_TF_RUN_ROOT"


def default_run_root() -> str | Path:
    """Where runs go: ``IGNITE_TF_RUN_ROOT`` (a folder, or an object-store URL such as ``s3://bucket/runs``:
    see ``ignite_tf.runstore``), else ``runs`` in the ignite-tf home. A folder comes back as a Path."""
    root = os.environ.get(ENV_RUN_ROOT) or str(HomeFolder.of().runs)
    return root if "://" in root else Path(root)


def staging_dir(cluster_id: str) -> Path:
    """The local folder a run with an object-store root is written in before its files reach the store."""
    return HomeFolder.of().staging / cluster_id


@dataclass(frozen=True)
class RunFolder:
    """The layout of one run's folder ``path`` (see the module docstring)."""

    path: Path

    # Inside a checkpoint directory (the runtime may be given one outside the run folder).
    BACKUP = "backup"
    MODEL = "model"

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def of(cls, cluster_id: str, root: str | Path | None = None) -> RunFolder:
        """The run folder of ``cluster_id`` under ``root`` (default :func:`default_run_root`)."""
        return cls(Path(root or default_run_root()) / cluster_id)

    @property
    def spec(self) -> Path:
        return self.path / "cluster.json"

    @property
    def kubernetes(self) -> Path:
        return self.path / "k8s.json"

    @property
    def shard_plan(self) -> Path:
        return self.path / "shard_plan.json"

    @property
    def job(self) -> Path:
        return self.path / "job"

    @property
    def code_zip(self) -> Path:
        return self.path / "code.zip"

    @property
    def code(self) -> Path:
        return self.path / "code"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def supervisor_log(self) -> Path:
        return self.logs / "supervisor.log"

    def log(self, task_name: str) -> Path:
        return self.logs / f"{task_name}.log"

    def progress(self, task_name: str) -> Path:
        return self.path / "progress" / f"{task_name}.json"

    def task_dir(self, task_name: str) -> Path:
        return self.path / "tasks" / task_name

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def backup(self) -> Path:
        return self.checkpoints / self.BACKUP

    @property
    def model(self) -> Path:
        return self.checkpoints / self.MODEL

    @property
    def tensorboard(self) -> Path:
        return self.path / "tensorboard"
