"""The supervision loop: observe the tasks through a backend, ask the policy, carry out its decision.

``Supervisor(spec, store, backend).run()`` is the whole life of a cluster: it records the state (the launcher
returns once it is recorded), lets the backend prepare (a fork server; Kubernetes objects), starts every
task, then polls — a stop request (SIGTERM, the state store, the backend's own reason), each task's
``Observation``, the policy's ``Decision`` — until the policy finishes the cluster. A cluster whose id already has
a state that ended or was lost (an Airflow retry of the same task instance) is resumed: the tasks go on from
the run's checkpoints, with attempt numbers above the earlier supervisor's; one whose supervisor still
heartbeats is refused (never two supervisors of one cluster). On its way out every task
is stopped (SIGTERM, ``grace_period_s``, then SIGKILL) and the final state is recorded; it returns the
``ExitCode``.

A backend (``Backend``) knows how to start, observe and stop one kind of task: local processes
(``processes.py``) or pods (``ignite_tf.cluster.k8s.pods``). It knows nothing of the rules.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from ignite_tf import timeline
from ignite_tf.cluster.spec import ClusterSpec, ClusterTask
from ignite_tf.cluster.supervision.backend import Backend, HandOver, SetupError
from ignite_tf.cluster.supervision.heartbeat import Heartbeat
from ignite_tf.cluster.supervision.locality import measured_locality
from ignite_tf.cluster.supervision.policy import AllUp, Decision, Finish, GoOn, Observation, Policy, Restart
from ignite_tf.contract import DATA_EXIT_CODE, UNAVAILABLE_EXIT_CODE
from ignite_tf.errors import OutageError
from ignite_tf.retries import Outage, transient
from ignite_tf.runstore import LAYOUT, RunStore
from ignite_tf.runstore.mirror import Mirror
from ignite_tf.state import ClusterState, ExitCode, StateStore, Status, TaskState, TaskStatus

STORE_POLL_S = 0.25  # a stop request (``ignite-tf stop``, on_kill, from any host) is seen this fast
WATCH_EVERY_S = 1.0  # progress reports are read at most this often


# Statuses whose task said why on its last ``error:`` line (``ignite_tf.faults``): the line joins the failure.
NAMED_STATUSES = (DATA_EXIT_CODE, UNAVAILABLE_EXIT_CODE)


def last_error_line(log_path: str, tail_bytes: int = 16384) -> str:
    """The last line of a task's log that starts with ``error: `` (without it), or ''."""
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, os.path.getsize(log_path) - tail_bytes))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return next((line.removeprefix("error: ") for line in reversed(lines) if line.startswith("error: ")), "")


class Supervisor:
    """Drives ``backend`` with ``Policy(spec)``, recording the cluster's state in ``store``; the backend's
    ``SupervisorHost``."""

    def __init__(self, spec: ClusterSpec, store: StateStore, backend: Backend):
        self.spec, self.store, self.backend = spec, store, backend
        self.policy = Policy(spec)
        backend.host = self
        self.terminating = False
        self.finishing = False
        self.replaced = False  # a SIGTERM to a supervisor whose tasks outlive it: hand over at the next poll
        self.attempt = 0
        self.resumed_from = ""  # how the earlier supervisor's cluster ended, when this one resumes it
        self.attempt_started = time.monotonic()
        self.state = ClusterState(
            cluster_id=spec.cluster_id, cache=spec.cache, mode=spec.mode.value, run_dir=spec.run_location,
            tasks=[TaskState(t.role.value, t.index, t.host, t.port, log=spec.log_path(t)) for t in spec.tasks],
            supervisor_pid=os.getpid(), supervisor_host=socket.gethostname(), chief_log=spec.log_path(spec.chief),
            labels=dict(spec.labels), launcher=backend.launcher_info(),
        )
        self.heartbeat = Heartbeat(store, spec.supervision.outage_budget_s)
        self._last_store_poll = 0.0
        self._last_watch = 0.0
        self.outage = Outage(backend.describe(), spec.supervision.outage_budget_s)
        # Every task's log (and ours) copied to an object-store run root while it grows; nothing for a folder.
        self.mirror = Mirror(RunStore(spec.run_store), spec.run_dir, (str(LAYOUT.logs),)) if spec.run_store else None

    def publish_logs(self) -> None:
        """Copy the logs to the run store now: before a final state is recorded, so that whoever sees the
        end (``attach``, the trigger) reads the whole output."""
        if self.mirror is not None:
            self.mirror.flush()

    # -- records -------------------------------------------------------------------------------------------
    def tstate(self, task: ClusterTask | str) -> TaskState:
        name = task if isinstance(task, str) else task.name
        return next(s for s in self.state.tasks if s.name == name)

    def event(self, message: str) -> None:
        """A supervisor event, written to its own log and into the chief's output (what `attach` streams)."""
        line = f"[ignite-tf {time.strftime('%H:%M:%S')}] {message}\n"
        sys.stdout.write(line)
        sys.stdout.flush()
        with open(self.spec.log_path(self.spec.chief), "a") as f:
            f.write(line)

    def mark(self, name: str) -> None:
        """A moment of the start-up (``ignite_tf.timeline``) in the chief's output, for the benches."""
        with open(self.spec.log_path(self.spec.chief), "a") as f:
            f.write(timeline.line(name) + "\n")

    def save(self, force: bool = False) -> None:
        """Record the state: now with ``force``, else within a heartbeat (``Heartbeat``: the loop never waits
        on the store for it)."""
        self.heartbeat.record(self.state, force)

    def cluster_attempt(self) -> int:
        return self.state.attempt

    def restart_count(self) -> int:
        return self.state.restarts

    def started_at(self) -> float:
        return self.state.started_at

    def record_launcher(self, key: str, value: Any) -> None:
        self.state.launcher[key] = value

    def epochs(self) -> list[dict[str, Any]]:
        return self.store.epochs(self.spec.cluster_id)

    def beat(self) -> bool:
        """For a backend that waits: record the state (a heartbeat) and say whether to give up (a stop). Raises
        ``HandOver`` once this supervisor is replaced: a wait is a point where handing over is safe."""
        self.hand_over_if_replaced()
        self.save()
        return self.stop_requested()

    def hand_over_if_replaced(self) -> None:
        """Raise ``HandOver`` where the loop may leave (between polls, in a backend's wait), never from the
        signal handler: raised there it could land in any ``except Exception`` (a state write, an API call)
        and be swallowed, leaving a replaced supervisor to run the cluster to its end beside its successor."""
        if self.replaced and not self.finishing and not self.terminating:
            raise HandOver()

    # -- mechanics -----------------------------------------------------------------------------------------
    def start_task(self, task: ClusterTask) -> None:
        Path(self.spec.task_dir(task)).mkdir(parents=True, exist_ok=True)
        progress = Path(self.spec.progress_path(task))
        progress.parent.mkdir(parents=True, exist_ok=True)
        progress.unlink(missing_ok=True)  # a new attempt is watched from its own first report
        pid = self.backend.start(task, self.attempt)
        ts = self.tstate(task)
        ts.pid, ts.state, ts.exit_code = pid, TaskStatus.STARTING, None

    def start_all(self) -> None:
        for task in self.spec.tasks:
            self.start_task(task)
        self.attempt_started = time.monotonic()
        self.mark("tasks_started")
        self.state.status, self.state.attempt = Status.STARTING, self.attempt
        self.save(force=True)

    def stop_tasks(self, tasks: list[ClusterTask], grace: float | None = None) -> None:
        codes = self.backend.stop(tasks, self.spec.supervision.grace_period_s if grace is None else grace)
        for t in tasks:
            ts = self.tstate(t)
            if ts.state in (TaskStatus.STARTING, TaskStatus.RUNNING):
                ts.state = TaskStatus.KILLED
            if codes.get(t.name) is not None:
                ts.exit_code = codes[t.name]

    def stop_all(self, grace: float | None = None) -> None:
        self.stop_tasks(self.spec.tasks, grace)

    def restart_cluster(self, why: str) -> None:
        limit = self.spec.supervision.max_restarts
        self.state.restarts += 1
        self.attempt += 1
        self.state.attempt = self.attempt
        self.event(f"{why}: restarting the whole cluster from the latest checkpoint "
                   f"(restart {self.state.restarts}/{limit})")
        self.state.status = Status.RESTARTING
        self.mark("restarting")
        self.save(force=True)
        self.stop_all()
        for ts in self.state.tasks:
            ts.restarts += 1
        self.start_all()

    def restart_task(self, task: ClusterTask, why: str) -> None:
        self.state.restarts += 1
        self.tstate(task).restarts += 1
        self.event(f"{why}: restarting {task.name} alone; training goes on "
                   f"(restart {self.state.restarts}/{self.spec.supervision.max_restarts})")
        self.mark("restarting")
        self.stop_tasks([task], 0)
        self.start_task(task)
        self.save(force=True)

    def finish(self, status: Status, code: ExitCode, reason: str) -> ExitCode:
        self.finishing = True
        self.stop_all()
        self.backend.release()
        self.state.status, self.state.exit_code, self.state.reason = status, int(code), reason
        self.state.finished_at = time.time()
        self.report_locality()
        self.event(f"cluster {self.spec.cluster_id} {status.value}: {reason}")
        self.publish_logs()
        self.save(force=True)
        return code

    def report_locality(self) -> None:
        """Among the final lines: what the workers measured of their reads (``measured_locality``)."""
        line = measured_locality(self.store, self.spec)
        if line:
            self.event(line)

    def resume_previous(self, predecessor_gone: bool = False) -> bool:
        """Go on from the state an earlier supervisor of this cluster left (it ended, or was lost): attempts
        above its own, its failures kept. False when that supervisor still heartbeats (and is not known gone)."""
        try:
            previous = self.store.get(self.spec.cluster_id)
        except Exception:  # noqa: BLE001 - an unreachable store: nothing to go on from
            return True
        if previous is None:
            return True
        if not previous.status.final and not previous.lost and not predecessor_gone:
            sys.stdout.write(f"[ignite-tf] cluster {self.spec.cluster_id} is supervised by pid "
                             f"{previous.supervisor_pid} on {previous.supervisor_host} (heartbeat "
                             f"{time.time() - previous.heartbeat:.0f}s ago): not starting a second supervisor\n")
            return False
        self.attempt = previous.attempt + 1
        self.state.attempt, self.state.resumes = self.attempt, previous.resumes + 1
        self.state.started_at, self.state.failures = previous.started_at, list(previous.failures)
        ended = previous.status.value if previous.status.final else "lost"
        self.resumed_from = f"{ended}{f': {previous.reason}' if previous.reason else ''}"
        return True

    # -- the loop ------------------------------------------------------------------------------------------
    def run(self) -> ExitCode:
        """Supervise the cluster to its end (or a hand-over); SIGTERM and SIGINT are this loop's meanwhile."""
        previous = {signum: signal.signal(signum, self._on_term) for signum in (signal.SIGTERM, signal.SIGINT)}
        try:
            return self._run()
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)

    def _run(self) -> ExitCode:
        self.spec.folder.logs.mkdir(parents=True, exist_ok=True)
        adopted = self.adopt_previous()
        # A replaced pod supervisor's predecessor is gone (its pod is, before this one runs): its state, even
        # with a fresh heartbeat, is a lost cluster's when none of its tasks could be adopted.
        if not adopted and not self.resume_previous(predecessor_gone=self.backend.survives_supervisor):
            return ExitCode.INTERNAL_ERROR
        if self.mirror is not None:
            self.mirror.start()
        try:
            self.mark("supervisor_started")
            self.save(force=True)  # the launcher returns once this is recorded, not once the tasks start
            self.heartbeat.start()
            try:
                self.backend.prepare()
            except SetupError as exc:
                return self._abort(str(exc))
            self.mark("prepared")
            if self.resumed_from:
                self.event(f"cluster {self.spec.cluster_id} resumed (resume {self.state.resumes}) from its "
                           f"checkpoints in {self.spec.run_location}; it had {self.resumed_from}")
            if not adopted:
                self.event(f"cluster {self.spec.cluster_id}: {self.spec.mode.value} mode, tasks "
                           + ", ".join(f"{t.name}@{t.address}" for t in self.spec.tasks))
                self.start_all()
            while True:
                self.hand_over_if_replaced()
                outcome = self.step()
                if outcome is not None:
                    return outcome
                time.sleep(self.backend.poll_s)
        except HandOver:
            self.heartbeat.stop()
            self.event("supervisor replaced: its tasks go on under the next one")
            self.backend.hand_over()
            self.publish_logs()
            return ExitCode.STOPPED
        except BaseException as exc:  # noqa: BLE001 - never leave tasks behind
            reason = f"supervisor error: {exc}" if isinstance(exc, OutageError) else f"supervisor error: {exc!r}"
            try:
                self.stop_all(grace=0)
            except Exception as stop_exc:  # noqa: BLE001 - the end is recorded all the same, with what is left
                reason += f"; its tasks could not all be stopped ({type(stop_exc).__name__}: {stop_exc})"
            self.state.status, self.state.exit_code = Status.FAILED, int(ExitCode.INTERNAL_ERROR)
            self.state.reason = reason
            self.state.finished_at = time.time()
            self.publish_logs()
            self.save(force=True)
            raise
        finally:
            self.heartbeat.stop()
            self.backend.close()
            if self.mirror is not None:
                self.mirror.stop()
            # A final state is recorded once, by whoever ended the cluster, and nothing after it: whoever saw
            # that record (a stop, a retry) may already run the cluster's next supervisor, whose state a
            # second write here would overwrite with this ended one.
            if not self.state.status.final:
                self.save(force=True)

    def adopt_previous(self) -> bool:
        """Continue the cluster a supervisor left (a pod supervisor's replaced pod): its recorded state, and the
        tasks the backend adopts (``Backend.adopt``); False: a fresh start."""
        if not self.backend.survives_supervisor:
            return False
        previous = self.store.get(self.spec.cluster_id)
        if previous is None or previous.status.final:
            return False
        attempt = self.backend.adopt(previous)
        if attempt is None:
            return False
        previous.supervisor_pid, previous.supervisor_host = self.state.supervisor_pid, self.state.supervisor_host
        previous.launcher = {**self.state.launcher, **{k: v for k, v in previous.launcher.items()
                                                      if k not in self.state.launcher}}
        self.state, self.attempt = previous, attempt
        self.attempt_started = time.monotonic()
        return True

    def step(self) -> ExitCode | None:
        observed = self.observe_through_outages()
        if self.stop_requested():
            return self.finish(Status.STOPPED, ExitCode.STOPPED, "stopped on request")
        if observed is None:  # the backend's service did not answer: nothing is decided on what was not seen
            self.save()
            return None
        seen, ended = observed
        decision = self.policy.decide(self.state, seen, ended, now=time.time(),
                                      since_start=time.monotonic() - self.attempt_started)
        return self.act(decision)

    def observe_through_outages(self) -> tuple[dict[str, Observation], list[str]] | None:
        """``observe()`` after the backend's ``refresh``; None while they fail transiently (the Kubernetes API
        answering 503, a connection refused: ``ignite_tf.retries``) within the outage budget, the tasks left
        as they are; past it ``OutageError`` (the loop then ends the cluster, as for any supervisor error)."""
        try:
            self.backend.refresh()
            observed = self.observe()
        except Exception as exc:
            if not transient(exc):
                raise
            note, observed = self.outage.failed(exc), None
        else:
            note = self.outage.answered()
        if note:
            self.event(note)
        return observed

    def observe(self) -> tuple[dict[str, Observation], list[str]]:
        """Observe every task and record what changed; the tasks that ended at this poll, in order. Every task
        is observed before anything is recorded: an observation that fails leaves the records as they were,
        for the next poll to see the same ends again."""
        now = time.time()
        watch = bool(self.spec.supervision.progress_timeout_s) and now - self._last_watch >= WATCH_EVERY_S
        observations = {}
        for task in self.spec.tasks:
            ts = self.tstate(task)
            o = self.backend.observe(task, starting=ts.state is TaskStatus.STARTING)
            if watch and o.exit_code is None and ts.state in (TaskStatus.STARTING, TaskStatus.RUNNING):
                o = replace(o, progress=self.backend.progress(task))
            if o.exit_code in NAMED_STATUSES and not o.detail:  # what the task said of its cause, in the reason
                o = replace(o, detail=last_error_line(self.spec.log_path(task)))
            observations[task.name] = o
        if watch:
            self._last_watch = now
        seen: dict[str, Observation] = {}
        ended: list[str] = []
        for task in self.spec.tasks:
            ts, o = self.tstate(task), observations[task.name]
            seen[task.name] = o
            if o.host:
                ts.host = o.host
            if o.exit_code is None:
                if ts.state is TaskStatus.STARTING and o.up:
                    ts.state = TaskStatus.RUNNING
            elif ts.state in (TaskStatus.STARTING, TaskStatus.RUNNING):
                ts.exit_code = o.exit_code
                ts.state = TaskStatus.EXITED if o.exit_code == 0 else TaskStatus.FAILED
                ended.append(task.name)
        return seen, ended

    def act(self, decision: Decision) -> ExitCode | None:
        for note in decision.notes:
            self.event(note)
        if isinstance(decision, Finish):
            if decision.failure is not None:
                self.state.failures.append({**decision.failure, "time": time.time()})
            return self.finish(decision.status, decision.code, decision.reason)
        if isinstance(decision, Restart):
            self.state.failures.append({**decision.failure, "time": time.time()})
            if decision.task is None:
                self.restart_cluster(decision.why)
            else:
                self.restart_task(self.spec.task(decision.task), decision.why)
            return None
        if isinstance(decision, AllUp):
            self.state.status = Status.RUNNING
            self.mark("all_up")
            self.event(f"all {len(self.spec.tasks)} tasks up after {decision.after_s:.1f}s")
            self.save(force=True)
            return None
        assert isinstance(decision, GoOn), decision
        self.save()
        return None

    def stop_requested(self) -> bool:
        if self.terminating:
            return True
        now = time.monotonic()
        if now - self._last_store_poll >= STORE_POLL_S:
            self._last_store_poll = now
            try:
                self.terminating = self.store.stop_requested(self.spec.cluster_id)
            except Exception:  # noqa: BLE001 - an unreachable store is not a stop request
                pass
        if not self.terminating:
            why = self.backend.lost()
            if why:
                self.event(why)
                self.terminating = True
        return self.terminating

    def _abort(self, reason: str) -> ExitCode:
        """End a cluster whose backend could not prepare it: nothing started, what was made is deleted."""
        self.finishing = True
        self.backend.release()
        self.state.status, self.state.exit_code = Status.FAILED, int(ExitCode.INTERNAL_ERROR)
        self.state.reason, self.state.finished_at = reason, time.time()
        self.event(reason)
        self.publish_logs()
        self.save(force=True)
        return ExitCode.INTERNAL_ERROR

    def _on_term(self, signum, frame) -> None:
        if self.backend.survives_supervisor:
            self.replaced = True  # a stop or an end going on is not handed over: its clean-up ends us
            return
        self.terminating = True
