"""ETL load against the real session Ignite cluster: sources, keys, nulls, idempotence, refused input."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections import OrderedDict
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.errors import IgniteUnavailableError, LoadError
from ignite_tf.etl import encode as etl_encode
from ignite_tf.etl import input as etl_input
from ignite_tf.etl import loader as etl
from ignite_tf.etl.loader import hash_keys, load, row_hash_keys
from ignite_tf.ports import free_port
from tests.support.sql import sql


def features(n: int, seed: int = 0, with_id: bool = True) -> pd.DataFrame:
    """The demo's shape: 16 float32 features and an int32 label (plus an int64 id)."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({f"f{i}": rng.standard_normal(n).astype("float32") for i in range(16)})
    df["label"] = rng.integers(0, 10, n).astype("int32")
    if with_id:
        df.insert(0, "id", np.arange(n, dtype="int64") * 7 + 3)
    return df


def count(client, table: str) -> int:
    return sql(client, f"SELECT COUNT(*) FROM {table}")[0][0]


def table_exists(client, table: str) -> bool:
    return bool(sql(client, f"SELECT TABLE_NAME FROM SYS.TABLES WHERE TABLE_NAME = '{table.upper()}'"))


def assert_sql_matches(client, table: str, df: pd.DataFrame, key: str = "id") -> None:
    """Every row of ``df`` is in the table with the same values (float32 within float32 precision)."""
    cols = [c for c in df.columns if c != key]
    got = pd.DataFrame(sql(client, f"SELECT {key}, {', '.join(cols)} FROM {table} ORDER BY {key}"),
                       columns=[key, *cols])
    want = df.sort_values(key).reset_index(drop=True)
    assert len(got) == len(want)
    np.testing.assert_array_equal(got[key].to_numpy(), want[key].to_numpy())
    for c in cols:
        if want[c].dtype == np.float32:
            np.testing.assert_allclose(got[c].to_numpy(np.float64), want[c].to_numpy(np.float64), rtol=1e-6)
        else:
            np.testing.assert_array_equal(got[c].to_numpy(), want[c].to_numpy())


# -- sources -----------------------------------------------------------------------------------------------
def test_dataframe_with_integer_key_is_visible_to_sql_and_get(ignite_conn, ignite_client, cache_name):
    df = features(3000)
    report = load(ignite_conn, cache_name, df, key="id", batch_size=700)
    assert (report.rows_in, report.rows_written, report.rows_in_cache) == (3000, 3000, 3000)
    assert report.batches_written == 5 and report.created_table and report.key_mode == "column"
    assert report.key_column == "id" and report.columns["id"] == "int64" and report.columns["f0"] == "float32"
    json.dumps(report.to_dict())
    assert_sql_matches(ignite_client, cache_name, df)
    info = sql(ignite_client, f"SELECT KEY_ALIAS, KEY_TYPE_NAME, VALUE_TYPE_NAME FROM SYS.TABLES "
                              f"WHERE TABLE_NAME = '{cache_name.upper()}'")[0]
    assert info[:2] == ["ID", "java.lang.Long"] and info[2] == report.value_type
    backups = sql(ignite_client, f"SELECT BACKUPS FROM SYS.CACHES WHERE CACHE_NAME = '{cache_name}'")[0][0]
    assert backups == 1
    row = ignite_client.get_cache(cache_name).get(int(df.id[42]))
    assert row.LABEL == df.label[42] and row.F3 == pytest.approx(float(df.f3[42]), rel=1e-6)


def test_csv_source_with_schema_nulls_and_nan(ignite_conn, ignite_client, cache_name, tmp_path):
    path = tmp_path / "people.csv"
    path.write_text("id,name,age,score,active\n1,ann,31,0.5,true\n2,,40,nan,false\n3,\"c, d\",,2.25,\n")
    report = load(ignite_conn, cache_name, path, key="id",
                  schema={"id": "int64", "name": "string", "age": "int32", "score": "float64", "active": "bool"})
    assert report.rows_in_cache == 3 and report.source == str(path)
    rows = sql(ignite_client, f"SELECT id, name, age, score, active FROM {cache_name} ORDER BY id")
    assert rows[0] == [1, "ann", 31, 0.5, True]
    assert rows[1][1] is None and np.isnan(rows[1][3]) and rows[1][4] is False  # "nan" is a value, "" is NULL
    assert rows[2] == [3, "c, d", None, 2.25, None]


def test_parquet_source_inferred_schema(ignite_conn, ignite_client, cache_name, tmp_path):
    df = features(2000, seed=1)
    path = tmp_path / "features.parquet"
    pq.write_table(pa.Table.from_pandas(df, preserve_index=False), path)
    report = load(ignite_conn, cache_name, path, key="id")
    assert report.rows_in_cache == 2000 and report.columns["label"] == "int32"
    assert_sql_matches(ignite_client, cache_name, df)


def test_schema_selects_columns(ignite_conn, ignite_client, cache_name):
    df = features(100)
    report = load(ignite_conn, cache_name, df, key="id", schema={"f0": "float64", "label": "int64"})
    assert report.columns == {"id": "int64", "f0": "float64", "label": "int64"}
    assert sorted(report.columns_ignored) == sorted(f"f{i}" for i in range(1, 16))
    types = dict(sql(ignite_client, f"SELECT COLUMN_NAME, TYPE FROM SYS.TABLE_COLUMNS "
                                    f"WHERE TABLE_NAME = '{cache_name.upper()}'"))
    assert types["F0"] == "java.lang.Double" and types["LABEL"] == "java.lang.Long" and "F1" not in types
    assert_sql_matches(ignite_client, cache_name, df[["id", "f0", "label"]].astype({"label": "int64"}))


def test_nulls_are_sql_null(ignite_conn, ignite_client, cache_name):
    df = pd.DataFrame({
        "id": [1, 2, 3, 4],
        "x": np.array([1.5, np.nan, 3.0, 4.0], "float32"),           # NaN: a value
        "n": pd.array([10, None, 30, pd.NA], dtype="Int32"),           # NA: NULL
        "s": ["a", None, "ünïcode", ""],                               # None: NULL, "" a value
        "b": pd.array([True, None, False, True], dtype="boolean"),
    })
    load(ignite_conn, cache_name, df, key="id")
    rows = sql(ignite_client, f"SELECT id, x, n, s, b FROM {cache_name} ORDER BY id")
    assert rows[0] == [1, 1.5, 10, "a", True]
    assert np.isnan(rows[1][1]) and rows[1][2:] == [None, None, None]
    assert rows[2] == [3, 3.0, 30, "ünïcode", False] and rows[3][2:] == [None, "", True]
    assert sql(ignite_client, f"SELECT COUNT(*) FROM {cache_name} WHERE n IS NULL")[0][0] == 2
    assert sql(ignite_client, f"SELECT COUNT(*) FROM {cache_name} WHERE x IS NULL")[0][0] == 0


def test_existing_table_made_by_sql_gets_the_rows(ignite_conn, ignite_client, cache_name):
    """A table someone else created (its own value type name) sees rows written by the loader."""
    t = cache_name.upper()
    sql(ignite_client, f'CREATE TABLE {t} (ID BIGINT PRIMARY KEY, V DOUBLE, S VARCHAR) WITH "cache_name={cache_name}"')
    sql(ignite_client, f"INSERT INTO {t} (ID, V, S) VALUES (100, 1.0, 'by sql')")
    report = load(ignite_conn, cache_name, pd.DataFrame({"id": [1, 2], "v": [0.5, 0.25], "s": ["x", "y"]}), key="id")
    assert not report.created_table and report.value_type.startswith("SQL_PUBLIC_")
    assert sql(ignite_client, f"SELECT id, v, s FROM {t} ORDER BY id") == [
        [1, 0.5, "x"], [2, 0.25, "y"], [100, 1.0, "by sql"]]


# -- keys and idempotence ------------------------------------------------------------------------------------
def test_rerun_is_idempotent(ignite_conn, ignite_client, cache_name):
    df = features(5000, seed=2, with_id=False)
    first = load(ignite_conn, cache_name, df, batch_size=2000)
    before = sql(ignite_client, f"SELECT row_key, f0, f15, label FROM {cache_name} ORDER BY row_key")
    second = load(ignite_conn, cache_name, df.sample(frac=1.0, random_state=3), batch_size=1500)
    after = sql(ignite_client, f"SELECT row_key, f0, f15, label FROM {cache_name} ORDER BY row_key")
    assert first.key_mode == "row_hash" and first.created_table and not second.created_table
    assert first.rows_in_cache == second.rows_in_cache == 5000 and before == after
    assert all(r[0] >= 0 for r in before)


def test_wide_rows_are_written_in_requests_within_the_byte_cap(ignite_conn, ignite_client, cache_name):
    """600 rows of 800 float columns (about 2.4 MB) with batch_size 10,000: written in several put-all requests
    of at most MAX_REQUEST_BYTES each, every row arriving whole."""
    rng = np.random.default_rng(4)
    frame = pd.DataFrame(rng.random((600, 800), dtype=np.float32), columns=[f"p{i}" for i in range(800)])
    frame.insert(0, "id", np.arange(600, dtype=np.int64))
    sizes = []
    real = etl._put_all
    with pytest.MonkeyPatch.context() as mp:  # the real write, with its request sizes noted
        mp.setattr(etl, "_put_all",
                   lambda client, cid, payload: (sizes.append(len(payload)), real(client, cid, payload)))
        report = load(ignite_conn, cache_name, frame, key="id", batch_size=10_000)
    assert report.rows_written == report.rows_in_cache == 600
    assert report.batches_written == len(sizes) >= 2 and max(sizes) <= etl.MAX_REQUEST_BYTES
    (row,) = sql(ignite_client, f"SELECT P0, P799 FROM {cache_name} WHERE ID = 599")
    assert list(row) == pytest.approx([frame.p0[599], frame.p799[599]])


def test_identical_rows_collapse_into_one_key(ignite_conn, ignite_client, cache_name):
    df = pd.DataFrame({"a": [1.0, 2.0, 1.0, 1.0, -0.0, 0.0], "b": ["x", "y", "x", "x", "z", "z"]})
    report = load(ignite_conn, cache_name, df)
    assert report.duplicates_collapsed == 3 and report.rows_written == 3 and report.rows_in_cache == 3
    assert sorted(sql(ignite_client, f"SELECT b FROM {cache_name}")) == [["x"], ["y"], ["z"]]


def test_hashed_string_key(ignite_conn, ignite_client, cache_name):
    df = pd.DataFrame({"email": ["a@x.org", "b@x.org", "c@x.org"], "age": [30, 40, 50]})
    report = load(ignite_conn, cache_name, df, key="email")
    assert report.key_mode == "hashed_column" and report.key_column == "row_key"
    keys = hash_keys(df.email)
    assert sql(ignite_client, f"SELECT row_key, email, age FROM {cache_name} ORDER BY age") == [
        [int(k), e, a] for k, e, a in zip(keys, df.email, df.age, strict=True)]
    assert ignite_client.get_cache(cache_name).get(int(hash_keys(["b@x.org"])[0])).AGE == 40
    df.loc[1, "age"] = 41  # same key value: the entry is overwritten, not added
    assert load(ignite_conn, cache_name, df, key="email").rows_in_cache == 3
    assert sql(ignite_client, f"SELECT age FROM {cache_name} WHERE email = 'b@x.org'") == [[41]]


KEY_SCRIPT = """
import json, numpy as np, pandas as pd, pyarrow as pa
from ignite_tf.etl.loader import hash_keys, row_hash_keys
cols = {"a": pa.array([1.5, None, float("nan")], pa.float32()), "s": pa.array(["x", "ü", None])}
print(json.dumps({"strings": hash_keys(["alice", "bob", "ünï"]).tolist(),
                  "floats": hash_keys([0.5, -0.0], "float64").tolist(),
                  "rows": row_hash_keys(cols, {"a": "float32", "s": "string"}).tolist()}))
"""


def test_hashed_keys_are_stable_across_processes():
    cols = {"s": pa.array(["x", "ü", None]), "a": pa.array([1.5, None, float("nan")], pa.float32())}
    here = {"strings": hash_keys(["alice", "bob", "ünï"]).tolist(),
            "floats": hash_keys([0.5, 0.0], "float64").tolist(),
            "rows": row_hash_keys(cols, {"a": "float32", "s": "string"}).tolist()}
    for seed in ("1", "2"):  # Python's hash() would differ between these two
        proc = subprocess.run([sys.executable, "-c", KEY_SCRIPT], capture_output=True, text=True, check=True,
                              env={"PYTHONHASHSEED": seed, "PATH": "/usr/bin:/bin"})
        assert json.loads(proc.stdout) == here
    assert here["strings"][0] == hash_keys(np.array(["alice"], dtype=object))[0]
    assert all(0 <= k < 2**63 for v in here.values() for k in v) and len(set(here["rows"])) == 3
    # Keys already in users' caches depend on the algorithm: it must not change between versions.
    assert here["strings"][0] == 8227683891280493330
    assert hash_keys([7], "int64")[0] == 8813626210444184066
    assert row_hash_keys({"a": pa.array([1.5], pa.float32())}, {"a": "float32"})[0] == 3627694814590075963


def test_encoding_matches_pyignite(ignite_client):
    """Rows encoded with NumPy are byte for byte what pyignite writes for the same object."""
    from pyignite import datatypes as dt
    from pyignite.binary import GenericObjectMeta
    from pyignite.stream import BinaryStream
    from pyignite.utils import entity_id, schema_id

    types = {"F": ("float32", dt.FloatObject), "D": ("float64", dt.DoubleObject), "I": ("int32", dt.IntObject),
             "L": ("int64", dt.LongObject), "B": ("bool", dt.BoolObject), "S": ("string", dt.String)}
    values = {"F": [1.5, None, 2.0], "D": [2.25, 3.0, float("nan")], "I": [7, -3, None], "L": [2**40, None, -1],
              "B": [True, False, None], "S": ["héllo", None, "x" * 300]}
    fields = OrderedDict((k, t[1]) for k, t in types.items())
    cls = GenericObjectMeta("EncodingProbe", (), {}, type_name="ignite_tf.encoding_probe", schema=fields)
    # object columns: None is a null there; D is float64, where NaN is a value
    cols = [etl_encode.encode_column(
        etl_input.convert_column(pd.Series(values[k], dtype="float64" if k == "D" else object), k, t[0], "test"),
        k, t[0]) for k, t in types.items()]
    keys = np.array([5, 6, 7], np.int64)
    for lo, hi in ((0, 1), (1, 2), (2, 3), (0, 3)):
        payload = etl_encode.encode_rows(keys, cols, lo, hi, entity_id(cls.type_name), schema_id(fields))
        want = bytearray(np.array([hi - lo], "<i4").tobytes())
        for r in range(lo, hi):
            obj = cls(**{k: values[k][r] for k in types})
            with BinaryStream(ignite_client) as stream:
                obj._from_python(stream, save_to_buf=True)
            want += b"\x04" + int(keys[r]).to_bytes(8, "little") + bytes(obj._buffer)
        assert payload == bytes(want), (lo, hi)
    numbers = [c for c in cols if c.ctype != "string"]
    for c in numbers:
        c.nulls = None  # no nulls and no strings: the column-slice fast path
    fast = etl_encode.encode_rows(keys, numbers, 0, 3, 11, 12)
    assert fast == etl_encode._encode_general(keys, numbers, 0, 3, 11, 12)


# -- refused input: a LoadError that says what and where, and nothing written ---------------------------------
def test_missing_key_column(ignite_conn, ignite_client, cache_name):
    with pytest.raises(LoadError, match=r"key column 'uid' not found; available: id, f0, f1, .*label") as err:
        load(ignite_conn, cache_name, features(10), key="uid")
    assert err.value.report["rows_written"] == 0 and err.value.report["batches_written"] == 0
    assert not table_exists(ignite_client, cache_name)


def test_missing_schema_column(ignite_conn, ignite_client, cache_name):
    with pytest.raises(LoadError, match=r"column\(s\) 'weight' not found; available: id, f0"):
        load(ignite_conn, cache_name, features(10), key="id", schema={"f0": "float32", "weight": "float32"})
    assert not table_exists(ignite_client, cache_name)


def test_bad_value_names_row_and_column_and_writes_nothing(ignite_conn, ignite_client, cache_name):
    schema = {"id": "int64", "age": "int32"}
    good = pd.DataFrame({"id": range(30), "age": [str(20 + i) for i in range(30)]})
    load(ignite_conn, cache_name, good, key="id", schema=schema)
    bad = good.assign(id=good.id + 100)  # 30 new keys, none may be written
    bad.loc[17, "age"] = "abc"
    bad.loc[25, "age"] = "4.5"
    with pytest.raises(LoadError, match=r"row 17, column 'age': 'abc' is not int32; "
                                        r"row 25, column 'age': '4.5' is not int32") as err:
        load(ignite_conn, cache_name, bad, key="id", schema=schema)
    assert err.value.report["rows_written"] == 0 and err.value.report["rows_in"] == 30
    assert count(ignite_client, cache_name) == 30
    assert sql(ignite_client, f"SELECT MAX(id), MAX(age) FROM {cache_name}") == [[29, 49]]


def test_bad_csv_value(ignite_conn, ignite_client, cache_name, tmp_path):
    path = tmp_path / "ages.csv"
    lines = ["id,age"] + [f"{i},{30 + i}" for i in range(40)]
    lines[18] = "17,abc"  # data row 17 (the header is line 0 here)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LoadError, match=rf"{path}: row 17, column 'age': 'abc' is not int32"):
        load(ignite_conn, cache_name, path, key="id", schema={"id": "int64", "age": "int32"})
    assert not table_exists(ignite_client, cache_name)


def test_out_of_range_and_uninferable_values(ignite_conn, ignite_client, cache_name):
    with pytest.raises(LoadError, match=r"row 1, column 'n': 3000000000 is not int32"):
        load(ignite_conn, cache_name, pd.DataFrame({"n": [1, 3_000_000_000]}), schema={"n": "int32"})
    with pytest.raises(LoadError, match=r"row 0, column 'x': 1e\+300 is not float32"):
        load(ignite_conn, cache_name, pd.DataFrame({"x": [1e300]}), schema={"x": "float32"})
    with pytest.raises(LoadError, match=r"column 'when' has type timestamp.*declare it in schema="):
        load(ignite_conn, cache_name, pd.DataFrame({"when": pd.to_datetime(["2024-01-01"]), "v": [1.0]}))
    assert not table_exists(ignite_client, cache_name)


def test_empty_input(ignite_conn, ignite_client, cache_name, tmp_path):
    with pytest.raises(LoadError, match=r"DataFrame: the input is empty \(2 columns, no rows\)"):
        load(ignite_conn, cache_name, features(0).iloc[:, :2])
    path = tmp_path / "empty.csv"
    path.write_text("id,age\n")
    with pytest.raises(LoadError, match="the input is empty"):
        load(ignite_conn, cache_name, path)
    assert not table_exists(ignite_client, cache_name)


def test_unreachable_cluster_names_the_address(cache_name):
    port = free_port()  # nothing listens on it
    conn = IgniteConnectionConfig(addresses=[("127.0.0.1", port)], timeout=2)
    with pytest.raises(IgniteUnavailableError, match=rf"127\.0\.0\.1:{port}"):
        load(conn, cache_name, features(5))


def test_schema_conflict_with_existing_table(ignite_conn, ignite_client, cache_name):
    df = features(50)
    load(ignite_conn, cache_name, df, key="id")
    before = sql(ignite_client, f"SELECT id, f0 FROM {cache_name} ORDER BY id")
    changed = df.assign(id=df.id + 1, f0=df.f0.astype("float64"), extra=1.0)
    with pytest.raises(LoadError, match=r"column 'extra' \(float64\) only in the input; "
                                        r"column 'f0' is float32 \(REAL\) in the table but float64 \(DOUBLE\) "
                                        r"in the input") as err:
        load(ignite_conn, cache_name, changed, key="id")
    assert err.value.report["rows_written"] == 0
    with pytest.raises(LoadError, match=r"primary key is 'id' there, 'row_key' in the input"):
        load(ignite_conn, cache_name, df.drop(columns="id"))
    assert sql(ignite_client, f"SELECT id, f0 FROM {cache_name} ORDER BY id") == before


def test_bad_files_and_names(ignite_conn, ignite_client, cache_name, tmp_path):
    (tmp_path / "rows.json").write_text("[]")
    with pytest.raises(LoadError, match=r"unsupported file type '\.json'; give a \.csv, \.parquet"):
        load(ignite_conn, cache_name, tmp_path / "rows.json")
    with pytest.raises(LoadError, match=r"nothere\.parquet: no such file"):
        load(ignite_conn, cache_name, str(tmp_path / "nothere.parquet"))
    with pytest.raises(LoadError, match=r"column 'my col' is not a usable SQL identifier"):
        load(ignite_conn, cache_name, pd.DataFrame({"my col": [1.0]}))
    with pytest.raises(LoadError, match=r"column 'select' is not a usable SQL identifier"):
        load(ignite_conn, cache_name, pd.DataFrame({"select": [1.0]}))
    with pytest.raises(LoadError, match=r"cache name 'my-cache' is not a usable SQL identifier"):
        load(ignite_conn, "my-cache", pd.DataFrame({"a": [1.0]}))
    assert not table_exists(ignite_client, cache_name)


def test_bad_keys(ignite_conn, ignite_client, cache_name):
    with pytest.raises(LoadError, match=r"key column 'id' has duplicate values \(row 1 = 2, row 3 = 2\)"):
        load(ignite_conn, cache_name, pd.DataFrame({"id": [1, 2, 3, 2], "v": [1.0, 2.0, 3.0, 4.0]}), key="id")
    with pytest.raises(LoadError, match=r"key column 'email' has 1 null value\(s\), at rows \[1\]"):
        load(ignite_conn, cache_name, pd.DataFrame({"email": ["a", None], "v": [1.0, 2.0]}), key="email")
    assert not table_exists(ignite_client, cache_name)


# -- a node lost in the middle of a load ----------------------------------------------------------------------
def test_node_lost_midway(own_ignite, monkeypatch):
    """Losing one of two nodes (backups=1) costs nothing; losing the last one fails with a true report."""
    sent, killed = [], []
    put_all = etl._put_all

    def send(client, cache_id, payload):
        # The batch after the kill goes to the dead node (the client would pick it at random, or not: with
        # partition awareness a live one 5 times in a row in 1 of 32 loads), so the re-send is certain.
        if killed and killed[0] is not None:
            port = killed[0]
            killed[0] = None
            dead = next(c for c in client._nodes if c.port == port)  # pyignite's own connection list
            sent.append(dead.port)
            return put_all(SimpleNamespace(random_node=dead), cache_id, payload)
        sent.append("any")
        return put_all(client, cache_id, payload)

    monkeypatch.setattr(etl, "_put_all", send)
    cluster = own_ignite(2)
    conn = IgniteConnectionConfig(addresses=[("127.0.0.1", n.client_port) for n in cluster.nodes], timeout=20)
    df = features(8000, seed=5)  # 8 batches: the kills land after batch 3 and 2, mid-load

    def kill_node_1(report):
        if report.batches_written == 3:
            cluster.stop_node(1, signal.SIGKILL)
            killed.append(cluster.nodes[1].client_port)

    report = load(conn, "lost_one", df, key="id", batch_size=1000, on_batch=kill_node_1)
    assert report.rows_written == report.rows_in_cache == 8000 and report.batches_written == 8
    # The 4th batch went to the dead node first and was sent again through the live one.
    assert len(sent) == 9 and sent[3] == cluster.nodes[1].client_port

    def kill_node_0(report):
        if report.batches_written == 2:
            cluster.stop_node(0, signal.SIGKILL)

    with pytest.raises(LoadError, match=r"2000 of 8000 rows \(2 batches\) were written before it\. "
                                        r"The load is idempotent: run it again") as err:
        load(conn, "lost_all", df, key="id", batch_size=1000, on_batch=kill_node_0)
    assert err.value.report["rows_written"] == 2000 and err.value.report["batches_written"] == 2
    assert err.value.report["rows_in_cache"] == -1
