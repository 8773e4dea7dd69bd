"""The worker runtime with REAL TensorFlow processes on localhost, reading the REAL Ignite session cluster.

Task processes are started here the way the launcher starts them (``ClusterSpec.task_env`` + the
connection + a local state store, cwd = the task directory), at most 4 TF processes at a time, and are
always killed in a ``finally``; every test asserts that none is left.
"""

from __future__ import annotations

import difflib
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from ignite_tf_dev import demo_data

import ignite_tf.data as itd
from ignite_tf.cluster.procs import die_with_parent, pid_alive
from ignite_tf.cluster.spec import build_spec
from ignite_tf.defaults import DEFAULT_SHUFFLE_BUFFER
from ignite_tf.errors import ConfigError
from ignite_tf.plan.partitions import PartitionMap
from ignite_tf.plan.shards import ShardPlan
from ignite_tf.state import LocalStateStore, store_to_env
from tests.support.polling import wait_for

REPO = Path(__file__).resolve().parents[2]
TUTORIAL = REPO / "dags" / "examples" / "mnist_keras_tutorial"
FEATURES = demo_data.feature_columns()


# -- helpers ----------------------------------------------------------------------------------------------
class LocalTasks:
    """The tasks of ``spec`` as local processes (what the launcher will do), killed on exit."""

    def __init__(self, spec, conn, state_dir: Path, command, extra_env: dict | None = None):
        self.spec, self.conn, self.command = spec, conn, command
        self.store_env = store_to_env(LocalStateStore(state_dir))
        self.extra_env = extra_env or {}
        self.procs: dict[str, subprocess.Popen] = {}
        self.all_pids: list[int] = []

    def start(self, attempt: int = 0) -> None:
        for task in self.spec.tasks:
            env = {**os.environ, **self.spec.task_env(task, attempt), **self.conn.to_env(), **self.store_env,
                   "CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "2",
                   "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
                   **self.extra_env}
            Path(self.spec.task_dir(task)).mkdir(parents=True, exist_ok=True)
            log_path = Path(self.spec.log_path(task))
            log_path.parent.mkdir(parents=True, exist_ok=True)
            with open(log_path, "a") as log:
                proc = subprocess.Popen(self.command(task), cwd=self.spec.task_dir(task), env=env, stdout=log,
                                        stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
            self.procs[task.name] = proc
            self.all_pids.append(proc.pid)

    def wait(self, name: str, timeout: float) -> int:
        try:
            return self.procs[name].wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{name} still running after {timeout}s; logs:\n{self.logs()}")

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)

    def kill_all(self) -> None:
        for name in self.procs:
            self.kill(name)

    def log(self, name: str) -> str:
        return Path(self.spec.log_path(self.spec.task(name))).read_text(errors="replace")

    def logs(self) -> str:
        return "\n".join(f"--- {n}:\n{self.log(n)[-3000:]}" for n in self.procs)

    def __enter__(self) -> LocalTasks:
        return self

    def __exit__(self, *exc) -> None:
        self.kill_all()
        left = [p for p in self.all_pids if pid_alive(p)]
        assert not left, f"TF task processes left running: {left}"


def runtime_command(entry_point: str, *args: str):
    return lambda task: [sys.executable, "-m", "ignite_tf.runtime", "--entry-point", entry_point,
                         "--label-column", "label", *args]


def epochs_of(state_dir: Path, cluster_id: str) -> list[dict]:
    return LocalStateStore(state_dir).epochs(cluster_id)


@pytest.fixture(scope="module")
def tabular(ignite_conn, tmp_path_factory):
    """4000 rows of the shipped tabular data set, loaded with the ETL core, and a 2-worker ShardPlan."""
    from ignite_tf.etl import load

    cache = f"rt_{uuid.uuid4().hex[:8]}"
    report = load(ignite_conn, cache, demo_data.tabular(4000), key="id")
    assert report.rows_in_cache == 4000
    plan = ShardPlan.build(PartitionMap.discover(ignite_conn, cache), 2, seed=7)
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    plan.save(path)
    return SimpleNamespace(cache=cache, plan=plan, plan_path=str(path))


def probe_model(n_features: int = 16, n_classes: int | None = None, learning_rate: float = 0.01):
    """Entry point for the async test: before building the model, ask every worker what its feed holds.

    Runs in the chief, inside the ParameterServerStrategy's scope. Each scheduled function runs on some
    worker and returns that worker's ``feed/meta.json`` (its index) together with the first row of the
    batch the chief's dataset graph yielded there: both are resolved against that worker's directory.
    """
    import tensorflow as tf

    from ignite_tf.data.feed import feed_dataset_fn
    from ignite_tf.models import tabular_classifier

    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(tf.distribute.get_strategy())
    per_worker = coordinator.create_per_worker_dataset(
        feed_dataset_fn(n_features=n_features, label_dtype=np.int32, epochs=1))
    iterator = iter(per_worker)

    @tf.function
    def where(it):
        features, _ = next(it)
        return tf.io.read_file("feed/meta.json"), features[0]

    results = [coordinator.schedule(where, args=(iterator,)) for _ in range(24)]
    coordinator.join()
    out = []
    for r in results:
        meta, row = r.fetch()
        out.append({"worker": json.loads(meta)["worker"], "row": np.asarray(row).tolist()})
    Path(os.environ["PROBE_OUT"]).write_text(json.dumps(out))
    return tabular_classifier(n_features, n_classes, learning_rate=learning_rate)


# -- no TensorFlow needed -----------------------------------------------------------------------------------
def test_import_does_not_load_tensorflow():
    code = ("import sys, ignite_tf.runtime.train, ignite_tf.runtime.inputs, ignite_tf.models; "
            "assert 'tensorflow' not in sys.modules, 'tensorflow imported'")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_task_roles_from_tf_config():
    from ignite_tf.runtime.task import task_info

    sync = {"worker": ["h:1", "h:2"]}
    w0 = task_info(environ={"TF_CONFIG": json.dumps({"cluster": sync, "task": {"type": "worker", "index": 0}})})
    w1 = task_info(environ={"TF_CONFIG": json.dumps({"cluster": sync, "task": {"type": "worker", "index": 1}})})
    assert (w0.mode.value, w0.is_chief, w0.serves) == ("sync", True, False)
    assert (w1.is_chief, w1.serves, w1.workers) == (False, False, 2)
    full = {"chief": ["h:0"], "worker": ["h:1", "h:2"], "ps": ["h:3"]}
    roles = {}
    for kind, index in (("chief", 0), ("worker", 1), ("ps", 0)):
        info = task_info(environ={"TF_CONFIG": json.dumps({"cluster": full, "task": {"type": kind, "index": index}}),
                                  "IGNITE_TF_MODE": "async"})
        roles[kind] = (info.mode.value, info.is_chief, info.serves)
    assert roles == {"chief": ("async", True, False), "worker": ("async", False, True), "ps": ("async", False, True)}
    alone = task_info(environ={})
    assert (alone.type, alone.is_chief, alone.serves) == (None, True, False)
    with pytest.raises(ConfigError, match="needs a 'chief' and 'ps'"):
        task_info(environ={"TF_CONFIG": json.dumps({"cluster": sync, "task": {"type": "worker", "index": 0}}),
                           "IGNITE_TF_MODE": "async"})
    with pytest.raises(ConfigError, match="sync mode .* has no parameter servers"):
        task_info(environ={"TF_CONFIG": json.dumps({"cluster": full, "task": {"type": "ps", "index": 0}}),
                           "IGNITE_TF_MODE": "sync"})
    with pytest.raises(ConfigError, match="mode must be one of"):
        task_info(environ={"IGNITE_TF_MODE": "fast"})
    with pytest.raises(ConfigError, match="not valid JSON"):
        task_info(environ={"TF_CONFIG": "{nope"})


def test_entry_point_errors_say_what_to_do():
    from ignite_tf.runtime.model import load_entry_point
    from ignite_tf.runtime.train import main

    assert load_entry_point("ignite_tf.models:tabular_classifier").__name__ == "tabular_classifier"
    with pytest.raises(ConfigError, match="must look like 'package.module:function'"):
        load_entry_point("ignite_tf.models")
    with pytest.raises(ConfigError, match="cannot import 'no_such_module_x'.*PYTHONPATH"):
        load_entry_point("no_such_module_x:f")
    with pytest.raises(ConfigError, match="has no function 'nope'"):
        load_entry_point("ignite_tf.models:nope")
    # A training task without an entry point fails with exit code 2 and a message, before importing TF.
    assert main(["--epochs", "1", "--label", "label"]) == 2


EVALUATION_BLOCK = ("# --- optional, beyond the tutorial: held-out evaluation",
                    "# --- end of the held-out evaluation ---")


def split_evaluation_block(lines: list[str]) -> tuple[list[str], list[str]]:
    """(the port without its marked held-out evaluation block, the block's lines between the markers)."""
    starts = [i for i, line in enumerate(lines) if line.startswith(EVALUATION_BLOCK[0])]
    if not starts:
        return lines, []
    start = starts[0]
    end = lines.index(EVALUATION_BLOCK[1], start)
    before = lines[:start]
    while before and not before[-1].strip():  # the blank line that sets the block apart belongs to it
        before.pop()
    return before + lines[end + 1:], lines[start + 1:end]


@pytest.mark.parametrize("tutorial", ["mnist_keras_tutorial", "parameter_server_tutorial"])
def test_tutorial_port_changes_fewer_than_ten_lines(tutorial):
    """Each ported TensorFlow tutorial differs from its original in a few lines, all listed in its CHANGES.md; an
    optional addition beyond the tutorial (the held-out evaluation) is a marked block at the end, counted apart
    and listed too."""
    folder = TUTORIAL.parent / tutorial
    original = (folder / "original.py").read_text().splitlines()
    ported, evaluation = split_evaluation_block((folder / "ported.py").read_text().splitlines())
    changed = [line for line in difflib.unified_diff(original, ported, lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert 0 < len(changed) < 10, changed
    listed = (folder / "CHANGES.md").read_text()
    for line in changed:
        assert line in listed, f"CHANGES.md does not list {line!r}"
    if tutorial == "mnist_keras_tutorial":  # the Keras port shows the evaluation API in a few lines
        code = "\n".join(evaluation)
        assert 0 < len(evaluation) <= 4 and "evaluation_dataset(" in code and "report_evaluation(" in code, evaluation
    for line in evaluation:
        assert line in listed, f"CHANGES.md does not list the evaluation line {line!r}"


# -- feed of the async workers (in-process) ----------------------------------------------------------------
def test_feed_is_exactly_the_worker_shard(tabular, ignite_conn, tmp_path, monkeypatch):
    from ignite_tf.data.feed import feed_dataset_fn, read_feed, write_feed
    from ignite_tf.runtime.inputs import resume_point

    plan, seen = tabular.plan, []
    for w in (0, 1):
        feed = tmp_path / f"worker-{w}" / "feed"
        meta = write_feed(2, batch_size=50, label="label", worker=w, plan=plan, conn=ignite_conn, feed_dir=feed)
        assert not meta["reused"] and meta["features"] == FEATURES
        print(f"feed of worker {w}: {sum(meta['rows'])} rows in {meta['seconds']:.2f}s, {sum(meta['bytes'])} bytes")
        assert meta["rows"] == [plan.shard(w, e).rows for e in (0, 1)]
        for epoch in (0, 1):
            expected = np.concatenate([
                np.column_stack([b[c].astype(np.float32) for c in [*FEATURES, "label"]])
                for b in itd.batches(epoch, batch_size=50, worker=w, plan=plan, conn=ignite_conn,
                                     columns=[*FEATURES, "label"], shuffle_buffer=DEFAULT_SHUFFLE_BUFFER)])
            np.testing.assert_array_equal(read_feed(feed, epoch), expected)
        seen.append(read_feed(feed, 0))
        assert write_feed(2, batch_size=50, label="label", worker=w, plan=plan, conn=ignite_conn,
                          feed_dir=feed)["reused"]
    # The two workers' epoch-0 feeds are disjoint and together hold every row once.
    rows = {r.tobytes() for r in np.concatenate(seen)}
    assert len(rows) == sum(len(s) for s in seen) == 4000

    # The chief's dataset graph, run where the cwd is worker 1's directory, yields worker 1's rows.
    monkeypatch.chdir(tmp_path / "worker-1")
    ds = feed_dataset_fn(n_features=16, label_dtype=np.int32, epochs=2)()
    want = np.concatenate([read_feed("feed", 0), read_feed("feed", 1)])
    got_x, got_y = [], []
    for x, y in ds:
        got_x.append(x.numpy())
        got_y.append(y.numpy())
        if sum(len(b) for b in got_x) >= len(want):
            break
    assert got_y[0].dtype == np.int32
    np.testing.assert_array_equal(np.concatenate(got_x), want[:, :16])
    np.testing.assert_array_equal(np.concatenate(got_y), want[:, 16].astype(np.int32))
    with pytest.raises(ConfigError, match="must be relative"):
        feed_dataset_fn(n_features=16, label_dtype=np.int32, epochs=1, feed_dir=str(tmp_path))
    assert resume_point(tmp_path / "no-backup", 10) == (0, 0)


def test_sync_dataset_reads_each_epochs_assignment_with_equal_steps(tabular, ignite_conn):
    from ignite_tf.runtime.inputs import sync_dataset

    plan, steps, batch = tabular.plan, 7, 50

    def epoch_rows(epoch: int) -> np.ndarray:
        stream = itd.batches(epoch, batch_size=batch, worker=1, plan=plan, conn=ignite_conn,
                             columns=[*FEATURES, "label"], shuffle_buffer=DEFAULT_SHUFFLE_BUFFER)
        return np.concatenate([np.column_stack([b[c] for c in FEATURES]).astype(np.float32) for b in stream])

    # Worker 1 (TF_CONFIG absent: pass the input context a strategy would give worker 1 of 2).
    import tensorflow as tf

    ctx = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=1)
    ds = sync_dataset(plan=plan, batch_size=batch, label="label", features=FEATURES, epochs=3, steps=steps,
                      start_epoch=1, start_step=2, input_context=ctx, conn=ignite_conn)
    got = [x.numpy() for x, _ in ds]
    assert len(got) == (steps - 2) + steps  # epoch 1 resumed at step 2, then all of epoch 2
    assert all(len(b) == batch for b in got)
    e1, e2 = epoch_rows(1), epoch_rows(2)
    assert not np.array_equal(e1[:batch], e2[:batch]), "the assignment changes every epoch"
    np.testing.assert_array_equal(np.concatenate(got[:steps - 2]), e1[2 * batch:steps * batch])
    np.testing.assert_array_equal(np.concatenate(got[steps - 2:]), e2[:steps * batch])


def test_builtin_classifier_takes_the_number_of_classes_from_the_label(ignite_conn, tmp_path, monkeypatch):
    """A 5-class label, no model arguments: the runtime finds 5 classes in the data and the output layer has
    5 units; a model argument wins over the data; a float label offers no class count."""
    import tf_keras

    from ignite_tf.etl import load
    from ignite_tf.runtime.inputs import label_classes
    from ignite_tf.runtime.train import train

    frame = demo_data.tabular(600, seed=2)
    frame["label"] = (frame[FEATURES].to_numpy() @ np.random.default_rng(5).normal(size=(16, 5))).argmax(axis=1)
    frame["label"] = frame["label"].astype(np.int32)
    assert sorted(frame["label"].unique()) == [0, 1, 2, 3, 4]
    cache = f"five_{uuid.uuid4().hex[:8]}"
    load(ignite_conn, cache, frame, key="id")
    plan = ShardPlan.build(PartitionMap.discover(ignite_conn, cache), 1, reshuffle="none")
    for key, value in ignite_conn.to_env().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("TF_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)

    def output_units(model_kwargs, where):
        out = train("ignite_tf.models:tabular_classifier", epochs=1, batch_size=64, label_column="label", plan=plan,
                    model_kwargs=model_kwargs, checkpoint_dir=str(tmp_path / where))
        model = tf_keras.models.load_model(out["model_dir"], compile=False)
        return [layer.units for layer in model.layers if isinstance(layer, tf_keras.layers.Dense)]

    assert output_units(None, "data") == [32, 32, 5]
    assert output_units({"n_classes": 7, "hidden": 4}, "args") == [4, 4, 7]
    assert label_classes(plan, "f0", np.float32, ignite_conn) is None


def test_resume_point_follows_tf_keras_rules(tmp_path):
    import tensorflow as tf

    from ignite_tf.runtime.inputs import resume_point

    def backup(epoch: int, batch: int) -> Path:
        where = tmp_path / f"b{epoch}_{batch}"
        ckpt = tf.train.Checkpoint(ckpt_saved_epoch=tf.Variable(epoch, dtype=tf.int64),
                                   ckpt_saved_batch=tf.Variable(batch, dtype=tf.int64))
        tf.train.CheckpointManager(ckpt, str(where / "chief"), max_to_keep=1).save()
        return where

    assert resume_point(backup(2, -1), 10) == (3, 0)  # epoch 2 finished -> epoch 3
    assert resume_point(backup(-1, -1), 10) == (0, 0)
    assert resume_point(backup(2, 4), 10, step_level=True) == (2, 5)  # mid-epoch -> the next step
    assert resume_point(backup(2, 9), 10, step_level=True) == (3, 0)  # last step of the epoch


# -- real clusters -----------------------------------------------------------------------------------------
def test_sync_two_workers_train_report_and_save(tabular, ignite_conn, tmp_path):
    state, cid = tmp_path / "state", "rt-sync"
    spec = build_spec(cluster_id=cid, cache=tabular.cache, mode="sync", workers=2, run_dir=tmp_path / "run",
                      job={}, shard_plan_path=tabular.plan_path)
    command = runtime_command("ignite_tf.models:tabular_classifier", "--epochs", "3", "--batch-size", "32")
    started = time.monotonic()
    with LocalTasks(spec, ignite_conn, state, command) as tasks:
        tasks.start()
        codes = {name: tasks.wait(name, 420) for name in ("worker-0", "worker-1")}
        assert codes == {"worker-0": 0, "worker-1": 0}, tasks.logs()
        chief_log, other_log = tasks.log("worker-0"), tasks.log("worker-1")
    print(f"sync 2 workers x 3 epochs: {time.monotonic() - started:.1f}s")

    reported = epochs_of(state, cid)
    assert [m["epoch"] for m in reported] == [1, 2, 3]
    last = reported[-1]
    assert last["loss"] < 0.3 and last["accuracy"] > 0.85, reported
    assert last["examples_per_s"] > 0 and last["epoch_s"] > 0 and last["steps"] == min(
        itd.steps_per_epoch(32, e, plan=tabular.plan) for e in range(3))
    assert re.search(r"^epoch 3/3 loss=\d\.\d{4} accuracy=\d\.\d{4} examples/s=\d+ epoch_s=\d", chief_log, re.M)
    assert "epoch 1/3" not in other_log  # only the chief reports

    import tensorflow as tf
    import tf_keras

    events = list((Path(spec.tensorboard_dir) / "train").glob("events.out.tfevents.*"))
    assert events, "no TensorBoard event file"
    losses = {}
    for path in events:
        for event in tf.compat.v1.train.summary_iterator(str(path)):
            for value in event.summary.value:
                if value.tag == "epoch_loss":
                    losses[event.step] = float(tf.make_ndarray(value.tensor))
    assert losses == pytest.approx({i: m["loss"] for i, m in enumerate(reported)}, rel=1e-4)

    model_dir = Path(spec.checkpoint_dir) / "model"
    info = json.loads((model_dir / "ignite_tf_model.json").read_text())
    assert info["features"] == FEATURES and info["label"] == "label" and info["epochs"] == 3
    model = tf_keras.models.load_model(str(model_dir))
    fresh = demo_data.tabular(1000, seed=99)
    x, y = fresh[FEATURES].to_numpy(np.float32), fresh["label"].to_numpy()
    accuracy = (model.predict(x, verbose=0).argmax(axis=1) == y).mean()
    assert accuracy > 0.85
    # The saved copy (save_once) carries the trained model's resolved metrics: the reloaded model's own
    # evaluate() agrees with its predictions on the same rows (an unresolved "accuracy" said 0.30 for 0.87).
    assert model.evaluate(x, y, verbose=0, return_dict=True)["accuracy"] == pytest.approx(accuracy, abs=1e-6)
    # The backup outlives the training (a restart of a finished training trains nothing), the chief's only.
    assert [p.parent.name for p in (Path(spec.checkpoint_dir) / "backup").rglob("ckpt-*.index")] == ["chief"]
    # Saved by the chief alone (no other worker's temporary save), and both tasks' output is complete.
    assert not list(Path(spec.checkpoint_dir).glob(".model-*"))
    assert re.search(r"^timing: fit_end at [0-9.]+\nmodel saved to .*\ntiming: saved at [0-9.]+$", chief_log, re.M)
    assert "Traceback" not in other_log and "timing:" not in other_log


def test_async_chief_two_workers_one_ps_each_worker_reads_its_own_feed(tabular, ignite_conn, tmp_path):
    state, cid, probe = tmp_path / "state", "rt-async", tmp_path / "probe.json"
    spec = build_spec(cluster_id=cid, cache=tabular.cache, mode="async", workers=2, ps=1, run_dir=tmp_path / "run",
                      job={}, shard_plan_path=tabular.plan_path)
    command = runtime_command("tests.runtime.test_runtime:probe_model", "--epochs", "3", "--batch-size", "32")
    started = time.monotonic()
    with LocalTasks(spec, ignite_conn, state, command, {"PROBE_OUT": str(probe)}) as tasks:
        tasks.start()
        assert tasks.wait("chief-0", 480) == 0, tasks.logs()
        for name in ("worker-0", "worker-1", "ps-0"):
            assert tasks.procs[name].poll() is None, f"{name} stopped serving:\n{tasks.logs()}"
        logs = tasks.logs()
    print(f"async chief + 2 workers + 1 ps x 3 epochs: {time.monotonic() - started:.1f}s")

    reported = epochs_of(state, cid)
    assert [m["epoch"] for m in reported] == [1, 2, 3], logs
    assert reported[-1]["loss"] < 0.3 and reported[-1]["accuracy"] > 0.85, reported
    assert (Path(spec.checkpoint_dir) / "model" / "saved_model.pb").exists()
    assert list((Path(spec.tensorboard_dir) / "train").glob("events.out.tfevents.*"))

    from ignite_tf.data.feed import read_feed

    feeds = {}
    for w in (0, 1):
        feed = Path(spec.task_dir(spec.task(f"worker-{w}"))) / "feed"
        meta = json.loads((feed / "meta.json").read_text())
        assert meta["worker"] == w and meta["rows"] == [tabular.plan.shard(w, e).rows for e in range(3)]
        feeds[w] = {row.tobytes() for row in read_feed(feed, 0)[:, :16]}
    for name in ("chief-0", "ps-0"):
        assert not (Path(spec.task_dir(spec.task(name))) / "feed").exists()
    answers = json.loads(probe.read_text())
    assert {a["worker"] for a in answers} == {0, 1}, "both workers ran the chief's dataset graph"
    for a in answers:
        row = np.asarray(a["row"], dtype=np.float32).tobytes()
        assert row in feeds[a["worker"]] and row not in feeds[1 - a["worker"]]


def test_restarted_cluster_resumes_from_backup(tabular, ignite_conn, tmp_path):
    state, cid = tmp_path / "state", "rt-resume"
    spec = build_spec(cluster_id=cid, cache=tabular.cache, mode="sync", workers=2, run_dir=tmp_path / "run",
                      job={}, shard_plan_path=tabular.plan_path)
    command = runtime_command("ignite_tf.models:tabular_classifier", "--epochs", "6", "--batch-size", "16")
    with LocalTasks(spec, ignite_conn, state, command) as tasks:
        tasks.start(attempt=0)

        def two_epochs() -> bool:
            if len(epochs_of(state, cid)) >= 2:
                return True
            assert tasks.procs["worker-0"].poll() is None, tasks.logs()
            return False

        wait_for(two_epochs, 420, "two epochs reported", poll=0.2, seen=tasks.logs)
        tasks.kill("worker-1")  # kill -9 a worker mid-training ...
        tasks.kill("worker-0")  # ... and, as the supervisor does under MWMS, the rest of the cluster
        first = epochs_of(state, cid)
        assert 2 <= len(first) < 6, "the kill came too late to test resuming"

        tasks.start(attempt=1)  # same spec, same directories
        codes = {name: tasks.wait(name, 420) for name in ("worker-0", "worker-1")}
        assert codes == {"worker-0": 0, "worker-1": 0}, tasks.logs()
        chief_log = tasks.log("worker-0")

    second = [m for m in epochs_of(state, cid) if m["attempt"] == 1]
    resumed_at = second[0]["epoch"]
    print(f"attempt 0 reported epochs {[m['epoch'] for m in first]}, attempt 1 {[m['epoch'] for m in second]}")
    # Continues after the last backed-up epoch (an epoch is reported only after its backup is written).
    assert first[-1]["epoch"] + 1 <= resumed_at <= first[-1]["epoch"] + 2, (first, second)
    assert [m["epoch"] for m in second] == list(range(resumed_at, 7))
    assert f"resuming at epoch {resumed_at} step 0" in chief_log
    assert second[-1]["loss"] < 0.3


def test_read_ahead_modes(monkeypatch):
    """IGNITE_TF_READ_AHEAD is one of the modes (auto by default); a value it does not know is an error naming
    it. A task is alone on its host unless another task of the cluster has the same host (pods elsewhere do
    not count)."""
    from ignite_tf.cluster.spec import Mode
    from ignite_tf.runtime.start import alone_on_host, read_ahead_mode
    from ignite_tf.runtime.task import TaskInfo

    monkeypatch.delenv("IGNITE_TF_READ_AHEAD", raising=False)
    assert read_ahead_mode() == "auto"
    monkeypatch.setenv("IGNITE_TF_READ_AHEAD", " Off ")
    assert read_ahead_mode() == "off"
    monkeypatch.setenv("IGNITE_TF_READ_AHEAD", "sometimes")
    with pytest.raises(ConfigError, match="IGNITE_TF_READ_AHEAD='sometimes': use one of auto, process"):
        read_ahead_mode()
    assert not alone_on_host(TaskInfo("worker", 1, Mode.SYNC, {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}))
    assert alone_on_host(TaskInfo("worker", 0, Mode.SYNC, {"worker": ["127.0.0.1:1"]}))
    pods = {"chief": ["c-0.svc:2222"], "worker": ["w-0.svc:2222", "w-1.svc:2222"], "ps": ["p-0.svc:2222"]}
    assert alone_on_host(TaskInfo("worker", 1, Mode.ASYNC, pods))
    assert alone_on_host(TaskInfo(None, 0, Mode.SYNC, {}))


def test_when_a_task_reads_ahead(monkeypatch, tmp_path):
    """auto: in a thread once TensorFlow is imported when the task is alone on its host or TensorFlow was
    imported before it started (a forked task), else not at all;
    process / thread: during the import; after: after it; never for a resumed run, the async chief (it reads
    feeds) or with off."""
    from ignite_tf.cluster.spec import Mode
    from ignite_tf.runtime.start import read_ahead_plan
    from ignite_tf.runtime.task import TaskInfo

    alone = TaskInfo("worker", 0, Mode.SYNC, {"worker": ["127.0.0.1:1"]})
    worker = TaskInfo("worker", 0, Mode.SYNC, {"worker": ["127.0.0.1:1", "127.0.0.1:2"]})
    backup = tmp_path / "backup"
    monkeypatch.delenv("IGNITE_TF_READ_AHEAD", raising=False)
    assert read_ahead_plan(alone, backup) == "after-import"
    assert read_ahead_plan(worker, backup) is None
    assert read_ahead_plan(worker, backup, preloaded=True) == "after-import", "forked: no import to read beside"
    for mode, expected in (("process", "import-process"), ("thread", "import-thread"), ("after", "after-import"),
                           ("off", None)):
        monkeypatch.setenv("IGNITE_TF_READ_AHEAD", mode)
        assert read_ahead_plan(worker, backup) == expected
    monkeypatch.setenv("IGNITE_TF_READ_AHEAD", "process")
    assert read_ahead_plan(TaskInfo("chief", 0, Mode.ASYNC, {"chief": ["c:1"], "worker": ["w:1"], "ps": ["p:1"]}),
                            backup) is None
    backup.mkdir()
    (backup / "chief").mkdir()
    assert read_ahead_plan(worker, backup) is None, "a resumed run starts where its backup says"


def test_a_sync_worker_waits_for_the_leader_to_listen():
    """Workers other than the leader (the chief, else worker 0) wait until its port accepts connections;
    the leader never waits; a leader that never listens is given up on after the timeout (real sockets)."""
    import socket
    import threading

    from ignite_tf.cluster.spec import Mode
    from ignite_tf.ports import free_port
    from ignite_tf.runtime.start import wait_for_leader
    from ignite_tf.runtime.task import TaskInfo

    port = free_port()
    cluster = {"worker": [f"127.0.0.1:{port}", "127.0.0.1:1"]}
    assert wait_for_leader(TaskInfo("worker", 0, Mode.SYNC, cluster), timeout=0.0), "the leader does not wait"
    assert not wait_for_leader(TaskInfo("worker", 1, Mode.SYNC, cluster), timeout=0.3)
    server = socket.socket()
    opened = threading.Timer(0.3, lambda: (server.bind(("127.0.0.1", port)), server.listen()))
    opened.start()
    try:
        started = time.monotonic()
        assert wait_for_leader(TaskInfo("worker", 1, Mode.SYNC, cluster), timeout=30)
        assert time.monotonic() - started >= 0.25, "it waited for the port to open"
    finally:
        opened.join()
        server.close()
    with_chief = {"chief": [f"127.0.0.1:{port}"], "worker": ["127.0.0.1:1"]}
    assert not wait_for_leader(TaskInfo("worker", 0, Mode.SYNC, with_chief), timeout=0.2), "the chief leads"


def test_tensorflow_is_imported_without_pandas_and_fit_still_takes_pandas_inputs():
    """``import_tf`` leaves pandas out of TensorFlow's import (tf_keras's data adapter imported it only to
    recognise pandas inputs); once the program imports pandas, ``fit`` on a DataFrame and a Series trains as
    it did. A fresh interpreter, real TensorFlow."""
    code = """if True:
        import sys
        from ignite_tf.runtime.start import import_tf
        import_tf()
        assert "pandas" not in sys.modules, "pandas came with TensorFlow's import"
        import numpy as np, pandas as pd, tf_keras
        from tf_keras.src.engine import data_adapter
        x = pd.DataFrame({"a": np.arange(32.0), "b": np.ones(32)})
        assert isinstance(x, data_adapter.pd.DataFrame) and not isinstance(x.to_numpy(), data_adapter.pd.DataFrame)
        model = tf_keras.Sequential([tf_keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        history = model.fit(x, pd.Series(np.arange(32.0)), epochs=2, batch_size=8, verbose=0)
        assert len(history.history["loss"]) == 2, history.history
        print("ok")
    """
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
