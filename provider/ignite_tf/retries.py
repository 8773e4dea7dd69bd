"""Infrastructure is weather: one retry policy for calls to Ignite, the state store, Kubernetes and the object store.

A call that fails with a transient error (a connection refused, reset or timed out, no Ignite node reachable, a
DNS name not resolving for a moment, an HTTP 429 or 5xx) is tried again, with exponential backoff and full
jitter (so that many callers hit by one outage do not come back in step), until it answers or the outage
budget (``DEFAULT_OUTAGE_BUDGET_S``, or the caller's) is spent. Then :class:`~ignite_tf.errors.OutageError`
names what did not answer, for how long, and the last error. Any other error (a 404, a refused request, a bad
setting, a cluster that does not exist) is raised at once: trying again cannot fix it.

The policy is tenacity's (Airflow's own dependency); this module only decides what is transient and how a spent
budget is named.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from ignite_tf.defaults import DEFAULT_OUTAGE_BUDGET_S
from ignite_tf.errors import AuthenticationFailedError, OutageError

__all__ = ["DEFAULT_OUTAGE_BUDGET_S", "Outage", "acall", "call", "carries", "raised_from", "transient",
           "unavailable"]

T = TypeVar("T")
log = logging.getLogger(__name__)

# Errors of the clients in use that mean "the service did not answer", by class (any class in the error's MRO).
# Named, not imported: a caller need not have imported (or installed) each client for its errors to be told apart.
TRANSIENT_TYPES = frozenset({
    "pyignite.exceptions.ReconnectError",  # no node of the thin client's list answered
    "urllib3.exceptions.HTTPError",  # the Kubernetes client's connection, read and protocol errors
    "botocore.exceptions.HTTPClientError",  # connection and read timeouts to the object store
    "botocore.exceptions.ConnectionError",
    "aiohttp.client_exceptions.ClientConnectionError",
})
# HTTP statuses worth another try: throttled, or the server (or a proxy before it) failing for now.
TRANSIENT_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# What an S3 error response names when it is one of those.
TRANSIENT_S3_CODES = frozenset({"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "Throttling",
                                "ThrottlingException", "RequestTimeTooSkewed"})
# Backoff: the first retry after about FIRST_WAIT_S (full jitter), doubling up to MAX_WAIT_S.
FIRST_WAIT_S, MAX_WAIT_S = 0.5, 15.0


def transient(exc: BaseException) -> bool:
    """Whether ``exc`` says the service was unavailable for now (worth another try) rather than that the call
    was wrong."""
    if isinstance(exc, (AuthenticationFailedError, OutageError)):  # a wrong password; a budget already spent
        return False
    if isinstance(exc, (ConnectionError, TimeoutError, EOFError)):  # IgniteUnavailableError is a ConnectionError
        return True
    names = {f"{cls.__module__}.{cls.__qualname__}" for cls in type(exc).__mro__}
    if names & TRANSIENT_TYPES:
        return True
    if "kubernetes.client.exceptions.ApiException" in names:
        return getattr(exc, "status", None) in TRANSIENT_STATUSES
    if "botocore.exceptions.ClientError" in names:
        error = getattr(exc, "response", {}) or {}
        code = str(error.get("Error", {}).get("Code", ""))
        status = error.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return code in TRANSIENT_S3_CODES or status in TRANSIENT_STATUSES
    return False


# What a TensorFlow error says of a Python error raised in an input pipeline (``from_generator``), which it
# carries as text: the names of the errors that mean a service stayed away past its retries.
UNAVAILABLE_NAMES = ("IgniteUnavailableError", "OutageError", "ReconnectError", "ConnectionResetError",
                     "ConnectionRefusedError", "ConnectionAbortedError", "BrokenPipeError", "TimeoutError")


def raised_from(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc``, then each error it was raised from or during (``__cause__``, else ``__context__``)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def carries(exc: BaseException, names: Iterable[str]) -> bool:
    """Whether ``exc`` is a TensorFlow error carrying, as text, a Python error of one of ``names`` (one raised in
    an input pipeline, ``from_generator``)."""
    return type(exc).__module__.startswith("tensorflow") and any(name in str(exc) for name in names)


def unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) says a service was unavailable, transiently or past its
    outage budget, rather than that the code or the data was wrong; also through TensorFlow's errors."""
    return any(isinstance(e, OutageError) or transient(e) or carries(e, UNAVAILABLE_NAMES) for e in raised_from(exc))


def _policy(what: str, budget_s: float | None, is_transient: Callable[[BaseException], bool],
            logger: logging.Logger | logging.LoggerAdapter | None) -> dict[str, Any]:
    """tenacity's arguments for one call: retry transient errors until ``budget_s`` since the first attempt."""
    import tenacity

    budget = DEFAULT_OUTAGE_BUDGET_S if budget_s is None else float(budget_s)
    say = logger or log

    def before_sleep(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        say.warning("%s did not answer (%s: %s); trying again for up to %.0f s more", what, type(exc).__name__,
                    exc, max(0.0, budget - state.seconds_since_start))

    def spent(state: tenacity.RetryCallState):
        exc = state.outcome.exception() if state.outcome else None
        if exc is None or not is_transient(exc):  # not one to retry: as raised
            return state.outcome.result()
        raise OutageError(f"{what} has not answered for {state.seconds_since_start:.0f} s (the outage budget is "
                          f"{budget:.0f} s): {type(exc).__name__}: {exc}") from exc

    return {"retry": tenacity.retry_if_exception(is_transient),
            "wait": tenacity.wait_random_exponential(multiplier=FIRST_WAIT_S, max=MAX_WAIT_S),
            "stop": tenacity.stop_before_delay(budget), "before_sleep": before_sleep, "retry_error_callback": spent}


def call(what: str, fn: Callable[..., T], *args, budget_s: float | None = None,
         is_transient: Callable[[BaseException], bool] = transient,
         logger: logging.Logger | logging.LoggerAdapter | None = None, **kwargs) -> T:
    """``fn(*args, **kwargs)``, tried again while it fails transiently, for at most ``budget_s`` seconds.

    :param what: what is called, for the log and the error (``"the state store (Ignite at 10.0.0.5:10800)"``).
    :raises OutageError: still failing transiently when the budget was spent (the last error is its cause).
    """
    import tenacity

    return tenacity.Retrying(**_policy(what, budget_s, is_transient, logger))(fn, *args, **kwargs)


async def acall(what: str, fn: Callable[..., T], *args, budget_s: float | None = None,
                is_transient: Callable[[BaseException], bool] = transient,
                logger: logging.Logger | logging.LoggerAdapter | None = None, **kwargs) -> T:
    """:func:`call` for an event loop: ``fn`` (blocking) runs in a thread, the waits are the loop's."""
    import tenacity

    async def attempt() -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    return await tenacity.AsyncRetrying(**_policy(what, budget_s, is_transient, logger))(attempt)


class Outage:
    """The budget of a loop that polls a service (rather than one call that retries): ``failed`` at each poll
    that failed transiently, ``answered`` at each that did not.

    :param what: the service, for the messages (``"the Kubernetes API (namespace ml)"``).
    """

    def __init__(self, what: str, budget_s: float):
        self.what, self.budget_s = what, budget_s
        self.since: float | None = None

    def failed(self, exc: BaseException) -> str | None:
        """What to report when this failure starts an outage (None while one goes on).

        :raises OutageError: the outage has lasted longer than the budget.
        """
        now = time.monotonic()
        if self.since is None:
            self.since = now
            return (f"{self.what} did not answer ({type(exc).__name__}: {exc}); waiting up to "
                    f"{self.budget_s:.0f} s for it")
        if now - self.since > self.budget_s:
            raise OutageError(f"{self.what} has not answered for {now - self.since:.0f} s (the outage budget is "
                              f"{self.budget_s:.0f} s): {type(exc).__name__}: {exc}") from exc
        return None

    def answered(self) -> str | None:
        """What to report when this answer ends an outage (None when there was none)."""
        if self.since is None:
            return None
        lasted, self.since = time.monotonic() - self.since, None
        return f"{self.what} answers again after {lasted:.0f} s"
