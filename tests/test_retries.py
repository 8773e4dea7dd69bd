"""The one retry policy (``ignite_tf.retries``): what counts as transient, for the real error classes of the clients in
use, and how a call rides out an outage or names one past its budget. Outages of real services are in the tests
that use them (``tests/operators/test_ownership.py``: the trigger through a cut link to Ignite)."""

from __future__ import annotations

import asyncio
import time

import pytest


def errors_of_the_clients():
    import botocore.exceptions
    import urllib3.exceptions
    from kubernetes.client.exceptions import ApiException
    from pyignite.exceptions import ReconnectError

    from ignite_tf.errors import AuthenticationFailedError, ConfigError, IgniteUnavailableError, OutageError

    def s3(code: str, status: int):
        return botocore.exceptions.ClientError({"Error": {"Code": code, "Message": code},
                                                "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")

    transient = [ConnectionRefusedError(), ConnectionResetError(), TimeoutError(), EOFError(),
                 IgniteUnavailableError("no node"), ReconnectError("all nodes down"),
                 urllib3.exceptions.MaxRetryError(None, "/api/v1/pods", "refused"),
                 urllib3.exceptions.ProtocolError("reset"),
                 ApiException(status=503), ApiException(status=429), ApiException(status=500),
                 botocore.exceptions.EndpointConnectionError(endpoint_url="http://s3:9000"),
                 botocore.exceptions.ReadTimeoutError(endpoint_url="http://s3:9000"),
                 s3("SlowDown", 503), s3("InternalError", 500)]
    lasting = [ApiException(status=404), ApiException(status=403), ApiException(status=422),
               s3("NoSuchKey", 404), s3("AccessDenied", 403), FileNotFoundError("x"), PermissionError("x"),
               KeyError("cluster"), ValueError("bad"), ConfigError("bad"), AuthenticationFailedError("password"),
               OutageError("spent")]
    return transient, lasting


def test_transient_errors_are_told_from_lasting_ones():
    from ignite_tf.retries import transient

    retried, raised = errors_of_the_clients()
    assert [e for e in retried if not transient(e)] == []
    assert [e for e in raised if transient(e)] == []


def flaky(failures: list[BaseException]):
    calls = []

    def fn(value):
        calls.append(time.monotonic())
        if len(calls) <= len(failures):
            raise failures[len(calls) - 1]
        return value

    return fn, calls


def test_a_call_is_tried_again_through_transient_failures_and_returns_its_value(caplog):
    from ignite_tf.retries import call

    fn, calls = flaky([ConnectionRefusedError("refused"), TimeoutError("timed out")])
    assert call("the state store", fn, 42, budget_s=30) == 42
    assert len(calls) == 3
    warnings = [r.getMessage() for r in caplog.records if "did not answer" in r.getMessage()]
    assert len(warnings) == 2 and warnings[0].startswith("the state store did not answer (ConnectionRefusedError")


def test_a_lasting_error_is_raised_at_once():
    from ignite_tf.retries import call

    fn, calls = flaky([KeyError("no such cluster")])
    with pytest.raises(KeyError):
        call("the state store", fn, 1, budget_s=30)
    assert len(calls) == 1


def test_past_the_budget_the_outage_is_named_with_its_last_error():
    from ignite_tf.errors import OutageError
    from ignite_tf.retries import call

    fn, calls = flaky([ConnectionRefusedError("refused")] * 1000)
    started = time.monotonic()
    with pytest.raises(OutageError) as raised:
        call("the Kubernetes API", fn, 1, budget_s=2)
    assert time.monotonic() - started < 2 + 1, "the budget bounds the whole call, its last wait included"
    assert len(calls) >= 2
    message = str(raised.value)
    assert message.startswith("the Kubernetes API has not answered for ") and "outage budget is 2 s" in message
    assert "ConnectionRefusedError: refused" in message and isinstance(raised.value.__cause__, ConnectionRefusedError)


def test_an_event_loop_call_runs_in_a_thread_and_retries():
    import threading

    from ignite_tf.retries import acall

    fn, calls = flaky([ConnectionResetError("reset")] * 2)
    threads = []

    def attempt():
        threads.append(threading.get_ident())
        return fn("ok")

    async def main():
        return threading.get_ident(), await acall("the state store", attempt, budget_s=30)

    loop_thread, value = asyncio.run(main())
    assert value == "ok" and len(calls) == 3
    assert loop_thread not in threads, "a blocking call ran on the event loop's thread"


def test_an_outage_inside_a_tensorflow_input_pipeline_is_told_from_a_code_error():
    """TensorFlow carries a Python error raised in a ``from_generator`` pipeline (where the reader runs) as text
    in an error of its own; the runtime reads it to exit with the retryable status (``UNAVAILABLE_EXIT_CODE``)."""
    import tensorflow as tf

    from ignite_tf.errors import IgniteUnavailableError
    from ignite_tf.retries import unavailable

    def failing(error):
        def generate():
            yield 1
            raise error

        return tf.data.Dataset.from_generator(generate, output_signature=tf.TensorSpec((), tf.int32))

    raised = {}
    for name, error in (("outage", IgniteUnavailableError("partition 3 of cache 'c' could not be read")),
                        ("code", ValueError("could not convert 'x' to float"))):
        with pytest.raises(tf.errors.OpError) as caught:
            list(failing(error))
        raised[name] = caught.value
    assert unavailable(raised["outage"]) and not unavailable(raised["code"])
