"""Waiting in tests: poll a condition until it holds, failing with what was awaited (and what was seen)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(predicate, timeout: float = 60.0, what: str = "condition", poll: float = 0.3,
             seen: Callable[[], str] | None = None, errors: tuple[type[Exception], ...] = ()):
    """Poll ``predicate`` until it returns something true, and return that; fail after ``timeout`` s naming
    ``what`` (and ``seen()``, what there was instead).

    :param errors: exceptions of ``predicate`` that mean "not yet" (a node still joining); the last one is
        named on a timeout. Any other exception fails at once.
    """
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        try:
            value = predicate()
        except errors as exc:
            last_error, value = exc, None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}"
                                 + (f" (last error: {last_error})" if last_error else "")
                                 + (f"\n{seen()}" if seen else ""))
        time.sleep(poll)
