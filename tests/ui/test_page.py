"""The page's pieces without Airflow: views of a cluster state, SVG charts, the HTML, TensorBoard targets."""

from __future__ import annotations

import json
import time

import pytest

from ignite_tf.errors import ConfigError
from ignite_tf.state import ClusterState, LocalStateStore, Status, TaskState
from ignite_tf.ui import page
from ignite_tf.ui.charts import line_chart
from ignite_tf.ui.tensorboard import command, logdirs, tensorboard_url
from ignite_tf.ui.views import cluster_view


def a_state(tmp_path, epochs: int = 3) -> ClusterState:
    state = ClusterState(
        cluster_id="c-1", cache="digits", mode="sync", run_dir=str(tmp_path / "c-1"), status=Status.SUCCEEDED,
        tasks=[TaskState("worker", 0, "127.0.0.1", 1, state="exited", exit_code=0),
               TaskState("worker", 1, "127.0.0.1", 2, state="exited", exit_code=0, restarts=1)],
        started_at=time.time() - 125, finished_at=time.time(), restarts=1,
        labels={"dag_id": "d", "run_id": "manual__2026-01-01T00:00:00+00:00", "task_id": "train",
                "map_index": "-1"})
    state.epochs = [{"epoch": e, "epochs": epochs, "loss": 1.0 / e, "accuracy": 0.5 + e / 10,
                     "val_loss": 1.2 / e, "examples_per_s": 1000.0 + e, "epoch_s": 1.5, "time": 0.0}
                    for e in range(1, epochs + 1)]
    return state


def test_view_charts_and_page(tmp_path):
    publish = {"model": "m", "version": "v0001", "status": "production", "reasons": [], "path": str(tmp_path),
               "previous_production": None}
    (tmp_path / "metadata.json").write_text(json.dumps({"metrics": {"accuracy": 0.8}}))
    validation = {"passed": True, "suite": "s.yaml", "rows": 100, "rows_checked": 100,
                  "rows_per_shard": {"0": 50, "1": 50}, "checks": [{"success": True}], "message": "ok"}
    view = cluster_view(a_state(tmp_path), alive=False, results={"publish": publish, "validation": validation})
    assert view["epochs_done"] == 3 and view["epochs_total"] == 3 and view["age"] == "2m"
    assert [t["restarts"] for t in view["tasks"]] == [0, 1]
    assert len(view["charts"]) == 3  # loss (+val_loss), accuracy, examples/s
    assert 'data-series="val_loss"' in view["charts"][0]
    html = page.render([view], source="somewhere", tensorboard_for=tensorboard_url)
    assert 'data-cluster="c-1"' in html and "epochs 3/3" in html and "v0001" in html and "accuracy=0.8" in html
    assert 'href="/dags/d/runs/manual__2026-01-01T00%3A00%3A00%2B00%3A00/tasks/train"' in html
    assert "http-equiv" not in html, "a finished cluster needs no refresh"
    assert "<script" not in html


def test_lost_cluster_and_empty_page(tmp_path):
    state = a_state(tmp_path, epochs=1)
    state.status, state.finished_at = Status.RUNNING, None
    view = cluster_view(state, alive=False)
    assert view["status"] == "lost" and view["publish"] is None and view["plan"] is None
    assert "No TensorFlow cluster" in page.render([], source="x", tensorboard_for=tensorboard_url)


def test_chart_escapes_and_skips_nan():
    svg = line_chart("<loss>", {"a&b": [(1, 1.0), (2, float("nan")), (3, 0.5)]})
    assert "&lt;loss&gt;" in svg and "a&amp;b" in svg and svg.count("<circle") == 2
    assert line_chart("empty", {"x": []}) == ""


def test_tensorboard_targets(tmp_path):
    for name in ("r1", "r2"):
        (tmp_path / "runs" / name / "tensorboard").mkdir(parents=True)
    (tmp_path / "runs" / "not-a-run").mkdir()
    assert list(logdirs([str(tmp_path / "runs")])) == ["r1", "r2"]
    assert logdirs([str(tmp_path / "runs" / "r1")]) == {"r1": (tmp_path / "runs" / "r1" / "tensorboard").resolve()}
    store = LocalStateStore(tmp_path / "state")
    store.put(ClusterState("c-2", "digits", "sync", str(tmp_path / "runs" / "r2")))
    assert logdirs(["c-2"], store) == {"c-2": tmp_path / "runs" / "r2" / "tensorboard"}
    with pytest.raises(ConfigError, match="no TensorFlow cluster"):
        logdirs(["nope"], store)
    with pytest.raises(ConfigError, match="no TensorBoard files"):
        logdirs([str(tmp_path / "runs" / "not-a-run")])
    argv = command({"r1": tmp_path / "tb"}, port=7000)
    assert argv[1:3] == ["-m", "tensorboard.main"] and f"r1:{tmp_path / 'tb'}" in argv
    assert tensorboard_url("c-2").endswith("runFilter=c-2#timeseries")


def test_held_out_evaluation_section(tmp_path):
    """The evaluation goes through the state store (one record beside the epochs, not counted as one) and onto
    the page: both models' held-out numbers, and the gate's decision."""
    store = LocalStateStore(tmp_path / "state")
    state = a_state(tmp_path)
    store.put(state)
    for epoch in state.epochs:
        store.add_epoch("c-1", epoch)
    evaluation = {"rows": 120, "metrics": {"accuracy": 0.91, "loss": 0.25},
                  "production_metrics": {"accuracy": 0.88, "loss": 0.3}, "production": {"version": "v0001"},
                  "split": {"fraction": 0.1, "seed": 0, "by": "key hash"}, "seconds": 1.2, "by": "chief"}
    store.set_evaluation("c-1", evaluation)
    state = store.get("c-1")
    assert state.evaluation == evaluation and len(state.epochs) == 3 and state.last_epoch["epoch"] == 3
    (tmp_path / "metadata.json").write_text(json.dumps({"metrics": {}, "gate": {"on": "evaluation", "notes": []}}))
    publish = {"model": "m", "version": "v0002", "status": "production", "reasons": [], "path": str(tmp_path),
               "previous_production": "v0001"}
    html = page.render([cluster_view(state, alive=False, results={"publish": publish})], source="s",
                       tensorboard_for=tensorboard_url)
    assert "120 held-out rows (10% by key hash, seed 0)" in html and "<th>production v0001</th>" in html
    assert '<td>accuracy</td><td><span class="num">0.9100</span></td><td><span class="num">0.8800</span></td>' in html
    assert "gate on evaluation metrics" in html
    evaluation["production"] = {"version": "v0001", "error": "column(s) ['f3'] gone"}
    store.set_evaluation("c-1", {**evaluation, "production_metrics": None})
    html = page.render([cluster_view(store.get("c-1"), alive=False)], source="s", tensorboard_for=tensorboard_url)
    assert "production v0001 not evaluated: column(s) [&#x27;f3&#x27;] gone" in html
