"""The pod supervisor on the local Kubernetes: a training outlives the process that launched it and the
supervisor's own pod.

Real: the control plane and its controllers (the Deployment's ReplicaSet brings the deleted supervisor pod
back, the garbage collector deletes what the root owned), CoreDNS, the kubelet running the task image on the
real node (the supervisor and TensorFlow in containers), Ignite as the pods of docker/k8s/ignite.yaml (the
state store the supervisor pod reaches at their pod addresses, with the login from the cluster's Secret), the
run root on the cluster's object store (s3proxy), the `ignite-tf` CLI as its own process. Simulated: nothing;
the failures are made by hand (SIGKILL of the CLI, deletion of the supervisor's pod).
"""

from __future__ import annotations

import json
import re
import signal
import threading
import uuid

import pytest

from ignite_tf.cluster.api import make_launcher
from ignite_tf.cluster.k8s import objects, supervisor
from ignite_tf.registry.publish import BlessingGate, ModelRegistry
from ignite_tf.runstore import LAYOUT, RunStore
from ignite_tf.state import LOST_AFTER_S, Status
from tests.cluster.k8s import test_training as training
from tests.cluster.k8s.test_training import TRAIN_PY, _bare_env, _cli, _feature_rows, _predict
from tests.support.clusters import assert_nothing_left
from tests.support.k8s_launch import cluster_pods
from tests.support.polling import wait_for

pytestmark = pytest.mark.timeout(1500)
deployed = training.deployed  # the deployed shape's settings (a fixture)


def supervisor_pods(core, ns: str, cid: str) -> list:
    """The cluster's supervisor pods that are not being deleted."""
    pods = core.list_namespaced_pod(ns, label_selector=f"{objects.LABEL_SUPERVISOR_OF}={cid}").items
    return [p for p in pods if not p.metadata.deletion_timestamp]


def _shell_with_table(exports: dict, home, cache: str, rows: int, seed: int, job: bool = True) -> dict:
    """A launching shell of its own (``home``): the `make k8s-up` exports, ``rows`` demo rows loaded into
    ``cache`` with `ignite-tf load`, and the job folder ``job/train.py`` (the runtime's trainer); its env."""
    from ignite_tf_dev import demo_data

    env = _bare_env(exports, home)
    demo_data.tabular(rows, seed=seed).to_csv(home / "data.csv", index=False)
    load = _cli(["load", "--key", "id", cache, "data.csv"], env=env, cwd=home)
    out, _ = load.communicate(timeout=600)
    assert load.returncode == 0, out[-3000:]
    if job:
        (home / "job").mkdir()
        (home / "job" / "train.py").write_text(TRAIN_PY)
    return env


def test_training_outlives_its_launcher_and_its_supervisor_pod(deployed, tmp_path):
    """`ignite-tf start --launcher kubernetes` (sync, 2 workers, `max_runtime` through --k8s) is SIGKILLed as soon
    as the cluster's state is recorded; after the first epoch the supervisor's pod is deleted (default grace).
    Kubernetes makes a new supervisor pod, which re-adopts the task pods: no task restarts (every task pod is
    the first one), the epochs recorded are the epochs asked, each once, and the chief's log in the run store
    has each epoch's line once (nothing lost or copied twice at the hand-over); the cluster succeeds, the
    model saved in the run store is published and loads, every pod carried the bounded lifetime
    (activeDeadlineSeconds), and nothing of the cluster is left, its logs kept in the run store."""

    core, ns, conn, run_root, exports = deployed
    # Long enough that the training is still on when the new supervisor pod takes over (about 5-10 s after the
    # deletion): with 6 epochs the cluster could end first, and the old supervisor recorded the end itself.
    epochs = 24
    cache = f"sup_pod_{uuid.uuid4().hex[:6]}"
    cid = f"k8s-sup-{uuid.uuid4().hex[:6]}"
    home = tmp_path / "launcher"
    env = _shell_with_table(exports, home, cache, 1200, seed=5)
    start = _cli(["start", "--launcher", "kubernetes", "--namespace", ns, "--k8s", json.dumps({"max_runtime": 3000}),
                  "--workers", "2", "--id", cid, "--startup-deadline", "900", cache, "job", "python", "train.py",
                  "--entry-point", "ignite_tf.models:tabular_classifier", "--batch-size", "32", "--label", "label",
                  "--learning-rate", "0.02", "--epochs", str(epochs)], env=env, cwd=home)
    output: list[str] = []
    reader = threading.Thread(target=lambda: output.extend(start.stdout), daemon=True)
    reader.start()
    launcher = make_launcher(conn)
    try:
        # A launch that fails ends the process: that is an answer too (asserted below), not a wait of 600 s.
        # The kill comes once the launch is recorded and the launcher's head-start pods exist (it makes them
        # right after the supervisor's Deployment, whose pod may record first on a busy machine).
        wait_for(lambda: start.poll() is not None or (launcher.find(cid) and len(cluster_pods(core, ns, cid)) == 2),
                 600, "the launch to be recorded", poll=0.05)
        start.send_signal(signal.SIGKILL)  # the launching process dies right after its launch
        start.wait(timeout=30)
    finally:
        if start.poll() is None:
            start.kill()
        reader.join(timeout=30)
    assert start.returncode == -signal.SIGKILL, "".join(output)[-2000:]

    # A cluster that ends before its first epoch is an answer too: said with its reason, not after the timeout.
    wait_for(lambda: len(launcher.store.epochs(cid)) >= 1 or launcher.status(cid).status.final, 900,
             "the first epoch (no launcher alive)", poll=0.5, seen=lambda: str(launcher.status(cid)))
    state = launcher.status(cid)
    assert not state.status.final, (state.status, state.reason, state.failures)
    (first,) = supervisor_pods(core, ns, cid)
    tasks_before = {t: p.metadata.name for t, p in cluster_pods(core, ns, cid).items()}
    assert sorted(tasks_before) == ["worker-0", "worker-1"], tasks_before
    core.delete_namespaced_pod(first.metadata.name, ns)  # the default grace: SIGTERM, a hand-over

    def replaced():
        pods = [p for p in supervisor_pods(core, ns, cid) if p.metadata.name != first.metadata.name]
        return pods[0] if pods and pods[0].status.phase == "Running" else None

    second = wait_for(replaced, 300, "a new supervisor pod", poll=0.5)
    print(f"supervisor pod {first.metadata.name} deleted -> {second.metadata.name} running")
    deadlines = {p.metadata.name: p.spec.active_deadline_seconds for p in cluster_pods(core, ns, cid).values()}

    def ended():
        state, alive = launcher.settled(cid)
        return state if state.status.final and not alive else None

    state = wait_for(ended, 1800, f"cluster {cid} to end", poll=1.0)
    assert state.status is Status.SUCCEEDED, (state.reason, state.failures)
    assert state.restarts == 0 and not state.failures, state.failures
    assert state.supervisor_host == f"pod/{ns}/{second.metadata.name}", state.supervisor_host
    recorded = [e["epoch"] for e in state.epochs]
    assert recorded == list(range(1, epochs + 1)), recorded
    assert deadlines and all(d is not None and 3000 < d <= 3000 + 120 for d in deadlines.values()), deadlines
    assert set(deadlines) == set(tasks_before.values()), "the task pods were replaced, not re-adopted"
    assert_nothing_left(cid, k8s=(core, ns), timeout=120)

    run = RunStore(state.run_dir)
    chief = run.read_text(LAYOUT.log("worker-0")) or ""
    for k in range(1, epochs + 1):
        lines = re.findall(rf"^epoch {k}/{epochs} .*$", chief, flags=re.M)
        assert len(lines) == 1, (k, lines, chief[-3000:])
    assert "re-adopting pods" in chief and "supervisor replaced" in chief, chief[-3000:]
    # The first pods were the launcher's (its head start), made before it was killed, and kept to the end.
    assert chief.count("made by the launcher (head start): taken") == 2, chief[:3000]
    supervisor_log = run.read_text(LAYOUT.supervisor_log) or ""
    assert f"cluster {cid} succeeded" in supervisor_log, supervisor_log[-2000:]

    metrics = {k: v for k, v in state.last_epoch.items() if isinstance(v, (int, float))}
    result = ModelRegistry(str(tmp_path / "registry")).publish(
        "sup_pod", saved_model_dir=run.path(LAYOUT.model), checkpoint_dir=run.path(LAYOUT.backup),
        tensorboard_dir=run.path(LAYOUT.tensorboard), metrics=metrics, gate=BlessingGate(thresholds={}))
    predicted = _predict(tmp_path / "registry" / "sup_pod" / result.version / "saved_model", _feature_rows(4))
    assert len(predicted) == 4


def test_max_runtime_and_a_stop_request_end_a_pod_supervised_cluster(deployed, tmp_path):
    """Two clusters whose one task never becomes ready (a sleeping command: no TensorFlow), supervised by a pod.
    The first has `max_runtime: 25`: its pod, made by the launcher beside the supervisor's Deployment (the head
    start: it is there when the launch returns) and taken by the supervisor as its task's (no second pod),
    carries that bound as activeDeadlineSeconds, and the supervisor stops the cluster once it is reached. The
    second is stopped by `ignite-tf stop` run in a shell of its own (the state store's request: no signal reaches
    the supervisor's pod). Both end STOPPED and leave nothing."""

    from ignite_tf.cluster.api import start_cluster

    core, ns, conn, run_root, exports = deployed
    home = tmp_path / "shell"
    cache = f"sup_stop_{uuid.uuid4().hex[:6]}"
    env = _shell_with_table(exports, home, cache, 200, seed=1, job=False)
    job = {"command": ["python", "-c", "import time; time.sleep(3000)"]}

    def launch(cid: str, **settings):
        launcher = make_launcher(conn, kind="kubernetes", kubernetes={"namespace": ns, **settings})
        state = start_cluster(cache, job, conn=conn, workers=1, cluster_id=cid, launcher=launcher,
                              startup_deadline_s=900, grace_period_s=2)
        assert state.supervisor_pid == 0 and state.supervisor_host.startswith(f"pod/{ns}/"), state
        # Taken for lost only after a replacement pod would have beaten (its node given up, the old pod gone).
        assert state.lost_after_s == LOST_AFTER_S + supervisor.REPLACED_S, state.lost_after_s
        return launcher

    bounded, stopped = f"k8s-maxrt-{uuid.uuid4().hex[:6]}", f"k8s-stop-{uuid.uuid4().hex[:6]}"
    launcher = launch(bounded, max_runtime=25)
    pod = cluster_pods(core, ns, bounded).get("worker-0")  # made by the launcher, before its supervisor runs
    assert pod is not None and pod.metadata.name == f"{bounded}-worker-0-0", pod
    assert 25 < pod.spec.active_deadline_seconds <= 25 + 2 + 60, pod.spec.active_deadline_seconds
    launch(stopped)
    wait_for(lambda: cluster_pods(core, ns, stopped).get("worker-0"), 120, "the second cluster's pod")

    stop = _cli(["stop", stopped], env=env, cwd=home)
    out, _ = stop.communicate(timeout=300)
    assert stop.returncode == 0 and f"{stopped} stopped" in out, out[-3000:]

    def ended(cid):
        def check():
            state, alive = launcher.settled(cid)
            return state if state.status.final and not alive else None
        return check

    state = wait_for(ended(bounded), 240, f"cluster {bounded} to reach max_runtime", poll=1.0)
    assert state.status is Status.STOPPED and 25 <= state.age_s < 120, (state.status, state.age_s)
    chief = RunStore(state.run_dir).read_text(LAYOUT.log("worker-0")) or ""
    assert "kubernetes.max_runtime (25s) reached" in chief, chief[-2000:]
    assert f"pod {pod.metadata.name} made by the launcher (head start): taken" in chief, chief[-2000:]
    assert state.restarts == 0 and not state.failures, state.failures
    assert launcher.status(stopped).status is Status.STOPPED
    for cid in (bounded, stopped):
        assert_nothing_left(cid, k8s=(core, ns), timeout=120)


def test_a_missing_namespace_or_an_image_the_node_cannot_get_is_said_at_once(deployed, tmp_path):
    """`ignite-tf start --launcher kubernetes` into a namespace that does not exist, then with an image the node
    does not have (pull policy Never, as on the local Kubernetes): each ends with an error naming the input and
    what to do (create the namespace; push the image and set kubernetes.image), within seconds rather than the
    state's timeout, and leaves no pod, Deployment or other object of the cluster, and no recorded state. Real: the
    apiserver's 404, the kubelet's ErrImageNeverPull. Simulated: nothing."""
    core, ns, conn, run_root, exports = deployed
    cache = f"sup_err_{uuid.uuid4().hex[:6]}"
    home = tmp_path / "launcher"
    env = _shell_with_table(exports, home, cache, 200, seed=3)
    missing = f"{ns}-missing"
    for k8s, expected in (({}, [f"namespace {missing!r} does not exist", f"kubectl create namespace {missing}"]),
                          ({"image": "localhost/ignite-tf-task:no-such-tag"},
                           ["ErrImageNeverPull", "localhost/ignite-tf-task:no-such-tag", "kubernetes.image"])):
        cid = f"k8s-err-{uuid.uuid4().hex[:6]}"
        namespace = missing if not k8s else ns
        start = _cli(["start", "--launcher", "kubernetes", "--namespace", namespace, "--k8s", json.dumps(k8s),
                      "--workers", "2", "--id", cid, cache, "job", "python", "train.py"], env=env, cwd=home)
        out, _ = start.communicate(timeout=300)
        assert start.returncode != 0, out[-3000:]
        assert all(text in out for text in expected), out[-3000:]
        assert "Traceback" not in out, out[-3000:]
        assert_nothing_left(cid, k8s=(core, ns))
        # No state: only the supervisor records one (``wait_recorded`` waits for it), and it never ran; the
        # launch's error is said to the caller, not recorded.
        assert make_launcher(conn).find(cid) is None


def test_a_spec_the_run_store_refuses_fails_the_launch_and_leaves_nothing(deployed, tmp_path, monkeypatch):
    """The launcher writes the spec to the run store while it makes the root, the supervisor's Deployment and
    the first pods (the supervisor gets the spec from its root ConfigMap, the tasks need none). Should that
    write fail, the launch fails with its error and deletes what it made, as when the write came first.
    Real: everything of `deployed`; injected: the store's refusal of that one write (the same write succeeds in
    every other test), made to come after the objects exist."""
    from ignite_tf_dev import demo_data
    from ignite_tf_dev.k8s import addons as local_k8s_addons
    from ignite_tf_dev.k8s import cluster as local_k8s

    from ignite_tf.cluster.api import start_cluster
    from ignite_tf.cluster.k8s.launcher import KubernetesLauncher
    from ignite_tf.etl import load

    core, ns, conn, run_root, _ = deployed
    cache = f"spec_put_{uuid.uuid4().hex[:6]}"
    cid = f"k8s-put-{uuid.uuid4().hex[:6]}"
    load(conn, cache, demo_data.tabular(200), key="id")
    made: list[str] = []

    def refused(self, spec):
        # Once the launcher's head start has made the first pods (the objects it would leave behind).
        wait_for(lambda: made.extend(p.metadata.name for p in cluster_pods(core, ns, cid).values()) or made, 60,
                 "the first pods", poll=0.05)
        raise PermissionError(f"AccessDenied: writing {spec.run_store}/spec.json (injected)")

    monkeypatch.setattr(KubernetesLauncher, "put_spec", refused)
    settings = {"namespace": ns, "node_selector": {local_k8s.HOST_LABEL: "real-0"},
                "ignite_selector": local_k8s_addons.IGNITE_SELECTOR,
                "ignite_namespace": local_k8s_addons.IGNITE_NAMESPACE}
    launcher = make_launcher(conn, kind="kubernetes", kubernetes=settings)
    with pytest.raises(PermissionError, match="AccessDenied: writing .*spec.json"):
        start_cluster(cache, {"entry_point": "ignite_tf.models:tabular_classifier",
                              "args": ["--epochs", "1", "--label-column", "label"]}, conn=conn, mode="sync",
                      workers=2, cluster_id=cid, run_root=run_root, launcher=launcher, startup_deadline_s=300)
    assert made, "the head start made no pods before the refusal"
    assert_nothing_left(cid, timeout=60, k8s=(core, ns))
