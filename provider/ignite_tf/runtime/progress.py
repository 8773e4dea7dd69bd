"""Progress reports of a task, read by the supervisor's watchdog (the format is ``ignite_tf.contract``'s).

A task of a cluster reports progress: the runtime at start-up, every training step (at most once a second)
and every epoch; ``ignite_tf.data`` at every block it reads, so a user's script that reads through it reports
without changes; any script may call ``report("...")`` itself. ``serving()`` ends the watch (async workers
and parameter servers only answer the chief, which reports for them). Outside a cluster these functions do
nothing. This module is the name user scripts import; the functions are the contract's.
"""

from __future__ import annotations

from ignite_tf.contract import EVERY_S, report, serving
from ignite_tf.contract import read_progress as read

__all__ = ["EVERY_S", "read", "report", "serving"]
