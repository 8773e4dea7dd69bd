"""Batch inference against the real session cluster: a trained tf_keras model, published, scores a cache
in two disjoint shards (as two mapped Airflow tasks would); every input key gets exactly one prediction."""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest
from ignite_tf_dev import demo_data

from ignite_tf.errors import ConfigError
from ignite_tf.etl import loader as etl
from ignite_tf.inference import postprocess, predict_shard
from ignite_tf.reader.partition import ReadTask
from ignite_tf.registry.publish import BlessingGate, ModelRegistry, VersionNotFoundError
from tests.support.sql import sql

FEATURES = demo_data.feature_columns()
HALVES = [list(range(0, 512)), list(range(512, 1024))]


@pytest.fixture(scope="module")
def setup(ignite_conn, tmp_path_factory):
    """3000 demo rows in a cache, and a tiny classifier trained on them, published as production."""
    import tf_keras

    frame = demo_data.tabular(3000, seed=7)
    cache = f"inf_{os.getpid()}"
    etl.load(ignite_conn, cache, frame, key="id")
    tf_keras.utils.set_random_seed(0)
    model = tf_keras.Sequential([tf_keras.layers.Input((len(FEATURES),)),
                                 tf_keras.layers.Dense(16, activation="relu"),
                                 tf_keras.layers.Dense(demo_data.N_CLASSES, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    x = frame[FEATURES].to_numpy(np.float32)
    history = model.fit(x, frame["label"].to_numpy(), epochs=2, batch_size=64, verbose=0)
    tmp = tmp_path_factory.mktemp("inference")
    model.save(str(tmp / "saved_model"))
    root = str(tmp / "registry")
    result = ModelRegistry(root).publish(
        "demo", saved_model_dir=str(tmp / "saved_model"), metrics={"accuracy": history.history["accuracy"][-1]},
        params={"features": FEATURES, "label": "label", "epochs": 2}, data={"cache": cache, "rows": 3000},
        gate=BlessingGate(thresholds={"accuracy": (0.4, None)}))
    assert result.status == "production", result.reasons
    probs = model.predict(x, batch_size=1024, verbose=0)
    return {"cache": cache, "root": root, "frame": frame, "probs": probs, "tmp": tmp}


def test_two_disjoint_shards_cover_every_row_once(setup, ignite_conn, ignite_client, cache_name):
    reports = [predict_shard(ignite_conn, registry_root=setup["root"], model="demo", input_cache=setup["cache"],
                             output_cache=cache_name, tasks=half, batch_size=500) for half in HALVES]
    for r in reports:
        assert (r.model, r.version, r.kind, r.key_column, r.features) == ("demo", "v0001", "classifier", "id",
                                                                         FEATURES)
        assert r.rows_scored == r.rows_written > 0 and r.rows_with_nan == 0 and r.rows_per_second > 0
    assert reports[0].partitions == HALVES[0] and reports[1].partitions == HALVES[1]
    assert sum(r.rows_scored for r in reports) == 3000

    table = cache_name.upper()
    assert sql(ignite_client, f"SELECT COUNT(*) FROM {table}")[0][0] == \
        sql(ignite_client, f"SELECT COUNT(*) FROM {setup['cache'].upper()}")[0][0] == 3000
    rows = np.array(sql(ignite_client, f"SELECT ID, PREDICTION, SCORE FROM {table} ORDER BY ID"))
    np.testing.assert_array_equal(rows[:, 0].astype(np.int64), setup["frame"]["id"].to_numpy())
    probs = setup["probs"]
    np.testing.assert_array_equal(rows[:, 1].astype(np.int32), probs.argmax(axis=1))
    np.testing.assert_allclose(rows[:, 2], probs.max(axis=1), rtol=1e-5)

    # A retried shard overwrites its own rows: still one prediction per key.
    again = predict_shard(ignite_conn, registry_root=setup["root"], model="demo", version="v0001",
                          input_cache=setup["cache"], output_cache=cache_name, tasks=HALVES[0], write_rows=700)
    # write_rows below batch_size: one write per read batch, so memory stays bounded by the batch.
    assert again.rows_scored == reports[0].rows_scored and again.writes == again.batches >= 2
    assert sql(ignite_client, f"SELECT COUNT(*) FROM {table}")[0][0] == 3000


def test_read_tasks_split_by_key_hash(setup, ignite_conn, ignite_client, cache_name):
    """ReadTask halves of every partition (record-level shards): together they score each row once."""
    shards = [[ReadTask(p).split(2)[i].to_dict() for p in range(1024)] for i in range(2)]
    reports = [predict_shard(ignite_conn, registry_root=setup["root"], model="demo", input_cache=setup["cache"],
                             output_cache=cache_name, tasks=s, features=FEATURES, with_score=False)
               for s in shards]
    assert all(r.rows_scored > 0 for r in reports) and sum(r.rows_scored for r in reports) == 3000
    rows = np.array(sql(ignite_client, f"SELECT ID, PREDICTION FROM {cache_name.upper()} ORDER BY ID"))
    assert len(rows) == 3000
    np.testing.assert_array_equal(rows[:, 1], setup["probs"].argmax(axis=1))
    columns = sql(ignite_client, f"SELECT COLUMN_NAME FROM SYS.TABLE_COLUMNS WHERE TABLE_NAME = '{cache_name.upper()}'")
    assert "SCORE" not in {c[0] for c in columns}


def test_plain_saved_model_regressor(setup, ignite_conn, ignite_client, cache_name):
    """A non-Keras SavedModel (tf.saved_model.save with a serving signature) scores through its signature."""
    import tensorflow as tf

    weights = np.linspace(-1, 1, len(FEATURES)).astype(np.float32)

    class Linear(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(weights[:, None])

        @tf.function(input_signature=[tf.TensorSpec([None, len(FEATURES)], tf.float32, name="x")])
        def serve(self, x):
            return {"value": tf.matmul(x, self.w)}

    module = Linear()
    path = str(setup["tmp"] / "linear")
    tf.saved_model.save(module, path, signatures={"serving_default": module.serve})
    ModelRegistry(setup["root"]).publish("linear", saved_model_dir=path, metrics={"mse": 0.0},
                                         params={"features": FEATURES, "task": "regressor"})
    report = predict_shard(ignite_conn, registry_root=setup["root"], model="linear", input_cache=setup["cache"],
                           output_cache=cache_name, tasks=range(1024))
    assert (report.kind, report.rows_scored) == ("regressor", 3000)
    rows = np.array(sql(ignite_client, f"SELECT ID, PREDICTION FROM {cache_name.upper()} ORDER BY ID"))
    want = setup["frame"][FEATURES].to_numpy(np.float32) @ weights
    np.testing.assert_allclose(rows[:, 1], want, rtol=1e-4, atol=1e-4)


def test_errors(setup, ignite_conn, cache_name):
    common = {"registry_root": setup["root"], "input_cache": setup["cache"], "tasks": [0]}
    with pytest.raises(ConfigError, match=r"feature\(s\) \['nope'\] not in cache"):
        predict_shard(ignite_conn, model="demo", output_cache=cache_name, features=["f0", "nope"], **common)
    with pytest.raises(ConfigError, match="takes 16 features per row but 2 were given"):
        predict_shard(ignite_conn, model="demo", output_cache=cache_name, features=["f0", "f1"], **common)
    with pytest.raises(ConfigError, match="is the input cache"):
        predict_shard(ignite_conn, model="demo", output_cache=setup["cache"], **common)
    with pytest.raises(VersionNotFoundError, match="no complete version 'v0042'"):
        predict_shard(ignite_conn, model="demo", version="v0042", output_cache=cache_name, **common)
    with pytest.raises(VersionNotFoundError, match="has no production version"):
        predict_shard(ignite_conn, model="absent", output_cache=cache_name, **common)
    with pytest.raises(ConfigError, match="kind must be one of"):
        predict_shard(ignite_conn, model="demo", output_cache=cache_name, kind="ranker", **common)


def test_postprocess():
    kind, pred, score = postprocess(np.array([[0.1, 0.7, 0.2], [2.0, -1.0, 0.0]]), None)
    assert kind == "classifier" and pred.tolist() == [1, 0]
    np.testing.assert_allclose(score, [0.7, np.exp(2) / (np.exp(2) + np.exp(-1) + 1)], rtol=1e-6)
    kind, pred, score = postprocess(np.array([[0.2], [0.9], [3.0]]), "classifier")
    assert pred.tolist() == [0, 1, 1]
    np.testing.assert_allclose(score, [0.8, 0.9, 1 / (1 + np.exp(-3))], rtol=1e-6)
    assert postprocess(np.array([1.5, -2.0]), None)[0] == "regressor"
    with pytest.raises(ConfigError, match="one value per row"):
        postprocess(np.zeros((2, 3)), "regressor")


def test_operator_logs_the_rows_it_scored(setup, ignite_conn, cache_name, monkeypatch):
    """The operator's summary line carries the real row count and rate (it once logged ``None rows``).

    Airflow's task logger is structlog: ``capture_logs`` records what it would write to the task log.
    """
    import re

    from structlog.testing import capture_logs

    from ignite_tf.operators.inference import BatchInferenceOperator
    from tests.support.airflow import ignite_connection_env

    for key, value in ignite_connection_env(ignite_conn).items():
        monkeypatch.setenv(key, value)
    op = BatchInferenceOperator(task_id="score", registry_root=setup["root"], model="demo",
                                input_cache=setup["cache"], output_cache=cache_name, shard=1, shards=2)
    with capture_logs() as logs:
        out = op.execute({})
    lines = [e["event"] for e in logs if "rows/s" in str(e.get("event"))]
    assert len(lines) == 1, logs
    found = re.fullmatch(r"scored (\d+) rows in ([\d.]+)s \((\d+) rows/s\) with demo v0001", lines[0])
    assert found, lines[0]
    assert 0 < int(found.group(1)) == out["rows_scored"] < 3000  # one of two shards
    assert int(found.group(3)) > 0
