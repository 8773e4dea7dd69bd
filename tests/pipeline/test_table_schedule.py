"""A spec's ``schedule: {table: ...}``: the DAG is scheduled on the Asset that ``IgniteLoadOperator`` emits for
that table (parsed and built here; the scheduler starting the run is tests/services/test_lineage.py)."""

from __future__ import annotations

import pytest
import yaml

from ignite_tf.pipeline.spec import SpecError, parse_spec
from tests.pipeline.test_factory import base_spec


def build(tmp_path, **changes):
    from ignite_tf.pipeline.factory import build_dag, render

    spec = {**base_spec(tmp_path), **changes}
    path = tmp_path / "table_schedule.yaml"
    path.write_text(yaml.safe_dump(spec))
    return build_dag(render(parse_spec(path))[0])


def test_load_emits_its_table_asset_and_a_spec_schedules_on_another_table(tmp_path):
    from ignite_tf.operators.ignite import IgniteLoadOperator, table_asset

    dag = build(tmp_path, schedule={"table": "raw_events"}, ignite_conn_id="ignite_prod")
    assert list(dag.timetable.asset_condition.objects) == [table_asset("raw_events", "ignite_prod")]
    assert dag.get_task("load").outlets == [table_asset("bad_spec", "ignite_prod")]
    assert table_asset("raw_events", "ignite_prod").uri == "ignite://ignite_prod/raw_events"
    # Any load of that table updates the same Asset: a DAG of another team, another task id.
    other = IgniteLoadOperator(task_id="ingest", cache="raw_events", source="x.csv", ignite_conn_id="ignite_prod")
    assert other.outlets == [table_asset("raw_events", "ignite_prod")]
    templated = IgniteLoadOperator(task_id="later", cache="{{ params.table }}", source="x.csv")
    assert templated.outlets == []  # known at run time only


def test_a_spec_scheduled_on_its_own_table_does_not_start_itself(tmp_path):
    dag = build(tmp_path, schedule={"table": "bad_spec"})
    assert [a.uri for a in dag.timetable.asset_condition.objects] == ["ignite://ignite_default/bad_spec"]
    assert dag.get_task("load").outlets == []


def test_schedule_takes_an_asset_or_a_table_not_both(tmp_path):
    spec = {**base_spec(tmp_path), "schedule": {"table": "a", "asset": "b"}}
    path = tmp_path / "both.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError) as raised:
        parse_spec(path)
    assert raised.value.field == "schedule", str(raised.value)
