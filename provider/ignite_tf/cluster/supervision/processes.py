"""The process backend: a cluster's tasks as local processes, children of the supervisor.

``python -m ignite_tf.cluster.supervision.processes [--after-plan] SPEC_JSON`` is the local supervisor (the
local launcher starts it detached, so it outlives an Airflow task that defers or a CLI that detaches; see
``main`` for ``--after-plan``). Its backend

- starts each task in its own process group with ``PR_SET_PDEATHSIG``: if the supervisor dies, for any
  reason, its children get SIGKILL at once;
- forks its runtime tasks from a fork server that imported TensorFlow once for all of them
  (``ignite_tf.cluster.forkserver``; user commands, GPU hosts and ``IGNITE_TF_FORKSERVER=off`` get a new
  process per task);
- gives each task an allowlisted environment (``ignite_tf.cluster.environment``): the runtime's variables,
  the Ignite connection, the user's named ``env`` and ``TF_CONFIG``, with this interpreter's folder first on
  ``PATH`` and the contract's ``taskboot`` first on ``PYTHONPATH``;
- sees a task up when it listens on its port, and stops tasks with SIGTERM, a grace period, then SIGKILL
  to the whole group (a user script's own children too).

The rules (restarts, deadlines, the watchdog) are the policy's (``policy.py``), carried out by ``loop.py``.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import time

from ignite_tf.cluster import forkserver
from ignite_tf.cluster.bytecode import with_bytecode_cache
from ignite_tf.cluster.commands import task_command, task_cwd
from ignite_tf.cluster.environment import minimal_env
from ignite_tf.cluster.procs import own_group_dying_with, signal_group
from ignite_tf.cluster.spec import ClusterSpec, ClusterTask
from ignite_tf.cluster.supervision.backend import Backend
from ignite_tf.cluster.supervision.loop import Supervisor
from ignite_tf.cluster.supervision.policy import Observation
from ignite_tf.contract import ENV_STATE_STORE, TASKBOOT_DIR
from ignite_tf.ports import listening
from ignite_tf.runstore import RunStore, code
from ignite_tf.runstore.credentials import CREDENTIAL_NAMES
from ignite_tf.state import ExitCode, store_from_env

MODULE = "ignite_tf.cluster.supervision.processes"  # ``python -m`` this: the local supervisor


class ProcessBackend(Backend):
    """Tasks as local processes.

    :param command_for: ``(spec, task) -> argv``.
    :param server: a fork server started earlier (``main``, from the draft spec); kept when it suits.
    """

    def __init__(self, spec: ClusterSpec, command_for=task_command, server: forkserver.ForkServer | None = None):
        super().__init__(spec)
        self.command_for = command_for
        self.procs: dict[str, subprocess.Popen | forkserver.ForkedTask] = {}
        self.forkserver = server

    def task_env(self, task: ClusterTask, attempt: int = 0) -> dict[str, str]:
        # A task of an object-store run copies its backup, model and events there: it gets the store's variables.
        names = [*self.spec.pass_env, *(CREDENTIAL_NAMES if self.spec.run_store else ())]
        env = minimal_env(os.environ, names)
        env.update(self.spec.task_env(task, attempt))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [TASKBOOT_DIR, env.get("PYTHONPATH")]))
        return with_bytecode_cache(env)

    # -- the fork server -------------------------------------------------------------------------------
    def start_forkserver(self) -> None:
        """Start the fork server when a task would use it (``forkserver.settings_for``); keep one started
        earlier (from the draft spec) when it was started with the same settings."""
        wanted = forkserver.settings_for(self.spec, self.task_env, self.command_for)
        if self.forkserver is not None and self.forkserver.settings != wanted:
            self.forkserver.close(0)
            self.forkserver = None
        if wanted is not None and self.forkserver is None:
            sys.stdout.flush()
            self.forkserver = forkserver.ForkServer(wanted[0], self.spec.run_dir, sys.stdout, hook=wanted[1])

    def forkserver_ready(self) -> bool:
        """Wait for the fork server's imports (recording state meanwhile); on failure go on without it."""
        server, deadline = self.forkserver, time.monotonic() + self.spec.supervision.startup_deadline_s
        while server is not None and not server.ready(0.2):
            stop = self.host.beat() if self.host is not None else False
            if server.gone or time.monotonic() > deadline or stop:
                self.event(f"the fork server did not start (status {server.proc.poll()}, see the supervisor log "
                           f"in {self.spec.folder.logs}): each task imports TensorFlow itself")
                server.close(0)
                self.forkserver = server = None
        return server is not None

    # -- Backend ---------------------------------------------------------------------------------------
    def prepare(self) -> None:
        self.start_forkserver()

    def start(self, task: ClusterTask, attempt: int) -> int:
        env, argv, cwd = self.task_env(task, attempt), self.command_for(self.spec, task), task_cwd(self.spec, task)
        log = self.spec.log_path(task)
        target = forkserver.module_of(argv)
        if target is not None and self.forkserver_ready():
            proc = self.forkserver.start(task.name, *target, env=env, cwd=cwd, log=log)
        else:
            with open(log, "ab") as out:
                proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                        stderr=subprocess.STDOUT,
                                        preexec_fn=functools.partial(own_group_dying_with, os.getpid()))
        self.procs[task.name] = proc
        return proc.pid

    def observe(self, task: ClusterTask, *, starting: bool) -> Observation:
        proc = self.procs.get(task.name)
        code = proc.poll() if proc is not None else None
        up = starting and code is None and listening(task.port, task.host)
        return Observation(task.name, code, up=up, pid=proc.pid if proc is not None else 0)

    def stop(self, tasks: list[ClusterTask], grace: float) -> dict[str, int]:
        procs = [self.procs[t.name] for t in tasks if t.name in self.procs]
        live = [p for p in procs if p.poll() is None]
        for p in live:
            signal_group(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while any(p.poll() is None for p in live) and time.monotonic() < deadline:
            time.sleep(0.05)
        for p in procs:
            signal_group(p.pid, signal.SIGKILL)  # the group too: a user script's own children
            p.wait()
        return {t.name: self.procs[t.name].returncode for t in tasks if t.name in self.procs}

    def close(self) -> None:
        if self.forkserver is not None:
            self.forkserver.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m ignite_tf.cluster.supervision.processes [--after-plan] SPEC_JSON``. With ``--after-plan``
    the launcher is still making the shard plan (``LocalLauncher.launching``): the first line of standard
    input is a draft spec, for which the fork server starts at once, and a second line says SPEC_JSON is
    saved. An input closed before that ends the supervisor and its fork server: the launch was given up."""
    argv = sys.argv[1:] if argv is None else argv
    after_plan = argv[:1] == ["--after-plan"]
    if len(argv) != 1 + after_plan:
        print(f"usage: python -m {MODULE} [--after-plan] SPEC_JSON", file=sys.stderr)
        return int(ExitCode.INTERNAL_ERROR)
    store = store_from_env()
    if store is None:
        print(f"error: no state store configured ({ENV_STATE_STORE})", file=sys.stderr)
        return int(ExitCode.INTERNAL_ERROR)
    early = None
    try:
        if after_plan:
            draft = sys.stdin.readline().strip()
            if draft:
                early = ProcessBackend(with_job_dir(ClusterSpec.from_dict(json.loads(draft))))
                early.start_forkserver()
            if not draft or not sys.stdin.readline().strip():
                print("the launch was given up before the shard plan was made", flush=True)
                return int(ExitCode.INTERNAL_ERROR)
        spec = with_job_dir(ClusterSpec.load(argv[-1]))
        backend = ProcessBackend(spec, server=early.forkserver if early else None)
        early = None
        return int(Supervisor(spec, store, backend).run())
    finally:
        if early is not None and early.forkserver is not None:
            early.forkserver.close(0)
        store.close()


def with_job_dir(spec: ClusterSpec) -> ClusterSpec:
    """User scripts import their own modules from the job directory, and every task the code the launcher
    shipped (``ignite_tf.runstore.code``: unpacked into the run folder's ``code/``, first on ``PYTHONPATH``;
    set before the fork server starts, so forked tasks have it on ``sys.path`` too)."""
    job_dir = spec.job.get("job_dir")
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if job_dir and job_dir not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [job_dir, *paths]))
    if spec.job.get("shipped"):
        code.on_path(code.unpack(RunStore(spec.run_location), spec.run_dir))
    return spec


if __name__ == "__main__":
    sys.exit(main())
