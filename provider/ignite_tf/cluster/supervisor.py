"""The supervisor: one process per TensorFlow cluster, parent of every task.

``python -m ignite_tf.cluster.supervisor SPEC_JSON`` (the local launcher starts it detached, so it outlives
an Airflow task that defers or a CLI that detaches; with ``--after-plan`` it starts while the shard plan is
made, see ``main``). It

- starts each task in its own process group with ``PR_SET_PDEATHSIG``: if the supervisor dies, for any
  reason, its children get SIGKILL at once;
- enforces a start-up deadline (TensorFlow waits for missing peers forever): every task must listen on its
  port (or have finished) within ``startup_deadline_s``;
- heals: sync mode restarts the whole cluster on any task failure (MultiWorkerMirroredStrategy needs all
  workers together), async mode restarts a failed worker alone and the whole cluster when the chief or a
  parameter server fails; restarted tasks resume from the checkpoint the runtime keeps;
- stops: on SIGTERM or a stop request in the state store, tasks get SIGTERM and ``grace_period_s`` to
  checkpoint, then SIGKILL; when the chief finishes, parameter servers and remaining tasks are stopped;
- forks its runtime tasks from a fork server that imported TensorFlow once for all of them (``forkserver.py``;
  user commands, GPU hosts and ``IGNITE_TF_FORKSERVER=off`` get a new process per task);
- gives each task an allowlisted environment (``environment.py``): the runtime's variables, the Ignite
  connection, the user's named ``env`` and ``TF_CONFIG``, with this interpreter's folder first on ``PATH``;
- records everything in the state store and exits with an ``ExitCode``.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ignite_tf.cluster import forkserver
from ignite_tf.cluster.bytecode import with_bytecode_cache
from ignite_tf.cluster.commands import task_command, task_cwd
from ignite_tf.cluster.environment import minimal_env
from ignite_tf.cluster.policy import Failure, RestartPolicy, first_cause
from ignite_tf.cluster.procs import own_group_dying_with, signal_group
from ignite_tf.cluster.spec import ClusterSpec, ClusterTask, Mode, Role
from ignite_tf.cluster.state import ClusterState, ExitCode, StateStore, Status, TaskState, store_from_env
from ignite_tf.ports import listening
from ignite_tf.runtime import progress

POLL_S = 0.2
HEARTBEAT_S = 2.0
STORE_POLL_S = 1.0
# Put first on every task's PYTHONPATH: its sitecustomize ends a task at once on an uncaught exception.
TASKBOOT_DIR = str(Path(__file__).resolve().parent.parent / "resources" / "taskboot")


class Supervisor:
    """Supervises local processes; a subclass may supervise other kinds of tasks (pods) by overriding
    ``start_task``, ``kill_task``, ``stop_all`` and the hooks ``poll_task``, ``task_up``, ``task_pid``,
    ``exit_detail`` and ``waiting_reason``."""

    poll_s = POLL_S

    def __init__(self, spec: ClusterSpec, store: StateStore, command_for):
        self.spec = spec
        self.store = store
        self.command_for = command_for  # (spec, task) -> argv
        self.procs: dict[str, subprocess.Popen | forkserver.ForkedTask] = {}
        self.forkserver: forkserver.ForkServer | None = None
        self.terminating = False
        self.attempt = 0
        self.state = ClusterState(
            cluster_id=spec.cluster_id, cache=spec.cache, mode=spec.mode.value, run_dir=spec.run_dir,
            tasks=[TaskState(t.role.value, t.index, t.host, t.port, log=spec.log_path(t)) for t in spec.tasks],
            supervisor_pid=os.getpid(), supervisor_host=socket.gethostname(), chief_log=spec.log_path(spec.chief),
            labels=dict(spec.labels),
        )
        self._last_put = 0.0
        self._last_store_poll = 0.0
        self._last_watch = 0.0

    # -- bookkeeping ---------------------------------------------------------------------------------------
    def tstate(self, task: ClusterTask) -> TaskState:
        return next(s for s in self.state.tasks if s.name == task.name)

    # -- hooks: what a task is, for local processes -----------------------------------------------------
    def poll_task(self, task: ClusterTask) -> int | None:
        """The task's exit status (negative: a signal), None while it runs."""
        return self.procs[task.name].poll()

    def task_up(self, task: ClusterTask) -> bool:
        """Whether a starting task is up (listens on its port)."""
        return listening(task.port, task.host)

    def task_pid(self, task: ClusterTask) -> int:
        proc = self.procs.get(task.name)
        return proc.pid if proc else 0

    def exit_detail(self, task: ClusterTask, code: int) -> str:
        """More about a failed task's end (a pod: OOMKilled with its limit); '' when nothing more is known."""
        return ""

    def waiting_reason(self, task: ClusterTask) -> str:
        """Why a task is not up yet (a pod: the scheduler's reason), for the start-up deadline's message."""
        return ""

    def event(self, message: str) -> None:
        """A supervisor event, written to its own log and into the chief's output (what `attach` streams)."""
        line = f"[ignite-tf {time.strftime('%H:%M:%S')}] {message}\n"
        sys.stdout.write(line)
        sys.stdout.flush()
        with open(self.spec.log_path(self.spec.chief), "a") as f:
            f.write(line)

    def save(self, force: bool = False) -> None:
        now = time.time()
        if force or now - self._last_put >= HEARTBEAT_S:
            self.state.heartbeat = now
            try:
                self.store.put(self.state)
            except Exception as exc:  # noqa: BLE001 - keep supervising; the store may come back
                sys.stdout.write(f"[ignite-tf] could not record state: {exc}\n")
            self._last_put = now

    # -- tasks ---------------------------------------------------------------------------------------------
    def task_env(self, task: ClusterTask) -> dict[str, str]:
        env = minimal_env(os.environ, self.spec.pass_env)
        env.update(self.spec.task_env(task, self.attempt))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [TASKBOOT_DIR, env.get("PYTHONPATH")]))
        return with_bytecode_cache(env)

    def start_forkserver(self) -> None:
        """Start the fork server when a task would use it (``forkserver.settings_for``); keep one started
        earlier (``main``, from the draft spec) when it was started with the same settings."""
        wanted = forkserver.settings_for(self.spec, self.task_env, self.command_for)
        if self.forkserver is not None and self.forkserver.settings != wanted:
            self.forkserver.close(0)
            self.forkserver = None
        if wanted is not None and self.forkserver is None:
            sys.stdout.flush()
            self.forkserver = forkserver.ForkServer(wanted[0], self.spec.run_dir, sys.stdout, hook=wanted[1])

    def forkserver_ready(self) -> bool:
        """Wait for the fork server's imports (recording state meanwhile); on failure go on without it."""
        server, deadline = self.forkserver, time.monotonic() + self.spec.startup_deadline_s
        while server is not None and not server.ready(0.2):
            self.save()
            if server.gone or time.monotonic() > deadline or self._stop_requested():
                self.event(f"the fork server did not start (status {server.proc.poll()}, see the supervisor log "
                           f"in {self.spec.folder.logs}): each task imports TensorFlow itself")
                server.close(0)
                self.forkserver = server = None
        return server is not None

    def start_task(self, task: ClusterTask) -> None:
        Path(self.spec.task_dir(task)).mkdir(parents=True, exist_ok=True)
        progress = Path(self.spec.progress_path(task))
        progress.parent.mkdir(parents=True, exist_ok=True)
        progress.unlink(missing_ok=True)  # a new attempt is watched from its own first report
        env, argv, cwd, log = self.task_env(task), self.command_for(self.spec, task), task_cwd(self.spec, task), \
            self.spec.log_path(task)
        target = forkserver.module_of(argv)
        if target is not None and self.forkserver_ready():
            proc = self.forkserver.start(task.name, *target, env=env, cwd=cwd, log=log)
        else:
            with open(log, "ab") as out:
                proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=subprocess.STDOUT,
                                        preexec_fn=functools.partial(own_group_dying_with, os.getpid()))
        self.procs[task.name] = proc
        ts = self.tstate(task)
        ts.pid, ts.state, ts.exit_code = proc.pid, "starting", None

    def start_all(self) -> None:
        for task in self.spec.tasks:
            self.start_task(task)
        self.attempt_started = time.monotonic()
        self.state.status = Status.STARTING
        self.save(force=True)

    def kill_task(self, task: ClusterTask, grace: float) -> None:
        proc = self.procs.get(task.name)
        if proc is None:
            return
        signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        signal_group(proc.pid, signal.SIGKILL)  # the group too: a user script's own children
        proc.wait()
        ts = self.tstate(task)
        if ts.state in ("starting", "running"):
            ts.state = "killed"
        ts.exit_code = proc.returncode

    def stop_all(self, grace: float | None = None) -> None:
        grace = self.spec.grace_period_s if grace is None else grace
        live = [t for t in self.spec.tasks if self.procs.get(t.name) and self.procs[t.name].poll() is None]
        for t in live:
            signal_group(self.procs[t.name].pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(self.procs[t.name].poll() is None for t in live) and time.monotonic() < deadline:
            time.sleep(0.05)
        for t in self.spec.tasks:
            self.kill_task(t, 0)

    # -- policy --------------------------------------------------------------------------------------------
    def restart_cluster(self, why: str) -> bool:
        if self.state.restarts >= self.spec.max_restarts:
            return False
        self.state.restarts += 1
        self.attempt += 1
        self.event(f"{why}: restarting the whole cluster from the latest checkpoint "
                   f"(restart {self.state.restarts}/{self.spec.max_restarts})")
        self.state.status = Status.RESTARTING
        self.save(force=True)
        self.stop_all()
        for t in self.spec.tasks:
            self.tstate(t).restarts += 1
        self.start_all()
        return True

    def restart_task(self, task: ClusterTask, why: str) -> bool:
        if self.state.restarts >= self.spec.max_restarts:
            return False
        self.state.restarts += 1
        self.tstate(task).restarts += 1
        self.event(f"{why}: restarting {task.name} alone; training goes on "
                   f"(restart {self.state.restarts}/{self.spec.max_restarts})")
        self.kill_task(task, 0)
        self.start_task(task)
        self.save(force=True)
        return True

    def finish(self, status: Status, code: ExitCode, reason: str) -> ExitCode:
        self.stop_all()
        self.state.status, self.state.exit_code, self.state.reason = status, int(code), reason
        self.state.finished_at = time.time()
        self.event(f"cluster {self.spec.cluster_id} {status.value}: {reason}")
        self.save(force=True)
        return code

    def failed(self, failure: Failure, together: list[Failure] = ()) -> ExitCode:
        """End the cluster after ``failure`` was not restarted; the reason says why not, and names the tasks
        that ended in the same poll (which of them failed first cannot be told apart)."""
        policy = self.spec.restart_policy
        why = failure.describe()
        others = [f.describe() for f in together if f is not failure]
        if others:
            why += f" (in the same moment: {'; '.join(others)})"
        if not policy.restarts(failure):
            code = ExitCode.USER_CODE_FAILED
            if policy is RestartPolicy.NEVER:
                why_not = "restart_policy 'never' restarts nothing"
            else:
                why_not = (f"not retryable ({failure.kind}): restart_policy '{policy.value}' restarts only signals, "
                           f"statuses >= 128 and the watchdog; fix the code, or use restart_policy 'on-failure'")
        else:
            code = ExitCode.RESTARTS_EXHAUSTED
            why_not = f"restarts exhausted ({self.state.restarts}/{self.spec.max_restarts})"
        if failure.exit_code is None:
            code = ExitCode.NO_PROGRESS
        self.state.failures.append({**failure.to_dict(), "time": time.time(), "action": f"not restarted: {why_not}"})
        return self.finish(Status.FAILED, code, f"{why}; {why_not}")

    def recover(self, failures: list[Failure], task: ClusterTask) -> ExitCode | None:
        """Restart after ``failures`` (tasks that ended together) if the policy allows, else end the cluster."""
        cause = first_cause(failures)
        for f in failures:
            self.event(f"{f.describe()}: {'retryable' if f.retryable else 'not retryable'} ({f.kind})")
        if not self.spec.restart_policy.restarts(cause):
            return self.failed(cause, failures)
        why = cause.describe()
        alone = self.spec.mode is Mode.ASYNC and task.role is Role.WORKER and len(failures) == 1
        restarted = self.restart_task(task, why) if alone else self.restart_cluster(why)
        if not restarted:
            return self.failed(cause, failures)
        self.state.failures.append({**cause.to_dict(), "time": time.time(),
                                    "action": f"restarted {task.name} alone" if alone else "restarted the cluster"})
        return None

    # -- main loop -----------------------------------------------------------------------------------------
    def run(self) -> ExitCode:
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGINT, self._on_term)
        self.spec.folder.logs.mkdir(parents=True, exist_ok=True)
        self.event(f"cluster {self.spec.cluster_id}: {self.spec.mode.value} mode, tasks "
                   + ", ".join(f"{t.name}@{t.address}" for t in self.spec.tasks))
        try:
            self.start_forkserver()
            self.save(force=True)  # the launcher returns once this is recorded, not once the server is ready
            self.start_all()
            while True:
                outcome = self.step()
                if outcome is not None:
                    return outcome
                time.sleep(self.poll_s)
        except BaseException as exc:  # noqa: BLE001 - never leave tasks behind
            self.stop_all(grace=0)
            self.state.status, self.state.exit_code = Status.FAILED, int(ExitCode.INTERNAL_ERROR)
            self.state.reason = f"supervisor error: {exc!r}"
            self.state.finished_at = time.time()
            self.save(force=True)
            raise
        finally:
            if self.forkserver is not None:
                self.forkserver.close()

    def silent_tasks(self) -> list[Failure]:
        """Live tasks whose last progress report is older than ``progress_timeout_s`` (checked once a second)."""
        timeout = self.spec.progress_timeout_s
        now = time.time()
        if not timeout or now - self._last_watch < 1.0:
            return []
        self._last_watch = now
        silent = []
        for task in self.spec.tasks:
            live = task.name in self.procs and self.poll_task(task) is None
            last = progress.read(self.spec.progress_path(task)) if live else None
            if last and last.get("watch") and now - last["time"] > timeout:
                silent.append(Failure(task.name, self.task_pid(task), None, silent_s=now - last["time"],
                                      detail=f"last: {last.get('what')} at {time.strftime('%H:%M:%S', time.localtime(last['time']))}"))
        return silent

    def _on_term(self, signum, frame) -> None:
        self.terminating = True

    def _stop_requested(self) -> bool:
        if self.terminating:
            return True
        now = time.monotonic()
        if now - self._last_store_poll >= STORE_POLL_S:
            self._last_store_poll = now
            try:
                self.terminating = self.store.stop_requested(self.spec.cluster_id)
            except Exception:  # noqa: BLE001 - an unreachable store is not a stop request
                pass
        return self.terminating

    def step(self) -> ExitCode | None:
        if self._stop_requested():
            return self.finish(Status.STOPPED, ExitCode.STOPPED, "stopped on request")
        chief = self.spec.chief
        failures: list[tuple[Failure, ClusterTask]] = []
        for task in self.spec.tasks:
            code = self.poll_task(task)
            ts = self.tstate(task)
            if code is None:
                if ts.state == "starting" and self.task_up(task):
                    ts.state = "running"
                continue
            if ts.state in ("exited", "failed", "killed"):
                continue
            ts.exit_code = code
            if code == 0:
                ts.state = "exited"
                if self.spec.mode is Mode.ASYNC and task.role is not Role.CHIEF:
                    # A server must run until the chief ends; it is restarted alone, as a lost worker is.
                    why = f"{task.name} exited before the chief finished"
                    if not self.restart_task(task, why):
                        return self.finish(Status.FAILED, ExitCode.RESTARTS_EXHAUSTED, f"{why}; restarts exhausted "
                                           f"({self.state.restarts}/{self.spec.max_restarts})")
                    return None
                done = (task == chief) if self.spec.mode is Mode.ASYNC else all(
                    self.tstate(t).state == "exited" for t in self.spec.tasks)
                if done:
                    return self.finish(Status.SUCCEEDED, ExitCode.SUCCEEDED, "training finished")
                continue
            ts.state = "failed"
            failures.append((Failure(task.name, self.task_pid(task), code, detail=self.exit_detail(task, code)), task))
        if not failures:
            silent = self.silent_tasks()
            if silent:
                self.event("no progress from " + ", ".join(f"{f.task} ({f.detail})" for f in silent)
                           + f" for {self.spec.progress_timeout_s:.0f}s (progress_timeout_s): treated as hung")
                # One failure naming every silent task: in a sync cluster the hung task's peers wait for it in a
                # collective, so all of them fall silent together.
                return self.recover([Failure(", ".join(f.task for f in silent), 0, None,
                                             silent_s=min(f.silent_s for f in silent),
                                             detail="; ".join(f"{f.task} {f.detail}" for f in silent))],
                                    self.spec.chief)
        if failures:
            # Tasks that ended in the same poll are judged together: a killed sync worker makes its peers
            # fail in their collectives with an ordinary error, which must not hide the retryable cause.
            cause = first_cause([f for f, _ in failures])
            task = next(t for f, t in failures if f is cause)
            return self.recover([f for f, _ in failures], task)

        if self.state.status in (Status.STARTING, Status.RESTARTING):
            if all(self.tstate(t).state != "starting" for t in self.spec.tasks):
                self.state.status = Status.RUNNING
                self.event(f"all {len(self.spec.tasks)} tasks up after "
                           f"{time.monotonic() - self.attempt_started:.1f}s")
                self.save(force=True)
            elif time.monotonic() - self.attempt_started > self.spec.startup_deadline_s:
                missing = [t.name + (f" ({why})" if (why := self.waiting_reason(t)) else "")
                           for t in self.spec.tasks if self.tstate(t).state == "starting"]
                return self.finish(Status.FAILED, ExitCode.STARTUP_DEADLINE,
                                   f"start-up deadline of {self.spec.startup_deadline_s:.0f}s passed; not up: "
                                   f"{', '.join(missing)} (see their logs in {self.spec.folder.logs})")
        self.save()
        return None


def main(argv: list[str] | None = None) -> int:
    """``python -m ignite_tf.cluster.supervisor [--after-plan] SPEC_JSON``. With ``--after-plan`` the
    launcher is still making the shard plan (``LocalLauncher.launching``): the first line of standard input is
    a draft spec, for which the fork server starts at once, and a second line says SPEC_JSON is saved. An
    input closed before that ends the supervisor and its fork server: the launch was given up."""
    argv = sys.argv[1:] if argv is None else argv
    after_plan = argv[:1] == ["--after-plan"]
    if len(argv) != 1 + after_plan:
        print("usage: python -m ignite_tf.cluster.supervisor [--after-plan] SPEC_JSON", file=sys.stderr)
        return int(ExitCode.INTERNAL_ERROR)
    store = store_from_env()
    if store is None:
        print("error: no state store configured (IGNITE_TF_STATE_STORE)", file=sys.stderr)
        return int(ExitCode.INTERNAL_ERROR)
    early = None
    try:
        if after_plan:
            draft = sys.stdin.readline().strip()
            if draft:
                early = Supervisor(_with_job_dir(ClusterSpec.from_dict(json.loads(draft))), store, task_command)
                early.start_forkserver()
            if not draft or not sys.stdin.readline().strip():
                print("the launch was given up before the shard plan was made", flush=True)
                return int(ExitCode.INTERNAL_ERROR)
        supervisor = Supervisor(_with_job_dir(ClusterSpec.load(argv[-1])), store, task_command)
        supervisor.forkserver, early = early.forkserver if early else None, None
        return int(supervisor.run())
    finally:
        if early is not None and early.forkserver is not None:
            early.forkserver.close(0)
        store.close()


def _with_job_dir(spec: ClusterSpec) -> ClusterSpec:
    """User scripts import their own modules from the job directory."""
    job_dir = spec.job.get("job_dir")
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if job_dir and job_dir not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [job_dir, *paths]))
    return spec


if __name__ == "__main__":
    sys.exit(main())
