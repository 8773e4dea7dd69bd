"""What failed, by cause: one classification, decided where the error is raised and carried to every reader.

- ``INFRASTRUCTURE``: a service (Ignite, the state store, the object store, the Kubernetes API) did not answer
  past its retries (``ignite_tf.retries``). A task exits ``contract.UNAVAILABLE_EXIT_CODE``; the supervisor
  restarts it from the last backup.
- ``DATA``: the rows cannot be trained on: they changed since validation (``DataChangedError``) or a row has no
  label (``MissingLabelError``). A task exits ``contract.DATA_EXIT_CODE``; it is never restarted, whatever the
  restart policy, and the Airflow task fails without retries: the same rows would fail the same way.
- ``CODE``: anything else a task raises (exit status 1): the restart policy decides.

Errors raised inside a TensorFlow input pipeline (``from_generator``, where the reader runs) reach the task as
TensorFlow's own errors carrying the Python error as text; they are told apart by the error's name there.
"""

from __future__ import annotations

import re
from enum import StrEnum

from ignite_tf.contract import DATA_EXIT_CODE, UNAVAILABLE_EXIT_CODE
from ignite_tf.errors import DataChangedError, MissingLabelError
from ignite_tf.retries import carries, raised_from, unavailable

__all__ = ["Cause", "cause_of", "described", "exit_code_of"]

DATA_ERRORS = (DataChangedError, MissingLabelError)


class Cause(StrEnum):
    INFRASTRUCTURE = "infrastructure unavailable"
    DATA = "data"
    CODE = "code"


def cause_of(exc: BaseException) -> Cause:
    """Why ``exc`` ended a task (or an error it was raised from; through TensorFlow's errors too)."""
    names = [error.__name__ for error in DATA_ERRORS]
    if any(isinstance(e, DATA_ERRORS) or carries(e, names) for e in raised_from(exc)):
        return Cause.DATA
    return Cause.INFRASTRUCTURE if unavailable(exc) else Cause.CODE


def exit_code_of(cause: Cause) -> int | None:
    """The status a task exits with for ``cause``; None: the task's own failure (status 1)."""
    return {Cause.INFRASTRUCTURE: UNAVAILABLE_EXIT_CODE, Cause.DATA: DATA_EXIT_CODE}.get(cause)


def described(exc: BaseException, limit: int = 1000) -> str:
    """``exc`` on one line as ``Name: message``; for a TensorFlow error that carries a Python error raised in an
    input pipeline, that error's (without TensorFlow's node names and the traceback)."""
    text = " ".join(str(exc).split())
    if type(exc).__module__.startswith("tensorflow"):
        found = re.search(r"(\w+(?:Error|Exception)): (.*?)(?: Traceback \(most recent call last\)|$)", text)
        if found:
            return f"{found.group(1)}: {found.group(2)}"[:limit]
    return f"{type(exc).__name__}: {text}"[:limit]
