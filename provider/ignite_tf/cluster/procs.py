"""Processes and ports of local clusters on this machine: free port blocks, pid checks, stopping by pid.

Used by :mod:`ignite_tf_dev.ignite.cluster` for Ignite server JVMs and by the TensorFlow cluster launcher and the
tests for their own processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from ignite_tf.errors import IgniteTFError
from ignite_tf.ports import port_free

MAX_NODES = 10


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); read its state.
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


# Ranges for clusters that must not collide with a `make ignite-up` cluster nor with each other. All lie
# below the kernel's ephemeral range (32768+), where outgoing client sockets take ports at random.
PORT_RANGES = {
    "tests": (20000, 22000),
    "private": (22000, 24000),
    "demo": (24000, 26000),
    "bench": (26000, 30000),
}


def free_port_bases(first: int = 20000, last: int = 22000) -> tuple[int, int, int]:
    """Client/discovery/communication port bases of a free block of 30 ports in ``[first, last)``.

    The search starts at a pid-dependent block so that concurrent processes rarely race for the same one.
    """
    blocks = list(range(first, last - 29, 30))
    start = os.getpid() % len(blocks)
    for base in blocks[start:] + blocks[:start]:
        bases = (base, base + MAX_NODES, base + 2 * MAX_NODES)
        if all(port_free(b + i) for b in bases for i in range(MAX_NODES)):
            return bases
    raise IgniteTFError(f"no free block of 30 ports in {first}..{last} for a local Ignite cluster")


def die_with_parent() -> None:  # runs in the child between fork and exec
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def own_group_dying_with(parent: int) -> None:  # runs in a child between fork and exec (or run)
    """Its own process group, and SIGKILL when ``parent`` (the pid that forks it, taken before the fork: use
    ``functools.partial(own_group_dying_with, os.getpid())``) dies; a parent already gone ends it at once, as
    it may have died before ``prctl`` took effect (checking for pid 1 instead misses a subreaper)."""
    os.setpgid(0, 0)
    die_with_parent()
    if os.getppid() != parent:
        os._exit(1)


def signal_group(pid: int, sig: int) -> None:
    """Signal the process group led by ``pid`` (a task and its own children); gone already is fine."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_and_wait(pid: int, sig: int = signal.SIGTERM, wait: float = 20,
                  proc: subprocess.Popen | None = None) -> None:
    """Signal the process group led by ``pid``; SIGKILL it each time it outlives ``wait`` seconds."""
    try:
        os.killpg(pid, sig)  # each node leads its own session/process group
    except ProcessLookupError:
        return
    except PermissionError:
        os.kill(pid, sig)
    deadline = time.monotonic() + wait
    while pid_alive(pid):
        if proc is not None:
            proc.poll()
        if time.monotonic() > deadline:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + wait
        time.sleep(0.1)
    if proc is not None:
        proc.wait()


def tail_of(path: str, lines: int = 30) -> str:
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
