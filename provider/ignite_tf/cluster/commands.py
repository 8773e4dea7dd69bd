"""What each task of a cluster runs, and where: the runtime with the job's entry point, or the user's command."""

from __future__ import annotations

import sys

from ignite_tf.cluster.spec import ClusterSpec, ClusterTask, Mode, Role

RUNTIME_MODULE = "ignite_tf.runtime"  # ``python -m ignite_tf.runtime``: one task of a cluster


def task_command(spec: ClusterSpec, task: ClusterTask) -> list[str]:
    """argv of one task: the runtime with an entry point, or the user's script (chief only in async mode)."""
    job = spec.job
    runtime = [sys.executable, "-m", RUNTIME_MODULE]
    if spec.mode is Mode.ASYNC and task.role is not Role.CHIEF:
        # Workers and parameter servers run a TF server (the runtime's, unless the job brings its own), with the
        # runtime's flags when the chief runs the runtime (an async worker writes the feed that chief reads).
        return list(job.get("serve_command") or [*runtime, "--serve", *runtime_args(job)])
    if runs_user_command(spec, task):
        return list(job["command"])
    return [*runtime, "--entry-point", job["entry_point"], *job.get("args", [])]


def runtime_args(job: dict) -> list[str]:
    """The runtime's flags in ``job``: its ``args``, or what follows ``-m ignite_tf.runtime`` in a command that runs
    the runtime itself; none for any other command (its servers are plain TF servers)."""
    if "command" not in job:
        return list(job.get("args", []))
    command = list(job["command"])
    for i in range(len(command) - 1):
        if command[i] == "-m" and command[i + 1] == RUNTIME_MODULE:
            return command[i + 2:]
    return []


def runs_user_command(spec: ClusterSpec, task: ClusterTask) -> bool:
    return "command" in spec.job and (spec.mode is Mode.SYNC or task.role is Role.CHIEF)


def task_cwd(spec: ClusterSpec, task: ClusterTask) -> str:
    """A user's script runs in its job directory; runtime tasks in their own task directory."""
    if runs_user_command(spec, task) and spec.job.get("job_dir"):
        return spec.job["job_dir"]
    return spec.task_dir(task)
