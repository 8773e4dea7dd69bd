"""TensorFlow's parameter-server tutorial shape (ClusterCoordinator, a dataset_fn through
distribute_datasets_from_function, scheduled steps) ported with ``ignite_tf.data.parameter_server_dataset_fn``
and run by ``ignite-tf start --mode async --workers 2 --ps 1`` (the command's own entry point, real TF
processes, the session Ignite cluster): every worker reads its own shard, and every row of the table is read
exactly once per epoch."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from ignite_tf.cluster.api import make_launcher
from tests.support.clusters import assert_nothing_left

TUTORIAL = Path(__file__).resolve().parents[2] / "dags" / "examples" / "parameter_server_tutorial"
ROWS, EPOCHS = 600, 3  # ported.py's NUM_EPOCHS


def _toy():
    sys.path.insert(0, str(TUTORIAL))
    try:
        import toy
    finally:
        sys.path.remove(str(TUTORIAL))
    return toy


@pytest.fixture(scope="module")
def toy_cache(ignite_conn):
    """(cache name, the table in it): the tutorial's toy rows in a fresh cache."""
    from ignite_tf.etl import load

    cache, table = f"ps_tutorial_{uuid.uuid4().hex[:8]}", _toy().frame(ROWS)
    assert load(ignite_conn, cache, table, key="id").rows_in_cache == ROWS
    return cache, table


def test_worker_answers_a_request_it_cannot_serve_with_the_error(toy_cache, ignite_conn, tmp_path, monkeypatch):
    """A worker that cannot write the requested feed answers with the error (the chief raises it, naming the
    worker) instead of leaving the chief waiting; a good request is answered with the rows of its shard."""
    from ignite_tf.data.feed import ANSWER, REQUEST, answer, pending_request, request_text
    from ignite_tf.plan.partitions import PartitionMap
    from ignite_tf.plan.shards import ShardPlan

    cache, _ = toy_cache
    plan = ShardPlan.build(PartitionMap.discover(ignite_conn, cache), 2)
    monkeypatch.chdir(tmp_path)
    assert pending_request() is None
    bad = json.loads(request_text({"batch_size": 32, "epochs": 1, "label_column": "nope", "features": None,
                                   "shuffle_buffer": 0}))
    Path(REQUEST).write_text(json.dumps(bad))
    assert pending_request() == bad
    reply = answer(pending_request(), worker=1, plan=plan, conn=ignite_conn, log=lambda _: None)
    assert json.loads(Path(ANSWER).read_text()) == reply
    assert reply["id"] == bad["id"] and "nope" in reply["error"], reply
    good = json.loads(request_text({**bad, "label_column": "y"}))
    reply = answer(good, worker=1, plan=plan, conn=ignite_conn, log=lambda _: None)
    assert "error" not in reply and reply["rows"] == [plan.shard(1, 0).rows], reply


def test_ported_parameter_server_tutorial_reads_every_row_once_per_epoch(toy_cache, ignite_conn, tmp_path):
    from ignite_tf.data.feed import read_feed

    cache, table = toy_cache
    cid = f"ps-tutorial-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, **ignite_conn.to_env(), "IGNITE_TF_RUN_ROOT": str(tmp_path / "runs"),
           "IGNITE_TF_HOME": str(tmp_path / "home")}
    run = subprocess.run([sys.executable, "-m", "ignite_tf.cli", "start", "--mode", "async", "--workers", "2",
                          "--ps", "1", "--max-restarts", "0", "--startup-deadline", "300", "--id", cid, cache,
                          str(TUTORIAL), sys.executable, "ported.py"],
                         env=env, capture_output=True, text=True, timeout=600)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    accuracies = [float(a) for a in re.findall(r"Finished epoch \d, accuracy is ([\d.]+)\.", out)]
    assert len(accuracies) == EPOCHS, out[-3000:]
    print(f"ported PS tutorial, {ROWS} rows, 2 workers + 1 ps: accuracy per epoch {accuracies}")
    assert accuracies[-1] > 0.7, accuracies  # linearly separable: the model learns from the fed rows

    launcher = make_launcher(ignite_conn)
    state = launcher.status(cid)
    tasks = Path(state.run_dir) / "tasks"
    # Each epoch: the two workers' feeds hold disjoint rows, together the whole table once (x0 tells a row).
    # Read straight from each worker's feed, in the directory its own process wrote it.
    x0_of = dict(zip(table["x0"].to_numpy(np.float32).tolist(), table["id"].tolist(), strict=True))
    assert len(x0_of) == ROWS
    for epoch in range(EPOCHS):
        ids = [[x0_of[float(v)] for v in read_feed(tasks / f"worker-{w}" / "feed", epoch)[:, 0]]
               for w in (0, 1)]
        assert ids[0] and ids[1], f"epoch {epoch}: a worker read nothing"
        assert not set(ids[0]) & set(ids[1]), f"epoch {epoch}: rows read by both workers"
        assert sorted(ids[0] + ids[1]) == list(range(ROWS)), f"epoch {epoch}: not every row exactly once"
    assert not (tasks / "chief-0" / "feed").exists() and not (tasks / "ps-0" / "feed").exists()
    # The workers' own reads, as the cluster state recorded them: one pass per epoch, each of its shard.
    reads = {r["worker"]: r for r in launcher.store.reads(cid)}
    print(f"reads recorded: {reads}")
    assert sorted(reads) == [0, 1] and all(r["passes"] == EPOCHS for r in reads.values()), reads
    assert sum(r["rows"] for r in reads.values()) == EPOCHS * ROWS, reads
    assert_nothing_left(cid, state.run_dir)
