"""``TaskPolicy``: the Airflow task settings a pipeline spec may give, for the whole pipeline and per stage.

The keys (``TASK_POLICY_KEYS``) are Airflow's own ``default_args``: ``retries``, ``retry_delay``,
``retry_exponential_backoff``, ``max_retry_delay`` and ``execution_timeout``. At the spec's top level they
apply to every task of its DAGs; in the ``training``, ``publish`` and ``inference`` sections to that stage's
tasks, over the top level's. The training stage's retries re-attach to or resume the task instance's cluster
(``TFClusterOperator``), never train from scratch. A duration is seconds (a number) or a string of amounts
with units, ``90s``, ``5m``, ``1h30m``, ``2d``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any

from ignite_tf.errors import SpecError

TASK_POLICY_KEYS = ("retries", "retry_delay", "retry_exponential_backoff", "max_retry_delay", "execution_timeout")
"""The spec keys of a ``TaskPolicy``, as Airflow names them in ``default_args``."""
STAGE_SECTIONS = ("training", "publish", "inference")
"""The spec sections that may set their stage's own task policy."""
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration(value: Any, field_path: str) -> timedelta:
    """Seconds (a number) or ``1h30m``-style text as a timedelta; SpecError on ``field_path`` otherwise."""
    if isinstance(value, bool):
        seconds = None
    elif isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str) and value.strip() and _DURATION.sub("", value.strip().lower()) == "":
        seconds = sum(float(n) * _UNITS[u] for n, u in _DURATION.findall(value.strip().lower()))
    else:
        seconds = None
    if seconds is None or seconds < 0:
        raise SpecError(None, [(field_path, f"{value!r} is not a duration: give seconds (e.g. 300) or amounts "
                                            f"with units s, m, h, d (e.g. '5m', '1h30m')")])
    return timedelta(seconds=seconds)


@dataclass(frozen=True)
class TaskPolicy:
    """Airflow task settings; None leaves Airflow's own default (or the level above's)."""

    retries: int | None = None
    """Tries after the first before the task fails. For training: each retry re-attaches to the cluster, or
    resumes it from its checkpoints."""
    retry_delay: timedelta | None = None
    """Wait before a retry (Airflow's default: 5 minutes)."""
    retry_exponential_backoff: bool | None = None
    """Double the wait after each retry (up to ``max_retry_delay``)."""
    max_retry_delay: timedelta | None = None
    """The longest wait between tries with exponential backoff."""
    execution_timeout: timedelta | None = None
    """The longest one try may take; the training task stops its cluster when it passes."""

    def __post_init__(self):
        if self.retries is not None and (isinstance(self.retries, bool) or not isinstance(self.retries, int)
                                         or self.retries < 0):
            raise SpecError(None, [("retries", f"{self.retries!r} is not allowed: a whole number >= 0")])
        if self.execution_timeout is not None and self.execution_timeout <= timedelta(0):
            raise SpecError(None, [("execution_timeout", "must be longer than 0 (or left out for no limit)")])
        if self.max_retry_delay is not None and self.retry_exponential_backoff is False:
            raise SpecError(None, [("max_retry_delay", "goes with retry_exponential_backoff: true")])

    @classmethod
    def parse(cls, doc: dict[str, Any], where: str = "") -> TaskPolicy:
        """The policy keys of one spec mapping (the top level or a stage's section); ``where`` prefixes the
        field path of an error."""
        values: dict[str, Any] = {}
        for key in TASK_POLICY_KEYS:
            value = doc.get(key)
            if value is None:
                continue
            path = f"{where}.{key}" if where else key
            if key in ("retry_delay", "max_retry_delay", "execution_timeout"):
                value = parse_duration(value, path)
            elif key == "retry_exponential_backoff" and not isinstance(value, bool):
                raise SpecError(None, [(path, f"expected true or false, got {value!r}")])
            values[key] = value
        try:
            return cls(**values)
        except SpecError as exc:
            raise exc.within(None, where) if where else exc from None

    def over(self, base: TaskPolicy) -> TaskPolicy:
        """This policy where it sets a key, ``base`` elsewhere (a stage's over the pipeline's)."""
        return TaskPolicy(**{f.name: getattr(base, f.name) if getattr(self, f.name) is None else getattr(self, f.name)
                             for f in fields(self)})

    def default_args(self) -> dict[str, Any]:
        """The keys set, as Airflow's ``default_args`` / operator arguments."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


def task_policies(doc: dict[str, Any]) -> dict[str, TaskPolicy]:
    """The policies a spec sets: ``""`` for its top level, else a stage's section (``STAGE_SECTIONS``)."""
    out = {"": TaskPolicy.parse(doc)}
    for section in STAGE_SECTIONS:
        if isinstance(doc.get(section), dict):
            out[section] = TaskPolicy.parse(doc[section], section)
    return {k: v for k, v in out.items() if v.default_args()}
