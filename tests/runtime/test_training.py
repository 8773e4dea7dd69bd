"""Real TensorFlow training through the launcher: sync and async, healing after kill -9, supervisor death."""

from __future__ import annotations

import os
import re
import signal
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import psutil
import pytest

from ignite_tf.cluster.api import make_launcher, start_cluster
from ignite_tf.state import ExitCode, LocalStateStore, Status
from tests.support.clusters import assert_nothing_left
from tests.support.polling import wait_for

CACHE = "training_tabular"
TUTORIAL = Path(__file__).resolve().parents[2] / "dags" / "examples" / "mnist_keras_tutorial"


@pytest.fixture(scope="module")
def cache(ignite_conn):
    from ignite_tf_dev import demo_data

    from ignite_tf.etl import load

    load(ignite_conn, CACHE, demo_data.tabular(4000, seed=1), key="id")
    return CACHE


@pytest.fixture
def launcher(ignite_conn, run_root, tmp_path):
    return make_launcher(ignite_conn, store=LocalStateStore(tmp_path / "state"))


def job(epochs: int, batch_size: int = 32, *extra: str) -> dict:
    return {"entry_point": "ignite_tf.models:tabular_classifier",
            "args": ["--epochs", str(epochs), "--batch-size", str(batch_size), "--label-column", "label",
                     "--learning-rate", "0.02", *extra]}


def epochs_reported(launcher, cluster_id: str) -> list[int]:
    return [e["epoch"] for e in launcher.store.epochs(cluster_id)]


def test_sync_worker_killed_cluster_restarts_from_checkpoint(cache, ignite_conn, launcher):
    state = start_cluster(cache, job(6), conn=ignite_conn, launcher=launcher, mode="sync", workers=2, max_restarts=2)
    wait_for(lambda: len(epochs_reported(launcher, state.cluster_id)) >= 2, timeout=300, what="2 epochs")
    done_before_kill = max(epochs_reported(launcher, state.cluster_id))
    victim = next(t for t in launcher.status(state.cluster_id).tasks if t.name == "worker-1")
    os.kill(victim.pid, signal.SIGKILL)
    final = launcher.wait(state.cluster_id, timeout=600)

    assert final.status is Status.SUCCEEDED, launcher.tail(state.cluster_id, 40)
    assert final.restarts == 1
    reported = epochs_reported(launcher, state.cluster_id)
    assert sorted(set(reported)) == [1, 2, 3, 4, 5, 6]
    # The restart resumed after the last checkpointed epoch: at most one epoch (the checkpoint interval)
    # is trained twice, never the epochs finished before the kill.
    repeated = [e for e in set(reported) if reported.count(e) > 1]
    assert all(e > done_before_kill - 1 for e in repeated), reported
    assert f"resuming at epoch {done_before_kill + 1}" in launcher.output(state.cluster_id)[0] or \
        f"resuming at epoch {done_before_kill + 2}" in launcher.output(state.cluster_id)[0]
    assert final.epochs[-1]["loss"] < 0.5
    assert_nothing_left(state.cluster_id, final.run_dir)


def test_async_trains_and_survives_a_killed_worker(cache, ignite_conn, launcher):
    state = start_cluster(cache, job(5), conn=ignite_conn, launcher=launcher, mode="async", workers=2, ps=1,
                          max_restarts=2, startup_deadline_s=300)
    assert [t.name for t in state.tasks] == ["chief-0", "worker-0", "worker-1", "ps-0"]
    wait_for(lambda: len(epochs_reported(launcher, state.cluster_id)) >= 1, timeout=400, what="first epoch")
    victim = next(t for t in launcher.status(state.cluster_id).tasks if t.name == "worker-0")
    os.kill(victim.pid, signal.SIGKILL)
    final = launcher.wait(state.cluster_id, timeout=600)

    assert final.status is Status.SUCCEEDED, launcher.tail(state.cluster_id, 40)
    tasks = {t.name: t for t in final.tasks}
    assert tasks["worker-0"].restarts == 1 and tasks["chief-0"].restarts == 0 and tasks["ps-0"].restarts == 0
    assert final.epochs[-1]["epoch"] == 5 and final.epochs[-1]["loss"] < 0.6
    assert os.path.isdir(os.path.join(final.run_dir, "checkpoints", "model"))
    assert_nothing_left(state.cluster_id, final.run_dir)


def test_supervisor_killed_during_training_leaves_no_tf_process(cache, ignite_conn, launcher):
    state = start_cluster(cache, job(100), conn=ignite_conn, launcher=launcher, mode="sync", workers=2)
    wait_for(lambda: launcher.status(state.cluster_id).status is Status.RUNNING, timeout=300, what="running")
    pids = [t.pid for t in launcher.status(state.cluster_id).tasks]
    os.kill(state.supervisor_pid, signal.SIGKILL)
    killed_at = time.monotonic()
    wait_for(lambda: not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                             for p in pids), timeout=10, what="TF tasks to die with their supervisor")
    assert time.monotonic() - killed_at < 10
    assert_nothing_left(state.cluster_id, state.run_dir, timeout=5)
    stopped = launcher.stop(state.cluster_id)
    assert stopped.status is Status.STOPPED and stopped.exit_code != ExitCode.SUCCEEDED


def test_ported_conv_tutorial_with_repeat_trains_on_two_workers(ignite_conn, launcher):
    """TensorFlow's multi-worker tutorial model (Conv2D on 28x28) ported as the README says, with
    ``ignite_tf.data.dataset(...).repeat()``, run by the supervisor on 2 workers over a cache whose shards do
    not divide into the global batch. A short batch at the end of a pass would leave a replica with no
    rows and fail Conv2D's gradient (ReluGrad shapes [0,26,26,32] != [0,28,28,1]). The plan holds 10% of the
    rows out: the port's optional evaluation block evaluates on them and reports, and the publish gate judges
    the reported held-out numbers."""
    from ignite_tf.etl import load
    from ignite_tf.plan.partitions import PartitionMap
    from ignite_tf.plan.shards import ShardPlan
    from ignite_tf.registry.gate import BlessingGate, held_out_inputs

    sys.path.insert(0, str(TUTORIAL))
    try:
        import digits
    finally:
        sys.path.remove(str(TUTORIAL))
    cache = f"digits_{uuid.uuid4().hex[:8]}"
    assert load(ignite_conn, cache, digits.frame(2818), key="id").rows_in_cache == 2818
    # Without a static batch size, TF splits each batch of global_batch rows in two halves, one per replica:
    # a pass ending in 1 row (1409 = 11 x 128 + 1 rows a shard) gave one replica 0 rows, and Conv2D failed.
    global_batch = 64 * 2  # per_worker_batch_size * num_workers in ported.py
    pm = PartitionMap.discover(ignite_conn, cache)
    plan = next((p for p in (ShardPlan.build(pm, 2, seed=s, evaluation=0.1) for s in range(50))
                 if any(w.rows % global_batch == 1 for w in p.shards(0))), None)
    assert plan is not None, "no seed gives a shard of 128 n + 1 rows"
    # 3 epochs x 70 steps x 64 rows per worker: each worker passes over its ~1409 rows 9 times.
    state = start_cluster(cache, {"command": [sys.executable, "ported.py"], "job_dir": str(TUTORIAL)},
                          conn=ignite_conn, launcher=launcher, mode="sync", plan=plan, max_restarts=0,
                          startup_deadline_s=300)
    final = launcher.wait(state.cluster_id, timeout=900)
    log = launcher.output(state.cluster_id)[0]
    assert final.status is Status.SUCCEEDED, log[-4000:]
    assert "ReluGrad" not in log
    finals = re.findall(r"70/70 \[=+\] - \d+m?s .*?- loss: ([\d.]+) - accuracy: ([\d.]+)", log)
    assert len(finals) == 3, log[-3000:]
    print(f"conv tutorial on 2 workers, 2818 rows: (loss, accuracy) per epoch {finals}")
    # The tutorial's SGD(0.001) learns slowly, from an unseeded start (the port is the tutorial unchanged): its
    # loss falls and it ends above chance (0.1) is what it shows; its accuracy after 210 steps varies (0.19-0.3).
    assert float(finals[-1][1]) > 0.1 and float(finals[-1][0]) < float(finals[0][0]), finals

    # The held-out evaluation, reported by the chief alone, is in the cluster state, over every held-out row.
    # The table's keys are 0..2817: the split's own key hash says which are held out (no second read of them).
    evaluation, held = final.evaluation, int(plan.evaluation.held_out(np.arange(2818, dtype=np.int64)).sum())
    print(f"conv tutorial held-out evaluation: {evaluation}")
    assert evaluation["by"] == "script" and evaluation["rows"] == held > 0, evaluation
    assert evaluation["split"] == plan.evaluation.to_dict() and set(evaluation["metrics"]) == {"loss", "accuracy"}
    assert log.count(f"held-out evaluation on {held} rows: accuracy=") == 1, log[-3000:]
    # The gate judges those numbers, not the training's: a threshold just above the held-out accuracy refuses.
    judged, _, notes = held_out_inputs({"accuracy": 1.0}, None, None, evaluation)
    assert judged == evaluation["metrics"] and not notes
    accuracy = evaluation["metrics"]["accuracy"]
    assert BlessingGate(thresholds={"accuracy": (accuracy - 0.01, None)}).evaluate(judged, None) == ([], {})
    reasons, _ = BlessingGate(thresholds={"accuracy": (accuracy + 0.01, None)}).evaluate(judged, None)
    assert reasons and f"accuracy = {accuracy:.6g} is below" in reasons[0]
    assert_nothing_left(state.cluster_id, final.run_dir)
