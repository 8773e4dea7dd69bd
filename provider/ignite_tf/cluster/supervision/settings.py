"""``Supervision``: the six settings of a cluster's supervisor, with their one default each.

One value travels from every edge — the YAML spec's ``training`` section, the CLI's ``start`` flags, the
``TFClusterOperator``'s arguments, ``start_cluster``'s keyword arguments — through ``ClusterSpec.supervision``
to the policy (``policy.py``) and both backends (local processes, pods). Strings (a templated operator
argument, a YAML value, JSON) become typed values here, once.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from enum import StrEnum
from typing import Any

from ignite_tf.defaults import DEFAULT_MAX_RESTARTS, DEFAULT_OUTAGE_BUDGET_S, DEFAULT_STARTUP_DEADLINE_S
from ignite_tf.errors import ConfigError


class RestartPolicy(StrEnum):
    """Which failures of a task the supervisor restarts (up to ``max_restarts``).

    A task that dies from a signal (SIGKILL from the OOM killer or a user, a lost node), exits with a status
    of 128 or more (a shell reporting a signal, an infrastructure wrapper), is found silent by the progress
    watchdog, or (async) a server that ends before the chief, may well run on a second try. A task whose own
    code exited with a status from 1 to 127 (an uncaught exception, a ``ModuleNotFoundError`` at import, a
    bad argument) will fail the same way again.
    """

    ON_FAILURE = "on-failure"
    """Every failure, until ``max_restarts``."""
    EXIT_CODE = "exit-code"
    """Retryable failures only: signals, statuses >= 128, the infrastructure status (``contract.
    UNAVAILABLE_EXIT_CODE``: Ignite or a store unreachable past the retries), the watchdog. A task's own error
    fails fast."""
    NEVER = "never"
    """Nothing: the first failure ends the cluster."""


class SupervisionError(ConfigError):
    """A supervision setting is invalid; ``field`` names it."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field} {message}")
        self.field = field


@dataclass(frozen=True)
class Supervision:
    """How the supervisor keeps a cluster alive and when it gives up. Each field's default is the one."""

    max_restarts: int = DEFAULT_MAX_RESTARTS
    """Restarts (of the cluster or of one task) after failures before the cluster fails: enough for a lost
    node or an OOM kill, few enough that a job that fails for its own reasons ends quickly."""
    restart_policy: RestartPolicy = RestartPolicy.EXIT_CODE
    """Which failures are restarted (``RestartPolicy``)."""
    startup_deadline_s: float = DEFAULT_STARTUP_DEADLINE_S
    """Seconds for every task to be up (listen on its port, a pod Ready) after a (re)start: TensorFlow waits
    for missing peers forever, so the supervisor must not."""
    progress_timeout_s: float = 600.0
    """A task that reported progress and then makes none for this long is hung (0 turns the watchdog off).
    Ten minutes, like TensorFlowOnSpark's feed timeout: far above TF's start-up and first step on a busy
    machine, the 10-60 s end of a long MultiWorkerMirroredStrategy fit, and the gaps between the block reads
    of a user script."""
    grace_period_s: float = 10.0
    """Seconds a stopped task gets between SIGTERM (a pod's deletion) and SIGKILL, to write a checkpoint."""
    outage_budget_s: float = DEFAULT_OUTAGE_BUDGET_S
    """Seconds the services the supervisor and the watching trigger call (the Kubernetes API, the state store)
    may keep failing transiently before the outage is named and the cluster fails: until then nothing is
    restarted or deleted (``ignite_tf.retries``)."""

    def __post_init__(self):
        set_ = object.__setattr__
        set_(self, "max_restarts", _number(int, "max_restarts", self.max_restarts))
        if self.max_restarts < 0:
            raise SupervisionError("max_restarts", f"must be >= 0 (got {self.max_restarts})")
        policy = self.restart_policy
        if not isinstance(policy, RestartPolicy):
            try:
                policy = RestartPolicy(policy)
            except ValueError:
                raise SupervisionError("restart_policy", f"must be one of {[p.value for p in RestartPolicy]} "
                                                         f"(got {policy!r})") from None
        set_(self, "restart_policy", policy)
        for name in ("startup_deadline_s", "progress_timeout_s", "grace_period_s", "outage_budget_s"):
            value = _number(float, name, getattr(self, name))
            if value < 0 or (name == "startup_deadline_s" and value == 0):
                what = "> 0" if name == "startup_deadline_s" else ">= 0"
                off = " (0 turns the watchdog off)" if name == "progress_timeout_s" else ""
                raise SupervisionError(name, f"must be {what}{off} (got {value:g})")
            set_(self, name, value)

    @classmethod
    def build(cls, base: Supervision | dict[str, Any] | None = None, **settings: Any) -> Supervision:
        """``base`` (a Supervision, its dict, or None for the defaults) with the ``settings`` given: a None
        or empty-string setting keeps the base's (an operator argument left out, a template that rendered
        to nothing); a string is parsed."""
        unknown = set(settings) - {f.name for f in fields(cls)}
        if unknown:
            raise ConfigError(f"unknown supervision settings {sorted(unknown)} (known: "
                              f"{[f.name for f in fields(cls)]})")
        given = {k: v for k, v in settings.items() if v is not None and v != ""}
        if base is None:
            return cls(**given)
        if isinstance(base, dict):
            return cls.from_dict({**base, **given})
        return replace(base, **given) if given else base

    def to_dict(self) -> dict[str, Any]:
        """JSON-able: the policy as its string."""
        return {**asdict(self), "restart_policy": self.restart_policy.value}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Supervision:
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ConfigError(f"unknown supervision settings {sorted(unknown)} (known: {sorted(known)})")
        return cls(**{k: v for k, v in data.items() if v is not None})


def _number(kind: type, name: str, value: Any):
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise SupervisionError(name, f"must be a number (got {value!r})")
    try:
        number = kind(float(value)) if kind is float else kind(value)
    except (TypeError, ValueError):
        raise SupervisionError(name, f"must be {'an integer' if kind is int else 'a number'} (got {value!r})") from None
    if kind is int and isinstance(value, float) and value != number:
        raise SupervisionError(name, f"must be an integer (got {value!r})")
    return number
