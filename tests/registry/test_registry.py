"""Model registry: blessing gate, immutable versions, crash consistency (SIGKILL-like exits), fsspec roots.

Real SavedModels, checkpoints and event files from tf_keras; the crash tests run the publish in a
subprocess that exits with ``os._exit(137)`` at a named step (the state a SIGKILL there would leave).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import pytest

from ignite_tf.errors import ConfigError
from ignite_tf.registry.publish import (
    COMPLETE,
    CRASH_ENV,
    CRASH_STEPS,
    BlessingGate,
    ModelRegistry,
    VersionNotFoundError,
)

GATE = BlessingGate(thresholds={"accuracy": (0.5, None), "loss": (None, None)}, tolerance=0.01)
X = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    """A trained tiny tf_keras model saved as a SavedModel, with a real checkpoint and TensorBoard events."""
    import tensorflow as tf
    import tf_keras

    root = tmp_path_factory.mktemp("artifacts")
    model = tf_keras.Sequential([tf_keras.layers.Input((4,)), tf_keras.layers.Dense(3, activation="softmax")])
    model.compile("adam", "sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(X, np.arange(8) % 3, epochs=2, verbose=0)
    # tf.summary.write is core TensorFlow (the tensorboard package, which tf.summary.scalar needs, may be absent).
    with tf.summary.create_file_writer(str(root / "tensorboard")).as_default():
        for step, loss in enumerate(history.history["loss"]):
            tf.summary.write("loss", tf.constant(loss), step=step)
    model.save(str(root / "saved_model"))
    tf.train.Checkpoint(model=model).save(str(root / "checkpoints" / "ckpt"))
    return {"saved_model_dir": str(root / "saved_model"), "checkpoint_dir": str(root / "checkpoints"),
            "tensorboard_dir": str(root / "tensorboard"), "expected": model.predict_on_batch(X)}


def publish(registry, artifacts, accuracy, loss, **kw):
    paths = {k: v for k, v in artifacts.items() if k != "expected"}
    return registry.publish("churn", **paths, metrics={"accuracy": accuracy, "loss": loss},
                            params={"epochs": 2, "features": ["f0", "f1"]},
                            data={"cache": "churn", "rows": np.int64(3000)},
                            context={"dag_id": "train", "run_id": "r1"}, gate=kw.pop("gate", GATE), **kw)


def assert_consistent(registry: ModelRegistry, model: str = "churn") -> None:
    """Only complete versions are listed, and production (if any) is one of them."""
    versions = registry.versions(model)
    for v in versions:
        meta = registry.metadata(model, v)
        assert meta["version"] == v
        assert registry.fs.exists(registry._path(model, v, "saved_model", "saved_model.pb"))
    prod = registry.production(model)
    assert prod is None or prod in versions
    pointer = registry._pointer(model)
    assert pointer is None or pointer["version"] in versions, "PRODUCTION names a missing version"


def test_first_then_better_then_worse(tmp_path, artifacts):
    reg = ModelRegistry(str(tmp_path / "registry"))
    first = publish(reg, artifacts, 0.80, 0.50)
    assert (first.version, first.status, first.previous_production, first.reasons) == ("v0001", "production", None, [])
    better = publish(reg, artifacts, 0.85, 0.40)
    assert (better.version, better.status, better.previous_production) == ("v0002", "production", "v0001")
    worse = publish(reg, artifacts, 0.70, 0.45)
    assert worse.status == "candidate"
    assert len(worse.reasons) == 2
    assert "accuracy" in worse.reasons[0] and "0.7" in worse.reasons[0] and "0.85" in worse.reasons[0]
    assert "loss" in worse.reasons[1] and "0.45" in worse.reasons[1] and "0.4" in worse.reasons[1]
    assert reg.versions("churn") == ["v0001", "v0002", "v0003"]
    assert reg.production("churn") == "v0002"
    meta = reg.metadata("churn", "v0003")
    assert meta["gate"]["blessed"] is False and meta["gate"]["compared_to"] == "v0002"
    assert meta["data"]["rows"] == 3000 and meta["context"]["run_id"] == "r1"
    assert meta["software"]["ignite_tf"] and meta["software"]["tensorflow"].startswith("2.")
    assert meta["files"]["checkpoint"]["files"] >= 2 and meta["files"]["tensorboard"]["files"] >= 1
    assert os.listdir(os.path.join(reg.root, "churn", "v0003", "tensorboard"))
    assert_consistent(reg)


def test_tolerance_is_relative_and_loss_is_lower_better(tmp_path, artifacts):
    reg = ModelRegistry(str(tmp_path / "r"))
    publish(reg, artifacts, 0.80, 0.50)
    # 0.793 >= 0.80 - 1% of 0.80 (0.792), 0.504 <= 0.50 + 1% of 0.50 (0.505): within tolerance.
    assert publish(reg, artifacts, 0.793, 0.504).status == "production"
    slightly_worse = publish(reg, artifacts, 0.785, 0.40)  # 0.785 < 0.793 - 0.00793
    assert slightly_worse.status == "candidate" and "accuracy" in slightly_worse.reasons[0]
    assert reg.production("churn") == "v0002"
    gate = BlessingGate(thresholds={"val_error": (None, None)})
    assert not gate.higher("val_error") and gate.higher("auc")
    assert BlessingGate(higher_is_better={"loss": True}).higher("loss")


def test_thresholds_fail_even_first(tmp_path, artifacts):
    reg = ModelRegistry(str(tmp_path / "r"))
    res = publish(reg, artifacts, 0.40, 0.1)
    assert res.status == "candidate" and res.reasons == ["accuracy = 0.4 is below the threshold min 0.5"]
    assert reg.production("churn") is None and reg.versions("churn") == ["v0001"]
    missing = reg.publish("churn", saved_model_dir=artifacts["saved_model_dir"], metrics={"loss": 0.1}, gate=GATE)
    assert missing.status == "candidate" and "'accuracy' is gated but missing" in missing.reasons[0]
    nan = publish(reg, artifacts, float("nan"), 0.1)
    assert nan.status == "candidate" and "nan" in nan.reasons[0]
    with pytest.raises(VersionNotFoundError, match="no production version"):
        reg.resolve("churn")
    upper = publish(reg, artifacts, 0.9, 0.1, gate=BlessingGate(thresholds={"loss": (None, 0.05)}))
    assert upper.status == "candidate" and "above the threshold max 0.05" in upper.reasons[0]


def test_resolve_loads_and_predicts(tmp_path, artifacts):
    import tf_keras

    reg = ModelRegistry(tmp_path / "r")
    publish(reg, artifacts, 0.8, 0.5)
    publish(reg, artifacts, 0.1, 0.5)  # candidate
    assert (reg.resolve("churn") == reg.resolve("churn", "v0001")
            == str(tmp_path / "r" / "churn" / "v0001" / "saved_model"))
    model = tf_keras.models.load_model(reg.resolve("churn"), compile=False)
    np.testing.assert_allclose(model.predict_on_batch(X), artifacts["expected"], rtol=1e-5, atol=1e-6)
    assert reg.fetch("churn", "v0002") == reg.resolve("churn", "v0002")
    with pytest.raises(VersionNotFoundError, match="versions: v0001, v0002"):
        reg.resolve("churn", "v0009")


def test_explicit_version_never_overwritten_and_promote(tmp_path, artifacts):
    reg = ModelRegistry(str(tmp_path / "r"))
    assert publish(reg, artifacts, 0.8, 0.5, version="2024-06-01").version == "2024-06-01"
    with pytest.raises(ConfigError, match="'2024-06-01' of model 'churn' already exists"):
        publish(reg, artifacts, 0.9, 0.5, version="2024-06-01")
    assert publish(reg, artifacts, 0.9, 0.4).version == "v0001"
    assert reg.production("churn") == "v0001"
    # A rollback by hand is not undone by recover() (the pointer generation moved).
    reg.promote("churn", "2024-06-01", "rollback")
    assert reg.recover("churn") == []
    assert reg.production("churn") == "2024-06-01"
    with pytest.raises(VersionNotFoundError):
        reg.promote("churn", "v0042")


@pytest.mark.parametrize("name", ["../etc", "..", "/abs", "a/b", "", ".hidden", "-x", "x" * 65, "bad name",
                                  "ok\n", "a..b", "PRODUCTION", 7])
def test_invalid_names(tmp_path, artifacts, name):
    reg = ModelRegistry(str(tmp_path / "r"))
    with pytest.raises(ConfigError, match="model name .* is invalid"):
        reg.publish(name, saved_model_dir=artifacts["saved_model_dir"], metrics={})
    with pytest.raises(ConfigError, match="version .* is invalid"):
        reg.publish("churn", saved_model_dir=artifacts["saved_model_dir"], metrics={}, version=name)
    for call in (lambda: reg.metadata("churn", name), lambda: reg.promote(name, "v0001"),
                 lambda: reg.promote("churn", name), lambda: reg.recover(name), lambda: reg.versions(name),
                 lambda: reg.resolve(name), lambda: reg.production(name)):
        with pytest.raises(ConfigError, match="is invalid"):
            call()
    assert not os.path.exists(tmp_path / "r" / "churn") and not os.path.exists(tmp_path / "etc")


def test_bad_inputs(tmp_path, artifacts):
    reg = ModelRegistry(str(tmp_path / "r"))
    with pytest.raises(ConfigError, match="holds no saved_model.pb"):
        reg.publish("m", saved_model_dir=str(tmp_path), metrics={})
    with pytest.raises(ConfigError, match="checkpoint_dir .* is not a directory"):
        reg.publish("m", saved_model_dir=artifacts["saved_model_dir"], checkpoint_dir=str(tmp_path / "no"),
                    metrics={})
    with pytest.raises(ConfigError, match="metric 'acc' must be a number"):
        reg.publish("m", saved_model_dir=artifacts["saved_model_dir"], metrics={"acc": "high"})
    with pytest.raises(ConfigError, match="min 0.9 is above max 0.1"):
        BlessingGate(thresholds={"acc": (0.9, 0.1)})
    with pytest.raises(ConfigError, match="tolerance"):
        BlessingGate(tolerance=-1)
    with pytest.raises(ConfigError, match="registry root"):
        ModelRegistry("")
    assert BlessingGate.from_dict(json.loads(json.dumps(GATE.to_dict()))) == GATE
    assert reg.versions("m") == []


# -- crash consistency ---------------------------------------------------------------------------------------
CHILD = """
import json, sys
from ignite_tf.registry.publish import BlessingGate, ModelRegistry
a = json.loads(sys.argv[1])
gate = BlessingGate.from_dict(a.pop("gate"))
print(json.dumps(ModelRegistry(a.pop("root")).publish("churn", gate=gate, **a).to_dict()))
"""


@pytest.mark.parametrize("step", CRASH_STEPS)
def test_crash_at_every_step(tmp_path, artifacts, step):
    root = str(tmp_path / "r")
    reg = ModelRegistry(root)
    publish(reg, artifacts, 0.80, 0.50)
    args = {"root": root, "saved_model_dir": artifacts["saved_model_dir"],
            "checkpoint_dir": artifacts["checkpoint_dir"], "tensorboard_dir": artifacts["tensorboard_dir"],
            "metrics": {"accuracy": 0.9, "loss": 0.3}, "gate": GATE.to_dict()}
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], env={**os.environ, CRASH_ENV: step},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 137, proc.stderr
    assert_consistent(reg)
    visible = step in ("renamed", "pointer_temp_written", "promoted")
    assert reg.versions("churn") == (["v0001", "v0002"] if visible else ["v0001"])
    assert reg.production("churn") == ("v0002" if step == "promoted" else "v0001")

    # A re-run first finishes or cleans up, then publishes a better model that becomes production.
    again = publish(reg, artifacts, 0.95, 0.2)
    assert again.status == "production"
    assert again.version == ("v0003" if visible else "v0002")
    assert reg.production("churn") == again.version
    if visible and step != "promoted":
        assert again.recovered[-1] == "finished the promotion of v0002 to production"
        assert len(again.recovered) == (2 if step == "pointer_temp_written" else 1)
        assert again.previous_production == "v0002"
    leftovers = os.listdir(os.path.join(root, "churn", ".staging")) + \
        [f for f in os.listdir(os.path.join(root, "churn")) if f.endswith(".tmp")]
    assert leftovers == []
    assert_consistent(reg)


def test_crash_then_recover_alone(tmp_path, artifacts):
    """recover() by itself removes a staging folder left mid-copy and keeps production."""
    root = str(tmp_path / "r")
    reg = ModelRegistry(root)
    publish(reg, artifacts, 0.80, 0.50)
    args = {"root": root, "saved_model_dir": artifacts["saved_model_dir"], "metrics": {"accuracy": 0.9, "loss": 0.3},
            "gate": GATE.to_dict()}
    proc = subprocess.run([sys.executable, "-c", CHILD, json.dumps(args)], env={**os.environ, CRASH_ENV: "copied"},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 137, proc.stderr
    assert len(os.listdir(os.path.join(root, "churn", ".staging"))) == 1
    done = reg.recover("churn")
    assert len(done) == 1 and "staging" in done[0]
    assert os.listdir(os.path.join(root, "churn", ".staging")) == []
    assert reg.production("churn") == "v0001" and reg.versions("churn") == ["v0001"]


# -- fsspec roots ----------------------------------------------------------------------------------------------
def test_memory_root(tmp_path, artifacts, monkeypatch):
    import tf_keras

    reg = ModelRegistry(f"memory://registry-{uuid.uuid4().hex[:8]}")
    assert not reg.local
    assert publish(reg, artifacts, 0.8, 0.5).status == "production"
    assert publish(reg, artifacts, 0.7, 0.5).status == "candidate"
    assert reg.versions("churn") == ["v0001", "v0002"] and reg.production("churn") == "v0001"
    assert reg.resolve("churn").startswith("memory://") and reg.models() == ["churn"]
    local = reg.fetch("churn", cache_dir=str(tmp_path))
    assert local == str(tmp_path / "churn" / "v0001" / "saved_model")
    assert (os.path.isfile(os.path.join(local, "saved_model.pb"))
            and reg.fetch("churn", cache_dir=str(tmp_path)) == local)
    model = tf_keras.models.load_model(local, compile=False)
    np.testing.assert_allclose(model.predict_on_batch(X), artifacts["expected"], rtol=1e-5, atol=1e-6)

    # Object stores: no folder rename, so a version is visible only once its marker exists.
    monkeypatch.setenv("IGNITE_TF_REGISTRY_CRASH_MODE", "raise")
    for step in ("copied", "metadata_written"):
        monkeypatch.setenv(CRASH_ENV, step)
        with pytest.raises(BaseException, match=step):
            publish(reg, artifacts, 0.99, 0.1)
        assert reg.fs.exists(reg._path("churn", "v0003", "saved_model", "saved_model.pb"))
        assert not reg.fs.exists(reg._path("churn", "v0003", COMPLETE))
        assert reg.versions("churn") == ["v0001", "v0002"] and reg.production("churn") == "v0001"
        assert_consistent(reg)
    monkeypatch.setenv(CRASH_ENV, "marker_written")
    with pytest.raises(BaseException, match="marker_written"):
        publish(reg, artifacts, 0.99, 0.1)
    assert reg.versions("churn")[-1] == "v0003" and reg.production("churn") == "v0001"
    monkeypatch.delenv(CRASH_ENV)
    res = publish(reg, artifacts, 0.999, 0.05)
    assert res.recovered == ["finished the promotion of v0003 to production"]
    assert (res.version, res.status, reg.production("churn")) == ("v0004", "production", "v0004")


def test_object_storage_path_root(tmp_path, artifacts):
    from airflow.sdk import ObjectStoragePath

    reg = ModelRegistry(ObjectStoragePath(f"file://{tmp_path}/osp"))
    assert reg.local
    assert publish(reg, artifacts, 0.8, 0.5).path == f"{tmp_path}/osp/churn/v0001"
    assert ModelRegistry(str(tmp_path / "osp")).production("churn") == "v0001"


def test_gate_inputs_with_a_held_out_evaluation():
    """The gate judges held-out numbers against production's on the same rows; training numbers without them."""
    from ignite_tf.registry.gate import NOT_BLESSED, held_out_inputs

    training, recorded = {"accuracy": 0.99}, {"accuracy": 0.95}
    assert held_out_inputs(training, recorded, "v1", None) == (training, recorded, [])
    evaluation = {"rows": 10, "metrics": {"accuracy": 0.8}, "production_metrics": {"accuracy": 0.85},
                  "production": {"version": "v1"}}
    assert held_out_inputs(training, recorded, "v1", evaluation) == ({"accuracy": 0.8}, {"accuracy": 0.85}, [])
    assert held_out_inputs(training, None, None, {**evaluation, "production": {"version": None}}) == (
        {"accuracy": 0.8}, None, [])
    judged, baseline, notes = held_out_inputs(training, recorded, "v1", {
        **evaluation, "production_metrics": None, "production": {"version": "v1", "error": "column f3 gone"}})
    assert baseline is None and "column f3 gone" in notes[0] and not notes[0].startswith(NOT_BLESSED)
    judged, baseline, notes = held_out_inputs(training, recorded, "v2", evaluation)
    assert baseline is None and notes[0].startswith(NOT_BLESSED)
