"""The supervision policy: from what the tasks did, what to do next. Written once for every backend.

``Policy.decide`` is a pure function of plain data: the cluster's recorded state (task states, restarts so
far, status), one ``Observation`` per task from this poll (exit status, up or not, last progress report...),
the clock. It returns a ``Decision``: go on, the cluster is up, restart the cluster, restart one task, or
finish with a status, an exit code and a reason. The loop (``loop.py``) carries decisions out through a
backend (local processes, pods), so the rules read the same whatever runs the tasks:

- success: async ends when the chief exits 0; sync when every worker has;
- a failure (a non-zero exit, or an async server ending before the chief) is restarted if the
  ``RestartPolicy`` allows it and ``max_restarts`` are left: sync restarts the whole cluster
  (MultiWorkerMirroredStrategy needs all workers together); async restarts a lost worker, or a server that
  ended early, alone, and the whole cluster when the chief or a parameter server fails. Tasks that ended in
  the same poll are judged together;
- the watchdog: tasks silent for ``progress_timeout_s`` after their first progress report are hung;
- the start-up deadline: every task must be up within ``startup_deadline_s`` of a (re)start.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field
from typing import Any

from ignite_tf.cluster.spec import ClusterSpec, Mode, Role
from ignite_tf.cluster.supervision.settings import RestartPolicy
from ignite_tf.contract import DATA_EXIT_CODE, UNAVAILABLE_EXIT_CODE, silent_for
from ignite_tf.state import ClusterState, ExitCode, Status, TaskStatus

# Statuses from here up are retryable under ``exit-code`` (Kubeflow's TFJob draws the line at 128 too).
RETRYABLE_STATUS = 128


@dataclass(frozen=True)
class Observation:
    """What a backend saw of one task at one poll.

    :param exit_code: the task's exit status (negative: a signal); None while it runs.
    :param up: whether it is up (listens on its port; a pod is Ready); asked of starting tasks only.
    :param pid: its process id, 0 where there is none to show (a pod).
    :param detail: more about how it ended (a pod: OOMKilled at its limit); '' when nothing more is known.
    :param waiting: why it is not up yet (a pod: the scheduler's reason); '' when nothing is known.
    :param progress: its last progress report (``ignite_tf.contract``), when read at this poll.
    :param host: where it runs, when the backend learnt it (a pod's node).
    """

    task: str
    exit_code: int | None = None
    up: bool = False
    pid: int = 0
    detail: str = ""
    waiting: str = ""
    progress: dict[str, Any] | None = None
    host: str = ""


@dataclass
class Failure:
    """One task's failure as the supervisor saw it.

    :param exit_code: ``Popen.returncode``: negative for a signal; None when the task was found silent.
    :param silent_s: seconds without progress, for a failure of the watchdog.
    :param early: an async server (worker or ps) that exited 0 before the chief finished.
    """

    task: str
    pid: int
    exit_code: int | None = None
    silent_s: float | None = None
    detail: str = ""
    early: bool = False

    @property
    def signal(self) -> str | None:
        if self.exit_code is None or self.exit_code >= 0:
            return None
        try:
            return signal.Signals(-self.exit_code).name
        except ValueError:
            return f"signal {-self.exit_code}"

    @property
    def retryable(self) -> bool:
        return (self.early or self.exit_code is None or self.exit_code < 0 or self.exit_code >= RETRYABLE_STATUS
                or self.exit_code == UNAVAILABLE_EXIT_CODE)

    @property
    def data(self) -> bool:
        """The task found its rows cannot be trained on: never restarted (``ignite_tf.faults``)."""
        return self.exit_code == DATA_EXIT_CODE

    @property
    def kind(self) -> str:
        if self.early:
            return "ended before the chief"
        if self.exit_code is None:
            return "no progress"
        if self.exit_code < 0:
            return "killed by a signal"
        if self.exit_code >= RETRYABLE_STATUS:
            return f"exit status >= {RETRYABLE_STATUS}"
        if self.exit_code == UNAVAILABLE_EXIT_CODE:
            return f"infrastructure unavailable (exit status {UNAVAILABLE_EXIT_CODE})"
        if self.data:
            return f"the data cannot be trained on (exit status {DATA_EXIT_CODE})"
        return "the task's own code failed"

    def describe(self) -> str:
        if self.exit_code is None:
            what = f"made no progress for {self.silent_s:.0f}s"
        elif self.signal:
            what = f"was killed by {self.signal}"
        else:
            what = f"exited with status {self.exit_code}"
        if self.early:
            what += " before the chief finished"
        pid = f" (pid {self.pid})" if self.pid else ""
        return f"{self.task}{pid} {what}{f' ({self.detail})' if self.detail else ''}"

    def to_dict(self) -> dict:
        return {"task": self.task, "pid": self.pid, "exit_code": self.exit_code, "signal": self.signal,
                "silent_s": None if self.silent_s is None else round(self.silent_s, 1), "kind": self.kind,
                "retryable": self.retryable, "detail": self.detail}


def first_cause(failures: list[Failure]) -> Failure:
    """The failure to act on when several tasks ended together: one that found the data cannot be trained on
    (its peers then fail in their collectives), else a retryable one, since in a sync cluster a killed worker
    makes its peers fail in their collectives with an ordinary error."""
    return next((f for f in failures if f.data), next((f for f in failures if f.retryable), failures[0]))


def restarts(policy: RestartPolicy, failure: Failure) -> bool:
    """Whether ``policy`` restarts after ``failure`` (restarts left or not)."""
    if failure.data:  # the same rows fail the same way
        return False
    if policy is RestartPolicy.ON_FAILURE:
        return True
    return policy is RestartPolicy.EXIT_CODE and failure.retryable


# -- decisions ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Decision:
    """What to do after a poll; ``notes`` are events to write first (what was seen, in words)."""

    notes: tuple[str, ...] = field(default=(), kw_only=True)


@dataclass(frozen=True)
class GoOn(Decision):
    """Nothing to do."""


@dataclass(frozen=True)
class AllUp(Decision):
    """Every task is up: the cluster runs."""

    after_s: float


@dataclass(frozen=True)
class Restart(Decision):
    """Restart ``task`` alone, or the whole cluster when ``task`` is None, after ``failure`` (its record, with
    the action taken)."""

    task: str | None
    why: str
    failure: dict[str, Any]


@dataclass(frozen=True)
class Finish(Decision):
    """End the cluster; ``failure`` is the record of the failure that was not restarted, if one was."""

    status: Status
    code: ExitCode
    reason: str
    failure: dict[str, Any] | None = None


ENDED = (TaskStatus.EXITED, TaskStatus.FAILED, TaskStatus.KILLED)


class Policy:
    """The rules of the module docstring for one cluster (``spec``: its tasks, mode and ``Supervision``)."""

    def __init__(self, spec: ClusterSpec):
        self.spec = spec
        self.settings = spec.supervision
        self.chief = spec.chief.name
        self.roles = {t.name: t.role for t in spec.tasks}

    def decide(self, state: ClusterState, seen: dict[str, Observation], ended: list[str], *, now: float,
               since_start: float) -> Decision:
        """The decision after one poll.

        :param state: the cluster as recorded after this poll (each task's state: ``ended`` ones are
            ``exited`` or ``failed`` now; a starting task seen up is ``running``).
        :param seen: this poll's observation of each task, by name.
        :param ended: the tasks that ended at this poll, in the spec's order.
        :param now: wall-clock time (progress reports carry it).
        :param since_start: seconds since the cluster was last (re)started.
        """
        states = {t.name: t.state for t in state.tasks}
        if self._succeeded(states, seen, ended):
            return Finish(Status.SUCCEEDED, ExitCode.SUCCEEDED, "training finished")
        failures = self._failures(seen, ended)
        if failures:
            cause = first_cause(failures)
            return self._recover(state, failures, cause.task)
        silent = self._silent(seen, now)
        if silent:
            note = ("no progress from " + ", ".join(f"{f.task} ({f.detail})" for f in silent)
                    + f" for {self.settings.progress_timeout_s:.0f}s (progress_timeout_s): treated as hung")
            # One failure naming every silent task: in a sync cluster the hung task's peers wait for it in a
            # collective, so all of them fall silent together.
            hung = Failure(", ".join(f.task for f in silent), 0, None, silent_s=min(f.silent_s for f in silent),
                           detail="; ".join(f"{f.task} {f.detail}" for f in silent))
            return self._recover(state, [hung], None, notes=(note,))
        if state.status in (Status.STARTING, Status.RESTARTING):
            starting = [name for name, s in states.items() if s is TaskStatus.STARTING]
            if not starting:
                return AllUp(since_start)
            if since_start > self.settings.startup_deadline_s:
                missing = [name + (f" ({seen[name].waiting})" if name in seen and seen[name].waiting else "")
                           for name in starting]
                return Finish(Status.FAILED, ExitCode.STARTUP_DEADLINE,
                              f"start-up deadline of {self.settings.startup_deadline_s:.0f}s passed; not up: "
                              f"{', '.join(missing)} (see their logs in {self.spec.folder.logs})")
        return GoOn()

    # -- the rules --------------------------------------------------------------------------------------
    def _succeeded(self, states: dict[str, TaskStatus], seen: dict[str, Observation], ended: list[str]) -> bool:
        if self.spec.mode is Mode.ASYNC:
            return self.chief in ended and seen[self.chief].exit_code == 0
        return bool(ended) and all(s is TaskStatus.EXITED for s in states.values())

    def _failures(self, seen: dict[str, Observation], ended: list[str]) -> list[Failure]:
        failures = []
        for name in ended:
            o = seen[name]
            if o.exit_code != 0:
                failures.append(Failure(name, o.pid, o.exit_code, detail=o.detail))
            elif self.spec.mode is Mode.ASYNC and name != self.chief:
                # A server must run until the chief ends: ending early is a failure like any other.
                failures.append(Failure(name, o.pid, 0, detail=o.detail, early=True))
        return failures

    def _silent(self, seen: dict[str, Observation], now: float) -> list[Failure]:
        timeout = self.settings.progress_timeout_s
        if not timeout:
            return []
        silent = []
        for o in seen.values():
            quiet = silent_for(o.progress, now) if o.exit_code is None else None
            if quiet is not None and quiet > timeout:
                last = time.strftime("%H:%M:%S", time.localtime(o.progress["time"]))
                silent.append(Failure(o.task, o.pid, None, silent_s=quiet,
                                      detail=f"last: {o.progress.get('what')} at {last}"))
        return silent

    def _recover(self, state: ClusterState, failures: list[Failure], task: str | None,
                 notes: tuple[str, ...] = ()) -> Decision:
        """Restart after ``failures`` (tasks that ended together; ``task``: the one whose failure is acted
        on, None for the watchdog's) if the policy allows, else finish."""
        cause = first_cause(failures)
        notes = notes + tuple(f"{f.describe()}: {'retryable' if f.retryable else 'not retryable'} ({f.kind})"
                              for f in failures)
        if not restarts(self.settings.restart_policy, cause) or state.restarts >= self.settings.max_restarts:
            return self._failed(state, cause, failures, notes)
        alone = (self.spec.mode is Mode.ASYNC and task is not None and len(failures) == 1
                 and (self.roles[task] is Role.WORKER or cause.early))
        action = f"restarted {task} alone" if alone else "restarted the cluster"
        return Restart(task if alone else None, cause.describe(), {**cause.to_dict(), "action": action},
                       notes=notes)

    def _failed(self, state: ClusterState, failure: Failure, together: list[Failure],
                notes: tuple[str, ...]) -> Finish:
        """End the cluster after ``failure`` was not restarted; the reason says why not, and names the tasks
        that ended in the same poll (which of them failed first cannot be told apart)."""
        policy, limit = self.settings.restart_policy, self.settings.max_restarts
        why = failure.describe()
        others = [f.describe() for f in together if f is not failure]
        if others:
            why += f" (in the same moment: {'; '.join(others)})"
        if failure.data:
            code = ExitCode.DATA_INVALID
            why_not = ("the data cannot be trained on: never restarted, whatever the restart policy (the same rows "
                       "would fail again); fix the rows, or validate them again, then retry")
        elif not restarts(policy, failure):
            code = ExitCode.USER_CODE_FAILED
            if policy is RestartPolicy.NEVER:
                why_not = "restart_policy 'never' restarts nothing"
            else:
                why_not = (f"not retryable ({failure.kind}): restart_policy '{policy.value}' restarts only signals, "
                           f"statuses >= 128, status {UNAVAILABLE_EXIT_CODE} (infrastructure unavailable) and the "
                           f"watchdog; fix the code, or use restart_policy 'on-failure'")
        else:
            code = ExitCode.RESTARTS_EXHAUSTED
            why_not = f"restarts exhausted ({state.restarts}/{limit})"
        if failure.exit_code is None:
            code = ExitCode.NO_PROGRESS
        return Finish(Status.FAILED, code, f"{why}; {why_not}",
                      {**failure.to_dict(), "action": f"not restarted: {why_not}"}, notes=notes)
