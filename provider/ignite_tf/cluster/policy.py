"""Deprecated: the restart policy moved into ``ignite_tf.cluster.supervision`` (``RestartPolicy`` and the
defaults in ``settings.py``, ``Failure`` and ``first_cause`` in ``policy.py``). The old names keep working
for one release, with a DeprecationWarning naming the new place."""

from __future__ import annotations

import warnings
from typing import Any

_MOVED = {
    "RestartPolicy": "ignite_tf.cluster.supervision.RestartPolicy",
    "DEFAULT_RESTART_POLICY": "ignite_tf.cluster.supervision.Supervision().restart_policy",
    "DEFAULT_PROGRESS_TIMEOUT_S": "ignite_tf.cluster.supervision.Supervision().progress_timeout_s",
    "Failure": "ignite_tf.cluster.supervision.policy.Failure",
    "first_cause": "ignite_tf.cluster.supervision.policy.first_cause",
    "RETRYABLE_STATUS": "ignite_tf.cluster.supervision.policy.RETRYABLE_STATUS",
}


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"ignite_tf.cluster.policy.{name} is deprecated, use {_MOVED[name]}", DeprecationWarning,
                  stacklevel=2)
    from ignite_tf.cluster.supervision import policy, settings

    defaults = settings.Supervision()
    return {"RestartPolicy": settings.RestartPolicy, "DEFAULT_RESTART_POLICY": defaults.restart_policy,
            "DEFAULT_PROGRESS_TIMEOUT_S": defaults.progress_timeout_s, "Failure": policy.Failure,
            "first_cause": policy.first_cause, "RETRYABLE_STATUS": policy.RETRYABLE_STATUS}[name]
