"""The held-out evaluation split on the session Ignite cluster and real TensorFlow processes: which rows are held
out (stable, never trained on), the chief's evaluation after training, champion/challenger on the same rows, the
gate on held-out numbers, a production model whose column is gone reported and not crashed on."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import ignite_tf.data as itd
from ignite_tf.cluster.api import make_launcher, start_cluster
from ignite_tf.contract import ENV_PRODUCTION_MODEL
from ignite_tf.evaluation.heldout import EVALUATION_FILE, read_held_out
from ignite_tf.plan.partitions import PartitionMap
from ignite_tf.plan.shards import ShardPlan
from ignite_tf.plan.split import EvaluationSplit
from ignite_tf.registry.gate import BlessingGate
from ignite_tf.registry.publish import ModelRegistry
from ignite_tf.state import LocalStateStore, Status

CACHE = "heldout_tabular"
NO_F3 = "heldout_tabular_no_f3"
ROWS = 1200


@pytest.fixture(scope="module")
def cache(ignite_conn):
    from ignite_tf_dev import demo_data

    from ignite_tf.etl import load

    load(ignite_conn, CACHE, demo_data.tabular(ROWS, seed=3), key="id")
    return CACHE


def keys_read(plan, ignite_conn, epoch: int) -> list[int]:
    return [int(k) for w in range(plan.workers)
            for b in itd.batches(epoch, batch_size=256, worker=w, plan=plan, conn=ignite_conn)
            for k in b[plan.partition_map.key_column]]


def test_training_never_reads_the_held_out_rows_and_the_split_is_stable(cache, ignite_conn):
    pm = PartitionMap.discover(ignite_conn, cache)
    plan = ShardPlan.build(pm, 2, evaluation=0.2, evaluation_seed=7)
    plan = ShardPlan.from_json(plan.to_json())  # what a worker loads
    held = [int(k) for k in read_held_out(plan, ignite_conn)["id"]]
    assert 0.15 * ROWS < len(held) < 0.25 * ROWS
    for epoch in (0, 1):
        trained = keys_read(plan, ignite_conn, epoch)
        assert len(trained) == len(set(trained)) == ROWS - len(held)
        assert not set(trained) & set(held)
        assert set(trained) | set(held) == set(range(ROWS))
    # The same rows for another plan of the same table (other workers, reshuffle seed); others for another salt.
    again = ShardPlan.build(pm, 3, seed=5, evaluation=0.2, evaluation_seed=7)
    assert sorted(int(k) for k in read_held_out(again, ignite_conn)["id"]) == sorted(held)
    other = EvaluationSplit(0.2, 8).held_out(np.array(held))
    assert 0 < other.sum() < len(held) * 0.5
    assert plan.rows_per_worker(0) == [int(r * 0.8) for r in ShardPlan.build(pm, 2).rows_per_worker(0)]


def test_bad_fractions_are_refused():
    for bad in (1.0, -0.1, "ten percent", float("nan")):
        with pytest.raises(ValueError, match="shard_plan.evaluation must be a number in"):
            EvaluationSplit(bad)


def job(epochs: int) -> dict:
    return {"entry_point": "ignite_tf.models:tabular_classifier",
            "args": ["--epochs", str(epochs), "--batch-size", "32", "--label-column", "label",
                     "--learning-rate", "0.02"]}


def train(launcher, ignite_conn, cache_name: str, registry_root, workers: int = 1):
    env = [f"{ENV_PRODUCTION_MODEL}={registry_root}/churn"]
    state = start_cluster(cache_name, job(1), conn=ignite_conn, launcher=launcher, mode="sync", workers=workers,
                          evaluation=0.2, evaluation_seed=7, env=env)
    final = launcher.wait(state.cluster_id, timeout=600)
    assert final.status is Status.SUCCEEDED, launcher.tail(state.cluster_id, 40)
    return final, launcher.output(state.cluster_id)[0]


def publish(registry, final, gate):
    return registry.publish("churn", saved_model_dir=f"{final.run_dir}/checkpoints/model", metrics=final.last_epoch,
                            gate=gate, evaluation=final.evaluation)


def test_champion_and_challenger_on_the_same_held_out_rows(cache, ignite_conn, run_root, tmp_path):
    from ignite_tf_dev import demo_data

    from ignite_tf.etl import load

    launcher = make_launcher(ignite_conn, store=LocalStateStore(tmp_path / "state"))
    registry_root = tmp_path / "registry"
    registry = ModelRegistry(str(registry_root))
    held = len(read_held_out(ShardPlan.build(PartitionMap.discover(ignite_conn, cache), 1, evaluation=0.2,
                                             evaluation_seed=7), ignite_conn)["id"])
    gate = BlessingGate(thresholds={"accuracy": (0.4, None), "loss": (None, None)}, tolerance=0.5)

    # The first version: no production yet; evaluated, recorded everywhere, blessed on held-out numbers.
    first, output = train(launcher, ignite_conn, cache, registry_root, workers=2)
    evaluation = first.evaluation
    assert evaluation["rows"] == held and set(evaluation["metrics"]) >= {"loss", "accuracy"}
    assert evaluation["production"] == {"version": None} and evaluation["production_metrics"] is None
    assert evaluation["split"] == {"fraction": 0.2, "seed": 7, "by": "key hash"}
    assert f"held-out evaluation on {held} rows: accuracy=" in output
    assert json.loads((Path(first.run_dir) / "checkpoints" / "model" / EVALUATION_FILE).read_text()) == evaluation
    assert len(first.epochs) == 1 and first.summary()["evaluation"] == evaluation  # not counted as an epoch
    v1 = publish(registry, first, gate)
    meta = registry.metadata("churn", v1.version)
    assert v1.status == "production", (v1.reasons, evaluation)
    assert meta["evaluation"]["metrics"] == evaluation["metrics"]
    assert meta["gate"]["on"] == "evaluation"

    # The second: production v0001 evaluated on the same rows in the same run; the gate compares the two.
    second, output = train(launcher, ignite_conn, cache, registry_root)
    evaluation = second.evaluation
    assert evaluation["production"] == {"version": v1.version} and evaluation["rows"] == held
    assert f"| production {v1.version}: accuracy=" in output
    v2 = publish(registry, second, gate)
    compared = registry.metadata("churn", v2.version)["gate"]["comparisons"]
    assert compared["accuracy"]["new"] == evaluation["metrics"]["accuracy"]
    assert compared["accuracy"]["production"] == evaluation["production_metrics"]["accuracy"]
    assert compared["loss"]["production"] == evaluation["production_metrics"]["loss"]

    # A table without the column f3: the production model cannot take it; reported, the training succeeds.
    load(ignite_conn, NO_F3, demo_data.tabular(600, seed=4).drop(columns=["f3"]), key="id")
    third, output = train(launcher, ignite_conn, NO_F3, registry_root)
    production = third.evaluation["production"]
    assert production["version"] == registry.production("churn") and "['f3']" in production["error"]
    assert f"production {production['version']} not evaluated: " in output
    v3 = publish(registry, third, gate)
    notes = registry.metadata("churn", v3.version)["gate"]["notes"]
    assert v3.status == "production" and "was not evaluated on the held-out rows" in notes[0]


def test_a_user_script_gets_its_evaluation_slice_and_reports_one_line(cache, ignite_conn, tmp_path, monkeypatch):
    """``ignite_tf.data.evaluation_dataset`` / ``report_evaluation`` in a real TensorFlow process (this one): the
    held-out rows only, and the report lands in the cluster state where the page and the publish gate read it."""
    import time

    import tensorflow as tf

    from ignite_tf.contract import ENV_CLUSTER_ID, ENV_STATE_DIR, ENV_STATE_STORE
    from ignite_tf.state import ClusterState

    plan = ShardPlan.build(PartitionMap.discover(ignite_conn, cache), 2, evaluation=0.2, evaluation_seed=7)
    held = len(read_held_out(plan, ignite_conn)["id"])
    ds = itd.evaluation_dataset(100, label_column="label", plan=plan, conn=ignite_conn)
    shapes = [(x.shape, y.shape) for x, y in ds]
    assert sum(y[0] for _, y in shapes) == held and shapes[0][0] == (100, 16)
    model = tf.keras.Sequential([tf.keras.layers.Dense(3, activation="softmax")])
    model.compile(loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    metrics = model.evaluate(ds, return_dict=True, verbose=0)

    store = LocalStateStore(tmp_path / "state")
    store.put(ClusterState(cluster_id="script-1", cache=cache, mode="sync", run_dir=str(tmp_path),
                           status=Status.RUNNING, started_at=time.time()))
    monkeypatch.setenv(ENV_STATE_STORE, "local")
    monkeypatch.setenv(ENV_STATE_DIR, str(tmp_path / "state"))
    monkeypatch.setenv(ENV_CLUSTER_ID, "script-1")
    reported = itd.report_evaluation(metrics, plan=plan)
    assert reported["rows"] == held and reported["by"] == "script"
    assert store.get("script-1").evaluation == reported
    assert reported["metrics"]["accuracy"] == pytest.approx(metrics["accuracy"], abs=1e-6)
    with pytest.raises(ValueError, match="holds no rows out for evaluation"):
        itd.evaluation_dataset(100, label_column="label", plan=ShardPlan.build(plan.partition_map, 2),
                               conn=ignite_conn)
