"""Progress reports of a task, read by the supervisor's watchdog.

A task of a cluster reports progress to the file named by ``IGNITE_TF_PROGRESS_FILE`` (the supervisor sets
it): the runtime at start-up, every training step (at most once a second) and every epoch; ``ignite_tf.data``
at every block it reads, so a user's script that reads through it reports without changes; any script may
call ``report("...")`` itself. The watchdog watches a task from its first report: a task that then reports
nothing for ``progress_timeout_s`` is hung. ``serving()`` ends the watch (async workers and parameter
servers only answer the chief, which reports for them). Outside a cluster these functions do nothing.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ignite_tf.cluster.spec import ENV_PROGRESS_FILE

EVERY_S = 1.0  # at most one write a second
_last = 0.0


def report(what: str, *, force: bool = False) -> None:
    """Note that this task made progress (``what``: e.g. ``"epoch 2 step 40"``)."""
    global _last
    now = time.time()
    if not force and now - _last < EVERY_S:
        return
    _last = now
    _write({"time": now, "what": what, "watch": True, "pid": os.getpid()})


def serving(what: str = "serving") -> None:
    """This task now only serves: the watchdog stops watching it."""
    _write({"time": time.time(), "what": what, "watch": False, "pid": os.getpid()})


def _write(record: dict) -> None:
    path = os.environ.get(ENV_PROGRESS_FILE)
    if not path:
        return
    try:
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(record))
        os.replace(tmp, path)
    except OSError:  # progress reports must never stop training
        pass


def read(path: str | Path) -> dict | None:
    """The last report in ``path``, or None when there is none (yet)."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
