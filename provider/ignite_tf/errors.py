"""Errors of ignite-tf. Each message says what was wrong, which input, and what to do."""

from __future__ import annotations


class IgniteTFError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(IgniteTFError, ValueError):
    """A setting, argument or connection field is invalid."""


class IgniteUnavailableError(IgniteTFError, ConnectionError):
    """No Ignite node could be reached at the configured addresses."""


class OutageError(IgniteTFError):
    """A service (Ignite, the state store, Kubernetes, the object store) kept failing transiently for longer than
    the outage budget (``ignite_tf.retries``); the last error is its ``__cause__``."""


class AuthenticationFailedError(ConfigError):
    """Ignite refused the connection's username and password (a wrong setting, never worth a retry)."""


class CacheNotFoundError(IgniteTFError, LookupError):
    """The named cache does not exist on the cluster."""


class LoadError(IgniteTFError, ValueError):
    """The ETL load refused its input or could not write it.

    ``report`` says exactly what was written before the error (often nothing).
    """

    def __init__(self, message: str, report: dict | None = None):
        super().__init__(message)
        self.report = report or {}


class TopologyChangedError(IgniteTFError):
    """A PartitionMap no longer matches the running cluster (a node left or joined)."""


class DecodeError(IgniteTFError):
    """A scan page did not have the layout the partition reader expected (unsupported type, mixed value types...)."""


class ValidationFailed(IgniteTFError):
    """The data did not meet its suite; ``summary`` is the full ``ignite_tf.validation.results.ValidationSummary``."""

    def __init__(self, message: str, summary):
        super().__init__(message)
        self.summary = summary


class MissingLabelError(IgniteTFError, ValueError):
    """Rows read for training have no label (NULL, or NaN); ``keys`` holds theirs (the first few)."""

    def __init__(self, message: str, keys: list):
        super().__init__(message)
        self.keys = keys


class DivergedError(IgniteTFError):
    """A training's loss became NaN or infinite: the fit is failed, nothing of that epoch kept."""


class DataChangedError(IgniteTFError):
    """The training read rows that differ from those validation read (``ignite_tf.validation.fingerprints``);
    ``changes`` holds each changed partition's difference."""

    def __init__(self, message: str, changes: list[dict]):
        super().__init__(message)
        self.changes = changes


class VersionNotFoundError(IgniteTFError, LookupError):
    """The model or version asked for is not in the registry (or is not complete)."""


class SpecError(ConfigError):
    """A pipeline spec is invalid. ``problems`` holds ``(field path, message)`` pairs; ``field`` the first."""

    def __init__(self, file, problems: list[tuple[str, str]]):
        self.file = str(file) if file is not None else None
        self.problems = list(problems)
        self.field = self.problems[0][0] if self.problems else ""
        where = self.file or "pipeline spec"
        if len(self.problems) == 1:
            text = f"{where}: {self.problems[0][0]}: {self.problems[0][1]}"
        else:
            text = f"{where}: {len(self.problems)} problems:\n" + "\n".join(f"  {f}: {m}" for f, m in self.problems)
        super().__init__(text)

    def within(self, file=None, prefix: str = "") -> SpecError:
        """The same problems, under ``prefix`` (a section) and in ``file``."""
        problems = [(f"{prefix}.{f}" if prefix and f else prefix or f, m) for f, m in self.problems]
        return SpecError(file if file is not None else self.file, problems)


class IgniteTFDeprecationWarning(DeprecationWarning):
    """A name of ignite-tf that is deprecated: its message names the new one and the release that removes it
    (``ignite_tf.public_api.DEPRECATED``). Its own class, so that the project's tests can turn the project's
    own deprecations into errors while other packages' stay warnings."""


class SpecDeprecationWarning(FutureWarning):
    """A pipeline spec uses a key renamed since an earlier release: it is read under its new name for one more
    release, and the message names the file, the old key and the new one.

    A FutureWarning, not a DeprecationWarning: it is meant for the spec's author, so Python (and Airflow's DAG
    processor, which keeps the warnings of each parsed file) shows it by default.
    """
