"""The run-store settings from YAML, CLI and operator to what runs; a task's backup, events and model to and
from a REAL S3 server (s3proxy) and back to a restarted task on another folder."""

from __future__ import annotations

from pathlib import Path

import yaml

from ignite_tf.runstore import LAYOUT, RunStore
from ignite_tf.runstore.sync import TaskSync


def _spec(folder: Path, **top) -> Path:
    from tests.test_settings import SUITE as suite

    (folder / "suite.yaml").write_text(suite.read_text())
    (folder / "shared").mkdir()
    doc = {"dag_id": "runstore_settings", "cache": "c", "suite": "suite.yaml",
           "source": {"generator": "ignite_tf_dev.demo_data:tabular", "rows": 10},
           "training": {"entry_point": "team_model:build", "py_modules": ["shared"]},
           "publish": {"model": "m"}, **top}
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_run_root_connection_and_py_modules_reach_every_task_that_needs_them(tmp_path):
    from ignite_tf.cli import build_parser
    from ignite_tf.operators.tensorflow import TFClusterOperator
    from ignite_tf.pipeline.factory import render
    from ignite_tf.pipeline.spec import parse_spec

    config = parse_spec(_spec(tmp_path, run_root="s3://bucket/runs", run_store_conn_id="runs_s3"))
    assert config.run_root == "s3://bucket/runs" and config.training.py_modules == (tmp_path / "shared",)
    tasks = {t.task_id: t.kwargs for t in render(config)[0].tasks}
    assert tasks["train"]["run_root"] == "s3://bucket/runs" and tasks["train"]["run_store_conn_id"] == "runs_s3"
    assert tasks["train"]["py_modules"] == [str(tmp_path / "shared")]
    assert tasks["validation_gate"]["run_root"] == "s3://bucket/runs"
    assert tasks["publish"]["run_store_conn_id"] == "runs_s3"
    (tmp_path / "x").mkdir()
    local = parse_spec(_spec(tmp_path / "x", run_root="runs"))
    assert local.run_root == str(tmp_path / "x" / "runs")  # a folder is relative to the spec file

    args = build_parser().parse_args(["start", "--run-root", "s3://b/r", "--py-module", "a", "--py-module", "b.py",
                                      "cache", "job", "python", "train.py"])
    assert args.run_root == "s3://b/r" and args.py_modules == ["a", "b.py"]

    op = TFClusterOperator(task_id="t", cache="c", entry_point="m:f", run_store_conn_id="runs_s3")
    from ignite_tf.triggers.tf_cluster import TFClusterTrigger

    trigger = TFClusterTrigger(cluster_id="c1", run_store_conn_id=op.run_store_conn_id)
    assert trigger.serialize()[1]["run_store_conn_id"] == "runs_s3"


def test_a_restarted_task_elsewhere_resumes_from_the_stores_backup(s3_bucket, tmp_path):
    url = f"s3://{s3_bucket}/runs/resume1"
    env = {"IGNITE_TF_RUN_STORE": url}
    first = tmp_path / "first"
    chief = TaskSync.from_env(first / "backup", first / "tb", True, environ=env)
    assert not chief.pull()  # nothing yet: a fresh start
    (first / "backup" / "chief").mkdir(parents=True)
    (first / "backup" / "chief" / "ckpt-1.index").write_text("epoch 1")
    (first / "tb" / "train").mkdir(parents=True)
    (first / "tb" / "train" / "events.out.tfevents.1").write_text("events")
    chief.push()
    (first / "backup" / "chief" / "ckpt-1.index").unlink()
    (first / "backup" / "chief" / "ckpt-2.index").write_text("epoch 2")
    chief.push()
    TaskSync.from_env(first / "b", first / "t", False, environ=env).push()  # a non-chief copies nothing

    # Another task (another folder, as a new pod) gets the newest backup only.
    second = tmp_path / "second"
    assert TaskSync.from_env(second / "backup", second / "tb", False, environ=env).pull()
    assert [p.name for p in (second / "backup").rglob("*") if p.is_file()] == ["ckpt-2.index"]

    model = first / "model"
    model.mkdir()
    (model / "saved_model.pb").write_text("pb")
    store = RunStore(url)
    store.write_text(LAYOUT.model / "stale.txt", "from an earlier attempt")
    chief.finish(str(model))
    assert store.read_text(LAYOUT.model / "saved_model.pb") == "pb"
    assert store.read_text(LAYOUT.model / "stale.txt") is None
    assert store.read_text(LAYOUT.tensorboard / "train" / "events.out.tfevents.1") == "events"
    assert store.read_text(LAYOUT.backup / "chief" / "ckpt-2.index") == "epoch 2"
    import shutil

    shutil.rmtree(first / "backup")  # BackupAndRestore removes its backup after a finished fit: so does the store
    chief.push()
    assert not store.get_dir(LAYOUT.backup, tmp_path / "after")

    # Without a run store (a folder as run root) nothing is copied anywhere.
    none = TaskSync.from_env(tmp_path / "n" / "backup", tmp_path / "n" / "tb", True, environ={})
    assert none.store is None and not none.pull()
    none.push()
    none.finish(str(model))


def test_an_aws_connection_reaches_the_store_and_the_supervisor_but_nothing_written(s3_bucket, object_store,
                                                                                       tmp_path, monkeypatch):
    """Airflow's way: the worker's environment has no store credentials; the ``aws`` connection does."""
    import json

    from ignite_tf.cluster.launcher import LocalLauncher
    from ignite_tf.cluster.spec import build_spec
    from ignite_tf.state import LocalStateStore

    creds = object_store.env()
    for name in creds:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_RUNS_S3", json.dumps({
        "conn_type": "aws", "login": creds["AWS_ACCESS_KEY_ID"], "password": creds["AWS_SECRET_ACCESS_KEY"],
        "extra": {"endpoint_url": creds["AWS_ENDPOINT_URL"], "region_name": "us-east-1"}}))
    launcher = LocalLauncher(LocalStateStore(tmp_path / "state"), run_store_conn_id="runs_s3")
    url = f"s3://{s3_bucket}/runs/conn1"
    store = launcher.run_store(url)
    store.write_text(LAYOUT.log("worker-0"), "hello\n")
    assert store.read_text(LAYOUT.log("worker-0")) == "hello\n"

    spec = build_spec(cluster_id="conn1", cache="c", mode="sync", workers=1, run_dir=tmp_path / "staging",
                      job={"entry_point": "m:f"}, run_store=url)
    env = launcher.supervisor_env(spec, environ={"PATH": "/usr/bin"})
    assert env["AWS_SECRET_ACCESS_KEY"] == creds["AWS_SECRET_ACCESS_KEY"]
    assert env["AWS_ENDPOINT_URL"] == creds["AWS_ENDPOINT_URL"]
    assert "AIRFLOW_CONN_RUNS_S3" not in env
    (tmp_path / "staging").mkdir()
    launcher.save_spec(spec)
    assert creds["AWS_SECRET_ACCESS_KEY"] not in store.read_text(LAYOUT.spec)
    assert creds["AWS_SECRET_ACCESS_KEY"] not in (tmp_path / "staging" / "cluster.json").read_text()
    local = build_spec(cluster_id="conn2", cache="c", mode="sync", workers=1, run_dir=tmp_path / "runs" / "conn2",
                       job={"entry_point": "m:f"})
    assert "AWS_SECRET_ACCESS_KEY" not in launcher.supervisor_env(local, environ={"PATH": "/usr/bin"})


def test_the_sensor_reads_a_failed_remote_runs_tail_with_its_connection(s3_bucket, object_store, tmp_path,
                                                                          monkeypatch):
    """The TFClusterSensor, like the operator and the trigger, reads an object-store run with the ``aws``
    connection's credentials (the worker's environment has none)."""
    import json

    import pytest
    from airflow.sdk.exceptions import AirflowException

    from ignite_tf.contract import ENV_STATE_DIR
    from ignite_tf.sensors.tf_cluster import TFClusterSensor
    from ignite_tf.state import ClusterState, LocalStateStore, Status

    creds = object_store.env()
    url = f"s3://{s3_bucket}/runs/sensed"
    RunStore(url).write_text(LAYOUT.log("worker-0"), "epoch 1\nworker-0 failing on purpose\n")
    for name in creds:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AIRFLOW_CONN_RUNS_S3", json.dumps({
        "conn_type": "aws", "login": creds["AWS_ACCESS_KEY_ID"], "password": creds["AWS_SECRET_ACCESS_KEY"],
        "extra": {"endpoint_url": creds["AWS_ENDPOINT_URL"], "region_name": "us-east-1"}}))
    monkeypatch.setenv(ENV_STATE_DIR, str(tmp_path / "state"))
    LocalStateStore(tmp_path / "state").put(ClusterState(
        cluster_id="sensed", cache="c", mode="sync", run_dir=url, status=Status.FAILED, exit_code=3,
        reason="worker-0 exited with status 3", chief_log=str(tmp_path / "logs" / "worker-0.log")))

    sensor = TFClusterSensor(task_id="watch", cluster_id="sensed", ignite_conn_id=None, deferrable=False,
                             run_store_conn_id="runs_s3")
    with pytest.raises(AirflowException, match="exited with status 3") as failed:
        sensor.poke({})
    assert "worker-0 failing on purpose" in str(failed.value)
