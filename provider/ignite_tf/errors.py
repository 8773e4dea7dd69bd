"""Errors of ignite-tf. Each message says what was wrong, which input, and what to do."""

from __future__ import annotations


class IgniteTFError(Exception):
    """Base class of every error this package raises on purpose."""


class ConfigError(IgniteTFError, ValueError):
    """A setting, argument or connection field is invalid."""


class IgniteUnavailableError(IgniteTFError, ConnectionError):
    """No Ignite node could be reached at the configured addresses."""


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
