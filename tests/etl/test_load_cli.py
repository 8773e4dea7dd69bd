"""``ignite-tf load`` against the real session Ignite cluster, through the command's own entry point (a
subprocess): a declared schema is enforced, an undeclared column mixing numbers and text is refused, every
kind of problem in a file is reported at once, and nothing is written when the input is refused."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from ignite_tf.etl.loader import COLUMN_TYPES


def ignite_tf(conn, *args: str) -> subprocess.CompletedProcess:
    """``python -m ignite_tf.cli ARGS`` with the session cluster's addresses in the environment."""
    env = {"PATH": "/usr/bin:/bin", "IGNITE_TF_ADDRESSES": conn.addresses_str}
    return subprocess.run([sys.executable, "-m", "ignite_tf.cli", *args], capture_output=True, text=True,
                          timeout=180, env=env)


def table_rows(client, table: str) -> int | None:
    """Rows of the SQL table, None when the table (and its cache) does not exist."""
    with client.sql("SELECT TABLE_NAME FROM SYS.TABLES WHERE TABLE_NAME = ?", query_args=[table.upper()]) as cur:
        if not list(cur):
            return None
    with client.sql(f"SELECT COUNT(*) FROM {table}") as cur:
        return next(iter(cur))[0]


def write_csv(path, header: str, rows: list[str]):
    path.write_text("\n".join([header, *rows]) + "\n")
    return path


def scores(n: int = 40) -> list[str]:
    return [f"{i},{i / 4},{20 + i},name{i}" for i in range(n)]


def test_declared_float_column_refuses_text_naming_row_and_column(ignite_conn, ignite_client, cache_name, tmp_path):
    rows = scores()
    rows[23] = "23,abc,43,name23"
    path = write_csv(tmp_path / "scores.csv", "id,score,age,name", rows)
    proc = ignite_tf(ignite_conn, "load", cache_name, str(path), "--key", "id", "--column", "score:float64")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert f"ignite-tf load: error: {path}: row 23, column 'score': 'abc' is not float64" in proc.stderr
    assert table_rows(ignite_client, cache_name) is None  # nothing written, not even the table


def test_undeclared_column_mixing_numbers_and_text_is_refused(ignite_conn, ignite_client, cache_name, tmp_path):
    rows = scores()
    rows[31] = "31,n/a,51,name31"
    path = write_csv(tmp_path / "scores.csv", "id,score,age,name", rows)
    proc = ignite_tf(ignite_conn, "load", cache_name, str(path), "--key", "id")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "column 'score' mixes numbers and text (39 number(s), 1 text value(s)): row 31: 'n/a' is text" \
        in proc.stderr
    assert table_rows(ignite_client, cache_name) is None
    # Text that is all text is no mix: 'name' alone loads as VARCHAR once 'score' is fixed.
    rows[31] = "31,7.75,51,name31"
    write_csv(path, "id,score,age,name", rows)
    proc = ignite_tf(ignite_conn, "load", cache_name, str(path), "--key", "id")
    assert proc.returncode == 0, proc.stderr
    assert table_rows(ignite_client, cache_name) == 40


def test_three_kinds_of_problems_are_reported_together(ignite_conn, ignite_client, cache_name, tmp_path):
    # Loading a good file first shows that a refused load leaves the table's rows as they were.
    good = write_csv(tmp_path / "good.csv", "id,score,age,name", scores())
    assert ignite_tf(ignite_conn, "load", cache_name, str(good), "--key", "id").returncode == 0
    with ignite_client.sql(f"SELECT SUM(age), SUM(score) FROM {cache_name}") as cur:
        before = list(cur)
    rows = scores()
    rows[9] = "9,oops,29,name9"      # otherwise numbers: a column mixing numbers and text
    rows[12] = "3,3.0,32,name12"     # key 3 twice: a key problem
    rows[33] = "33,8.25,53,name33"
    path = write_csv(tmp_path / "scores.csv", "id,score,age,first name", rows)  # not an SQL name
    proc = ignite_tf(ignite_conn, "load", cache_name, str(path), "--key", "id")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    err = proc.stderr
    assert "3 kind(s) of problems" in err, err
    assert "column 'first name' is not a usable SQL identifier" in err
    assert "column 'score' mixes numbers and text" in err and "row 9: 'oops' is text" in err
    assert "key column 'id' has duplicate values (row 3 = 3, row 12 = 3)" in err
    assert table_rows(ignite_client, cache_name) == 40
    with ignite_client.sql(f"SELECT SUM(age), SUM(score) FROM {cache_name}") as cur:
        assert list(cur) == before


def test_declared_columns_report_each_bad_column(ignite_conn, ignite_client, cache_name, tmp_path):
    rows = scores()
    rows[5] = "5,0.25,abc,name5"
    rows[17] = "17,x17,37,name17"
    path = write_csv(tmp_path / "scores.csv", "id,score,age,name", rows)
    proc = ignite_tf(ignite_conn, "load", cache_name, str(path), "--key", "id", "--column", "age:int32",
                     "--column", "score:float64")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "row 5, column 'age': 'abc' is not int32" in proc.stderr
    assert "row 17, column 'score': 'x17' is not float64" in proc.stderr
    assert table_rows(ignite_client, cache_name) is None


@pytest.mark.parametrize("schema_format", ["yaml", "json"])
def test_schema_file_and_columns_load_with_the_declared_sql_types(ignite_conn, ignite_client, cache_name, tmp_path,
                                                                  schema_format):
    path = write_csv(tmp_path / "scores.csv", "id,score,age,name,extra", [f"{r},9" for r in scores()])
    schema = {"score": "float32", "age": "int64", "name": "string"}
    schema_file = tmp_path / f"schema.{schema_format}"
    schema_file.write_text(yaml.safe_dump(schema, sort_keys=False) if schema_format == "yaml" else json.dumps(schema))
    proc = ignite_tf(ignite_conn, "load", cache_name, str(path), "--key", "id", "--schema", str(schema_file),
                     "--column", "score:float64", "--column", "ID:int32")
    assert proc.returncode == 0, proc.stderr
    assert "not loaded (not in the schema): extra" in proc.stdout
    with ignite_client.sql("SELECT COLUMN_NAME, TYPE FROM SYS.TABLE_COLUMNS WHERE TABLE_NAME = ? AND "
                           "COLUMN_NAME NOT IN ('_KEY', '_VAL')", query_args=[cache_name.upper()]) as cur:
        types = dict(cur)
    # --column overrides the file (score) and adds to it (id); the key column is always BIGINT.
    assert types == {"ID": "java.lang.Long", "SCORE": "java.lang.Double", "AGE": "java.lang.Long",
                     "NAME": "java.lang.String"}
    assert "columns: id BIGINT (key), score DOUBLE, age BIGINT, name VARCHAR" in proc.stdout
    assert table_rows(ignite_client, cache_name) == 40


def test_bad_schema_arguments_name_what_is_allowed(ignite_conn, ignite_client, cache_name, tmp_path):
    path = write_csv(tmp_path / "scores.csv", "id,score,age,name", scores())
    proc = ignite_tf(ignite_conn, "load", cache_name, str(path), "--column", "score:float")
    assert proc.returncode == 2 and f"'score:float' is not NAME:TYPE with TYPE one of {', '.join(COLUMN_TYPES)}" \
        in proc.stderr
    (tmp_path / "schema.yaml").write_text("score: double\n")
    proc = ignite_tf(ignite_conn, "load", cache_name, str(path), "--schema", str(tmp_path / "schema.yaml"))
    assert proc.returncode == 1 and "schema.yaml: unknown type(s) {'score': 'double'}" in proc.stderr
    proc = ignite_tf(ignite_conn, "load", cache_name, str(path), "--column", "age:int32", "--column", "AGE:int64")
    assert proc.returncode == 1 and "--column declares 'age' more than once" in proc.stderr
    assert table_rows(ignite_client, cache_name) is None


def test_the_pipeline_schema_takes_the_same_type_names():
    from ignite_tf.pipeline.schema import schema

    declared = schema()["properties"]["source"]["properties"]["schema"]["additionalProperties"]["enum"]
    assert declared == list(COLUMN_TYPES)
