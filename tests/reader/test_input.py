"""The training input path against real Ignite: stacked decoding, pipelined scans, blocks, dataset order, leaks.

The dataset hands tf.data blocks of rows that ``rebatch`` cuts into batches; the reader decodes the feature
columns straight into one float32 matrix and keeps scans of the next partitions in flight. Each of those must
leave the rows, their order and the resources exactly as the plain column-by-column path would.
"""

from __future__ import annotations

import gc
import threading
import time
import uuid
from types import SimpleNamespace

import numpy as np
import psutil
import pytest
from ignite_tf_dev import demo_data

import ignite_tf.data as itd
from ignite_tf.errors import ConfigError
from ignite_tf.plan.partitions import PartitionMap
from ignite_tf.plan.shards import ShardPlan
from ignite_tf.reader.partition import STACKED, PartitionReader
from tests.support.polling import wait_for
from tests.support.sql import sql

FEATURES = demo_data.feature_columns()


@pytest.fixture(scope="module")
def tabular(ignite_conn):
    """12,000 rows of the shipped tabular data (16 REAL features, INT label) and a 2-worker plan."""
    from ignite_tf.etl import load

    cache = f"in_{uuid.uuid4().hex[:8]}"
    frame = demo_data.tabular(12_000, seed=3)
    load(ignite_conn, cache, frame, key="id")
    plan = ShardPlan.build(PartitionMap.discover(ignite_conn, cache), 2, seed=9)
    return SimpleNamespace(cache=cache, plan=plan, frame=frame.set_index("id"))


@pytest.fixture(scope="module")
def mixed(ignite_conn):
    """300 rows of mixed numeric types, some NULL, and a string column (the general decoding path)."""
    client = ignite_conn.client()
    name = f"mx_{uuid.uuid4().hex[:8]}"
    sql(client, f'CREATE TABLE {name} (ID BIGINT PRIMARY KEY, A REAL, B DOUBLE, N INT, S VARCHAR, LABEL INT) '
                f'WITH "template=partitioned,backups=1,cache_name={name}"')
    values = []
    for k in range(300):
        a = "NULL" if k % 7 == 0 else f"{k / 4}"
        n = "NULL" if k % 11 == 0 else str(k * 3)
        values.append(f"({k}, {a}, {k * 1e6}, {n}, 's{k}', {k % 3})")
    sql(client, f"INSERT INTO {name} (ID, A, B, N, S, LABEL) VALUES {','.join(values)}")
    client.close()
    return name


# -- stacked decoding ---------------------------------------------------------------------------------------
def test_stacked_matrix_is_the_columns_as_float32(tabular, ignite_conn):
    order = FEATURES[::-1]  # any order the caller asks for, not the table's
    with PartitionReader(ignite_conn, tabular.cache, batch_size=1000) as plain:
        want = plain.read_all(range(plain.partitions))
    with PartitionReader(ignite_conn, tabular.cache, batch_size=1000, stack=order) as reader:
        got = reader.read_all(range(reader.partitions))
        assert reader.stats["fast_pages"] > 0 and reader.stats["slow_pages"] == 0
    assert set(got) == {"id", "label", STACKED}
    np.testing.assert_array_equal(got["id"], want["id"])
    np.testing.assert_array_equal(got["label"], want["label"])
    assert got[STACKED].dtype == np.float32 and got[STACKED].shape == (12_000, 16)
    np.testing.assert_array_equal(got[STACKED], np.column_stack([want[c] for c in order]))
    np.testing.assert_array_equal(got[STACKED][:, -1], tabular.frame.loc[got["id"], "f0"].to_numpy())


def test_stacked_mixed_types_and_nulls_are_filled(mixed, ignite_conn):
    with PartitionReader(ignite_conn, mixed, stack=["n", "b", "a"], columns=["a", "b", "n", "s"]) as reader:
        got = reader.read_all(range(reader.partitions))
        assert reader.stats["slow_pages"] > 0  # strings and NULLs: the general path
    keys = got["id"]
    matrix = got[STACKED]
    assert set(got) == {"id", "s", STACKED} and len(keys) == 300
    n_want = np.where(keys % 11 == 0, 0, keys * 3).astype(np.float32)  # NULL int -> 0
    a_want = np.where(keys % 7 == 0, np.nan, keys / 4).astype(np.float32)  # NULL float -> NaN
    np.testing.assert_array_equal(matrix[:, 0], n_want)
    np.testing.assert_array_equal(matrix[:, 1], (keys * 1e6).astype(np.float32))
    np.testing.assert_array_equal(matrix[:, 2], a_want)
    assert list(got["s"]) == [f"s{k}" for k in keys]
    with pytest.raises(ConfigError, match=r"\['s'\] cannot be stacked"):
        PartitionReader(ignite_conn, mixed, stack=["a", "s"])


# -- pipelined scans ----------------------------------------------------------------------------------------
def test_scans_ahead_change_neither_rows_nor_order(tabular, ignite_conn):
    tasks = list(np.random.default_rng(0).permutation(1024)[:300])
    runs = {}
    for ahead in (0, 1, 16):
        # Pages of 7 rows: most partitions take several pages, so page requests and scans interleave.
        with PartitionReader(ignite_conn, tabular.cache, batch_size=333, page_size=7, scans_ahead=ahead) as reader:
            runs[ahead] = [b["id"] for b in reader.batches(tasks)]
            assert all(len(b) == 333 for b in runs[ahead][:-1])
    for ahead in (1, 16):
        np.testing.assert_array_equal(np.concatenate(runs[ahead]), np.concatenate(runs[0]))


def test_abandoned_read_with_scans_in_flight_leaves_connections_usable(tabular, ignite_conn):
    with PartitionReader(ignite_conn, tabular.cache, batch_size=5, page_size=3, scans_ahead=16) as reader:
        it = reader.batches(range(1024))
        for _ in range(4):
            next(it)
        it.close()  # one partition mid-scan, 16 scans sent ahead: all answered and their cursors closed
        assert len(reader.read_all(range(1024))["id"]) == 12_000
        # pyignite's own requests on the same connections still pair with their answers.
        assert tabular.cache in reader._client.get_cache_names()


# -- blocks, batches, dataset -------------------------------------------------------------------------------
def test_blocks_are_bounded_whole_units_and_the_batches_of_the_dataset(tabular, ignite_conn):
    common = {"plan": tabular.plan, "conn": ignite_conn, "worker": 1}
    blocks = list(itd.blocks(2, batch_size=256, shuffle_buffer=3000, block_rows=8192, **common))
    sizes = [len(b["id"]) for b in blocks]
    assert all(s == 6000 for s in sizes[:-1]) and 0 < sizes[-1] <= 6000, sizes  # two 3,000-row units a block
    assert sum(sizes) == tabular.plan.shard(1, 2).rows
    ids = np.concatenate([b["id"] for b in blocks])
    batches = list(itd.batches(2, batch_size=256, shuffle_buffer=3000, **common))
    assert all(len(b["id"]) == 256 for b in batches[:-1])
    np.testing.assert_array_equal(np.concatenate([b["id"] for b in batches]), ids)
    unshuffled = [len(b["id"]) for b in itd.blocks(2, batch_size=256, block_rows=4096, **common)]
    assert all(s == 4096 for s in unshuffled[:-1]) and sum(unshuffled) == sum(sizes)

    ds = itd.dataset(256, 2, label_column="label", stack=True, shuffle_buffer=3000, drop_remainder=False, **common)
    xs, ys = zip(*[(x.numpy(), y.numpy()) for x, y in ds], strict=True)
    assert [len(y) for y in ys] == [256] * (len(ys) - 1) + [len(ids) % 256 or 256]  # rebatch keeps batch_size
    want = tabular.frame.loc[ids]
    np.testing.assert_array_equal(np.concatenate(xs), want[FEATURES].to_numpy(np.float32))
    np.testing.assert_array_equal(np.concatenate(ys), want["label"].to_numpy())


def test_dict_dataset_and_exactly_once_over_workers(tabular, ignite_conn):
    ids, f3, labels = [], [], []
    for worker in (0, 1):
        ds = itd.dataset(500, 0, label_column="label", features=["f3", "id"], worker=worker, plan=tabular.plan,
                         conn=ignite_conn, drop_remainder=False)
        for features, label in ds:
            assert set(features) == {"f3", "id"} and features["f3"].dtype.name == "float32"
            ids.append(features["id"].numpy())
            f3.append(features["f3"].numpy())
            labels.append(label.numpy())
    ids = np.concatenate(ids)
    assert len(ids) == len(np.unique(ids)) == 12_000
    np.testing.assert_array_equal(np.concatenate(f3), tabular.frame.loc[ids, "f3"].to_numpy())
    np.testing.assert_array_equal(np.concatenate(labels), tabular.frame.loc[ids, "label"].to_numpy())


def test_repeated_dataset_has_only_full_batches_unless_drop_remainder_is_false(tabular, ignite_conn):
    """``dataset(...).repeat()`` (the porting recipe) yields full batches only, reshuffled every pass, so
    every pass leaves out other rows; ``drop_remainder=False`` keeps the short last batch of a pass."""
    common = {"label_column": "label", "features": ["id"], "worker": 1, "plan": tabular.plan, "conn": ignite_conn}
    rows, batch = tabular.plan.shard(1, 0).rows, 128
    full, rest = divmod(rows, batch)
    assert rest, f"pick a batch size that does not divide the shard's {rows} rows"
    shard_ids = np.concatenate([b["id"] for b in itd.batches(0, batch_size=batch, worker=1, plan=tabular.plan,
                                                             conn=ignite_conn, columns=["id"],
                                                             shuffle_buffer=1000)])

    repeated = itd.dataset(batch, 0, shuffle_buffer=1000, **common).repeat()
    passes = []
    for features, _ in repeated.take(3 * full):
        passes.append(features["id"].numpy())
    assert {len(b) for b in passes} == {batch}, sorted({len(b) for b in passes})
    passes = [np.concatenate(passes[i * full:(i + 1) * full]) for i in range(3)]
    np.testing.assert_array_equal(passes[0], shard_ids[:full * batch])  # pass 0 is the shard's own order
    for ids in passes:
        assert len(np.unique(ids)) == full * batch and set(ids) <= set(shard_ids)
    assert not np.array_equal(passes[0], passes[1]), "each pass is shuffled anew"
    left_out = [set(shard_ids) - set(ids) for ids in passes]
    assert all(len(s) == rest for s in left_out) and left_out[0] != left_out[1], "other rows left out each pass"

    kept = [f["id"].numpy() for f, _ in itd.dataset(batch, 0, shuffle_buffer=1000, drop_remainder=False, **common)]
    assert [len(b) for b in kept] == [batch] * full + [rest]
    np.testing.assert_array_equal(np.concatenate(kept), shard_ids)
    epoch, ds = next(itd.epochs(1, batch_size=batch, shuffle_buffer=1000, drop_remainder=False, **common))
    assert epoch == 0 and sum(len(y) for _, y in ds) == rows

    with pytest.raises(ConfigError, match=rf"holds {rows} rows in epoch 0, fewer than batch_size={rows + 1}"):
        itd.dataset(rows + 1, 0, **common)


def _ignite_sockets(ports: set[int]) -> int:
    return sum(1 for c in psutil.Process().net_connections("tcp") if c.raddr and c.raddr.port in ports)


def test_dropped_iterator_closes_its_reader_and_leaves_no_thread(tabular, ignite_conn, ignite_cluster):
    ports = {n.client_port for n in ignite_cluster.nodes}
    # Blocks of 1,024 rows (two shuffle units): the shard of 6,000 rows takes several, read one at a time.
    ds = itd.dataset(64, 0, label_column="label", stack=True, plan=tabular.plan, conn=ignite_conn, worker=0,
                     shuffle_buffer=512, block_rows=1024)
    before, threads = _ignite_sockets(ports), threading.active_count()
    it = iter(ds)
    for _ in range(5):
        next(it)
    assert _ignite_sockets(ports) > before, "the reader is open mid-epoch"
    del it

    def closed() -> bool:
        gc.collect()
        return _ignite_sockets(ports) <= before

    wait_for(closed, 20, "a dropped iterator's reader to close its connections", poll=0.1)
    assert _ignite_sockets(ports) == before, "a dropped iterator left its reader's connections open"
    assert sum(1 for _ in ds) == tabular.plan.shard(0, 0).rows // 64  # a full epoch closes it too
    assert _ignite_sockets(ports) == before
    assert threading.active_count() == threads


def test_the_end_of_an_epoch_does_not_wait_for_tf_autotuning(tabular, ignite_conn):
    """TF's tuning thread makes deleting an iterator wait for its next tick (1.28 s, 2.55 s ... after the
    iterator began; about one time in three with autotuning on): the dataset turns autotuning off."""
    ds = itd.dataset(16, 0, label_column="label", stack=True, plan=tabular.plan, conn=ignite_conn, worker=0,
                     shuffle_buffer=0).repeat()
    assert ds.options().autotune.enabled is False
    for _ in range(3):
        it = iter(ds)
        started = time.monotonic()
        while time.monotonic() - started < 1.4:  # past the 1.28 s tick, well before the next one
            next(it)
        deleting = time.monotonic()
        del it
        assert time.monotonic() - deleting < 0.5
