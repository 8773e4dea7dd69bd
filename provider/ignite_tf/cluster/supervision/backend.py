"""What the supervision loop drives: a ``Backend`` starts, observes and stops one kind of task (local processes
in ``processes.py``, pods in ``ignite_tf.cluster.k8s.pods``) and knows nothing of the restart rules."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from ignite_tf.cluster.spec import ClusterSpec, ClusterTask
from ignite_tf.cluster.supervision.policy import Observation
from ignite_tf.contract import read_progress
from ignite_tf.state import ClusterState


class SetupError(Exception):
    """A backend could not prepare the cluster (its message is the cluster's reason)."""


class HandOver(Exception):  # noqa: N818 - an event, not an error
    """A SIGTERM to a supervisor whose tasks outlive it (``Backend.survives_supervisor``): it is being replaced
    (its pod deleted), so it leaves the tasks running for its successor instead of stopping them."""


class Backend(ABC):
    """Starts, observes and stops the tasks of one cluster; ``host`` (the loop) takes its events."""

    poll_s: float = 0.2
    """Seconds between polls."""
    survives_supervisor: bool = False
    """The tasks live on when the supervisor goes (pods under a pod supervisor that Kubernetes replaces): a
    SIGTERM is then a hand-over (``HandOver``), and a stop only a request in the state store."""

    def __init__(self, spec: ClusterSpec):
        self.spec = spec
        self.host: Any = None  # the Supervisor (loop.py) driving this backend; it sets itself here

    def launcher_info(self) -> dict[str, Any]:
        """Where the tasks run beyond this machine, kept in the state (``ClusterState.launcher``)."""
        return {}

    def event(self, message: str) -> None:
        if self.host is not None:
            self.host.event(message)

    def prepare(self) -> None:  # noqa: B027 - a backend with nothing to prepare needs nothing here
        """Before the first task starts; raise ``SetupError`` to end the cluster with its message."""

    @abstractmethod
    def start(self, task: ClusterTask, attempt: int) -> int:
        """Start ``task`` (the cluster's ``attempt``-th start); its pid, 0 where there is none."""

    def refresh(self) -> None:  # noqa: B027 - backends that observe tasks one by one need nothing here
        """Once per poll, before the tasks are observed."""

    @abstractmethod
    def observe(self, task: ClusterTask, *, starting: bool) -> Observation:
        """How ``task`` is now; ``up`` (and ``waiting``) are asked only while it is ``starting``."""

    def progress(self, task: ClusterTask) -> dict[str, Any] | None:
        """The task's last progress report (the run folder is where every backend's tasks write it)."""
        return read_progress(self.spec.progress_path(task))

    @abstractmethod
    def stop(self, tasks: list[ClusterTask], grace: float) -> dict[str, int]:
        """End ``tasks`` (SIGTERM, ``grace`` seconds, then SIGKILL) and wait for them; the exit statuses known."""

    def lost(self) -> str | None:
        """A reason to stop that is not a stop request (a pod backend's owner deleted); None to go on."""
        return None

    def adopt(self, previous: ClusterState) -> int | None:
        """Take over the running tasks of ``previous`` (the recorded state of a supervisor that went away); the
        cluster attempt to go on from, or None to start the cluster afresh."""
        return None

    def hand_over(self) -> None:  # noqa: B027 - only backends whose tasks survive the supervisor need it
        """Leave the tasks to the next supervisor (``survives_supervisor``), before the state is recorded."""

    def release(self) -> None:  # noqa: B027 - only backends with objects of their own need it
        """Before the final state is recorded: delete what the cluster made, so whoever sees the end finds
        nothing left."""

    def close(self) -> None:  # noqa: B027 - only backends holding something need it
        """When the supervisor ends, however it ends."""
