"""What the supervision loop drives: a ``Backend`` starts, observes and stops one kind of task (local processes
in ``processes.py``, pods in ``ignite_tf.cluster.k8s.pods``) and knows nothing of the restart rules.

A backend talks back to the loop driving it through ``SupervisorHost``, the few things it may ask of it (say
something, mark a moment, record the state, read what the state says of the cluster's attempt): the
``Supervisor`` of ``loop.py`` is one; a backend used without a supervisor (the Kubernetes launcher's head start)
has none."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Protocol, runtime_checkable

from ignite_tf.cluster.spec import ClusterSpec, ClusterTask
from ignite_tf.cluster.supervision.policy import Observation
from ignite_tf.contract import read_progress
from ignite_tf.state import ClusterState


class SetupError(Exception):
    """A backend could not prepare the cluster (its message is the cluster's reason)."""


class HandOver(Exception):  # noqa: N818 - an event, not an error
    """A SIGTERM to a supervisor whose tasks outlive it (``Backend.survives_supervisor``): it is being replaced
    (its pod deleted), so it leaves the tasks running for its successor instead of stopping them."""


@runtime_checkable
class SupervisorHost(Protocol):
    """What a backend may ask of the supervisor driving it (``Backend.host``)."""

    def event(self, message: str) -> None:
        """Say ``message`` in the supervisor's log and the chief's output."""

    def mark(self, name: str) -> None:
        """Mark the start-up moment ``name`` (``ignite_tf.timeline``) in the chief's output."""

    def save(self, force: bool = False) -> None:
        """Record the cluster's state (a heartbeat): at most every few seconds unless ``force``."""

    def beat(self) -> bool:
        """For a backend that waits: record the state and say whether to give up (a stop). May raise
        ``HandOver``: a wait is where a replaced supervisor leaves."""

    def cluster_attempt(self) -> int:
        """The attempt of the whole cluster the state records (0 first, one more at each whole restart)."""

    def restart_count(self) -> int:
        """The restarts so far (of the cluster or of one task), as the state records them."""

    def started_at(self) -> float:
        """When the cluster first started (unix time; a resumed cluster keeps its first start's)."""

    def record_launcher(self, key: str, value: Any) -> None:
        """Keep ``value`` under ``key`` in the state's launcher info (``ClusterState.launcher``); written with
        the next record."""

    def epochs(self) -> list[dict[str, Any]]:
        """The epochs the cluster's tasks recorded in the state store, oldest first."""


class Backend(ABC):
    """Starts, observes and stops the tasks of one cluster; ``host`` (the loop) takes its events."""

    poll_s: float = 0.2
    """Seconds between polls."""
    survives_supervisor: bool = False
    """The tasks live on when the supervisor goes (pods under a pod supervisor that Kubernetes replaces): a
    SIGTERM is then a hand-over (``HandOver``), and a stop only a request in the state store."""

    def __init__(self, spec: ClusterSpec):
        self.spec = spec
        self.host: SupervisorHost | None = None  # the Supervisor (loop.py) driving this backend sets itself here

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

    def describe(self) -> str:
        """What the tasks are observed through, for a message about an outage of it."""
        return f"the {type(self).__name__}'s service"

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
