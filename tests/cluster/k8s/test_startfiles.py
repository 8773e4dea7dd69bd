"""The pods' start files: the shard plan and code.zip handed over in a ConfigMap volume, not fetched from the store.

Real: the pod backend's manifests, the pod's first process's ``fetch_run`` reading the files where the kubelet
puts a ConfigMap volume's keys (a folder), zip extraction. Stand-in: the Kubernetes API is a recorder of what
the backend creates (the live tests of ``test_training.py`` run the real thing); the store's endpoint is a
closed port, so any read of it would fail the test.
"""

from __future__ import annotations

import base64
import io
import json
import zipfile

from ignite_tf.cluster.k8s import entry, startfiles
from ignite_tf.cluster.k8s.pods import PodBackend
from ignite_tf.cluster.k8s.settings import KubernetesSettings
from ignite_tf.cluster.spec import build_spec
from ignite_tf.contract import ENV_CODE, ENV_RUN_DIR, ENV_RUN_STORE, ENV_SHARD_PLAN
from tests.runstore.test_remote_run import Recorder


def test_the_backend_puts_the_plan_in_a_configmap_every_pod_mounts(tmp_path):
    plan = tmp_path / "staging" / "shard_plan.json"
    plan.parent.mkdir()
    plan.write_text('{"workers": 2}')
    spec = build_spec(cluster_id="sf1", cache="c", mode="sync", workers=2, run_dir=tmp_path / "staging",
                      job={"entry_point": "m:f", "shipped": ["m.py"]}, shard_plan_path=str(plan),
                      run_store="s3://bucket/runs/sf1")
    spec.folder.code_zip.write_bytes(b"PK-the-launcher's-copy")  # code.ship(local_copy=...): no store read
    core = Recorder()
    backend = PodBackend(spec, KubernetesSettings.parse({"placement": "none"}), "ns", "img:1", core=core)
    backend.owner = {"name": "sf1", "uid": "uid-1"}
    backend.start_files = backend._create_start_files({"metadata": backend.owner})  # as _create_objects does
    assert backend.start_files
    (kind, made), = core.created
    assert kind == "create_namespaced_config_map" and made["metadata"]["name"] == startfiles.name("sf1")
    assert made["metadata"]["ownerReferences"][0]["uid"] == "uid-1"  # garbage-collected with the cluster
    assert base64.b64decode(made["binaryData"][startfiles.PLAN]) == plan.read_bytes()
    assert base64.b64decode(made["binaryData"][startfiles.CODE]) == b"PK-the-launcher's-copy"
    for task in spec.tasks:
        backend.start(task, 0)
    for _, pod in core.created[1:]:
        assert {"name": startfiles.VOLUME, "configMap": {"name": "sf1-start"}} in pod["spec"]["volumes"]
        mounts = pod["spec"]["containers"][0]["volumeMounts"]
        assert {"name": startfiles.VOLUME, "mountPath": startfiles.MOUNT, "readOnly": True} in mounts


def test_files_too_big_for_a_configmap_stay_in_the_store():
    assert startfiles.manifest("c", {}, {}, {startfiles.CODE: b"x" * (startfiles.LIMIT + 1)}) is None
    assert startfiles.manifest("c", {}, {}, {}) is None


def test_the_pod_takes_its_start_files_without_a_store_client(tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens: a store read would fail
    start = tmp_path / "start"
    start.mkdir()
    (start / startfiles.PLAN).write_text(json.dumps({"workers": 1}))
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("team_model.py", "def build():\n    return 42\n")
    (start / startfiles.CODE).write_bytes(buf.getvalue())
    run_dir = tmp_path / "pod-run"
    env = {ENV_RUN_STORE: "s3://bucket/runs/x", ENV_SHARD_PLAN: str(run_dir / "shard_plan.json"),
           ENV_CODE: "team_model.py", ENV_RUN_DIR: str(run_dir)}
    code_dir = entry.fetch_run(env, start_dir=str(start))
    assert json.loads((run_dir / "shard_plan.json").read_text()) == {"workers": 1}
    assert (run_dir / "code" / "team_model.py").is_file() and code_dir == str((run_dir / "code").resolve())


def test_a_pod_is_told_when_the_store_holds_no_backup_and_then_never_asks_it(tmp_path):
    """Real: a run store (a folder here; the object store in the live tests) and the task's sync. A fresh
    start's pods skip the store before TensorFlow's import; once a backup exists, a restart's pods pull it."""
    from ignite_tf.contract import ENV_RUN_STORE_NO_BACKUP
    from ignite_tf.runstore import LAYOUT, RunStore
    from ignite_tf.runstore.sync import TaskSync

    store = RunStore(str(tmp_path / "store"))
    spec = build_spec(cluster_id="nb1", cache="c", mode="sync", workers=1, run_dir=tmp_path / "staging",
                      job={"entry_point": "m:f"}, run_store="s3://bucket/runs/nb1")
    core = Recorder()
    backend = PodBackend(spec, KubernetesSettings.parse({"placement": "none"}), "ns", "img:1", core=core)
    backend.owner = {"name": "nb1", "uid": "uid-1"}
    backend.__dict__["run_store"] = store

    def env_of_last_pod():
        pod = [body for kind, body in core.created if kind == "create_namespaced_pod"][-1]
        return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}

    backend.start(spec.tasks[0], 0)
    assert env_of_last_pod().get(ENV_RUN_STORE_NO_BACKUP) == "1"
    store.write_bytes(f"{LAYOUT.backup}/chief/checkpoint", b"weights")
    backend.start(spec.tasks[0], 1)
    assert ENV_RUN_STORE_NO_BACKUP not in env_of_last_pod()

    told = TaskSync(store, tmp_path / "pod" / "backup", tmp_path / "pod" / "tb", True, no_backup=True)
    assert told.pull() is False and not (tmp_path / "pod" / "backup").exists()
    asks = TaskSync(store, tmp_path / "pod" / "backup", tmp_path / "pod" / "tb", True)
    assert asks.pull() is True and (tmp_path / "pod" / "backup" / "chief" / "checkpoint").read_bytes() == b"weights"
