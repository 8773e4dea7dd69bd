"""Validation gate: suites parsed with line numbers, GX per shard against real Ignite tables, merge and gate."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from ignite_tf.errors import ConfigError, IgniteTFError
from ignite_tf.etl import load
from ignite_tf.plan.partitions import PartitionMap
from ignite_tf.plan.shards import ShardPlan
from ignite_tf.reader.partition import PartitionReader
from ignite_tf.validation.run import (
    ValidationFailed,
    ValidationSummary,
    gate,
    merge,
    validate_frame,
    validate_shard,
    write_results,
)
from ignite_tf.validation.suite import Suite, coerce_suite, load_suite

ROWS = 3000
SHARDS = 3

SUITE = """\
name: tabular_test
row_count: {min: 1000, max: 100000}
unique: [uid]
columns:
  f0: {type: float32, not_null: true, between: [-10, 10]}
  f1: {type: float32, not_null: true}
  f2: {type: float32, between: [-5, 5]}
  f3: {type: float32, not_null: true}
  label: {type: int32, in_set: [0, 1, 2]}
expectations:
  - expect_column_mean_to_be_between: {column: f1, min_value: -1, max_value: 1}
"""
# The label (expectation(column)) of every check the suite above makes, in the summary's order.
CHECKS = [
    "expect_column_values_to_be_of_type(f0)", "expect_column_values_to_not_be_null(f0)",
    "expect_column_values_to_be_between(f0)", "expect_column_values_to_be_of_type(f1)",
    "expect_column_values_to_not_be_null(f1)", "expect_column_values_to_be_of_type(f2)",
    "expect_column_values_to_not_be_null(f2)",  # f2 is typed float32 without allow_nan: no NaN
    "expect_column_values_to_be_between(f2)", "expect_column_values_to_be_of_type(f3)",
    "expect_column_values_to_not_be_null(f3)", "expect_column_values_to_be_of_type(label)",
    "expect_column_values_to_be_in_set(label)", "expect_column_values_to_be_unique(uid)",
    "expect_column_mean_to_be_between(f1)", "expect_table_row_count_to_be_between",
]


def clean_frame(n: int = ROWS, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({"id": np.arange(n, dtype=np.int64)})
    for i in range(4):
        df[f"f{i}"] = rng.uniform(-5, 5, n).astype(np.float32)
    df["label"] = rng.integers(0, 3, n).astype(np.int32)
    df["uid"] = rng.permutation(n).astype(np.int64) + 1_000_000
    return df


@pytest.fixture(scope="module")
def suite(tmp_path_factory) -> Suite:
    path = tmp_path_factory.mktemp("suite") / "tabular.yaml"
    path.write_text(SUITE)
    return load_suite(path)


def validate_table(conn, cache: str, suite: Suite):
    """Validate every shard of a 3-worker ShardPlan over the table, then merge with the cache-wide checks."""
    plan = ShardPlan.build(PartitionMap.discover(conn, cache), SHARDS)
    results = [validate_shard(conn, cache, plan.shard(w).read_tasks(), suite, shard=w) for w in range(SHARDS)]
    return results, merge(results, suite, conn=conn, cache=cache)


def failed_labels(summary) -> list[str]:
    return [c.label for c in summary.failures]


def check(summary, label: str):
    return next(c for c in summary.checks if c.label == label)


# -- against real Ignite --------------------------------------------------------------------------------
def test_clean_table_passes_on_every_shard(ignite_conn, cache_name, suite, tmp_path):
    load(ignite_conn, cache_name, clean_frame(), key="id")
    results, summary = validate_table(ignite_conn, cache_name, suite)
    assert [c.label for c in summary.checks] == CHECKS
    assert summary.passed, summary.message()
    assert summary.rows == ROWS and summary.rows_checked == ROWS and not summary.sampled
    assert sorted(summary.rows_per_shard) == [0, 1, 2] and all(v > 0 for v in summary.rows_per_shard.values())
    assert sum(summary.rows_per_shard.values()) == ROWS
    assert check(summary, "expect_column_values_to_be_unique(uid)").scope == "cache"
    assert gate(summary) is summary
    # JSON-able end to end (it travels through XCom), and the Data Docs come from GX's own site builder.
    assert ValidationSummary.from_dict(json.loads(json.dumps(summary.to_dict()))).checks == summary.checks
    json.dumps([r.to_dict() for r in results])
    paths = write_results(summary, tmp_path / "run")
    saved = json.loads((tmp_path / "run" / "validation.json").read_text())
    assert saved["passed"] is True and len(saved["shards"]) == SHARDS
    index = tmp_path / "run" / "data_docs" / "index.html"
    assert paths["data_docs"] == str(index) and index.is_file()
    pages = sorted(p.name for p in (tmp_path / "run" / "data_docs" / "validations").rglob("*.html"))
    assert pages == ["cache.html", "shard-0.html", "shard-1.html", "shard-2.html"]
    shard_page = next((tmp_path / "run" / "data_docs" / "validations").rglob("shard-0.html")).read_text()
    assert "values must belong to this set" in shard_page and "uid" in shard_page


def test_nans_fail_exactly_the_not_null_expectation(ignite_conn, cache_name, suite):
    df = clean_frame()
    bad = df["id"].to_numpy()[::100]  # 30 rows
    df.loc[df["id"].isin(bad), "f0"] = np.nan
    load(ignite_conn, cache_name, df, key="id")
    _, summary = validate_table(ignite_conn, cache_name, suite)
    assert failed_labels(summary) == ["expect_column_values_to_not_be_null(f0)"]
    failure = summary.failures[0]
    assert failure.unexpected_count == 30 and failure.element_count == ROWS
    assert 0 < len(failure.bad_rows) <= 5 and all(b["key"] in set(bad.tolist()) for b in failure.bad_rows)
    assert all(b["value"] == "NaN" for b in failure.bad_rows)
    assert "30 of 3000 rows (1.00%) NaN in float column f0" in summary.message()
    # NaN is null, not out of range: between(f0) ignores it.
    assert check(summary, "expect_column_values_to_be_between(f0)").unexpected_count == 0


def test_nan_in_a_typed_float_column_fails_unless_the_suite_allows_it(ignite_conn, cache_name, suite):
    df = clean_frame()
    bad = df["id"].to_numpy()[5::300]  # 10 rows; f2 has a type and a range, no not_null
    df.loc[df["id"].isin(bad), "f2"] = np.nan
    load(ignite_conn, cache_name, df, key="id")
    results, summary = validate_table(ignite_conn, cache_name, suite)
    assert failed_labels(summary) == ["expect_column_values_to_not_be_null(f2)"]
    failure = summary.failures[0]
    assert failure.unexpected_count == 10 and {b["key"] for b in failure.bad_rows} <= set(bad.tolist())
    assert check(summary, "expect_column_values_to_be_between(f2)").success  # between alone would let NaN through
    with pytest.raises(ValidationFailed) as info:
        gate(summary)
    message = str(info.value)
    assert "10 of 3000 rows (0.33%) NaN in float column f2" in message, message
    assert "allow_nan: true on column f2 accepts them" in message
    assert f"id={failure.bad_rows[0]['key']}: NaN" in message and "None" not in message
    data = suite.to_dict()
    data["columns"]["f2"]["allow_nan"] = True
    allowed = coerce_suite(data)
    assert allowed.columns["f2"].allow_nan and coerce_suite(allowed.to_dict()).columns["f2"].allow_nan
    _, summary = validate_table(ignite_conn, cache_name, allowed)
    assert summary.passed, summary.message()


def test_out_of_range_labels_fail_exactly_in_set(ignite_conn, cache_name, suite):
    df = clean_frame()
    df.loc[df["id"] % 250 == 7, "label"] = 7
    load(ignite_conn, cache_name, df, key="id")
    _, summary = validate_table(ignite_conn, cache_name, suite)
    assert failed_labels(summary) == ["expect_column_values_to_be_in_set(label)"]
    failure = summary.failures[0]
    assert failure.unexpected_count == 12
    assert {b["value"] for b in failure.bad_rows} == {7} and all(b["key"] % 250 == 7 for b in failure.bad_rows)
    with pytest.raises(ValidationFailed) as info:
        gate(summary)
    assert isinstance(info.value, IgniteTFError)
    shards = ",".join(map(str, failure.failing_shards))
    assert str(info.value).startswith(f"validation failed: expect_column_values_to_be_in_set(label) on shard"
                                      f"{'s' if len(failure.failing_shards) > 1 else ''} {shards}: 12 of 3000 rows "
                                      f"(0.40%) unexpected; e.g. id=")


def test_duplicates_in_different_shards_fail_exactly_the_unique_check(ignite_conn, cache_name, suite):
    df = clean_frame()
    load(ignite_conn, cache_name, df, key="id")
    plan = ShardPlan.build(PartitionMap.discover(ignite_conn, cache_name), SHARDS)
    with PartitionReader(ignite_conn, cache_name, columns=["uid"]) as reader:
        key_a = int(reader.read_all(plan.shard(0).read_tasks())["id"][0])
        key_b = int(reader.read_all(plan.shard(2).read_tasks())["id"][0])
    dup = int(df.loc[df["id"] == key_a, "uid"].iloc[0])
    client = ignite_conn.client()
    try:
        with client.sql(f"UPDATE {cache_name} SET UID = ? WHERE ID = ?", query_args=[dup, key_b]):
            pass
    finally:
        client.close()
    results, summary = validate_table(ignite_conn, cache_name, suite)
    # No shard sees both rows, so GX's per-shard uniqueness passes everywhere; the server-side check does not.
    assert all(e.success for r in results for e in r.results if e.expectation.endswith("_unique"))
    assert failed_labels(summary) == ["expect_column_values_to_be_unique(uid)"]
    failure = summary.failures[0]
    assert failure.scope == "cache" and failure.unexpected_count == 2
    assert failure.bad_rows == [{"value": dup, "count": 2, "keys": sorted([key_a, key_b])}]
    assert f"uid={dup} in id {min(key_a, key_b)}, {max(key_a, key_b)}" in summary.message()


@pytest.mark.parametrize("column,ctype,observed", [("f0", "float64", "float64"), ("f3", "string", "str")])
def test_wrong_column_type_fails_exactly_the_type_expectation(ignite_conn, cache_name, suite, column, ctype,
                                                              observed):
    df = clean_frame()
    if ctype == "string":
        df[column] = df[column].map(lambda v: f"{v:.3f}")
    load(ignite_conn, cache_name, df, key="id", schema={**{c: "float32" for c in ("f0", "f1", "f2", "f3")},
                                                         "label": "int32", "uid": "int64", column: ctype})
    _, summary = validate_table(ignite_conn, cache_name, suite)
    assert failed_labels(summary) == [f"expect_column_values_to_be_of_type({column})"]
    failure = summary.failures[0]
    assert failure.failing_shards == [0, 1, 2] and failure.scope == "every shard"
    assert failure.detail.startswith(f"observed '{observed}' on shard 0")


def test_sampled_validation_checks_a_fraction_and_says_so(ignite_conn, cache_name, suite):
    load(ignite_conn, cache_name, clean_frame(), key="id")
    sampled = coerce_suite({**suite.to_dict(), "sample_fraction": 0.25, "seed": 3})
    results, summary = validate_table(ignite_conn, cache_name, sampled)
    assert summary.passed and summary.sampled and all(r.sampled for r in results)
    assert summary.rows == ROWS and 0.15 * ROWS < summary.rows_checked < 0.35 * ROWS
    again, _ = validate_table(ignite_conn, cache_name, sampled)  # the sample is reproducible
    assert [r.rows_checked for r in again] == [r.rows_checked for r in results]


# -- pure (no Ignite) -----------------------------------------------------------------------------------
def one_percent_bad(mostly: float) -> tuple[Suite, list]:
    df = clean_frame(2000)
    df.loc[df["id"] < 20, "f0"] = 99.0  # 1% of the rows, all in shard 0 (2% of that shard)
    suite = coerce_suite({"name": "m", "columns": {"f0": {"between": [-10, 10], "mostly": mostly}}})
    return suite, [validate_frame(df.iloc[:1000], suite, shard=0), validate_frame(df.iloc[1000:], suite, shard=1)]


def test_mostly_is_applied_to_the_whole_cache():
    suite, results = one_percent_bad(0.98)
    assert gate(merge(results, suite)).passed
    suite, results = one_percent_bad(0.985)
    assert not results[0].success  # shard 0 alone has 2% bad rows ...
    assert merge(results, suite).passed  # ... the cache 1%, within the tolerance
    suite, results = one_percent_bad(0.995)
    summary = merge(results, suite)
    with pytest.raises(ValidationFailed, match=r"^validation failed: expect_column_values_to_be_between\(f0\) on "
                                               r"shard 0: 20 of 2000 rows \(1\.00%\) unexpected \(mostly 0\.995 "
                                               r"allows 0\.50%\); e\.g\. id=0: 99\.0, id=1: 99\.0, id=2: 99\.0$"):
        gate(summary)


def test_frame_result_has_keys_of_bad_rows_and_missing_columns_fail_clearly():
    df = clean_frame(500)
    df.loc[[3, 4, 5, 6, 7, 8, 9], "label"] = 5
    suite = coerce_suite({"name": "x", "columns": {"label": {"in_set": [0, 1, 2]}, "nope": {"not_null": True}}})
    result = validate_frame(df, suite, shard=4)
    assert result.shard == 4 and result.rows == result.rows_checked == 500
    in_set, missing = result.results
    assert (in_set.unexpected_count, in_set.success) == (7, False)
    assert in_set.bad_rows == [{"key": k, "value": 5} for k in (3, 4, 5, 6, 7)]
    assert not missing.success and "nope" in missing.error
    summary = merge([result], suite)
    assert failed_labels(summary) == ["expect_column_values_to_be_in_set(label)",
                                      "expect_column_values_to_not_be_null(nope)"]
    assert "raised:" in summary.failures[1].detail


def test_table_level_expectation_sees_every_column():
    suite = coerce_suite({"name": "x", "columns": {"f0": {"not_null": True}}, "expectations": [
        {"expect_table_columns_to_match_set": {"column_set": ["id", "f0", "f1", "f2", "f3", "label"]}}]})
    summary = merge([validate_frame(clean_frame(100), suite)], suite)
    assert failed_labels(summary) == ["expect_table_columns_to_match_set"]  # uid is not in the set
    assert "uid" in json.dumps(summary.failures[0].observed_value)


def test_type_check_of_an_object_column_looks_at_each_value():
    df = clean_frame(50)
    df["obj"] = pd.Series(["a"] * 48 + [7, None], dtype=object)
    suite = coerce_suite({"name": "x", "columns": {"obj": {"type": "string"}, "f0": {"type": "float32"}}})
    obj, f0, f0_nan = validate_frame(df, suite).results
    assert f0.success and f0.observed_value == "float32" and f0_nan.success
    assert not obj.success and obj.unexpected_count == 1 and obj.bad_rows == [{"key": 48, "value": 7}]


def test_recombined_mean_and_row_count():
    df = clean_frame(1000)
    df.loc[df["id"] < 500, "f1"] = 1.5  # shard 0's mean is 1.5, the cache's below 1
    df.loc[df["id"] >= 500, "f1"] = 0.0
    suite = coerce_suite({"name": "x", "row_count": {"max": 999}, "expectations": [
        {"expect_column_mean_to_be_between": {"column": "f1", "min_value": -1, "max_value": 1}}]})
    results = [validate_frame(df.iloc[:500], suite, 0), validate_frame(df.iloc[500:], suite, 1)]
    assert not results[0].results[0].success
    summary = merge(results, suite)
    mean, rows = summary.checks
    assert mean.success and mean.observed_value == pytest.approx(0.75)
    assert not rows.success and rows.observed_value == 1000
    assert failed_labels(summary) == ["expect_table_row_count_to_be_between"]


def test_importing_the_module_does_not_import_great_expectations():
    code = ("import sys, ignite_tf.validation.run, ignite_tf.validation.suite; "
            "print('great_expectations' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -- malformed suites (no cluster) ----------------------------------------------------------------------
@pytest.mark.parametrize("text,line,expected", [
    ("name: x\ncolumn:\n  f0: {type: float32}\n", 2, "column: unknown top-level key (did you mean columns?); allowed: "
                                                    "name, description"),
    ("name: x\ncolumns:\n  f0:\n    type: float32\n    nul_null: true\n", 5,
     "columns.f0.nul_null: unknown column rule (did you mean not_null?); allowed: type, not_null, between"),
    ("name: x\nexpectations:\n  - expect_column_values_to_not_be_nul: {column: f0}\n", 3,
     "expectations[0].expect_column_values_to_not_be_nul: unknown Great Expectations expectation; did you mean "
     "expect_column_values_to_not_be_null"),
    ("name: x\nexpectations:\n  - expect_column_values_to_be_between:\n      column: f0\n      min_value: abc\n", 5,
     "expectations[0].expect_column_values_to_be_between.min_value: 'abc': value is not a valid float"),
    ("name: x\nexpectations:\n  - expect_column_values_to_be_between:\n      column: f0\n      maxvalue: 3\n", 5,
     "expect_column_values_to_be_between.maxvalue: not a kwarg of expect_column_values_to_be_between "
     "(did you mean max_value?)"),
    ("name: x\nexpectations:\n  - expect_column_values_to_not_be_null: {column: 3}\n", 3,
     "expect_column_values_to_not_be_null.column: 3: str type expected"),
    ("name: x\nexpectations:\n  - expect_column_values_to_be_between: {min_value: 1}\n", 3,
     "required kwarg column is missing"),
    ("name: x\ncolumns:\n  f0: {not_null: true, mostly: 1.5}\n", 3, "columns.f0.mostly: mostly must be a number "
                                                                    "in (0, 1]"),
    ("name: x\nexpectations:\n  - expect_column_values_to_not_be_null:\n      column: f0\n      mostly: 0\n", 5,
     "expect_column_values_to_not_be_null.mostly: mostly must be a number in (0, 1]"),
    ("name: x\ncolumns:\n  f0: {type: float}\n", 3, "columns.f0.type: unknown type 'float'; allowed: float32"),
    ("name: x\ncolumns:\n  f0: {between: [5, 1]}\n", 3, "columns.f0.between: min 5 is greater than max 1"),
    ("name: x\ncolumns:\n  n: {type: int32, allow_nan: true}\n", 3,
     "columns.n.allow_nan: applies to a column typed float32 or float64, and this column's type is 'int32'"),
    ("name: x\ncolumns:\n  f0: {type: float32, allow_nan: yes please}\n", 3,
     "columns.f0.allow_nan: must be true or false"),
    ("name: x\ncolumns:\n  f0: {type: float32}\n  f0: {type: float32}\n", 4,
     "key 'f0' appears twice (first on line 3)"),
    ("name: x\nsample_fraction: 0\n", 2, "sample_fraction: must be a number in (0, 1]"),
    ("name: x\nrow_count: {min: 10, most: 3}\n", 2, "row_count.most: unknown key; allowed: min, max"),
    ("name: x\nexpectations:\n  - expect_column_values_to_not_be_null: {column: a, result_format: BASIC}\n", 3,
     "result_format: is set by ignite-tf; leave it out"),
    ("name: x\ncolumns: [\n", 3, "not valid YAML/JSON"),
])
def test_malformed_suite_names_file_line_and_key(tmp_path, text, line, expected):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_suite(path)
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert expected in str(info.value)


def test_json_suite_and_round_trip(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(textwrap.dedent("""\
        {
          "name": "j",
          "unique": "ID",
          "columns": {"F0": {"type": ["int32", "int64"], "in_set": [1, 2], "mostly": 0.9}},
          "expectations": [{"expect_column_max_to_be_between": {"column": "F0", "max_value": 3}}]
        }
        """))
    suite = load_suite(path)
    assert [s.label for s in suite.specs()] == [
        "expect_column_values_to_be_in_type_list(f0)", "expect_column_values_to_be_in_set(f0)",
        "expect_column_values_to_be_unique(id)", "expect_column_max_to_be_between(f0)"]
    assert suite.specs()[0].kwargs["type_list"] == ["int32", "Int32", "int64", "Int64"]
    assert coerce_suite(json.loads(json.dumps(suite.to_dict()))).specs() == suite.specs()
    path.write_text('{\n  "name": "j",\n  "columns": {\n    "f0": {"between": [1]}\n  }\n}\n')
    with pytest.raises(ConfigError, match=r"s\.json:4: columns\.f0\.between: must be \[min, max\]"):
        load_suite(path)


def test_example_suite_next_to_the_dags_is_valid():
    from pathlib import Path

    from ignite_tf_dev.demo_data import tabular

    suite = load_suite(Path(__file__).resolve().parents[2] / "dags" / "expectations" / "tabular.yaml")
    assert suite.name == "tabular" and suite.row_count and suite.specs()
    demo = tabular(4000)  # the table it describes passes, in two shards
    summary = merge([validate_frame(demo.iloc[:2500], suite, 0), validate_frame(demo.iloc[2500:], suite, 1)], suite)
    assert summary.passed, summary.message()
