"""``python -m ignite_tf.cluster.k8s.entry CWD -- ARGV...``: a task pod's first process.

Does in the pod what the local supervisor does for a child process: the task's working folder, the
contract's ``taskboot`` first on ``PYTHONPATH`` (an uncaught exception ends the task at once), the job
folder importable, then ``exec`` of the task's command (the container's main process, so its exit status
and signals are the pod's). A command that is not Python stays its child (``run_as_pid1``): as pid 1 it
would ignore the pod's SIGTERM. With an object-store run root (``IGNITE_TF_RUN_STORE``) it first fetches what
the pod cannot see on a shared disk: the shard plan, and the code the launcher shipped (``code.zip``,
unpacked first on ``PYTHONPATH``; see ``ignite_tf.runstore.code``), from the pod's start files where the
supervisor put them (``ignite_tf.cluster.k8s.startfiles``), else from the store.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from ignite_tf import timeline
from ignite_tf.cluster.k8s import standby, startfiles
from ignite_tf.contract import (
    ENV_CODE,
    ENV_JOB_DIR,
    ENV_PROGRESS_FILE,
    ENV_RUN_DIR,
    ENV_RUN_STORE,
    ENV_SHARD_PLAN,
    TASKBOOT_DIR,
)


def fetch_run(environ=None, start_dir: str | None = startfiles.MOUNT) -> str | None:
    """From a remote run store: the shard plan to ``IGNITE_TF_SHARD_PLAN`` and the shipped code unpacked into
    the pod's run folder; returns the code folder (for ``PYTHONPATH``), None when nothing was shipped. The
    supervisor's copies in the pod's start files (``startfiles``) are taken first: no store client to make."""
    env = os.environ if environ is None else environ
    if not env.get(ENV_RUN_STORE):
        return None
    from ignite_tf.runstore import LAYOUT, code

    store = None

    def the_store():
        nonlocal store
        if store is None:
            from ignite_tf.runstore import RunStore

            store = RunStore(env[ENV_RUN_STORE])
        return store

    if env.get(ENV_SHARD_PLAN):
        plan = startfiles.local(startfiles.PLAN, start_dir) if start_dir else None
        if plan is not None:
            Path(env[ENV_SHARD_PLAN]).parent.mkdir(parents=True, exist_ok=True)
            Path(env[ENV_SHARD_PLAN]).write_bytes(plan)
        elif not the_store().get_file(LAYOUT.shard_plan, env[ENV_SHARD_PLAN]):
            sys.exit(f"the shard plan is not in the run store {the_store().path(LAYOUT.shard_plan)}")
    if not env.get(ENV_CODE):
        return None
    shipped = startfiles.local(startfiles.CODE, start_dir) if start_dir else None
    if shipped is not None:
        return code.extract(shipped, env[ENV_RUN_DIR], f"{start_dir}/{startfiles.CODE}")
    return code.unpack(the_store(), env[ENV_RUN_DIR])


def main(argv: list[str]) -> None:
    if len(argv) < 3 or argv[1] != "--":
        sys.exit("usage: python -m ignite_tf.cluster.k8s.entry CWD -- COMMAND [ARGS...]")
    cwd, command = argv[0], argv[2:]
    if command[1:3] != ["-m", standby.MODULE]:  # only a standby checks the cluster's key; no task needs it
        os.environ.pop(standby.ENV_KEY, None)
    # The pod's start, for the runtime's timeline (``ignite_tf.timeline``); a user's command sees none of it.
    started = timeline.process_started()
    if started is not None:
        timeline.carry("process_started", at=started)
    timeline.carry("entry_started")
    prepare(cwd)
    sys.stdout.flush()
    run_as_pid1(command)


def prepare(cwd: str, start_dir: str | None = startfiles.MOUNT) -> list[str]:
    """The task's folder (made, and the working directory), what the run store holds for it (``fetch_run``;
    ``start_dir`` None: the pod has no start files, everything comes from the store) and
    ``PYTHONPATH`` in this process's environment; returns the folders the task imports from, in order (the
    taskboot's, the shipped code's, the job folder)."""
    Path(cwd).mkdir(parents=True, exist_ok=True)
    os.chdir(cwd)
    if os.environ.get(ENV_PROGRESS_FILE):
        Path(os.environ[ENV_PROGRESS_FILE]).parent.mkdir(parents=True, exist_ok=True)
    shipped = fetch_run(start_dir=start_dir)
    timeline.carry("code_fetched")
    path = [p for p in (TASKBOOT_DIR, shipped, os.environ.get(ENV_JOB_DIR)) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [*path, os.environ.get("PYTHONPATH")]))
    return path


def run_as_pid1(command: list[str]) -> None:
    """Become ``command``, or, when it is not Python, run it as a child and pass SIGTERM and SIGINT on.

    The first process of a PID namespace (a container's) gets no signal its handlers leave at the default:
    a Python task handles SIGTERM itself (the taskboot ``sitecustomize``), so it may be pid 1; a shell or
    another program may not, or the pod's deletion would wait out its grace period. Ends with the child's
    status (128 + the signal that killed it).
    """
    if Path(command[0]).name.startswith("python"):
        os.execvp(command[0], command)
    child = subprocess.Popen(command)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _frame: child.send_signal(signum))
    code = child.wait()
    sys.exit(128 - code if code < 0 else code)


if __name__ == "__main__":
    main(sys.argv[1:])
