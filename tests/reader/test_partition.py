"""The partition reader against real Ignite nodes: every key once, values exact, routing, failover, tf.data."""

from __future__ import annotations

import json
import os
import signal
from collections import OrderedDict

import numpy as np
import pytest
from pyignite import Client, GenericObjectMeta
from pyignite.api.affinity import cache_get_node_partitions
from pyignite.datatypes import DoubleObject, IntObject, LongObject, String
from pyignite.utils import cache_id

from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.errors import CacheNotFoundError, ConfigError
from ignite_tf.plan.split import EvaluationSplit
from ignite_tf.reader.partition import HASH_SPACE, PartitionReader, ReadTask, key_hash, tf_dataset
from tests.support.sql import sql

ALL = range(1024)


# -- test data written with plain SQL (independent of the ETL loader) --------------------------------------
def sql_literal(v) -> str:
    if v is None or (isinstance(v, float) and np.isnan(v)):
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, (bool, np.bool_)):
        return "TRUE" if v else "FALSE"
    return repr(float(v)) if isinstance(v, (float, np.floating)) else str(int(v))


def create_table(client, name: str, columns: dict[str, str], rows: dict[str, list], backups: int = 1) -> None:
    """SQL table ``name`` (cache ``name``), ``columns`` {NAME: SQL type} with ID BIGINT the primary key."""
    ddl = ", ".join(f"{c} {t}{' PRIMARY KEY' if c == 'ID' else ''}" for c, t in columns.items())
    sql(client, f'CREATE TABLE {name} ({ddl}) WITH "template=partitioned,backups={backups},cache_name={name}"')
    names = list(columns)
    n = len(rows[names[0]])
    for start in range(0, n, 2000):
        values = ",".join("(" + ",".join(sql_literal(rows[c][i]) for c in names) + ")"
                          for i in range(start, min(n, start + 2000)))
        sql(client, f"INSERT INTO {name} ({', '.join(names)}) VALUES {values}")


def numeric_rows(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"ID": rng.permutation(np.arange(n, dtype=np.int64) * 7 - 5000),
            "F0": rng.standard_normal(n).astype(np.float32), "F1": rng.standard_normal(n) * 1e6,
            "N": rng.integers(-2**31, 2**31, n).astype(np.int32), "LABEL": rng.integers(0, 3, n).astype(np.int32)}


NUMERIC = {"ID": "BIGINT", "F0": "REAL", "F1": "DOUBLE", "N": "INT", "LABEL": "INT"}


def by_key(data: dict[str, np.ndarray], key: str) -> dict[str, np.ndarray]:
    order = np.argsort(np.asarray(data[key]), kind="stable")
    return {k: v[order] for k, v in data.items()}


def assert_same_rows(got: dict, rows: dict[str, np.ndarray], key: str = "id") -> None:
    keys = np.asarray(got[key])
    assert len(np.unique(keys)) == len(keys), "a key came out twice"
    assert set(keys.tolist()) == set(np.asarray(rows["ID"]).tolist())
    got, want = by_key(got, key), by_key({k.lower(): np.asarray(v) for k, v in rows.items()}, "id")
    for name, values in want.items():
        assert got[name].dtype == values.dtype, name
        np.testing.assert_array_equal(got[name], values, err_msg=name)


@pytest.fixture(scope="module")
def numeric_table(ignite_cluster, ignite_conn):
    """5,000 rows of fixed-size numeric columns, no nulls (the fast decoding path)."""
    client = ignite_conn.client()
    rows = numeric_rows(5000)
    create_table(client, "reader_numeric", NUMERIC, rows)
    client.close()
    return "reader_numeric", rows


# -- key hash and tasks ---------------------------------------------------------------------------------------
def _splitmix64(x: int) -> int:
    """Plain-integer reference of splitmix64 (Vigna's C code, arithmetic mod 2**64)."""
    m = 2**64 - 1
    z = (x + 0x9E3779B97F4A7C15) & m
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & m
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & m
    return z ^ (z >> 31)


def test_key_hash_is_splitmix64():
    assert key_hash(np.array([0]))[0] == np.uint64(0xE220A8397B1DCDAF)  # splitmix64's well-known first output
    keys = np.concatenate([np.arange(-1000, 1000), [2**63 - 1, -2**63, 123456789012345]])
    assert key_hash(keys).tolist() == [_splitmix64(k & (2**64 - 1)) for k in keys.tolist()]
    keys = np.arange(-1000, 1000)
    h = key_hash(keys)
    assert h.dtype == np.uint64 and len(np.unique(h)) == len(keys)
    np.testing.assert_array_equal(key_hash(keys.astype(np.int32)), h)


def test_read_task_json_and_validation():
    task = ReadTask(7, 10, 2**63)
    assert ReadTask.from_dict(json.loads(json.dumps(task.to_dict()))) == task
    assert ReadTask.from_dict({"partition": 3}) == ReadTask(3) and ReadTask(3).whole
    parts = ReadTask(5).split(3)
    assert [p.hash_lo for p in parts][0] == 0 and parts[-1].hash_hi == HASH_SPACE
    assert all(a.hash_hi == b.hash_lo for a, b in zip(parts, parts[1:], strict=False))
    for bad in (dict(partition=-1), dict(partition=1, hash_lo=5, hash_hi=5), dict(partition=1, hash_hi=2**64 + 1)):
        with pytest.raises(ConfigError, match="ReadTask"):
            ReadTask(**bad)


# -- reading ------------------------------------------------------------------------------------------------
def test_reads_every_key_once_with_exact_values(numeric_table, ignite_conn, ignite_client):
    name, rows = numeric_table
    with PartitionReader(ignite_conn, name, page_size=2048) as reader:
        assert reader.key_column == "id"
        assert list(reader.schema) == ["id", "f0", "f1", "n", "label"]
        assert reader.schema["f0"] == np.float32 and reader.schema["n"] == np.int32
        got = reader.read_all(ALL)
        stats = reader.stats
    assert_same_rows(got, rows)
    assert stats["rows"] == 5000 and stats["failovers"] == 0
    assert stats["fast_pages"] > 0 and stats["slow_pages"] == 0
    # One page per partition here, each sent to its partition's primary: pages per node = its primaries.
    mapping = cache_get_node_partitions(ignite_client._nodes[0], cache_id(name)).value
    node_parts = mapping["partition_mapping"][cache_id(name)]["node_mapping"]
    by_uuid = {c.uuid: f"{c.host}:{c.port}" for c in ignite_client._nodes}
    assert stats["pages_per_node"] == {by_uuid[u]: len(p) for u, p in node_parts.items()}


def test_given_primaries_route_the_scans(numeric_table, ignite_conn):
    """A caller's partition map (e.g. PartitionMap.primary_addresses()) decides where each scan goes."""
    name, rows = numeric_table
    (h0, p0), (h1, p1) = ignite_conn.addresses
    primaries = {p: ("localhost" if p % 2 else h0, p0 if p % 2 else p1) for p in ALL}  # host names match too
    backups = {p: [(h1, p1)] for p in ALL}
    with PartitionReader(ignite_conn, name, primaries=primaries, backups=backups, page_size=2048) as reader:
        got = reader.read_all(ALL)
        assert reader.stats["pages_per_node"] == {f"{h0}:{p0}": 512, f"{h1}:{p1}": 512}
    assert_same_rows(got, rows)


def test_small_pages_and_batch_sizes(numeric_table, ignite_conn):
    name, rows = numeric_table
    with PartitionReader(ignite_conn, name, batch_size=333, page_size=3, columns=["LABEL", "f0"]) as reader:
        batches = list(reader.batches(ALL))
        assert reader.stats["pages"] >= 2 * 1024  # partitions of about 5 rows span several pages
    sizes = [len(b["id"]) for b in batches]
    assert all(s == 333 for s in sizes[:-1]) and 0 < sizes[-1] <= 333 and sum(sizes) == 5000
    assert list(batches[0]) == ["id", "label", "f0"]
    got = {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
    assert_same_rows(got, {k: rows[k] for k in ("ID", "LABEL", "F0")})


def test_hash_ranges_split_a_partition(numeric_table, ignite_conn):
    name, _ = numeric_table
    with PartitionReader(ignite_conn, name) as reader:
        whole = {p: reader.read_all([p])["id"] for p in range(6)}
        for p, keys in whole.items():
            parts = [reader.read_all([t])["id"] for t in ReadTask(p).split(3)]
            cut = [ReadTask(p, 0, 2**62), ReadTask(p, 2**62, 2**63 + 12345), ReadTask(p, 2**63 + 12345)]
            for pieces, tasks in ((parts, ReadTask(p).split(3)), ([reader.read_all([t])["id"] for t in cut], cut)):
                joined = np.concatenate(pieces)
                assert len(joined) == len(np.unique(joined)) and set(joined.tolist()) == set(keys.tolist())
                for piece, task in zip(pieces, tasks, strict=True):
                    assert all(task.hash_lo <= h < task.hash_hi for h in key_hash(piece).tolist())
        assert sum(len(k) for k in whole.values()) > 0


def test_hash_range_split_and_fingerprint_share_one_key_hash(numeric_table, ignite_conn):
    """A training read with all three users of the key hash (a task's hash range, the held-out split, the
    fingerprint) keeps exactly the rows, and fingerprints, of the same read with a plain key filter, which
    hashes the keys itself."""
    name, _ = numeric_table
    split = EvaluationSplit(0.3, 5)
    tasks = [t for p in range(8) for t in ReadTask(p).split(2)]
    reads = {}
    for how, key_filter in (("shared", split.training_filter()), ("plain", lambda keys: ~split.held_out(keys))):
        with PartitionReader(ignite_conn, name, key_filter=key_filter, fingerprint=True) as reader:
            reads[how] = (reader.read_all(tasks)["id"], reader.fingerprints.done)
    (keys, prints), (plain_keys, plain_prints) = reads["shared"], reads["plain"]
    with PartitionReader(ignite_conn, name) as reader:
        every = reader.read_all(range(8))["id"]
    assert sorted(keys.tolist()) == sorted(every[~split.held_out(every)].tolist())
    assert 0 < len(keys) < len(every) and sorted(plain_keys.tolist()) == sorted(keys.tolist())
    assert prints == plain_prints and sum(fp["rows"] for fp in prints.values()) == len(every)


def test_nulls_strings_and_general_path(ignite_conn, ignite_client, cache_name):
    n = 2000
    rng = np.random.default_rng(1)
    rows = {"ID": np.arange(n, dtype=np.int64), "F0": rng.standard_normal(n).astype(np.float32),
            "S": np.array([("é" * (i % 4)) + f"row-{i}" + "x" * (i % 300) for i in range(n)], dtype=object),
            "N": rng.integers(0, 100, n).astype(np.int32), "B": rng.integers(0, 2, n).astype(bool),
            "D": rng.standard_normal(n)}
    null = {c: rng.random(n) < 0.2 for c in ("F0", "S", "N", "B")}
    written = {c: [None if c in null and null[c][i] else v for i, v in enumerate(rows[c])] for c in rows}
    create_table(ignite_client, cache_name, {"ID": "BIGINT", "F0": "REAL", "S": "VARCHAR", "N": "INT",
                                             "B": "BOOLEAN", "D": "DOUBLE"}, written)
    with PartitionReader(ignite_conn, cache_name, batch_size=500) as reader:
        assert reader.schema["s"] == np.dtype(object) and reader.schema["b"] == np.dtype(bool)
        got = by_key(reader.read_all(ALL), "id")
        assert reader.stats["slow_pages"] > 0
    np.testing.assert_array_equal(got["id"], rows["ID"])
    f0 = np.where(null["F0"], np.float32(np.nan), rows["F0"])
    np.testing.assert_array_equal(got["f0"], f0)  # NULL -> NaN, plain ndarray
    np.testing.assert_array_equal(got["d"], rows["D"])
    for col in ("S", "N", "B"):
        values = got[col.lower()]
        assert isinstance(values, np.ma.MaskedArray), col
        np.testing.assert_array_equal(np.ma.getmaskarray(values), null[col], err_msg=col)
        np.testing.assert_array_equal(values.data[~null[col]], rows[col][~null[col]], err_msg=col)
    assert set(got["s"].data[null["S"]]) == {""} and not got["n"].data[null["N"]].any()


def test_plain_caches_without_sql(ignite_cluster, ignite_conn, cache_name):
    """Caches written by pyignite: primitive values, and objects with full (non-compact) footers."""
    client = Client(compact_footer=False)
    client.connect([("127.0.0.1", n.client_port) for n in ignite_cluster.nodes])
    try:
        prim = client.create_cache(cache_name)
        prim.put_all({(k, LongObject): (k * 0.5, DoubleObject) for k in range(300)})
        schema = OrderedDict([("Score", DoubleObject), ("Name", String), ("Count", IntObject)])

        class Item(metaclass=GenericObjectMeta, type_name=f"Item_{cache_name}", schema=schema):
            pass

        objs = client.create_cache(cache_name + "_obj")
        objs.put_all({(k, LongObject): Item(Score=k / 4, Name="n" * (k % 400), Count=k) for k in range(300)})
        with PartitionReader(ignite_conn, cache_name) as reader:
            assert reader.key_column == "_key" and list(reader.schema) == ["_key", "_val"]
            got = by_key(reader.read_all(ALL), "_key")
        np.testing.assert_array_equal(got["_key"], np.arange(300))
        np.testing.assert_array_equal(got["_val"], np.arange(300) * 0.5)
        with PartitionReader(ignite_conn, cache_name + "_obj", columns=["score", "NAME", "count"]) as reader:
            got = by_key(reader.read_all(ALL), "_key")
        np.testing.assert_array_equal(got["score"], np.arange(300) / 4)
        np.testing.assert_array_equal(got["count"], np.arange(300, dtype=np.int32))
        assert got["name"].tolist() == ["n" * (k % 400) for k in range(300)]
    finally:
        client.close()


def test_errors_name_the_input(numeric_table, ignite_conn):
    with pytest.raises(CacheNotFoundError, match="no_such_cache"):
        PartitionReader(ignite_conn, "no_such_cache")
    with pytest.raises(ConfigError, match="no column"):
        PartitionReader(ignite_conn, numeric_table[0], columns=["f0", "nope"])
    with PartitionReader(ignite_conn, numeric_table[0]) as reader, pytest.raises(ConfigError, match="1024"):
        list(reader.batches([1024]))


def test_abandoned_scan_leaves_the_connection_usable(numeric_table, ignite_conn):
    name, rows = numeric_table
    with PartitionReader(ignite_conn, name, batch_size=1, page_size=1) as reader:
        it = reader.batches(ALL)
        for _ in range(3):
            next(it)
        it.close()  # mid-partition: the open cursor is closed on the server
        assert_same_rows(reader.read_all(ALL), rows)


# -- failover -----------------------------------------------------------------------------------------------
def test_node_killed_mid_read_every_key_once(own_ignite):
    cluster = own_ignite(2)
    conn = IgniteConnectionConfig(addresses=tuple(("127.0.0.1", n.client_port) for n in cluster.nodes),
                                  timeout=120)  # a shared 2-core machine can be slow to INSERT
    client = conn.client()
    # Keys 7 apart fall evenly on the 1024 partitions: 6,500 rows are 6 or 7 a partition, enough for the kill
    # to land inside the first one's scan (>= 6 rows, asserted below); 8,000 only cost a longer cold INSERT.
    rows = numeric_rows(6500, seed=3)
    create_table(client, "failover_t", NUMERIC, rows, backups=1)
    victim = next(c for c in client._nodes if c.port == cluster.nodes[1].client_port)
    mapping = cache_get_node_partitions(client._nodes[0], cache_id("failover_t")).value
    victim_parts = sorted(mapping["partition_mapping"][cache_id("failover_t")]["node_mapping"][victim.uuid])
    client.close()
    with PartitionReader(conn, "failover_t") as reader:
        sizes = {p: len(reader.read_all([p])["id"]) for p in victim_parts}
    # A partition of the victim with >= 6 rows first: the kill lands inside its scan, between two pages.
    first = max(victim_parts, key=sizes.get)
    assert sizes[first] >= 6
    tasks = [first] + [p for p in victim_parts if p != first] + sorted(set(ALL) - set(victim_parts))
    with PartitionReader(conn, "failover_t", batch_size=2, page_size=2) as reader:
        it = reader.batches(tasks)
        got = [next(it) for _ in range(2)]
        assert reader.stats["partitions"] == 0 and reader.stats["pages"] == 2
        cluster.stop_node(1, signal.SIGKILL)
        got.extend(it)
        stats = reader.stats
    assert stats["failovers"] >= 1
    assert stats["pages_per_node"][f"127.0.0.1:{cluster.nodes[0].client_port}"] > 0
    assert_same_rows({k: np.concatenate([b[k] for b in got]) for k in got[0]}, rows)


# -- tf.data ------------------------------------------------------------------------------------------------
def test_tf_dataset_yields_the_same_rows(numeric_table, ignite_conn):
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    name, rows = numeric_table
    tasks = list(range(64))
    with PartitionReader(ignite_conn, name, batch_size=100) as reader:
        want = reader.read_all(tasks)
    ds = tf_dataset(ignite_conn, name, tasks, batch_size=100, label="label")
    assert ds.element_spec[1].dtype == tf.int32 and ds.element_spec[0]["f0"].dtype == tf.float32
    feats, labels = [], []
    for features, label in ds:
        assert features["id"].shape[0] <= 100
        feats.append({k: v.numpy() for k, v in features.items()})
        labels.append(label.numpy())
    got = {k: np.concatenate([f[k] for f in feats]) for k in feats[0]}
    got["label"] = np.concatenate(labels)
    assert set(got) == set(want)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)
