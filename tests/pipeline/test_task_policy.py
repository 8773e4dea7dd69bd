"""Airflow's task policy from a pipeline spec: ``retries``, ``retry_delay``, ``retry_exponential_backoff``,
``max_retry_delay`` and ``execution_timeout`` for every task and per stage, on the operators Airflow builds,
and refused with the file, the field and what is allowed."""

from __future__ import annotations

from datetime import timedelta

import pytest
import yaml

from ignite_tf.pipeline.factory import build_dag, render
from ignite_tf.pipeline.spec import SpecError, parse_spec
from ignite_tf.pipeline.task_policy import parse_duration
from tests.pipeline.test_factory import base_spec


def write(tmp_path, spec: dict, name: str = "policy.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(spec))
    return path


def test_pipeline_and_stage_policies_reach_the_operators(tmp_path):
    spec = base_spec(tmp_path)
    spec.update({"retries": 2, "retry_delay": "30s", "execution_timeout": 3600,
                 "inference": {"output_cache": "scores", "retries": 0}})
    spec["training"].update({"retries": 1, "retry_delay": 5, "execution_timeout": "1h30m",
                             "retry_exponential_backoff": True, "max_retry_delay": "10m", "deferrable": False})
    spec["publish"]["execution_timeout"] = "2m"
    training_dag, inference_dag = (build_dag(d) for d in render(parse_spec(write(tmp_path, spec))))
    load, train, publish = (training_dag.get_task(t) for t in ("load", "train", "publish"))
    assert (load.retries, load.retry_delay, load.execution_timeout) == (2, timedelta(seconds=30), timedelta(hours=1))
    assert (train.retries, train.retry_delay, train.execution_timeout) == (1, timedelta(seconds=5),
                                                                           timedelta(minutes=90))
    assert train.retry_exponential_backoff and train.max_retry_delay == timedelta(minutes=10)
    assert train.deferrable is False and training_dag.get_task("validation_gate").retries == 2
    assert (publish.retries, publish.execution_timeout) == (2, timedelta(minutes=2))
    score = inference_dag.get_task("score")
    assert score.retries == 0 and score.retry_delay == timedelta(seconds=30)


def test_without_a_policy_airflow_keeps_its_own_defaults(tmp_path):
    dag = build_dag(render(parse_spec(write(tmp_path, base_spec(tmp_path))))[0])
    train = dag.get_task("train")
    assert train.execution_timeout is None and train.deferrable is True
    assert dag.default_args == {"owner": "ignite-tf"}


@pytest.mark.parametrize(("change", "field", "allowed"), [
    ({"retries": -1}, "retries", "out of range (minimum 0)"),
    ({"retries": 1.5}, "retries", "expected an integer"),
    ({"retry_delay": "5 minutes"}, "retry_delay", "amounts with units s, m, h, d"),
    ({"execution_timeout": 0}, "execution_timeout", "must be longer than 0"),
    ({"retry_exponential_backoff": "yes"}, "retry_exponential_backoff", "expected boolean"),
    ({"training": {"retry_delay": -3}}, "training.retry_delay", "out of range"),
    ({"training": {"retry_exponential_backoff": False, "max_retry_delay": "1h"}}, "training.max_retry_delay",
     "goes with retry_exponential_backoff: true"),
    ({"publish": {"retires": 1}}, "publish.retires", "did you mean 'retries'?"),
])
def test_a_bad_policy_names_the_field_and_what_is_allowed(tmp_path, change, field, allowed):
    spec = base_spec(tmp_path)
    for key, value in change.items():
        if isinstance(value, dict):
            spec[key] = {**spec[key], **value}
        else:
            spec[key] = value
    path = write(tmp_path, spec)
    with pytest.raises(SpecError) as raised:
        parse_spec(path)
    assert raised.value.field == field and allowed in str(raised.value) and str(path) in str(raised.value)


def test_durations():
    assert parse_duration(90, "x") == timedelta(seconds=90)
    assert parse_duration("1h30m", "x") == timedelta(minutes=90)
    assert parse_duration("2d", "x") == timedelta(days=2) and parse_duration("0.5m", "x") == timedelta(seconds=30)
    for bad in ("", "5", "1x", "m5", True, -1):
        with pytest.raises(SpecError, match="not a duration"):
            parse_duration(bad, "x")
