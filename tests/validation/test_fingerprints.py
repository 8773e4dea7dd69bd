"""Trained on what was validated: validation's fingerprints, the training's reads checked against them.

Real Ignite (the session cluster) and, in the last test, real TensorFlow processes under the supervisor.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import numpy as np
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


def _validated_table(ignite_conn):
    """A fresh small table, planned on 2 workers and validated: (name, plan, summary)."""
    from ignite_tf_dev import demo_data

    name = f"fp_{uuid.uuid4().hex[:8]}"
    load(ignite_conn, name, demo_data.tabular(ROWS, seed=3), key="id")
    plan = ShardPlan.build(PartitionMap.discover(ignite_conn, name), 2, seed=1)
    results = [validate_shard(ignite_conn, name, plan.shard(w, 0).read_tasks(), SUITE, shard=w) for w in range(2)]
    return name, plan, merge(results, SUITE)


@pytest.fixture(scope="module")
def table(ignite_conn):
    return _validated_table(ignite_conn)


def _change_rows(ignite_conn, name: str, partitions: list[int], *, delete: bool = False) -> list[int]:
    """Change f0 and the label of the first row of each of ``partitions`` (or delete it); the keys."""
    with PartitionReader(ignite_conn, name, columns=["f0"]) as reader:
        keys = [int(reader.read_all([p])["id"][0]) for p in partitions]
    client = ignite_conn.client()
    try:
        for key in keys:
            if delete:
                sql(client, f"DELETE FROM {name} WHERE id = ?", [key])
            else:
                sql(client, f"UPDATE {name} SET f0 = f0 + 1, label = 9 - label WHERE id = ?", [key])
    finally:
        client.close()
    return keys


def _with_expected(plan: ShardPlan, summary, on_change: str = "fail") -> ShardPlan:
    plan = ShardPlan.from_dict(plan.to_dict())
    plan.fingerprints = {"expected": summary.fingerprints, "on_data_change": on_change}
    return plan


def _train_reads(ignite_conn, plan: ShardPlan, epoch: int) -> list:
    """Both workers' epoch as the runtime reads it (features stacked into the float32 matrix, the label apart)."""
    from ignite_tf_dev import demo_data

    import ignite_tf.data as itd

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
        assert rows == summary.fingerprints["rows"]

    fp = Fingerprints.from_dict(summary.fingerprints)
    # The reads check each partition as they finish it, worker 0's shard then worker 1's: the first two
    # partitions with rows in that order are changed and deleted from, so the changed one fails the reads.
    reading_order = [t.partition for w in range(2) for t in checked.shard(w, 0).read_tasks()]
    changed, deleted = [p for p in reading_order if fp.tasks[str(p)]["rows"]][:2]
    _change_rows(ignite_conn, name, [changed])
    _change_rows(ignite_conn, name, [deleted], delete=True)

    with pytest.raises(DataChangedError) as failed:
        _train_reads(ignite_conn, checked, 0)
    rows = fp.tasks[str(changed)]["rows"]
    assert str(failed.value).startswith(
        f"cache {name!r} changed since validation: partition {changed}: {rows} rows validated, {rows} read; "
        f"values changed in f0, label. The model would train on rows no expectation checked"), str(failed.value)

    warned = _with_expected(plan, summary, OnDataChange.WARN.value)
    from ignite_tf.data import rows as data_rows  # where blocks() finds data_check

    checks = []
    original = data_rows.data_check

    def keep(p):
        checks.append(original(p))
        return checks[-1]

    data_rows.data_check = keep
    try:
        rows = sum(len(b["id"]) for w in _train_reads(ignite_conn, warned, 0) for b in w)
    finally:
        data_rows.data_check = original
    assert rows == fp.to_dict()["rows"] - 1  # warn: the training went on, on the current rows
    changes = {c["partition"]: c for check in checks for c in check.changes}
    assert set(changes) == {changed, deleted}
    assert changes[changed]["validated_rows"] == changes[changed]["read_rows"]
    assert changes[changed]["columns_changed"] == ["f0", "label"] and not changes[changed]["keys_changed"]
    assert changes[deleted]["read_rows"] == changes[deleted]["validated_rows"] - 1
    assert changes[deleted]["keys_changed"]



def test_run_fails_when_rows_change_between_the_gate_and_training(ignite_conn, run_root, tmp_path):
    """The gate passed; then rows change; the TensorFlow cluster (a sync worker, a real process under the
    supervisor) reading them fails naming the partition, at once (not restarted: the data would differ again)."""
    from ignite_tf.cluster.api import make_launcher, start_cluster
    from ignite_tf.state import ExitCode, LocalStateStore, Status

    name, plan, summary = _validated_table(ignite_conn)
    plan = ShardPlan.build(plan.partition_map, 1, seed=1)  # validated on 2 shards, trained on 1: same partitions
    # Rows of several partitions change: sync training reads a whole number of batches, so a worker may stop
    # before its last partitions; one of these is read to its end whatever the deal.
    partitions = sorted(int(k) for k, v in summary.fingerprints["tasks"].items() if v[0])[-6:]
    _change_rows(ignite_conn, name, partitions)
    launcher = make_launcher(ignite_conn, store=LocalStateStore(tmp_path / "state"))
    job = {"entry_point": "ignite_tf.models:tabular_classifier",
           "args": ["--epochs", "2", "--batch-size", "32", "--label-column", "label"]}
    # on-failure restarts every failure but the data's: the same rows would fail again.
    state = start_cluster(name, job, conn=ignite_conn, launcher=launcher, mode="sync", workers=1,
                          plan=_with_expected(plan, summary), max_restarts=2, restart_policy="on-failure")
    final = launcher.wait(state.cluster_id, timeout=300)

    logs = "\n".join(p.read_text() for p in Path(final.run_dir, "logs").glob("*.log"))
    assert final.status is Status.FAILED, launcher.tail(state.cluster_id, 40)
    assert final.restarts == 0 and final.exit_code == ExitCode.DATA_INVALID, (final.exit_code, final.reason)
    # The headline (what Airflow and OpenLineage show) names the data, not "the task's own code failed".
    assert f"cache '{name}' changed since validation" in final.reason and "exited with status 65" in final.reason, \
        final.reason
    named = re.findall(rf"cache '{name}' changed since validation: partition (\d+): ", logs)
    assert named and {int(p) for p in named} <= set(partitions), logs[-3000:]
    assert "values changed in f0, label" in logs
    changes = [c for r in final.reads for c in r.get("data_changes", [])]
    assert changes and {c["partition"] for c in changes} <= set(partitions)


def test_fingerprint_is_order_independent_and_the_same_stacked_or_not():
    """No Ignite: the fingerprint of one task's rows, read in two pages in another order, as separate columns of
    their own dtypes or as the training's float32 matrix, is the same; one changed value changes it."""
    from ignite_tf.reader.fingerprint import Fingerprinter
    from ignite_tf.reader.partition import STACKED
    from ignite_tf.reader.tasks import ReadTask

    rng = np.random.default_rng(0)
    n, task = 300, ReadTask(7)
    rows = {"id": np.arange(n, dtype=np.int64), "f0": rng.random(n, dtype=np.float32),
            "f1": rng.random(n).astype(np.float64), "label": rng.integers(0, 10, n).astype(np.int32),
            "name": np.array([f"r{i}" for i in range(n)], dtype=object)}

    def fingerprint(pages, stack=None):
        fp = Fingerprinter("id", stack)
        for page in pages:
            fp.add(task, page)
        fp.finish(task)
        return fp.done["7"]

    plain = fingerprint([rows])
    order = rng.permutation(n)
    assert fingerprint([{k: v[order[:100]] for k, v in rows.items()},
                        {k: v[order[100:]] for k, v in rows.items()}]) == plain
    stacked = {"id": rows["id"], STACKED: np.stack([rows["f0"], rows["f1"].astype(np.float32)], axis=1),
               "label": rows["label"], "name": rows["name"]}
    assert fingerprint([stacked], ["f0", "f1"]) == plain
    changed = {k: v.copy() for k, v in rows.items()}
    changed["label"][5] += 1
    swapped = {k: v.copy() for k, v in rows.items()}
    swapped["f0"][[1, 2]] = swapped["f0"][[2, 1]]
    assert fingerprint([changed])["columns"]["label"] != plain["columns"]["label"]
    assert fingerprint([swapped])["columns"]["f0"] != plain["columns"]["f0"]
    assert fingerprint([changed])["keys"] == plain["keys"] and plain["rows"] == n
