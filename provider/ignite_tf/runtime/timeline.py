"""Moments of a task's life in its output, ``timing: <name> at <unix time>``, for the benchmarks.

The chief writes them (other tasks pass ``show=False``): ``runtime_started``, ``tf_imported``,
``strategy_ready`` (TF_CONFIG read, gRPC server up, all workers joined), ``fit_start``, ``fit_end`` and
``saved`` (the model saved and every sync worker done). ``bench/startup.py`` splits the start-up with them,
``bench/e2e.py`` and ``bench/end.py`` the time after the last epoch.
"""

from __future__ import annotations

import time

TIMING = "timing:"


def mark(name: str, *, show: bool = True) -> float:
    """Note a moment in the task's output (``timing: fit_end at 1763900000.123``)."""
    now = time.time()
    if show:
        print(f"{TIMING} {name} at {now:.3f}", flush=True)
    return now


def marks(output: str) -> dict[str, float]:
    """The moments in a task's output; a later line of the same name (a restarted attempt) wins."""
    found = {}
    for line in output.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[0] == TIMING and parts[2] == "at":
            try:
                found[parts[1]] = float(parts[3])
            except ValueError:
                continue
    return found
