"""Real TensorFlow training on the local Kubernetes in the deployed shape: no host network, no ``dns: false``,
no hostPath run folder.

Real in every test: the control plane, CoreDNS (the tasks of TF_CONFIG find each other by their headless
Service's DNS names), the kubelet running the task image (imported, never pulled) in containers on the real
node, TensorFlow in them, Ignite as the pods of docker/k8s/ignite.yaml (``k8s_ignite``: reached at their pod
addresses), the run root on the cluster's object store (s3proxy, bucket ``ignite-tf``, a fresh prefix per test;
the pods get its credentials from the launcher's Secret), code shipping through it, the model registry.
Nothing is simulated. Small data and few epochs: each training takes minutes on the shared 2-core machine, so
each test checks as much as one training allows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
import yaml
from ignite_tf_dev.k8s import addons as local_k8s_addons

from ignite_tf.cluster.api import make_launcher
from ignite_tf.cluster.k8s import startfiles
from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.runstore import LAYOUT, RunStore
from ignite_tf.state import Status
from tests.support.clusters import assert_nothing_left
from tests.support.k8s_launch import use_local_k8s
from tests.support.polling import wait_for

pytestmark = pytest.mark.timeout(3600)

# The team's own model module: in a tmp folder, never installed; it reaches the pods through code shipping.
TEAM_MODEL = '''
"""A team's classifier (not installed anywhere: shipped to the pods by the launcher)."""


def build(n_features=16, n_classes=None, learning_rate=0.02):
    from ignite_tf.runtime.start import import_tf

    import_tf()
    import tf_keras

    print("team_model.build: a", n_features, "->", n_classes, "classifier", flush=True)
    model = tf_keras.Sequential([
        tf_keras.layers.InputLayer(input_shape=(int(n_features),)),
        tf_keras.layers.Dense(16, activation="relu", name="team_hidden"),
        tf_keras.layers.Dense(int(n_classes), activation="softmax", name="team_out"),
    ])
    model.compile(optimizer=tf_keras.optimizers.Adam(learning_rate), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"])
    return model
'''


@pytest.fixture
def deployed(k8s_cluster, k8s_ignite, k8s_namespace, monkeypatch):
    """The deployed shape's settings, as `make k8s-up` exports them, with a fresh run-root prefix: returns
    (core api, namespace, Ignite connection, run root, the exports)."""
    store = local_k8s_addons.object_store(k8s_cluster.layout)
    assert store is not None, "the local Kubernetes' object store is not running"
    run_root = f"s3://{local_k8s_addons.BUCKET}/e2e-{uuid.uuid4().hex[:8]}"
    exports = {**local_k8s_addons.exports(k8s_cluster.layout), "IGNITE_TF_ADDRESSES": ",".join(k8s_ignite),
               "IGNITE_TF_RUN_ROOT": run_root}
    for key, value in exports.items():
        monkeypatch.setenv(key, value)
    use_local_k8s(monkeypatch, k8s_cluster)
    yield k8s_cluster.core, k8s_namespace, IgniteConnectionConfig(addresses=list(k8s_ignite)), run_root, exports
    try:  # the prefix is this test's own: s3proxy cannot remove a bucket recursively, a prefix it can
        RunStore(run_root).remove_dir("")
    except Exception:  # noqa: BLE001 - best effort; the bucket goes with the cluster
        pass


def _predict(saved_model_dir: str | Path, rows) -> list[int]:
    """Load a published SavedModel and score rows with its serving signature: the predicted classes."""
    import numpy as np
    import tensorflow as tf

    serve = tf.saved_model.load(str(saved_model_dir)).signatures["serving_default"]
    (name,) = serve.structured_input_signature[1]
    (out,) = serve(**{name: tf.constant(np.asarray(rows, dtype="float32"))}).values()
    return [int(i) for i in np.argmax(out.numpy(), axis=1)]


def _feature_rows(n: int) -> list[list[float]]:
    from ignite_tf_dev import demo_data

    frame = demo_data.tabular(n, seed=9)
    return frame[[c for c in frame.columns if c not in ("id", "label")]].to_numpy().tolist()


# mode -> the training's topology and the roles of its pods.
TOPOLOGY = {"async": ({"workers": 1, "ps": 1}, ["chief", "ps", "worker"]),
            "sync": ({"workers": 2}, ["worker", "worker"])}


@pytest.mark.parametrize("mode", sorted(TOPOLOGY))
def test_team_pipeline_as_a_dag_run(deployed, tmp_path, monkeypatch, capfd, mode):
    """A team's YAML pipeline (`launcher: kubernetes`, no other Kubernetes setting; `entry_point:
    team_model:build` from the team's own folder, not installed) run with dag.test(): load, plan, validate,
    the training's pods on the real node reading from the Ignite pods, the run on the object store, the
    chief's epoch lines (and the team model's own line) in the Airflow task log, PublishModelOperator
    publishing from the object store; the published SavedModel loads and scores rows."""
    import importlib.util

    from airflow import settings

    from tests.support.airflow import ignite_connection_env, migrate_db

    core, ns, conn, run_root, _ = deployed
    migrate_db()
    for key, value in ignite_connection_env(conn).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("K8S_TEST_NAMESPACE", ns)
    # The team's folder: sync finds the module where the launcher runs (on sys.path, as a DAG folder is on an
    # Airflow worker); async names it in py_modules. Neither installs it.
    team = tmp_path / "team"
    team.mkdir()
    (team / "team_model.py").write_text(TEAM_MODEL)
    if mode == "sync":
        monkeypatch.syspath_prepend(str(team))
    folder = Path(settings.DAGS_FOLDER) / f"k8s_{uuid.uuid4().hex[:6]}"  # dag.test() runs the dags folder's DAGs
    (folder / "specs").mkdir(parents=True)
    suite = Path(__file__).resolve().parents[3] / "dags" / "expectations" / "tabular.yaml"
    training = {"mode": mode, **TOPOLOGY[mode][0], "entry_point": "team_model:build", "epochs": 2,
                "batch_size": 32, "learning_rate": 0.02, "startup_deadline_s": 900,
                "launcher": "kubernetes", "kubernetes": {"namespace": "${K8S_TEST_NAMESPACE}"}}
    if mode == "async":
        training["py_modules"] = [str(team / "team_model.py")]
    dag_id = f"ignite_tf_k8s_{mode}_{uuid.uuid4().hex[:4]}"
    (folder / "specs" / "k8s.yaml").write_text(yaml.safe_dump({
        "dag_id": dag_id, "cache": f"k8s_{mode}", "key": "id", "suite": str(suite), "run_root": run_root,
        "source": {"generator": "ignite_tf_dev.demo_data:tabular", "rows": 1500, "seed": 2},
        "training": training,
        "publish": {"registry_root": str(tmp_path / "registry"), "model": f"k8s_{mode}", "thresholds": {}}}))
    (folder / "pipelines.py").write_text("# airflow dag\nfrom ignite_tf.pipeline import load_dags\n\n"
                                         "airflow_dags = load_dags(__file__, 'specs/*.yaml', globals())\n")
    module_spec = importlib.util.spec_from_file_location(f"dags_{uuid.uuid4().hex}", folder / "pipelines.py")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    dag = getattr(module, dag_id)
    started = time.monotonic()
    run = dag.test()
    # dag.test() runs each task, and the trigger it defers to, in this process: their log is this output.
    task_log = capfd.readouterr().out
    print(f"{mode}: dag run {time.monotonic() - started:.0f}s")
    states = {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
    assert run.state == "success", states

    trigger_lines = [line for line in task_log.splitlines() if "TFClusterTrigger" in line]
    assert any("epoch 2/2" in line for line in trigger_lines), task_log[-3000:]
    assert any("team_model.build" in line for line in trigger_lines), task_log[-3000:]

    cluster_id = next(s.cluster_id for s in make_launcher(conn).store.list() if s.labels.get("dag_id") == dag_id)
    state = make_launcher(conn).status(cluster_id)
    assert state.run_dir.startswith(run_root + "/"), state.run_dir
    # Measured, not planned: the readers counted rows per serving Ignite pod and matched the pods to Kubernetes
    # nodes through the plan's node map (in the start files, under the run store). Every pod here, the Ignite
    # pods and the training's, is on the one real node, so every row read is local.
    measured = state.measured_locality
    assert measured and measured["by"] == "kubernetes node" and measured["locality"] == 1.0, measured
    assert measured["unmatched_rows"] == 0, measured
    run_store = RunStore(state.run_dir)
    spec = run_store.read_json("cluster.json")
    assert sorted(t["role"] for t in spec["tasks"]) == TOPOLOGY[mode][1]
    assert run_store.exists(f"{LAYOUT.model}/saved_model.pb") and run_store.exists(LAYOUT.shard_plan)
    pod_spec = json.dumps([p.to_dict() for p in core.list_namespaced_pod(ns).items], default=str)
    assert "hostPath" not in pod_spec and "host_network': True" not in pod_spec

    from ignite_tf.registry.publish import ModelRegistry

    registry = ModelRegistry(tmp_path / "registry")
    (version,) = registry.versions(f"k8s_{mode}")
    predicted = _predict(tmp_path / "registry" / f"k8s_{mode}" / version / "saved_model", _feature_rows(5))
    assert len(predicted) == 5 and all(p >= 0 for p in predicted)
    assert_nothing_left(cluster_id, k8s=(core, ns))


def _cli(args: list[str], *, env: dict, cwd: Path, **kw) -> subprocess.Popen:
    return subprocess.Popen([str(Path(sys.executable).with_name("ignite-tf")), *args], env=env, cwd=cwd, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)


def _bare_env(exports: dict, home: Path) -> dict:
    """A shell with the `make k8s-up` exports and nothing else of this session (its own HOME)."""
    home.mkdir(parents=True, exist_ok=True)
    keep = {k: os.environ[k] for k in ("PATH", "LANG", "TF_USE_LEGACY_KERAS", "TF_CPP_MIN_LOG_LEVEL")
            if k in os.environ}
    return {**keep, **exports, "HOME": str(home), "IGNITE_TF_HOME": str(home / ".ignite-tf")}


TRAIN_PY = """# the job's script: the runtime's trainer with the command's arguments
import runpy

runpy.run_module("ignite_tf.runtime", run_name="__main__")
"""

READER = """
import json, sys
from ignite_tf.cluster.api import make_launcher
from ignite_tf.cluster.k8s import startfiles
from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.registry.publish import BlessingGate, ModelRegistry
from ignite_tf.runstore import LAYOUT, RunStore
from ignite_tf.ui import views

cid = sys.argv[1]
launcher = make_launcher(IgniteConnectionConfig.from_env())
state, alive = launcher.settled(cid)
view = views.cluster_view(state, alive=alive)
run = RunStore(state.run_dir)
metrics = {k: v for k, v in state.last_epoch.items() if isinstance(v, (int, float))}
result = ModelRegistry("registry").publish(
    "e2e_cli", saved_model_dir=run.path(LAYOUT.model), checkpoint_dir=run.path(LAYOUT.backup),
    tensorboard_dir=run.path(LAYOUT.tensorboard), metrics=metrics, gate=BlessingGate(thresholds={}))
print("VIEW " + json.dumps({"status": view["status"], "plan": view["plan"], "epochs_done": view["epochs_done"],
                            "run_dir": view["run_dir"], "publish": result.to_dict()}, default=str))
"""


def test_cli_training_restarts_a_deleted_worker_on_its_warm_pods_and_is_read_from_the_store_alone(deployed, tmp_path):
    """The README's commands with the `make k8s-up` exports only, each in a process of its own (own HOME,
    own working folder, no folder shared with the test or each other): `ignite-tf load` a CSV, then `ignite-tf
    start --launcher kubernetes --namespace NS --k8s '{"standby": true}' CACHE JOB_DIR python -m
    ignite_tf.runtime ...` (sync, 2 workers, JOB_DIR shipped through the object store). Once the first attempt is
    up the supervisor makes one warm pod per task, which imports TensorFlow and waits for its signed go record in
    the state store.
    When both say they wait, worker-1's pod is deleted with the default grace: it is gone within seconds (the TF
    process stops on SIGTERM), the whole-cluster restart is handed to the warm pods (no new task pod), the
    restarted chief resumes from the newest backup on the object store, and the epochs run equal the epochs
    asked (none twice). A second process sharing no folder with the launcher then reads the run from the store
    alone: `ignite-tf attach` prints the chief's output, the UI page's view shows it with its shard plan, and
    publish copies the model into its own registry, where it loads and scores rows. One training for both (the
    restart and the store), each of which takes minutes here; 20,000 rows so that epochs take seconds and the
    warm pods wait before the training ends."""
    from ignite_tf_dev import demo_data

    from ignite_tf.cluster.k8s import objects, standby

    core, ns, conn, run_root, exports = deployed
    epochs, rows = 16, 20_000
    cache = f"e2e_cli_{uuid.uuid4().hex[:6]}"
    cid = f"k8s-cli-{uuid.uuid4().hex[:6]}"
    launcher_home, reader_home = tmp_path / "launcher", tmp_path / "reader"
    env = _bare_env(exports, launcher_home)
    demo_data.tabular(rows, seed=5).to_csv(launcher_home / "data.csv", index=False)
    load = _cli(["load", "--key", "id", cache, "data.csv"], env=env, cwd=launcher_home)
    out, _ = load.communicate(timeout=600)
    assert load.returncode == 0, out[-3000:]
    job = launcher_home / "job"
    job.mkdir()
    (job / "train.py").write_text(TRAIN_PY)
    # `python -m ignite_tf.runtime`: a warm pod waits only for the runtime (a user's script may set TensorFlow up
    # before importing it); the job folder is shipped all the same and is the tasks' working folder.
    start = _cli(["start", "--launcher", "kubernetes", "--namespace", ns, "--k8s", json.dumps({"standby": True}),
                  "--workers", "2", "--id", cid, "--startup-deadline", "900", cache, "job", "python", "-m",
                  "ignite_tf.runtime", "--entry-point", "ignite_tf.models:tabular_classifier", "--batch-size", "64",
                  "--label", "label", "--learning-rate", "0.02", "--epochs", str(epochs)], env=env, cwd=launcher_home)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(start.stdout), daemon=True)
    reader.start()
    launcher = make_launcher(conn)

    def warm_waiting() -> list[str]:
        pods = core.list_namespaced_pod(ns, label_selector=f"{objects.LABEL_CLUSTER}={cid},{standby.LABEL}").items
        try:
            return sorted(p.metadata.name for p in pods
                          if standby.WAITING in (core.read_namespaced_pod_log(p.metadata.name, ns) or ""))
        except Exception:  # noqa: BLE001 - a pod not started yet has no log
            return []

    def seen() -> str:
        state = launcher.find(cid)
        status = state.status.value if state else "no state"
        return f"launcher exit {start.poll()}; {status}\n{''.join(output)[-2000:]}"

    try:
        # A launch that fails ends the CLI: said at once with its output, not after the timeout.
        warm = wait_for(lambda: start.poll() is not None or (len(warm_waiting()) == 2 and warm_waiting()), 600,
                        "two warm pods waiting", poll=0.5, seen=seen)
        assert start.poll() is None, seen()
        assert len(launcher.store.epochs(cid)) < epochs - 2, "trained to its end before the warm pods waited"
        (victim,) = [p for p in core.list_namespaced_pod(
            ns, label_selector=f"{objects.LABEL_CLUSTER}={cid},{objects.LABEL_TASK}=worker-1").items
            if standby.LABEL not in (p.metadata.labels or {})]  # the running attempt's, not its warm one
        assert victim.metadata.name not in warm
        # The plan and the shipped job folder came in the pods' start files, not through a store client.
        assert any(v.config_map and v.name == startfiles.VOLUME for v in victim.spec.volumes), victim.spec.volumes
        deleted = time.monotonic()
        core.delete_namespaced_pod(victim.metadata.name, ns)  # the default grace period

        def gone():
            from kubernetes.client.exceptions import ApiException

            try:
                core.read_namespaced_pod(victim.metadata.name, ns)
            except ApiException as exc:
                return exc.status == 404
            return False

        wait_for(gone, 60, f"pod {victim.metadata.name} gone", poll=0.1)
        gone_s = time.monotonic() - deleted
        print(f"worker pod deleted -> gone: {gone_s:.1f}s")
        assert gone_s < 8, f"the deleted pod took {gone_s:.1f}s to stop (its TF process ignored SIGTERM?)"
        start.wait(timeout=1800)
    finally:
        if start.poll() is None:
            start.kill()
        reader.join(timeout=30)
        if not launcher.status(cid).status.final:
            launcher.stop(cid)
    text = "".join(output)
    state = launcher.status(cid)
    if start.returncode != 0 or state.status is not Status.SUCCEEDED:  # each task's log, before the prefix goes
        logs = {t: (RunStore(state.run_dir).read_text(LAYOUT.log(t)) or "")[-2000:] for t in ("worker-0", "worker-1")}
        raise AssertionError(f"{state.status.value}: {state.reason}\n{text[-3000:]}\n{logs}")
    assert state.run_dir.startswith(run_root + "/"), state.run_dir
    assert state.restarts == 1, state.failures
    recorded = [e["epoch"] for e in state.epochs]
    assert sorted(recorded) == list(range(1, epochs + 1)), recorded
    assert {e.get("attempt", 0) for e in state.epochs} == {0, 1}, state.epochs
    worker0 = RunStore(state.run_dir).read_text(LAYOUT.log("worker-0")) or ""
    assert "standby: attempt 1 handed to the warm pods of generation 1" in worker0, worker0[-3000:]
    assert "resuming at epoch" in worker0, worker0[-3000:]
    assert_nothing_left(cid, k8s=(core, ns))

    # A second process with its own HOME and working folder: the run store and the exports only.
    renv = _bare_env(exports, reader_home)
    attach = _cli(["attach", "--from-start", cid], env=renv, cwd=reader_home)
    attached, _ = attach.communicate(timeout=300)
    assert attach.returncode == 0 and f"epoch {epochs}/{epochs}" in attached, attached[-3000:]
    page = subprocess.run([sys.executable, "-c", READER, cid], env=renv, cwd=reader_home, text=True,
                          capture_output=True, timeout=600)
    assert page.returncode == 0, page.stdout[-2000:] + page.stderr[-3000:]
    view = json.loads(next(line for line in page.stdout.splitlines() if line.startswith("VIEW "))[5:])
    assert view["status"] == "succeeded" and view["epochs_done"] == epochs and view["run_dir"] == state.run_dir
    assert view["plan"] and view["plan"]["rows"] == rows and "error" not in view["plan"], view["plan"]
    version = view["publish"]["version"]
    predicted = _predict(reader_home / "registry" / "e2e_cli" / version / "saved_model", _feature_rows(4))
    assert len(predicted) == 4
    assert not list(launcher_home.glob("**/checkpoints")), "the run is in the object store, not the launcher's folder"
