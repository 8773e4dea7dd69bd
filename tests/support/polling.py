"""Waiting in tests: poll a condition until it holds, failing with what was awaited (and what was seen)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(predicate, timeout: float, what: str, poll: float = 0.3, seen: Callable[[], str] | None = None):
    """Poll ``predicate`` until it returns something true; fail after ``timeout`` s naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}" + (f"\n{seen()}" if seen else ""))
        time.sleep(poll)
