"""Moments of a cluster's start and a task's life in the chief's output, ``timing: <name> at <unix time>``,
for the benchmarks.

The runtime's chief writes them (other tasks pass ``show=False``): ``runtime_started``, ``tf_imported``,
``strategy_ready`` (TF_CONFIG read, gRPC server up, all workers joined), ``fit_start``, ``fit_end`` and
``saved`` (the model saved and every sync worker done). A pod's first process (``ignite_tf.cluster.k8s.entry``)
adds ``process_started`` (its interpreter's start, from the kernel), ``entry_started`` and ``code_fetched`` (the
shard plan and the shipped code in place), carried to the runtime, which prints them with its own. The supervisor
writes its own into the chief's log (``Supervisor.mark``): ``supervisor_started``, ``prepared`` (the backend's
set-up: Kubernetes objects), ``tasks_started`` (every process or pod created, again at each restart, after
``restarting``), ``all_up``, and for pods ``chief_scheduled`` and ``chief_running`` (the chief's container
running), as it saw them. ``bench/startup.py`` and ``bench/k8s/startup.py`` split the start-up with them,
``bench/e2e.py`` and ``bench/end.py`` the time after the last epoch.
"""

from __future__ import annotations

import os
import time

TIMING = "timing:"
ENV_CARRIED = "IGNITE_TF_TIMELINE"
"""Moments of a pod's first process, handed to the task's runtime (``carry``), which prints them (``replay``):
the first process prints nothing into a user's command's output."""


def line(name: str, at: float | None = None) -> str:
    """The output line of a moment (``timing: fit_end at 1763900000.123``), without its newline."""
    return f"{TIMING} {name} at {time.time() if at is None else at:.3f}"


def mark(name: str, *, show: bool = True, at: float | None = None) -> float:
    """Note a moment (now, or ``at``) in the task's output."""
    now = time.time() if at is None else at
    if show:
        print(line(name, now), flush=True)
    return now


def carry(name: str, at: float | None = None, environ=None) -> None:
    """Note a moment (now, or ``at``) in this process's environment, for the command it runs (``replay``)."""
    env = os.environ if environ is None else environ
    env[ENV_CARRIED] = " ".join(filter(None, [env.get(ENV_CARRIED), f"{name}={time.time() if at is None else at:.3f}"]))


def replay(*, show: bool = True, environ=None) -> dict[str, float]:
    """Print the moments an earlier process of this task carried (``carry``); returns them."""
    env = os.environ if environ is None else environ
    found = {}
    for item in env.get(ENV_CARRIED, "").split():
        name, _, at = item.partition("=")
        try:
            found[name] = mark(name, show=show, at=float(at))
        except ValueError:
            continue
    return found


def process_started() -> float | None:
    """When this process started (unix time), from Linux's ``/proc``: what an interpreter's start costs before
    any of our code runs. None where there is no ``/proc``."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])  # field 22, after the command's parentheses
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        now = time.time()
    except (OSError, ValueError, IndexError):
        return None
    return now - (up - ticks / os.sysconf("SC_CLK_TCK"))  # /proc/uptime, not btime: btime is whole seconds


def all_marks(output: str) -> list[tuple[str, float]]:
    """Every moment in an output, in the order of its lines (a restarted attempt's again)."""
    found = []
    for text in output.splitlines():
        parts = text.split()
        if len(parts) == 4 and parts[0] == TIMING and parts[2] == "at":
            try:
                found.append((parts[1], float(parts[3])))
            except ValueError:
                continue
    return found


def marks(output: str) -> dict[str, float]:
    """The moments in an output; a later line of the same name (a restarted attempt) wins."""
    return dict(all_marks(output))
