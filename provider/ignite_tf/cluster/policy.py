"""Deprecated: the restart policy moved into ``ignite_tf.cluster.supervision`` (``RestartPolicy`` and the
defaults in ``settings.py``, ``Failure`` and ``first_cause`` in ``policy.py``). The old names keep working
until ``public_api.REMOVED_IN``, with a DeprecationWarning naming the new place (``public_api.DEPRECATED``)."""

from __future__ import annotations

from typing import Any

OLD = "ignite_tf.cluster.policy"


def __getattr__(name: str) -> Any:
    from ignite_tf.public_api import DEPRECATED, warn_deprecated

    if f"{OLD}.{name}" not in {d.old for d in DEPRECATED}:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warn_deprecated(f"{OLD}.{name}")
    from ignite_tf.cluster.supervision import policy, settings

    defaults = settings.Supervision()
    return {"RestartPolicy": settings.RestartPolicy, "DEFAULT_RESTART_POLICY": defaults.restart_policy,
            "DEFAULT_PROGRESS_TIMEOUT_S": defaults.progress_timeout_s, "Failure": policy.Failure,
            "first_cause": policy.first_cause, "RETRYABLE_STATUS": policy.RETRYABLE_STATUS}[name]
