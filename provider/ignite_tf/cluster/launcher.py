"""Launchers turn a ClusterSpec into running tasks. Callers (the CLI, the Airflow operator and trigger)
only use the ``Launcher`` interface, so a Kubernetes launcher can stand in for the local one.

``LocalLauncher`` (the embedded default) starts a detached supervisor process (see
``ignite_tf.cluster.supervision``) that
owns every task; secrets reach it through its environment only, never its command line, and that environment
is an allowlist (``environment.py``), not the caller's.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path

from ignite_tf.cluster.environment import minimal_env, pass_through
from ignite_tf.cluster.spec import ClusterSpec
from ignite_tf.cluster.supervision import processes
from ignite_tf.errors import ConfigError, IgniteTFError
from ignite_tf.retries import call
from ignite_tf.runstore import LAYOUT, RunStore, is_remote
from ignite_tf.runstore.credentials import credentials_env, storage_options
from ignite_tf.state import ClusterState, StateStore, Status, store_to_env


class LauncherKind(StrEnum):
    """Where a cluster's tasks run: which launcher starts them (YAML ``training.launcher``, CLI ``--launcher``,
    operator ``launcher=``, ``make_launcher(kind=)``)."""

    LOCAL = "local"
    """Processes on this machine (``LocalLauncher``)."""
    KUBERNETES = "kubernetes"
    """Pods (``ignite_tf.cluster.k8s.launcher.KubernetesLauncher``)."""

    @classmethod
    def parse(cls, value: LauncherKind | str | None) -> LauncherKind:
        """``value`` as a LauncherKind (None or empty: ``LOCAL``)."""
        try:
            return cls(value or cls.LOCAL)
        except ValueError:
            raise ConfigError(f"launcher {value!r} is not available (available: "
                              f"{', '.join(k.value for k in cls)})") from None


class Launcher(ABC):
    """Start, watch and stop TensorFlow clusters; the state lives in ``store``."""

    on_lost: Callable[[ClusterState], None] | None = None
    """``(state) -> None`` for a cluster whose supervisor was lost: deletes what outlives it (pods)."""

    def __init__(self, store: StateStore, run_store_conn_id: str | None = None):
        self.store = store
        self._claims: dict[str, tuple[int, str]] = {}  # cluster id -> (resume, owner) of the claims it holds
        self.run_store_conn_id = run_store_conn_id
        """The Airflow ``aws`` connection of an object-store run root; None: the environment's credentials."""

    def run_store_env(self) -> dict[str, str]:
        """The run store's credentials as variables, for the processes this launcher starts (never written)."""
        env = self.__dict__.get("_run_store_env")
        if env is None:
            env = self.__dict__["_run_store_env"] = credentials_env(self.run_store_conn_id)
        return env

    def run_store(self, location: str) -> RunStore:
        """The run at ``location`` (a folder or an object-store URL) as this launcher reads it."""
        if not is_remote(location):
            return RunStore(location)
        options = dict(storage_options())
        if self.run_store_conn_id:  # this process's own reads: the connection's keys in memory only
            from ignite_tf.runstore.credentials import env_to_options

            options.update(env_to_options(self.run_store_env(), location))
        return RunStore(location, options)

    @abstractmethod
    def launch(self, spec: ClusterSpec) -> ClusterState:
        """Start the cluster and return once its state is recorded (the tasks may still be starting)."""

    @contextmanager
    def launching(self, draft: ClusterSpec) -> Iterator[Callable[[ClusterSpec], ClusterState]]:
        """While the block makes the shard plan, start what does not depend on it (``draft`` is the cluster
        but for the plan's workers and hosts); yields ``launch``, to call with the final spec. Here: nothing
        starts early."""
        yield self.launch

    @abstractmethod
    def stop(self, cluster_id: str, timeout: float = 60.0) -> ClusterState:
        """Ask the cluster to stop and wait until it has."""

    @abstractmethod
    def output(self, cluster_id: str, offset: int = 0) -> tuple[str, int]:
        """The chief's output from byte ``offset``: (text, new offset)."""

    def status(self, cluster_id: str) -> ClusterState:
        return self.store.require(cluster_id)

    def settled(self, cluster_id: str) -> tuple[ClusterState, bool]:
        """The cluster's state and whether it still runs, free of the exit race.

        A supervisor records its final state before it exits, so when a non-final state comes with a dead
        supervisor, reading the state again tells a clean finish from a lost supervisor.
        """
        state = self.status(cluster_id)
        if state.status.final:
            return state, False
        if self.is_alive(state):
            return state, True
        state = self.status(cluster_id)
        if not state.status.final:
            state.mark_lost()
        return state, False

    def is_alive(self, state: ClusterState) -> bool:
        """Whether ``state``'s cluster runs: not ended, its supervisor's heartbeat fresher than
        ``LOST_AFTER_S``; the same answer on every host (no pid is looked at)."""
        return not state.status.final and not state.lost

    def release_lost(self, state: ClusterState) -> ClusterState:
        """Record a cluster whose supervisor was lost as stopped (its tasks gone with it); what outlives a
        supervisor (pods) is deleted by ``on_lost``."""
        state.status, state.reason, state.finished_at = Status.STOPPED, "supervisor lost", time.time()
        state.mark_lost()
        self.store.put(state)
        if self.on_lost is not None:
            self.on_lost(state)
        return state

    claim_stale_s = 600.0
    """A claim whose launcher never got its supervisor to record a state in this long was given up."""
    claim_wait_s = 180.0
    """How long a launch that lost the claim waits for the winner's supervisor to record its state."""

    def claim(self, cluster_id: str, previous: ClusterState | None) -> ClusterState | None:
        """Before a supervisor of ``cluster_id`` starts (the first, or one that resumes ``previous``): take
        the claim on it in the state store, so that two launches (two tries of one Airflow task instance)
        never start two. None: this launch won and starts it; else the state the winner's supervisor
        recorded, to re-attach to."""
        resume = 0 if previous is None else previous.resumes + 1
        owner = f"{socket.gethostname()}:{os.getpid()}:{id(self)}"
        deadline = time.monotonic() + self.claim_wait_s
        while time.monotonic() < deadline:
            # Tried again while waiting: a winner whose launch failed gives its claim back (``released``).
            if self.store.claim(cluster_id, resume, owner, self.claim_stale_s):
                self.store.clear_stop(cluster_id)  # an earlier request stopped the cluster this one resumes
                self._claims[cluster_id] = (resume, owner)
                return None
            state = self.find(cluster_id)
            if state is not None and (previous is None or state.resumes >= resume):
                return state
            time.sleep(0.2)
        raise IgniteTFError(f"cluster {cluster_id} is being started by another launch, whose supervisor did not "
                            f"record its state within {self.claim_wait_s:.0f}s; try again after "
                            f"{self.claim_stale_s:.0f}s, when its claim lapses")

    @contextmanager
    def released_on_error(self, cluster_id: str):
        """Around a launch after ``claim`` won: a launch that fails gives the claim back, so that the next launch
        (an Airflow retry) starts at once instead of waiting for the claim to lapse (``claim_stale_s``)."""
        try:
            yield
        except BaseException:
            resume, owner = self._claims.pop(cluster_id, (None, None))
            if resume is not None:
                self.store.release_claim(cluster_id, resume, owner)
            raise
        self._claims.pop(cluster_id, None)

    def find(self, cluster_id: str) -> ClusterState | None:
        return self.store.get(cluster_id)

    def wait(self, cluster_id: str, *, timeout: float | None = None, poll_s: float = 0.5,
             on_output: Callable[[str], None] | None = None, from_start: bool = True,
             outage_budget_s: float | None = None) -> ClusterState:
        """Block until the cluster ends, passing the chief's output to ``on_output`` as it comes. A poll that
        fails transiently is tried again for up to ``outage_budget_s`` (``ignite_tf.retries``)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        what = f"the state store of TensorFlow cluster {cluster_id} ({self.store.describe()})"
        offset = 0 if from_start else self.output(cluster_id)[1]
        while True:
            state, alive = call(what, self.settled, cluster_id, budget_s=outage_budget_s)
            if on_output is not None:
                text, offset = call(what, self.output, cluster_id, offset, budget_s=outage_budget_s)
                if text:
                    on_output(text)
            if state.status.final:
                if on_output is not None:
                    text, offset = self.output(cluster_id, offset)
                    if text:
                        on_output(text)
                return state
            if not alive:
                raise IgniteTFError(f"cluster {cluster_id} lost its supervisor (last heartbeat "
                                    f"{time.time() - state.heartbeat:.0f}s ago)")
            if deadline is not None and time.monotonic() > deadline:
                return state
            time.sleep(poll_s)

    def stream(self, cluster_id: str, *, from_start: bool = False, poll_s: float = 0.3) -> Iterator[str]:
        """The chief's output as it grows, until the cluster ends (``attach``)."""
        offset = 0 if from_start else self.output(cluster_id)[1]
        while True:
            state, alive = self.settled(cluster_id)
            text, offset = self.output(cluster_id, offset)
            if text:
                yield text
            if not alive:
                text, offset = self.output(cluster_id, offset)
                if text:
                    yield text
                return
            time.sleep(poll_s)

    def tail(self, cluster_id: str, lines: int = 20) -> str:
        text, _ = self.output(cluster_id, 0)
        return "\n".join(text.splitlines()[-lines:])


class SupervisedLauncher(Launcher):
    """A launcher that starts one detached supervisor process per cluster, which owns the tasks; the state
    store is how every other process (``ps``, ``attach``, ``stop``, the trigger) reaches it.

    :param conn: the Ignite connection handed to the tasks (secrets through the environment).
    :param on_lost: ``(state) -> None`` for a stopped cluster whose supervisor was lost.
    """

    state_timeout_s = 60.0
    """Seconds for a new supervisor to record the cluster's state."""

    def __init__(self, store: StateStore, conn=None, on_lost: Callable[[ClusterState], None] | None = None,
                 run_store_conn_id: str | None = None):
        super().__init__(store, run_store_conn_id)
        self.conn = conn
        # Called by stop() for a cluster whose supervisor was lost: tasks that do not die with it (pods) are
        # deleted there (``make_launcher`` passes ``release_remote``).
        self.on_lost = on_lost

    @abstractmethod
    def supervisor_command(self, spec: ClusterSpec) -> list[str]:
        """The supervisor's command line for ``spec``, saved in its run folder (``RunFolder.spec``)."""

    def prepare(self, spec: ClusterSpec) -> None:  # noqa: B027 - only launchers with more to set up need it
        """Before ``spec`` is saved and its supervisor started."""

    def launch(self, spec: ClusterSpec, timeout: float | None = None) -> ClusterState:
        existing = self.store.get(spec.cluster_id)
        if existing is not None and not existing.status.final and self.is_alive(existing):
            return existing  # idempotent: never a second cluster under one id
        self.prepare(spec)
        self.save_spec(spec)
        proc = self._start_supervisor(spec, self.supervisor_command(spec))
        return self._recorded(spec, proc, self.state_timeout_s if timeout is None else timeout)

    def save_spec(self, spec: ClusterSpec, to_store: bool = True) -> Path:
        """Write ``spec`` to its run folder (``RunFolder.spec``), and to the run store when it has one (unless
        ``to_store`` is false: the caller puts it there with ``put_spec``)."""
        folder = spec.folder
        folder.logs.mkdir(parents=True, exist_ok=True)
        spec.save(folder.spec)
        if to_store:
            self.put_spec(spec)
        return folder.spec

    def put_spec(self, spec: ClusterSpec) -> None:
        """The saved spec to the run store, when the run has one: readers of the run (``ps --tasks``, the page)
        find it there."""
        if spec.run_store:
            self.run_store(spec.run_store).put_file(spec.folder.spec, LAYOUT.spec)

    def _start_supervisor(self, spec: ClusterSpec, command: list[str], stdin=subprocess.DEVNULL) -> subprocess.Popen:
        spec.folder.logs.mkdir(parents=True, exist_ok=True)
        with open(spec.folder.supervisor_log, "ab") as log:
            return subprocess.Popen(command, env=self.supervisor_env(spec), stdin=stdin, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)

    def _recorded(self, spec: ClusterSpec, proc: subprocess.Popen, timeout: float) -> ClusterState:
        """Wait until the supervisor ``proc`` recorded the state of ``spec``'s cluster."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.store.get(spec.cluster_id)
            if state is not None and state.supervisor_pid == proc.pid:
                self._reap_later(proc)
                return state
            if proc.poll() is not None:
                log_tail = spec.folder.supervisor_log.read_text(errors="replace")[-2000:]
                raise IgniteTFError(f"the supervisor of cluster {spec.cluster_id} exited with {proc.returncode} "
                                    f"before recording its state:\n{log_tail}")
            time.sleep(0.05)
        proc.kill()
        raise IgniteTFError(f"the supervisor of cluster {spec.cluster_id} did not record its state in {timeout:.0f}s")

    def supervisor_env(self, spec: ClusterSpec, environ: dict[str, str] | None = None) -> dict[str, str]:
        """The supervisor's environment: the runtime's variables, the state store, this launcher's connection
        and the user's ``pass_env`` variables; nothing else of ours (an Airflow worker's ``AIRFLOW_CONN_*``)."""
        environ = os.environ if environ is None else environ
        values = pass_through(spec.pass_env, environ, source=f"cluster {spec.cluster_id}: env")
        env = minimal_env(environ)
        if self.conn is not None:
            for name in self.conn.env_names():  # the launcher's connection, not one left in our environment
                env.pop(name, None)
            env.update(self.conn.to_env())
        env.update(store_to_env(self.store))
        if spec.run_store:
            env.update(self.run_store_env())
        env.update(values)
        env.setdefault("TF_USE_LEGACY_KERAS", "1")
        return env

    @staticmethod
    def _reap_later(proc: subprocess.Popen) -> None:
        # The supervisor outlives us by design; keep a reference so a finished one is reaped, not a zombie.
        _SUPERVISORS.append(proc)
        for p in list(_SUPERVISORS):
            if p.poll() is not None:
                _SUPERVISORS.remove(p)

    def stop(self, cluster_id: str, timeout: float = 60.0) -> ClusterState:
        """Ask through the state store, from any host: the supervisor that owns the cluster (a local process,
        a pod) sees the request within ``STORE_POLL_S`` and stops its tasks. One whose heartbeat stopped is
        lost: its cluster is recorded stopped, and what outlives it (pods) deleted (``on_lost``). A cluster that
        ended is stopped already; what may have outlived its supervisor (pods it could not delete while the
        Kubernetes API was away) is deleted again (``on_lost``: nothing to do when nothing is left)."""
        state = self.status(cluster_id)
        if state.status.final:
            if self.on_lost is not None:
                try:
                    self.on_lost(state)
                except Exception as exc:  # noqa: BLE001 - the cluster is stopped all the same; say what is left
                    sys.stderr.write(f"cluster {cluster_id} has ended; deleting what may be left of it failed: "
                                     f"{exc}\n")
            return state
        self.store.request_stop(cluster_id)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for p in list(_SUPERVISORS):
                p.poll()
            state = self.status(cluster_id)
            if state.status.final:
                return state
            if state.lost:
                return self.release_lost(state)
            time.sleep(0.1)
        raise IgniteTFError(f"cluster {cluster_id} did not stop within {timeout:.0f}s (its supervisor "
                            f"{state.supervisor_pid} on {state.supervisor_host} heartbeats but has not ended)")

    def output(self, cluster_id: str, offset: int = 0) -> tuple[str, int]:
        state = self.status(cluster_id)
        if is_remote(state.run_dir):  # the run lives in an object store: its copy of the chief's log
            data = self.run_store(state.run_dir).read_bytes(LAYOUT.log(Path(state.chief_log).stem), offset)
        else:
            try:
                with open(state.chief_log, "rb") as f:
                    f.seek(offset)
                    data = f.read()
            except FileNotFoundError:
                data = None
        if data is None:
            return "", offset
        # Hand out whole lines only, so a reader never sees half a line twice.
        cut = data.rfind(b"\n") + 1
        return data[:cut].decode(errors="replace"), offset + cut


class LocalLauncher(SupervisedLauncher):
    """Tasks as local processes under a detached supervisor (``ignite_tf.cluster.supervision.processes``)."""

    def supervisor_command(self, spec: ClusterSpec, after_plan: bool = False) -> list[str]:
        return [sys.executable, "-m", processes.MODULE, *(["--after-plan"] if after_plan else []),
                str(spec.folder.spec)]

    @contextmanager
    def launching(self, draft: ClusterSpec) -> Iterator[Callable[[ClusterSpec], ClusterState]]:
        """Start the supervisor with ``draft`` while the shard plan is made: it starts its fork server, so
        TensorFlow is imported meanwhile. The draft goes to the supervisor's standard input as one line; a
        second line says the final spec is saved; leaving the block without launching closes the input, and
        the supervisor ends with its fork server (``processes.main``)."""
        proc = self._start_supervisor(draft, self.supervisor_command(draft, after_plan=True), stdin=subprocess.PIPE)
        launched = False

        def launch(spec: ClusterSpec, timeout: float | None = None) -> ClusterState:
            nonlocal launched
            self.save_spec(spec)
            launched = True
            _send(proc, "saved\n", close=True)
            return self._recorded(spec, proc, self.state_timeout_s if timeout is None else timeout)

        try:
            _send(proc, json.dumps(draft.to_dict()) + "\n")
            yield launch
        finally:
            if not launched:
                _send(proc, "", close=True)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()


_SUPERVISORS: list[subprocess.Popen] = []


def _send(proc: subprocess.Popen, text: str, close: bool = False) -> None:
    """Write to a supervisor's standard input; one that already exited has said why in its log."""
    try:
        if text:
            proc.stdin.write(text.encode())
            proc.stdin.flush()
        if close:
            proc.stdin.close()
    except (BrokenPipeError, ValueError):
        pass
