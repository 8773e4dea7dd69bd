"""A real training whose run root is a bucket on a REAL S3 server (s3proxy), read afterwards by a second process
that shares no folder with the launcher; and the pod backend's objects for such a run.

The training: the local launcher, 2 sync workers of real TensorFlow over the session's real Ignite nodes, the
model from a team's own module in a temporary folder that is on the launcher's ``sys.path`` only (the tasks
get it as shipped code). The pod objects are built by the real ``PodBackend`` against a recorder standing in
for the Kubernetes API (these tests run without a cluster; the real-node tests are marked ``k8s``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path

import psutil
import pytest

from ignite_tf.cluster.api import make_launcher, start_cluster
from ignite_tf.runstore import LAYOUT
from ignite_tf.state import Status
from tests.support.polling import wait_for

CACHE = "runstore_tabular"


@pytest.fixture(scope="module")
def cache(ignite_conn):
    from ignite_tf_dev import demo_data

    from ignite_tf.etl import load

    load(ignite_conn, CACHE, demo_data.tabular(1500, seed=3), key="id")
    return CACHE


def _objects(bucket: str) -> dict[str, bytes]:
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.invalidate_cache()
    return {p.split("/", 1)[1]: fs.cat_file(p) for p, info in fs.find(bucket, detail=True).items()
            if info.get("type") == "file" and not p.endswith("/")}


def test_training_lives_in_the_bucket_and_a_second_process_reads_it(cache, ignite_conn, s3_bucket, object_store,
                                                                      tmp_path, monkeypatch):
    secret = object_store.env()["AWS_SECRET_ACCESS_KEY"]
    team = tmp_path / "team"
    team.mkdir()
    (team / "team_model.py").write_text(textwrap.dedent("""
        from ignite_tf.models import tabular_classifier

        def build(n_features, n_classes, learning_rate=0.02):
            return tabular_classifier(n_features=n_features, n_classes=n_classes, learning_rate=learning_rate)
    """))
    monkeypatch.syspath_prepend(str(team))  # the launcher finds it; the tasks' environment does not have it
    assert str(team) not in os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("IGNITE_TF_HOME", str(tmp_path / "launcher-home"))  # the launcher's staging is here
    root = f"s3://{s3_bucket}/runs"
    cid = f"s3-{uuid.uuid4().hex[:8]}"
    launcher = make_launcher(ignite_conn)  # the cluster state in Ignite: no folder shared with the reader
    job = {"entry_point": "team_model:build",
           "args": ["--epochs", "3", "--batch-size", "32", "--label-column", "label"]}
    state = start_cluster(cache, job, conn=ignite_conn, launcher=launcher, workers=2, run_root=root, cluster_id=cid)
    assert state.run_dir == f"{root}/{cid}"
    try:
        # No secret on any command line of the supervisor or its tasks while they run.
        procs = [psutil.Process(state.supervisor_pid)]
        procs += procs[0].children(recursive=True)
        for p in procs:
            try:
                assert secret not in " ".join(p.cmdline())
            except psutil.NoSuchProcess:
                pass
        # The chief's backup reaches the bucket after each epoch (and leaves it after success, as locally).
        backups: list[str] = []
        watching = threading.Event()

        def backed_up_or_ended() -> bool:
            backups.extend(k for k in _objects(s3_bucket) if f"/{LAYOUT.backup.as_posix()}/" in k)
            return bool(backups) or watching.is_set()

        def watch():  # ends with the training at the latest (launcher.wait's 600 s below)
            wait_for(backed_up_or_ended, 660, "a backup in the bucket, or the training's end", poll=0.2)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        final = launcher.wait(cid, timeout=600)
        watching.set()
        watcher.join(10)
    finally:
        launcher.stop(cid) if not launcher.status(cid).status.final else None
    assert final.status is Status.SUCCEEDED, launcher.tail(cid, 40)

    objects = _objects(s3_bucket)
    run = f"runs/{cid}"
    for name in (LAYOUT.spec, LAYOUT.shard_plan, LAYOUT.log("worker-0"), LAYOUT.log("worker-1"),
                 LAYOUT.supervisor_log, LAYOUT.code_zip, LAYOUT.model / "saved_model.pb",
                 LAYOUT.model / "ignite_tf_model.json"):
        assert f"{run}/{name.as_posix()}" in objects, sorted(objects)
    assert any(k.startswith(f"{run}/tensorboard/") for k in objects), sorted(objects)
    chief_log = objects[f"{run}/logs/worker-0.log"].decode()
    assert backups, "no backup in the bucket while training"
    # The backup outlives the success (runtime.stopping): a late restart finds the training complete.
    assert f"{run}/{LAYOUT.backup.as_posix()}/attempt" in objects, sorted(objects)
    assert "epoch 3/3" in chief_log and "model copied to" in chief_log and "succeeded" in chief_log
    # Among the final lines: the locality the workers measured (every Ignite node is on this host).
    assert "measured locality: 100.0% of " in chief_log and "on the same host" in chief_log, chief_log[-2000:]
    # Credentials in no object of the run (spec, logs, plan) and not in the recorded state.
    assert not [k for k, v in objects.items() if secret.encode() in v]
    assert secret not in json.dumps(launcher.status(cid).to_dict())
    staging = tmp_path / "launcher-home" / "staging" / cid
    assert secret not in (staging / "cluster.json").read_text()

    # A second process: another folder, another ignite-tf home, the run root unset — only the Ignite
    # connection (cluster state) and the store's credentials in its environment.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("IGNITE_TF_RUN_ROOT", "PYTHONPATH")}
    env.update({**ignite_conn.to_env(), "IGNITE_TF_HOME": str(tmp_path / "reader-home")})
    attach = subprocess.run([sys.executable, "-m", "ignite_tf.cli", "attach", "--from-start", cid], env=env,
                            cwd=elsewhere, capture_output=True, text=True, timeout=120)
    assert attach.returncode == 0, attach.stderr
    assert "epoch 3/3" in attach.stdout and "succeeded" in attach.stdout and secret not in attach.stdout
    reader = textwrap.dedent(f"""
        import json, sys
        from ignite_tf.cluster.api import make_launcher
        from ignite_tf.connection import IgniteConnectionConfig
        from ignite_tf.registry.publish import ModelRegistry
        from ignite_tf.runstore import LAYOUT, RunStore
        from ignite_tf.ui.tensorboard import logdirs
        from ignite_tf.ui.views import plan_summary

        launcher = make_launcher(IgniteConnectionConfig.from_env())
        state = launcher.status({cid!r})
        plan = plan_summary(state.run_dir)
        run = RunStore(state.run_dir)
        result = ModelRegistry("registry").publish("team", saved_model_dir=run.path(LAYOUT.model),
                                                   tensorboard_dir=run.path(LAYOUT.tensorboard),
                                                   metrics=state.last_epoch or {{}})
        events = [str(p) for p in logdirs([{cid!r}], launcher.store)[{cid!r}].rglob("events.out.tfevents.*")]
        print(json.dumps({{"plan": plan, "version": result.version, "path": result.path, "events": events}}))
    """)
    out = subprocess.run([sys.executable, "-c", reader], env=env, cwd=elsewhere, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert [w["worker"] for w in seen["plan"]["workers"]] == [0, 1] and seen["plan"]["rows"] == 1500
    published = Path(seen["path"])
    assert published.is_relative_to(elsewhere) and (published / "saved_model" / "saved_model.pb").is_file()
    assert seen["events"] and all(e.startswith(str(tmp_path / "reader-home")) for e in seen["events"])


class Recorder:
    """Stands in for the Kubernetes API (CoreV1Api): records what the pod backend creates."""

    def __init__(self):
        self.created: list[tuple[str, dict]] = []

    def __getattr__(self, name):
        def call(namespace, body, **kwargs):
            self.created.append((name, body))
            from types import SimpleNamespace

            return SimpleNamespace(metadata=SimpleNamespace(name=body["metadata"]["name"], uid="uid-1"))
        return call


def test_pods_of_a_remote_run_mount_nothing_and_carry_no_secret(tmp_path, monkeypatch):
    from ignite_tf.cluster.k8s.pods import PodBackend
    from ignite_tf.cluster.k8s.settings import KubernetesSettings
    from ignite_tf.cluster.spec import build_spec

    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDPODS")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "pods-secret-value")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://10.0.0.5:8080")
    spec = build_spec(cluster_id="podrun", cache="c", mode="sync", workers=2, run_dir=tmp_path / "staging",
                      job={"command": ["python", "train.py"], "job_dir": str(tmp_path / "job"),
                           "shipped": ["job/*"]},
                      shard_plan_path=str(tmp_path / "staging" / "shard_plan.json"),
                      run_store="s3://bucket/runs/podrun")
    core = Recorder()
    backend = PodBackend(spec, KubernetesSettings.parse({"placement": "none"}), "ns", "img:1", core=core)
    backend.owner = {"name": "podrun", "uid": "uid-1"}
    core.create_namespaced_secret("ns", {"metadata": {"name": "podrun-env"}, "stringData": backend.secret_env()})
    for task in spec.tasks:
        backend.start(task, 0)
    secret_body = core.created[0][1]
    assert secret_body["stringData"]["AWS_SECRET_ACCESS_KEY"] == "pods-secret-value"
    pods = [body for name, body in core.created if name == "create_namespaced_pod"]
    assert len(pods) == 2
    for pod in pods:
        text = json.dumps(pod)
        assert "pods-secret-value" not in text and "AKIDPODS" not in text
        assert "hostPath" not in text and not pod["spec"]["volumes"]
        container = pod["spec"]["containers"][0]
        assert container["envFrom"] == [{"secretRef": {"name": "podrun-env"}}]
        env = {e["name"]: e.get("value") for e in container["env"]}  # NODE_NAME: valueFrom
        assert env["IGNITE_TF_RUN_STORE"] == "s3://bucket/runs/podrun"
        assert env["IGNITE_TF_RUN_DIR"].startswith("/tmp/ignite-tf-run/podrun")
        assert env["IGNITE_TF_SHARD_PLAN"] == "/tmp/ignite-tf-run/podrun/shard_plan.json"
        assert env["IGNITE_TF_JOB_DIR"] == "/tmp/ignite-tf-run/podrun/code"  # the job folder, shipped
        assert str(tmp_path) not in text  # nothing of the launching host's disk
        assert container["command"][:4] == ["python", "-m", "ignite_tf.cluster.k8s.entry",
                                            "/tmp/ignite-tf-run/podrun/code"]

    # A run folder as run root keeps the shared folder (one node, or a shared mount).
    local = build_spec(cluster_id="podlocal", cache="c", mode="sync", workers=1, run_dir=tmp_path / "runs" / "x",
                       job={"entry_point": "m:f"})
    core2 = Recorder()
    backend2 = PodBackend(local, KubernetesSettings.parse({"placement": "none"}), "ns", "img:1", core=core2)
    backend2.owner = {"name": "podlocal", "uid": "uid-2"}
    backend2.start(local.tasks[0], 0)
    assert core2.created[0][1]["spec"]["volumes"][0]["hostPath"]["path"] == str(tmp_path / "runs" / "x")


class WithPods(Recorder):
    """The recorder, also listing pods: Ignite's (by the selector) and the cluster's own, each on a node."""

    def __init__(self, ignite_pods: dict[str, str], worker_nodes: list[str]):
        super().__init__()
        self.ignite_pods, self.worker_nodes = ignite_pods, worker_nodes

    def list_namespaced_pod(self, namespace, label_selector=""):
        from types import SimpleNamespace as NS

        def pod(name, node, ip=None):
            return NS(metadata=NS(name=name, deletion_timestamp=None), spec=NS(node_name=node, hostname=None),
                      status=NS(pod_ip=ip, container_statuses=None))
        if label_selector == "app=ignite":
            return NS(items=[pod(cid, node, f"10.9.0.{i}") for i, (cid, node) in enumerate(self.ignite_pods.items())])
        made = [body["metadata"]["name"] for name, body in self.created if name == "create_namespaced_pod"]
        return NS(items=[pod(name, node) for name, node in zip(made, self.worker_nodes, strict=False)])


def test_ignite_nodes_are_recorded_for_measured_locality_with_placement_none(cache, ignite_conn, tmp_path):
    """``placement: none`` sets no affinity, yet the shard plan records where Ignite's pods run, so that the
    workers' measured locality is known (before, only ``required``/``preferred`` recorded it)."""
    from ignite_tf.cluster.k8s.pods import PodBackend
    from ignite_tf.cluster.k8s.settings import KubernetesSettings
    from ignite_tf.cluster.spec import build_spec
    from ignite_tf.plan.partitions import PartitionMap
    from ignite_tf.plan.shards import ShardPlan

    pm = PartitionMap.discover(ignite_conn, cache)
    ids = sorted(n.consistent_id for n in pm.nodes.values())
    where = dict(zip(ids, ["kn-a", "kn-b"], strict=False))
    plan_path = tmp_path / "run" / "shard_plan.json"
    plan_path.parent.mkdir()
    ShardPlan.build(pm, 2).save(plan_path)
    spec = build_spec(cluster_id="podnone", cache=cache, mode="sync", workers=2, run_dir=tmp_path / "run",
                      job={"command": ["python", "train.py"]}, shard_plan_path=str(plan_path))
    core = WithPods(where, ["kn-b", "kn-a"])
    settings = KubernetesSettings.parse({"placement": "none", "ignite_selector": "app=ignite", "model_params": 1000})
    backend = PodBackend(spec, settings, "ns", "img:1", core=core)
    backend.prepare()
    for task in spec.tasks:
        backend.start(task, 0)
    assert all("affinity" not in body["spec"] for name, body in core.created if name == "create_namespaced_pod")
    backend.refresh()
    recorded = ShardPlan.load(plan_path).placement
    assert recorded["mode"] == "none" and recorded["ignite_nodes"] == where
    assert [w["node"] for w in recorded["workers"]] == ["kn-b", "kn-a"]
