"""Trained on what was validated: validation's fingerprints, the training's reads checked against them.

Real Ignite (the session cluster) and, in the last test, real TensorFlow processes under the supervisor.
"""

from __future__ import annotations

import uuid

import pytest

from ignite_tf.connection import sql
from ignite_tf.etl import load
from ignite_tf.plan.partitions import PartitionMap
from ignite_tf.plan.shards import ShardPlan
from ignite_tf.reader.partition import PartitionReader
from ignite_tf.validation.fingerprints import DataChangedError, Fingerprints, OnDataChange
from ignite_tf.validation.run import merge, validate_shard

ROWS = 600
SUITE = {"name": "fingerprints", "columns": {"f0": {"not_null": True}, "label": {"between": [0, 9]}}}


@pytest.fixture
def table(ignite_conn):
    """A fresh small table (every test changes rows), planned on 2 workers and validated: (name, plan, summary)."""
    from ignite_tf_dev import demo_data

    name = f"fp_{uuid.uuid4().hex[:8]}"
    load(ignite_conn, name, demo_data.tabular(ROWS, seed=3), key="id")
    plan = ShardPlan.build(PartitionMap.discover(ignite_conn, name), 2, seed=1)
    results = [validate_shard(ignite_conn, name, plan.shard(w, 0).read_tasks(), SUITE, shard=w) for w in range(2)]
    return name, plan, merge(results, SUITE)


def _with_expected(plan: ShardPlan, summary, on_change: str = "fail") -> ShardPlan:
    plan = ShardPlan.from_dict(plan.to_dict())
    plan.fingerprints = {"expected": summary.fingerprints, "on_data_change": on_change}
    return plan


def _train_reads(ignite_conn, plan: ShardPlan, epoch: int) -> list:
    """Both workers' epoch as the runtime reads it (features stacked into the float32 matrix, the label apart)."""
    import ignite_tf.data as itd
    from ignite_tf_dev import demo_data

    features = demo_data.feature_columns()
    return [list(itd.blocks(epoch, batch_size=64, worker=w, plan=plan, conn=ignite_conn,
                            columns=[*features, "label"], stack=features)) for w in range(2)]


def test_validation_fingerprints_every_partition_once(table):
    name, plan, summary = table
    fp = Fingerprints.from_dict(summary.fingerprints)
    assert fp.columns == ["f0", "label"]  # the columns the suite made validation read
    assert sum(t["rows"] for t in fp.tasks.values()) == ROWS == summary.fingerprints["rows"]
    # Every partition, the empty ones too: a row written later into one is a change.
    assert sorted(int(k) for k in fp.tasks) == list(range(plan.partition_map.partitions))
    # Round trip through the XCom form.
    assert Fingerprints.from_dict(fp.to_dict()) == fp


def test_training_reads_match_in_every_epoch_then_a_change_is_named(table, ignite_conn):
    name, plan, summary = table
    checked = _with_expected(plan, summary)
    for epoch in (0, 1):  # epoch 1 deals the partitions to the workers differently: still the same rows
        rows = sum(len(b["id"]) for w in _train_reads(ignite_conn, checked, epoch) for b in w)
        assert rows == ROWS

    fp = Fingerprints.from_dict(summary.fingerprints)
    changed, deleted = sorted(int(k) for k in fp.tasks)[:2]
    with PartitionReader(ignite_conn, name, columns=["f0"]) as reader:
        key_changed = int(reader.read_all([changed])["id"][0])
        key_deleted = int(reader.read_all([deleted])["id"][0])
    client = ignite_conn.client()
    try:
        sql(client, f"UPDATE {name} SET f0 = f0 + 1, label = 9 - label WHERE id = ?", [key_changed])
        sql(client, f"DELETE FROM {name} WHERE id = ?", [key_deleted])
    finally:
        client.close()

    with pytest.raises(DataChangedError) as failed:
        _train_reads(ignite_conn, checked, 0)
    message = str(failed.value)
    assert f"cache {name!r} changed since validation: partition " in message
    assert "values changed in f0, label" in message or "rows validated" in message

    warned = _with_expected(plan, summary, OnDataChange.WARN.value)
    import ignite_tf.data as itd

    checks = []
    original = itd.data_check

    def keep(p):
        checks.append(original(p))
        return checks[-1]

    itd.data_check = keep
    try:
        rows = sum(len(b["id"]) for w in _train_reads(ignite_conn, warned, 0) for b in w)
    finally:
        itd.data_check = original
    assert rows == ROWS - 1  # warn: the training went on, on the current rows
    changes = {c["partition"]: c for check in checks for c in check.changes}
    assert set(changes) == {changed, deleted}
    assert changes[changed]["validated_rows"] == changes[changed]["read_rows"]
    assert changes[changed]["columns_changed"] == ["f0", "label"] and not changes[changed]["keys_changed"]
    assert changes[deleted]["read_rows"] == changes[deleted]["validated_rows"] - 1
    assert changes[deleted]["keys_changed"]

