"""The OpenLineage datasets of ``ignite_tf.lineage`` as OpenLineage's own client serializes them (no Airflow run:
the services test, tests/services/test_lineage.py, reads them from real events)."""

from __future__ import annotations

import json

from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.lineage import file_dataset, lineage, model_output, table_input

CONN = IgniteConnectionConfig(addresses=(("10.0.0.5", 10800), ("10.0.0.6", 10800)), username="trainer",
                              password="never-shown")


def as_json(dataset) -> dict:
    from openlineage.client.serde import Serde

    return json.loads(Serde.to_json(dataset))


def test_a_failed_validation_is_reported_on_the_table_with_each_check_and_its_bounds():
    summary = {"cache": "events", "passed": False, "rows": 1200, "checks": [
        {"expectation": "expect_column_values_to_be_between", "column": "f0", "success": False,
         "kwargs": {"column": "f0", "min_value": -10, "max_value": 10, "mostly": 0.999},
         "detail": "3 of 1200 values outside [-10, 10]"},
        {"expectation": "expect_table_row_count_to_be_between", "column": None, "success": True,
         "kwargs": {"min_value": 1000}, "detail": ""}]}
    found = as_json(table_input(CONN, "events", summary))
    assert (found["namespace"], found["name"]) == ("ignite://10.0.0.5:10800", "events")
    first, second = found["facets"]["dataQualityAssertions"]["assertions"]
    assert first["success"] is False and first["column"] == "f0" and first["severity"] == "error"
    assert first["params"] == {"min_value": -10, "max_value": 10, "mostly": 0.999}
    assert first["description"] == "3 of 1200 values outside [-10, 10]"
    assert second["success"] is True and "column" not in second and "description" not in second
    assert found["inputFacets"]["dataQualityMetrics"]["rowCount"] == 1200
    assert "never-shown" not in json.dumps(found)


def test_a_table_read_without_validation_has_no_quality_facets():
    found = as_json(table_input(CONN, "events"))
    assert not found.get("facets") and not found.get("inputFacets")


def test_model_versions_and_files_are_named_as_openlineage_names_files(tmp_path):
    assert file_dataset("s3://models/registry/churn/v0003") == ("s3://models", "registry/churn/v0003")
    assert file_dataset("file:///srv/registry/churn") == ("file", "/srv/registry/churn")
    assert file_dataset(str(tmp_path / "a.csv")) == ("file", str(tmp_path / "a.csv"))
    out = as_json(model_output({"path": "s3://models/registry/churn/v0003", "version": "v0003"}))
    assert (out["namespace"], out["name"]) == ("s3://models", "registry/churn/v0003")
    assert out["facets"]["version"]["datasetVersion"] == "v0003"
    done = lineage([], [model_output({"path": str(tmp_path), "version": "v0001"})])
    assert [d.name for d in done.outputs] == [str(tmp_path)] and done.inputs == []
