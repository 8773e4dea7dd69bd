"""RunFolder is the one layout of a run's files: the spec's task paths and the launcher's files come from it."""

from __future__ import annotations

from pathlib import Path

from ignite_tf.cluster.spec import build_spec
from ignite_tf.runstore.layout import RunFolder, default_run_root


def test_spec_paths_come_from_the_run_folder(tmp_path):
    spec = build_spec(cluster_id="c1", cache="x", mode="async", workers=2, ps=1, run_dir=tmp_path,
                      job={"entry_point": "m:f"})
    folder = RunFolder(tmp_path)
    assert spec.folder == folder
    chief = spec.chief
    assert spec.log_path(chief) == str(folder.log("chief-0")) == str(tmp_path / "logs" / "chief-0.log")
    assert spec.progress_path(chief) == str(folder.progress("chief-0"))
    assert spec.task_dir(chief) == str(folder.task_dir("chief-0"))
    assert spec.checkpoint_dir == str(folder.checkpoints) and spec.tensorboard_dir == str(folder.tensorboard)
    assert folder.model == Path(spec.checkpoint_dir) / RunFolder.MODEL
    assert folder.backup == Path(spec.checkpoint_dir) / RunFolder.BACKUP
    assert folder.supervisor_log.parent == folder.logs and folder.spec.name == "cluster.json"


def test_run_folder_of_a_cluster_lies_under_the_run_root(tmp_path, monkeypatch):
    monkeypatch.setenv("IGNITE_TF_RUN_ROOT", str(tmp_path))
    assert default_run_root() == tmp_path
    assert RunFolder.of("c1").path == tmp_path / "c1"
    assert RunFolder.of("c1", tmp_path / "elsewhere").shard_plan == tmp_path / "elsewhere" / "c1" / "shard_plan.json"
