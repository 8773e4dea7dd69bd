"""One classification of what ended a task (``ignite_tf.faults``), from the real errors, and where each cause
goes: the task's exit status, the supervisor's decision, the Airflow exception."""

from __future__ import annotations

import pytest

from ignite_tf.contract import DATA_EXIT_CODE, UNAVAILABLE_EXIT_CODE
from ignite_tf.errors import DataChangedError, IgniteUnavailableError, MissingLabelError
from ignite_tf.faults import Cause, cause_of, described, exit_code_of


def raised_in_an_input_pipeline(error: Exception) -> Exception:
    """``error`` as a training task meets it: raised where the reader runs, reaching ``fit`` as TensorFlow's."""
    import tensorflow as tf

    def generate():
        yield 1
        raise error

    with pytest.raises(tf.errors.OpError) as caught:
        list(tf.data.Dataset.from_generator(generate, output_signature=tf.TensorSpec((), tf.int32)))
    return caught.value


def test_each_error_has_one_cause_and_one_status():
    data = [DataChangedError("partition 3 changed", []), MissingLabelError("2 rows have no 'label'", [1, 2])]
    infrastructure = [IgniteUnavailableError("no node"), ConnectionResetError("reset")]
    code = [ValueError("could not convert 'x' to float"), KeyError("feature")]
    for errors, cause in ((data, Cause.DATA), (infrastructure, Cause.INFRASTRUCTURE), (code, Cause.CODE)):
        for error in errors:
            assert cause_of(error) is cause, error
            assert cause_of(raised_in_an_input_pipeline(error)) is cause, error
    wrapped = raised_in_an_input_pipeline(DataChangedError("cache 'x' changed since validation: partition 3", []))
    assert described(wrapped) == "DataChangedError: cache 'x' changed since validation: partition 3"
    assert described(KeyError("f0")) == "KeyError: 'f0'"
    assert exit_code_of(Cause.DATA) == DATA_EXIT_CODE and exit_code_of(Cause.INFRASTRUCTURE) == UNAVAILABLE_EXIT_CODE
    assert exit_code_of(Cause.CODE) is None


def test_a_data_failure_fails_the_airflow_task_without_retries():
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from ignite_tf.state import ExitCode
    from ignite_tf.triggers.cluster_events import result_of

    def failed(code: ExitCode) -> dict:
        return {"status": "error", "cluster_id": "c", "message": "worker-0 exited with status 65", "tail": "",
                "summary": {"exit_code": int(code)}}

    with pytest.raises(AirflowFailException, match="TensorFlow cluster c failed: worker-0 exited with status 65"):
        result_of(failed(ExitCode.DATA_INVALID))
    with pytest.raises(AirflowException) as raised:
        result_of(failed(ExitCode.USER_CODE_FAILED))
    assert not isinstance(raised.value, AirflowFailException)


def test_the_supervisor_reads_the_tasks_last_error_line(tmp_path):
    from ignite_tf.cluster.supervision.loop import last_error_line

    log = tmp_path / "worker-0.log"
    log.write_text("epoch 1/3 loss=0.5\nerror: an earlier one\nTraceback...\n"
                   "error: data: DataChangedError: partition 3 of cache 'rows' changed since validation\nbye\n")
    assert last_error_line(str(log)) == "data: DataChangedError: partition 3 of cache 'rows' changed since validation"
    assert last_error_line(str(tmp_path / "none.log")) == ""
