"""Which failures of a task a restart can fix, and the progress watchdog's default.

A task that dies from a signal (SIGKILL from the OOM killer or a user, a lost node), exits with a status of
128 or more (a shell reporting a signal, an infrastructure wrapper), or is found silent by the progress
watchdog may well run on a second try. A task whose own code exited with a status from 1 to 127 (an
uncaught exception, a ``ModuleNotFoundError`` at import, a bad argument) will fail the same way again.
``RestartPolicy`` chooses which of these the supervisor restarts (up to ``max_restarts``).
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from enum import StrEnum

from ignite_tf.errors import ConfigError

# A task that reports progress and then makes none for this long is treated as hung (0 turns the watchdog
# off). Ten minutes, like TensorFlowOnSpark's feed timeout: far above TF's start-up and first step on a busy
# machine, the 10-60 s end of a long MultiWorkerMirroredStrategy fit, and the gaps between the block reads
# of a user script.
DEFAULT_PROGRESS_TIMEOUT_S = 600.0
# Statuses from here up are retryable under ``exit-code`` (Kubeflow's TFJob draws the line at 128 too).
RETRYABLE_STATUS = 128


class RestartPolicy(StrEnum):
    """What the supervisor restarts (see the module docstring)."""

    ON_FAILURE = "on-failure"
    """Every failure, until ``max_restarts``."""
    EXIT_CODE = "exit-code"
    """Retryable failures only: signals, statuses >= 128, the watchdog. A task's own error fails fast."""
    NEVER = "never"
    """Nothing: the first failure ends the cluster."""

    @classmethod
    def parse(cls, value: RestartPolicy | str | None) -> RestartPolicy:
        if value in (None, ""):
            return DEFAULT_RESTART_POLICY
        try:
            return cls(value)
        except ValueError:
            raise ConfigError(f"restart_policy must be one of {[p.value for p in cls]} (got {value!r})") from None

    def restarts(self, failure: Failure) -> bool:
        if self is RestartPolicy.ON_FAILURE:
            return True
        return self is RestartPolicy.EXIT_CODE and failure.retryable


DEFAULT_RESTART_POLICY = RestartPolicy.EXIT_CODE


@dataclass
class Failure:
    """One task's failure as the supervisor saw it.

    :param exit_code: ``Popen.returncode``: negative for a signal; None when the task was found silent.
    :param silent_s: seconds without progress, for a failure of the watchdog.
    """

    task: str
    pid: int
    exit_code: int | None = None
    silent_s: float | None = None
    detail: str = ""

    @property
    def signal(self) -> str | None:
        if self.exit_code is None or self.exit_code >= 0:
            return None
        try:
            return signal.Signals(-self.exit_code).name
        except ValueError:
            return f"signal {-self.exit_code}"

    @property
    def retryable(self) -> bool:
        return self.exit_code is None or self.exit_code < 0 or self.exit_code >= RETRYABLE_STATUS

    @property
    def kind(self) -> str:
        if self.exit_code is None:
            return "no progress"
        if self.exit_code < 0:
            return "killed by a signal"
        if self.exit_code >= RETRYABLE_STATUS:
            return f"exit status >= {RETRYABLE_STATUS}"
        return "the task's own code failed"

    def describe(self) -> str:
        if self.exit_code is None:
            what = f"made no progress for {self.silent_s:.0f}s"
        elif self.signal:
            what = f"was killed by {self.signal}"
        else:
            what = f"exited with status {self.exit_code}"
        pid = f" (pid {self.pid})" if self.pid else ""
        return f"{self.task}{pid} {what}{f' ({self.detail})' if self.detail else ''}"

    def to_dict(self) -> dict:
        return {"task": self.task, "pid": self.pid, "exit_code": self.exit_code, "signal": self.signal,
                "silent_s": None if self.silent_s is None else round(self.silent_s, 1), "kind": self.kind,
                "retryable": self.retryable, "detail": self.detail}


def first_cause(failures: list[Failure]) -> Failure:
    """The failure to act on when several tasks ended together: a retryable one first, since in a sync
    cluster a killed worker makes its peers fail in their collectives with an ordinary error."""
    return next((f for f in failures if f.retryable), failures[0])
