"""ShardPlan + worker datasets against real Ignite: exactly-once coverage, reshuffle, locality, TF_CONFIG."""

from __future__ import annotations

import json
import os
import re
from collections import Counter

import numpy as np
import pytest

import ignite_tf.data as itd
from ignite_tf.plan.partitions import PartitionMap
from ignite_tf.plan.shards import ShardPlan
from tests.support.sql import create_table


def keys_read(plan: ShardPlan, conn, epoch: int) -> list[list[int]]:
    out = []
    for w in range(plan.workers):
        keys = []
        for batch in itd.batches(epoch, batch_size=97, worker=w, plan=plan, conn=conn):
            keys.extend(int(k) for k in batch["id"])
        out.append(keys)
    return out


def assert_exactly_once(per_worker: list[list[int]], expected: set[int]):
    counts = Counter(k for keys in per_worker for k in keys)
    assert set(counts) == expected, "every row read"
    dupes = [k for k, c in counts.items() if c > 1]
    assert not dupes, f"rows read twice: {dupes[:5]}"


@pytest.mark.parametrize("template,n_rows,workers", [
    ("partitioned", 3000, 1),        # one worker reads everything
    ("partitioned", 3000, 3),        # 1024 partitions, 3 workers
    ("ignite_tf_small", 1200, 3),    # 8 partitions, 3 workers: whole partitions
    ("ignite_tf_small", 1200, 12),   # 8 partitions, 12 workers: record-level cuts
])
def test_every_row_exactly_once_per_epoch(ignite_conn, ignite_client, cache_name, template, n_rows, workers):
    keys = list(range(0, n_rows * 5, 5))
    create_table(ignite_client, cache_name, keys, template=template)
    pm = PartitionMap.discover(ignite_conn, cache_name)
    plan = ShardPlan.build(pm, workers, reshuffle="epoch", seed=11, conn=ignite_conn)
    for epoch in (0, 1):
        per_worker = keys_read(plan, ignite_conn, epoch)
        assert_exactly_once(per_worker, set(keys))
        sizes = [len(k) for k in per_worker]
        assert min(sizes) > 0
        if plan.cuts is not None:
            assert max(sizes) - min(sizes) <= 0.01 * n_rows / workers + 1, sizes
        else:
            assert max(sizes) - n_rows / workers <= max(pm.rows)
        # What the plan promised is what was read.
        assert sizes == [s.rows for s in plan.shards(epoch)]


def test_empty_partitions_are_still_covered(ignite_conn, ignite_client, cache_name):
    # Rows in only a few of the 8 partitions: the others are empty at plan time.
    create_table(ignite_client, cache_name, [], template="ignite_tf_small")
    pm0 = PartitionMap.discover(ignite_conn, cache_name)
    cache = ignite_client.get_cache(cache_name)
    del cache
    keys = [k for k in range(4000) if k % 8 == 0][:300]
    create_rows = ",".join(f"({k},{k / 2},{k % 3})" for k in keys)
    with ignite_client.sql(f"INSERT INTO {cache_name} (ID, F0, LABEL) VALUES {create_rows}") as cur:
        list(cur)
    pm = PartitionMap.discover(ignite_conn, cache_name)
    assert pm0.total_rows == 0 and pm.total_rows == len(keys)
    empty = [p for p in range(pm.partitions) if pm.rows[p] == 0]
    assert empty, "the test needs empty partitions"
    workers = sum(1 for r in pm.rows if r) + 1  # more workers than non-empty partitions -> cuts
    plan = ShardPlan.build(pm, workers, conn=ignite_conn)
    assert plan.cuts is not None
    covered = {s.partition for sh in plan.shards(0) for s in sh.slices}
    assert covered == set(range(pm.partitions))
    # Rows that arrive in a partition that was empty at plan time are still read, once.
    late = next(k for k in range(1, 10_000) if k % 8 and k not in keys)
    with ignite_client.sql(f"INSERT INTO {cache_name} (ID, F0, LABEL) VALUES ({late}, 0.5, 1)") as cur:
        list(cur)
    assert_exactly_once(keys_read(plan, ignite_conn, 0), set(keys) | {late})


def test_reshuffle_reproducible_from_seed_and_epoch(ignite_conn, ignite_client, cache_name):
    create_table(ignite_client, cache_name, range(2000))
    pm = PartitionMap.discover(ignite_conn, cache_name)
    plan = ShardPlan.build(pm, 2, seed=5)
    restarted = ShardPlan.from_json(plan.to_json())
    e0, e1 = keys_read(plan, ignite_conn, 0), keys_read(plan, ignite_conn, 1)
    assert keys_read(restarted, ignite_conn, 1) == e1, "same (seed, epoch) -> same rows in the same order"
    assert set(e0[0]) != set(e1[0]) and e0[0] != e1[0], "epochs differ"
    fixed = ShardPlan.build(pm, 2, reshuffle="none")
    assert keys_read(fixed, ignite_conn, 0) == keys_read(fixed, ignite_conn, 3)


def test_locality_is_one_when_workers_sit_on_their_nodes(ignite_conn, ignite_client, cache_name):
    from ignite_tf.reader.partition import PartitionReader

    create_table(ignite_client, cache_name, range(4000))
    pm = PartitionMap.discover(ignite_conn, cache_name)
    # Balance the nodes' primary rows exactly (delete the heavier node's surplus), so the balance bound
    # leaves room for a fully local plan; Ignite's affinity alone gives nodes slightly different sizes.
    per_node = {n: sum(pm.rows[p] for p in pm.partitions_of(n)) for n in pm.nodes}
    heavy, light = sorted(per_node, key=per_node.get, reverse=True)
    surplus = per_node[heavy] - per_node[light]
    with PartitionReader(ignite_conn, cache_name) as reader:
        heavy_keys = reader.read_all(pm.partitions_of(heavy))["id"][:surplus]
    if surplus:
        with ignite_client.sql(f"DELETE FROM {cache_name} WHERE ID IN ({','.join(map(str, heavy_keys))})") as cur:
            list(cur)
    pm = PartitionMap.discover(ignite_conn, cache_name)
    hosts = [n.consistent_id for n in sorted(pm.nodes.values(), key=lambda n: n.order)]
    plan = ShardPlan.build(pm, len(hosts), worker_hosts=hosts)
    for epoch in range(3):
        for sh in plan.shards(epoch):
            assert sh.locality == pytest.approx(1.0), plan.describe(epoch)
            assert set(s.partition for s in sh.slices) == set(pm.partitions_of(pm.primary[sh.slices[0].partition]))
    assert "1.00" in plan.describe(0)
    # Both nodes on one host: every worker on that host is local to everything.
    same_host = ShardPlan.build(pm, 3, worker_hosts=["127.0.0.1"] * 3)
    assert all(sh.locality == 1.0 for sh in same_host.shards(0))


def test_dataset_under_tf_config(ignite_conn, ignite_client, cache_name, tmp_path, monkeypatch):
    create_table(ignite_client, cache_name, range(1000), template="ignite_tf_small")
    pm = PartitionMap.discover(ignite_conn, cache_name)
    plan = ShardPlan.build(pm, 2, seed=3)
    plan.save(tmp_path / "plan.json")
    for k, v in ignite_conn.to_env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv(itd.ENV_SHARD_PLAN, str(tmp_path / "plan.json"))
    monkeypatch.setenv("TF_USE_LEGACY_KERAS", "1")
    cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    seen = {}
    for index in (0, 1):
        monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}))
        ds = itd.dataset(batch_size=64, epoch=1, label_column="label", include_key=True, shuffle_buffer=256,
                         drop_remainder=False)
        ids, labels = [], []
        for features, label in ds:
            ids.extend(features["id"].numpy().tolist())
            labels.extend(label.numpy().tolist())
            assert set(features) == {"id", "f0"}
        expected = {int(k) for k in itd.load_plan().shard(index, 1).read_tasks() and keys_of(plan, ignite_conn, index)}
        assert set(ids) == expected
        assert labels == [i % 3 for i in ids]
        seen[index] = ids
    assert not set(seen[0]) & set(seen[1]) and len(seen[0]) + len(seen[1]) == 1000
    stacked = next(iter(itd.dataset(batch_size=10, label_column="label", stack=True, worker=0)))
    assert stacked[0].shape == (10, 1) and np.all(np.isfinite(stacked[0].numpy()))


def keys_of(plan: ShardPlan, conn, worker: int, epoch: int = 1) -> list[int]:
    return [int(k) for b in itd.batches(epoch, worker=worker, plan=plan, conn=conn) for k in b["id"]]


def test_single_worker_outside_a_cluster(ignite_conn, ignite_client, cache_name, monkeypatch):
    """No TF_CONFIG, no plan: one worker reads the whole cache."""
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv(itd.ENV_SHARD_PLAN, raising=False)
    create_table(ignite_client, cache_name, range(500), template="ignite_tf_small")
    ds = itd.dataset(batch_size=100, cache=cache_name, conn=ignite_conn, include_key=True, shuffle_buffer=0)
    ids = [int(i) for features in ds for i in features["id"].numpy()]
    assert sorted(ids) == list(range(500))


@pytest.mark.parametrize("label_type", ["INT", "DOUBLE"])
def test_a_row_without_a_label_is_refused_with_its_key(ignite_conn, ignite_client, cache_name, monkeypatch,
                                                       label_type):
    """An INT NULL would be read as 0, a DOUBLE NULL as NaN: either trains on a label the row does not have."""
    import tensorflow as tf

    from ignite_tf.errors import MissingLabelError
    from tests.support.sql import sql

    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv(itd.ENV_SHARD_PLAN, raising=False)
    sql(ignite_client, f'CREATE TABLE {cache_name} (ID BIGINT PRIMARY KEY, F0 REAL, LABEL {label_type}) '
                       f'WITH "template=ignite_tf_small,cache_name={cache_name}"')
    sql(ignite_client, f"INSERT INTO {cache_name} (ID, F0, LABEL) VALUES "
                       + ",".join(f"({k},{k / 2},{'NULL' if k in (17, 41) else k % 3})" for k in range(100)))
    ds = itd.dataset(batch_size=10, cache=cache_name, conn=ignite_conn, label_column="label", shuffle_buffer=0,
                     drop_remainder=False)
    with pytest.raises(tf.errors.OpError) as raised:
        list(ds)
    message = str(raised.value)
    assert MissingLabelError.__name__ in message
    said = re.search(rf"2 row\(s\) read from cache '{cache_name}' have no 'label' \(NULL or NaN\), keys \[(.*?)\]",
                     message)
    assert said and sorted(int(k) for k in said.group(1).split(",")) == [17, 41], message


def test_label_is_the_deprecated_name_of_label_column(ignite_conn, ignite_client, cache_name, monkeypatch):
    """``label=`` (the data API's name before it took the runtime's ``label_column``) still reads the label, and
    warns naming ``label_column``; giving both is an error."""
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.delenv(itd.ENV_SHARD_PLAN, raising=False)
    create_table(ignite_client, cache_name, range(300), template="ignite_tf_small")
    common = dict(batch_size=50, cache=cache_name, conn=ignite_conn, include_key=True, shuffle_buffer=0,
                  drop_remainder=False)

    def rows(ds):
        return sorted((int(i), int(y)) for features, labels in ds
                      for i, y in zip(features["id"].numpy(), labels.numpy(), strict=True))

    with pytest.warns(DeprecationWarning,
                      match=r"dataset\(label=\) is deprecated: use label_column=.*removed in 0\.3\.0"):
        old = itd.dataset(label="label", **common)
    assert rows(old) == rows(itd.dataset(label_column="label", **common)) == [(i, i % 3) for i in range(300)]
    with pytest.warns(DeprecationWarning, match="label_column="):
        _, old = next(itd.epochs(1, label="label", **common))
    assert rows(old) == [(i, i % 3) for i in range(300)]
    with pytest.warns(DeprecationWarning, match="label_column="):
        old = itd.epochs_dataset(50, range(1), label="label", **{k: v for k, v in common.items() if k != "batch_size"})
    assert rows(old) == [(i, i % 3) for i in range(300)]
    for function in (itd.dataset, itd.epochs_dataset, itd.epochs, itd.read_ahead, itd.cache_columns):
        with pytest.raises(TypeError, match="give label_column= only"):
            function(1, range(1), label="label", label_column="label")


def test_epochs_dataset_reads_each_epochs_rows_and_is_built_once(ignite_conn, ignite_client, cache_name,
                                                                  monkeypatch):
    """``epochs_dataset`` over 3 epochs yields epoch 1's rows, then epoch 2's, then epoch 3's (each epoch's own
    assignment, the same rows and order as ``dataset`` of that epoch). Building it over 200 epochs looks the
    columns up once and opens no reader: an epoch is read when it is reached. A bad range is refused."""
    from ignite_tf.errors import ConfigError

    create_table(ignite_client, cache_name, range(1200), template="ignite_tf_small")
    plan = ShardPlan.build(PartitionMap.discover(ignite_conn, cache_name), 2, reshuffle="epoch", seed=3)
    args = {"label_column": "label", "include_key": True, "worker": 1, "plan": plan, "conn": ignite_conn,
            "shuffle_buffer": 64}

    def ids(ds):
        return [int(i) for features, _ in ds for i in features["id"].numpy()]

    per_epoch = [ids(itd.dataset(50, e, **args)) for e in (1, 2, 3)]
    assert per_epoch[0] != per_epoch[1], "each epoch reads its own assignment"
    assert ids(itd.epochs_dataset(50, range(1, 4), **args)) == [i for rows in per_epoch for i in rows]
    assert ids(itd.epochs_dataset(50, range(2, 3), **args)) == per_epoch[1]  # one epoch: no flat_map
    # each: shapes every epoch's part, told which epoch it is
    import tensorflow as tf

    def first_row(ds, epoch):  # (the epoch each was told, the epoch's first id)
        return ds.take(1).map(lambda f, lab: (tf.fill([1], epoch), f["id"][:1]))

    def told(epochs):
        return [(int(e[0]), int(i[0])) for e, i in itd.epochs_dataset(50, epochs, each=first_row, **args)]

    expected = [(e, rows[0]) for e, rows in zip((1, 2, 3), per_epoch, strict=True)]
    assert told(range(1, 4)) == expected
    assert told(range(3, 4)) == expected[2:]

    # Spies that count the calls and run the real functions.
    looked_up, opened = [], []
    from ignite_tf.data import datasets  # where epochs_dataset finds them

    real_columns, real_blocks = datasets.cache_columns, datasets.blocks
    monkeypatch.setattr(datasets, "cache_columns", lambda *a, **k: looked_up.append(a) or real_columns(*a, **k))
    monkeypatch.setattr(datasets, "blocks", lambda *a, **k: opened.append(a[0]) or real_blocks(*a, **k))
    many = itd.epochs_dataset(50, range(200), **args)
    assert len(looked_up) == 1 and opened == []
    next(iter(many))
    assert opened == [0], "only the first epoch is read so far"
    for bad in (range(0), [0, 1], 3):
        with pytest.raises(ConfigError, match="non-empty range of epoch numbers"):
            itd.epochs_dataset(50, bad, **args)


@pytest.fixture(autouse=True)
def _read_aheads_dropped():
    """A test that fails half way leaves no read-ahead for the next one to take."""
    yield
    itd.drop_read_ahead()


def _children() -> set[int]:
    """This process's children, with those that ended and are not reaped yet (zombies)."""
    import psutil

    return {c.pid for c in psutil.Process().children()}


@pytest.mark.parametrize("process", [False, True], ids=["thread", "process"])
def test_read_ahead_hands_its_first_block_to_the_matching_dataset(ignite_conn, ignite_client, cache_name, process):
    """``read_ahead`` reads the first block in a thread (or a child process, which then reads the whole first
    pass); the ``dataset`` call with the same plan and arguments starts from it and yields exactly what a
    dataset without it yields, in the same (shuffled) order, for the first pass and the next. A read-ahead no
    dataset matches (another epoch) is left alone and closed by ``drop_read_ahead``; the dataset of that epoch
    reads its own rows. No child process is left."""
    from ignite_tf.reader.ahead import HeadStart

    create_table(ignite_client, cache_name, range(3000), template="ignite_tf_small")
    plan = ShardPlan.build(PartitionMap.discover(ignite_conn, cache_name), 2, reshuffle="epoch", seed=5)
    args = {"label_column": "label", "stack": True, "worker": 1, "plan": plan, "conn": ignite_conn,
            "shuffle_buffer": 256, "block_rows": 512}

    def two_passes(ds):
        return [np.concatenate([lab.numpy() for _, lab in ds]), np.concatenate([f.numpy()[:, 0] for f, _ in ds])]

    plain = two_passes(itd.dataset(64, 0, **args))
    before = _children()
    itd.read_ahead(64, 0, process=process, **args)
    itd.read_ahead(64, 1, process=process, **args)
    assert len(HeadStart._pending) == 2
    for head in HeadStart._pending.values():
        head.thread.join()  # a child is started in the thread
    children = {key[2]: head.proc.pid for key, head in HeadStart._pending.items() if head.proc}  # by epoch
    assert len(children) == (2 if process else 0) and set(children.values()) <= _children() - before
    ahead = two_passes(itd.dataset(64, 0, **args))
    assert len(HeadStart._pending) == 1, "the epoch-0 dataset took its read-ahead, not epoch 1's"
    if process:
        assert children[0] not in _children(), "the child of the pass that was read to its end has ended"
    for a, b in zip(ahead, plain, strict=True):
        assert len(a) == plan.shard(1, 0).rows // 64 * 64 and np.array_equal(a, b)
    epoch2 = two_passes(itd.dataset(64, 2, **args))
    assert len(HeadStart._pending) == 1
    expected = {float(k) / 2 for k in keys_of(plan, ignite_conn, 1, epoch=2)}
    assert set(epoch2[1].tolist()) <= expected and len(epoch2[1]) == plan.shard(1, 2).rows // 64 * 64
    itd.drop_read_ahead()
    assert not HeadStart._pending
    assert not _children() - before, "no read-ahead child is left"


def test_a_read_ahead_process_that_dies_fails_the_pass_and_one_that_fails_is_read_again(ignite_conn, cache_name):
    """A read-ahead child killed in the middle of the first pass: the dataset yields what came before and then
    fails with an error that says so (no rows are silently missing). A child whose request fails (a label the
    cache does not have) leaves the dataset to read, and fail, as it would without a read-ahead."""
    import signal

    import tensorflow as tf
    from ignite_tf_dev import demo_data

    from ignite_tf.errors import ConfigError
    from ignite_tf.etl import load
    from ignite_tf.reader.ahead import HeadStart

    load(ignite_conn, cache_name, demo_data.tabular(20_000), key="id")
    plan = ShardPlan.build(PartitionMap.discover(ignite_conn, cache_name), 1, reshuffle="none")
    # Blocks of 512 rows of 17 columns: a few fill the pipe, so the child is still reading when it is killed.
    args = {"label_column": "label", "stack": True, "worker": 0, "plan": plan, "conn": ignite_conn, "shuffle_buffer": 0,
            "block_rows": 512}
    before = _children()
    itd.read_ahead(64, 0, process=True, **args)
    head = next(iter(HeadStart._pending.values()))
    head.thread.join()
    assert head.proc.poll() is None, "the child waits on a full pipe"
    os.kill(head.proc.pid, signal.SIGKILL)
    seen = 0
    with pytest.raises(tf.errors.OpError, match="read-ahead process ended before its last block"):
        for _, lab in itd.dataset(64, 0, **args):
            seen += len(lab)
    assert 0 < seen < 20_000
    assert not _children() - before

    itd.read_ahead(64, 0, process=True, **{**args, "label_column": "no_such_column"})
    with pytest.raises(ConfigError, match="no_such_column"):
        itd.dataset(64, 0, **{**args, "label_column": "no_such_column"})
    assert not HeadStart._pending and not _children() - before
