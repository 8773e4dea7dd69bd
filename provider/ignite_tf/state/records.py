"""The records of a cluster's state: what a supervisor is running (``ClusterState``, a ``TaskState`` per task),
its ``Status``, each task's ``TaskStatus``, the supervisor's ``ExitCode``.

Plain data: JSON through ``ClusterState.to_dict`` / ``from_dict``. Where they are kept, and the records kept
beside them (epochs, reads, claims, stop requests, watch offsets), is :mod:`ignite_tf.state.store`'s.
"""

from __future__ import annotations

import signal
import time
from dataclasses import asdict, dataclass, field, fields
from enum import IntEnum, StrEnum
from typing import Any

from ignite_tf.reader.locality import combine

LOST_AFTER_S = 20.0
"""A supervisor process whose last heartbeat is older than this is lost, judged the same on every host (``ps``,
a retry, a trigger elsewhere): ten of its heartbeats (``supervision.heartbeat.HEARTBEAT_S``, written by a thread
that no call of its loop holds up). A supervisor that something replaces (a pod of a Deployment) records a
longer allowance in its state (``ClusterState.lost_after_s``)."""


class Status(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def final(self) -> bool:
        return self in (Status.SUCCEEDED, Status.FAILED, Status.STOPPED)


class ExitCode(IntEnum):
    """The supervisor's (and ``ignite-tf start``'s) exit status."""

    SUCCEEDED = 0
    USER_CODE_FAILED = 1
    RESTARTS_EXHAUSTED = 2
    STARTUP_DEADLINE = 3
    STOPPED = 4
    INTERNAL_ERROR = 5
    NO_PROGRESS = 6
    DATA_INVALID = 7


class TaskStatus(StrEnum):
    """Where one task stands, as its supervisor recorded it (the state store's JSON holds the value)."""

    PENDING = "pending"
    """Not started yet."""
    STARTING = "starting"
    """Started, not up yet (not listening on its port; a pod not Ready)."""
    RUNNING = "running"
    EXITED = "exited"
    """Ended with status 0."""
    FAILED = "failed"
    """Ended with another status or a signal."""
    KILLED = "killed"
    """Stopped by its supervisor (a restart, a stop, the cluster's end)."""
    GONE = "gone"
    """Its supervisor was lost (a task dies with its supervisor)."""

    @property
    def live(self) -> bool:
        return self in (TaskStatus.PENDING, TaskStatus.STARTING, TaskStatus.RUNNING)


LIVE_TASK_STATES = tuple(s for s in TaskStatus if s.live)


@dataclass
class TaskState:
    """One task as its supervisor last recorded it (``state``: see ``TaskStatus``). ``exit_code`` is negative
    when a signal ended the task."""

    role: str
    index: int
    host: str
    port: int
    pid: int = 0
    state: TaskStatus = TaskStatus.PENDING
    restarts: int = 0
    exit_code: int | None = None
    log: str = ""

    def __post_init__(self):
        self.state = TaskStatus(self.state)

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def live(self) -> bool:
        return self.state.live

    @property
    def exit_text(self) -> str:
        """``0``, ``3``, ``SIGKILL``, or ``-`` while the task has not ended."""
        if self.exit_code is None:
            return "-"
        if self.exit_code < 0:
            try:
                return signal.Signals(-self.exit_code).name
            except ValueError:
                return f"signal {-self.exit_code}"
        return str(self.exit_code)


@dataclass
class ClusterState:
    cluster_id: str
    cache: str
    mode: str
    run_dir: str
    tasks: list[TaskState] = field(default_factory=list)
    status: Status = Status.STARTING
    started_at: float = field(default_factory=time.time)
    heartbeat: float = field(default_factory=time.time)
    finished_at: float | None = None
    exit_code: int | None = None
    reason: str = ""
    restarts: int = 0
    supervisor_pid: int = 0
    supervisor_host: str = ""
    chief_log: str = ""
    epochs: list[dict[str, Any]] = field(default_factory=list)
    # Each failure the supervisor saw: task, exit_code, signal, kind, retryable, action (restarted or why not).
    failures: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)  # the spec's labels: the Airflow task that started it
    # Where the tasks run beyond this machine: {} for local processes; for pods {"kind": "kubernetes",
    # "namespace", "owner", "conn_id"}, so any process that stops the cluster can also delete its objects.
    launcher: dict[str, Any] = field(default_factory=dict)
    # Per worker, the running total of its reads (``StateStore.add_reads``): rows, local_rows, by_node, passes
    # (one per pass over its shard: an epoch, or each pass of a repeated dataset), last_epoch.
    reads: list[dict[str, Any]] = field(default_factory=list)
    attempt: int = 0
    """The tasks' current attempt (``IGNITE_TF_ATTEMPT``): a resumed cluster goes on above its last one, so its
    chief's claim on the backup fences off any task of an earlier supervisor."""
    resumes: int = 0
    """How many later launches (an Airflow retry) took this cluster over after it ended or was lost."""
    lost_after_s: float = LOST_AFTER_S
    """Seconds without a heartbeat after which every reader takes the cluster for lost: ``LOST_AFTER_S`` for a
    supervisor process; longer for a supervisor pod, which Kubernetes replaces (``k8s.supervisor.REPLACED_S``)
    while its tasks run on: its successor's first heartbeat may come that much later."""
    evaluation: dict[str, Any] | None = None
    """The chief's held-out evaluation after training (``ignite_tf.runtime.evaluation``): rows, metrics,
    production_metrics, split; None without a held-out split."""

    def __post_init__(self):
        self.status = Status(self.status)
        self.tasks = [t if isinstance(t, TaskState) else TaskState(**t) for t in self.tasks]

    @property
    def age_s(self) -> float:
        return (self.finished_at or time.time()) - self.started_at

    def mark_lost(self) -> None:
        """The supervisor is gone without recording an end: its live tasks are gone with it (PDEATHSIG)."""
        for t in self.tasks:
            if t.live:
                t.state = TaskStatus.GONE

    @property
    def last_epoch(self) -> dict[str, Any]:
        """The chief's last epoch report (``epoch``, ``epochs``, metrics...), or {} before the first one."""
        return self.epochs[-1] if self.epochs else {}

    @property
    def measured_locality(self) -> dict[str, Any] | None:
        """All workers' reads together: rows, local_rows, by_node, locality (None before any read)."""
        return combine(*self.reads)

    def heartbeat_stale(self, after_s: float | None = None) -> bool:
        """Whether a cluster that has not ended lost its supervisor (no heartbeat for ``after_s``, default its
        ``lost_after_s``)."""
        return not self.status.final and time.time() - self.heartbeat > (after_s or self.lost_after_s)

    @property
    def lost(self) -> bool:
        return self.heartbeat_stale()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        for task in data["tasks"]:
            task["state"] = TaskStatus(task["state"]).value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterState:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})  # a newer writer's extra keys are skipped

    def summary(self) -> dict[str, Any]:
        """Small JSON-able result (XCom): status, reason, restarts and the last epoch's metrics."""
        return {
            "cluster_id": self.cluster_id, "status": self.status.value, "exit_code": self.exit_code,
            "reason": self.reason, "restarts": self.restarts, "epochs": len(self.epochs),
            "metrics": self.last_epoch, "run_dir": self.run_dir,
            "seconds": round(self.age_s, 2), "failures": self.failures[-5:],
            "locality": {k: v for k, v in (self.measured_locality or {}).items() if k != "by_node"} or None,
            "evaluation": self.evaluation,
        }
