"""The Kubernetes launcher on the local Kubernetes, with simulated (kwok) nodes.

Real in every test: the control plane (apiserver, scheduler, controller-manager and its garbage collector),
Airflow's KubernetesHook that the launcher and its pod supervisor use, the session's 2 Ignite nodes (the
partition map, the shard plan, the cluster state store), the pod supervisor process. Simulated: what runs in
a pod on a kwok node — nothing runs; a pod stays Running until the test sets its exit code through an
annotation (0, 1, 137 with reason OOMKilled), as k8s/kwok/pod-exit.yaml plays it.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import time

import pytest
from ignite_tf_dev.k8s import cluster as local_k8s

from ignite_tf.cli import main as cli_main
from ignite_tf.cluster.k8s import objects, standby
from ignite_tf.plan.shards import ShardPlan
from ignite_tf.state import LOST_AFTER_S, ExitCode, Status
from tests.support.clusters import assert_nothing_left
from tests.support.k8s_launch import (
    GRACE_S,
    cluster_pods,
    end_pod,
    simulated_settings,
    start,
    use_local_k8s,
    wait_final,
    wait_running,
)
from tests.support.polling import wait_for

pytestmark = pytest.mark.timeout(3600)

SIMULATED = ["sim-0", "sim-1", "sim-2"]
DATA_ROWS = 600  # rows of data_cache


@pytest.fixture
def kube(k8s_cluster, k8s_namespace, monkeypatch):
    use_local_k8s(monkeypatch, k8s_cluster)
    return k8s_cluster.core, k8s_namespace


def _ignite_pods(core, ns, conn, cache) -> dict[str, str]:
    """Stand-ins for Ignite's pods: one simulated pod per Ignite node, named by its consistent id, placed by
    the real scheduler on a chosen simulated node. Returns consistent id -> Kubernetes node."""
    from ignite_tf.plan.partitions import PartitionMap

    pm = PartitionMap.discover(conn, cache)
    ids = sorted(n.consistent_id for n in pm.nodes.values())
    where = dict(zip(ids, ["sim-2", "sim-0"], strict=False))
    for cid, node in where.items():
        core.create_namespaced_pod(ns, {"metadata": {"name": cid, "labels": {"app": "ignite"}}, "spec": {
            "nodeSelector": {local_k8s.HOST_LABEL: node}, "tolerations": [local_k8s.SIMULATED_TOLERATION],
            "containers": [{"name": "ignite", "image": "simulated/ignite:2.17"}]}})
    wait_for(lambda: all(core.read_namespaced_pod(c, ns).spec.node_name for c in where), 60, "Ignite pods placed")
    return where


def test_workers_are_placed_next_to_their_ignite_nodes(kube, ignite_conn, data_cache, tmp_path):
    """Real scheduler on simulated nodes: each worker lands on the Kubernetes node of the Ignite pod that holds
    its partitions (placement: required); the shard plan records the locality its own plan allows and the chief's
    output prints it. Also checked on the real objects: one headless Service, pods owned by the ConfigMap, TF_CONFIG
    from the Service's DNS names, the Ignite login in a Secret (not in the pod spec), a computed memory request."""
    core, ns = kube
    where = _ignite_pods(core, ns, ignite_conn, data_cache)
    launcher, state = start(ignite_conn, data_cache, tmp_path, simulated_settings(
        ns, placement="required", ignite_selector="app=ignite", resources={}))
    cid = state.cluster_id
    try:
        pods = wait_running(core, ns, cid, ["worker-0", "worker-1"])
        plan = ShardPlan.load(f"{state.run_dir}/shard_plan.json")
        for i in range(2):
            assert pods[f"worker-{i}"].spec.node_name == where[plan.worker_hosts[i]]
        wait_for(lambda: ShardPlan.load(f"{state.run_dir}/shard_plan.json").placement, 60, "placement recorded")
        placed = ShardPlan.load(f"{state.run_dir}/shard_plan.json").placement
        assert placed["locality"] == placed["planned_locality"] > 0.9 and placed["local_workers"] == 2
        svc = core.read_namespaced_service(objects.service_name(cid), ns)
        assert svc.spec.cluster_ip == "None"
        pod = pods["worker-1"]
        assert pod.metadata.owner_references[0].kind == "ConfigMap" and pod.metadata.owner_references[0].name == cid
        env = {e.name: e.value for e in pod.spec.containers[0].env}
        tf_config = json.loads(env["TF_CONFIG"])
        assert tf_config["cluster"]["worker"][1] == f"worker-1.{svc.metadata.name}.{ns}.svc:2222"
        assert "IGNITE_TF_ADDRESSES" not in env and pod.spec.containers[0].env_from[0].secret_ref.name
        memory = pod.spec.containers[0].resources.requests["memory"]
        assert memory == pod.spec.containers[0].resources.limits["memory"] and memory.endswith("Mi")
        for p in pods.values():
            end_pod(core, ns, p, 0)
        final = wait_final(launcher, cid)
        assert final.status is Status.SUCCEEDED, final.reason
        out = launcher.output(cid)[0]
        assert "memory estimate per task" in out and f"{placed['locality'] * 100:.1f}% of rows read locally" in out
    finally:
        launcher.stop(cid)
    assert_nothing_left(cid, k8s=(core, ns))


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_restart_scope_follows_the_mode(kube, ignite_conn, data_cache, tmp_path, mode):
    """Simulated exit 137 of worker-1 (retryable): sync replaces every pod, async replaces worker-1 alone;
    then simulated exit 0 ends the cluster as succeeded (async: the chief's exit; the ps is stopped) and
    nothing of it is left. Real: the supervisor's decisions on the apiserver's pod statuses."""
    core, ns = kube
    launcher, state = start(ignite_conn, data_cache, tmp_path, simulated_settings(ns), mode=mode, ps=1)
    cid = state.cluster_id
    tasks = ["worker-0", "worker-1"] + (["chief-0", "ps-0"] if mode == "async" else [])
    try:
        before = wait_running(core, ns, cid, tasks, attempt=0)
        end_pod(core, ns, before["worker-1"], 137)
        after = wait_running(core, ns, cid, ["worker-1"], attempt=1)
        others = [t for t in tasks if t != "worker-1"]
        if mode == "sync":
            after = wait_running(core, ns, cid, tasks, attempt=1)
        else:
            assert all(after[t].metadata.name == before[t].metadata.name for t in others)
        state = wait_for(lambda: launcher.status(cid).failures and launcher.status(cid), 30, "the failure recorded")
        assert state.restarts == 1 and state.failures[0]["exit_code"] == 137
        for t in (["chief-0"] if mode == "async" else tasks):
            end_pod(core, ns, after[t], 0)
        final = wait_final(launcher, cid)
        assert final.status is Status.SUCCEEDED, final.reason
        assert final.failures[0]["action"] == ("restarted worker-1 alone" if mode == "async"
                                                else "restarted the cluster")
    finally:
        launcher.stop(cid)
    assert_nothing_left(cid, k8s=(core, ns))


def test_own_error_fails_fast_and_a_kwok_simulated_oomkilled_status_is_reported(kube, ignite_conn, data_cache,
                                                                                tmp_path):
    """Simulated exit 1 (the task's own error) under the exit-code policy ends the cluster at once (exit 1); a
    kwok-simulated OOMKilled status (137, set through kwok's pod-exit annotation) with no restarts left ends it
    naming OOMKilled, the limit and the estimate. Simulated because nothing runs on a kwok node, so no OOM kill
    can happen there; a real one (the kernel's, on the real node, and the restart with a larger limit) is
    tests/cluster/k8s/test_oom.py."""
    core, ns = kube
    launcher, state = start(ignite_conn, data_cache, tmp_path, simulated_settings(ns))
    cid = state.cluster_id
    try:
        pods = wait_running(core, ns, cid, ["worker-0", "worker-1"])
        end_pod(core, ns, pods["worker-0"], 1)
        final = wait_final(launcher, cid)
    finally:
        launcher.stop(cid)
    assert final.exit_code == ExitCode.USER_CODE_FAILED and final.restarts == 0
    assert "worker-0 exited with status 1" in final.reason and "not retryable" in final.reason
    assert_nothing_left(cid, k8s=(core, ns))

    launcher, state = start(ignite_conn, data_cache, tmp_path, simulated_settings(ns, resources={}), max_restarts=0,
                            cluster_id="oom-" + cid[-6:])
    cid = state.cluster_id
    try:
        pods = wait_running(core, ns, cid, ["worker-0", "worker-1"])
        end_pod(core, ns, pods["worker-1"], 137)
        final = wait_final(launcher, cid)
    finally:
        launcher.stop(cid)
    assert final.exit_code == ExitCode.RESTARTS_EXHAUSTED
    assert "OOMKilled at its memory limit" in final.reason and "estimate" in final.reason, final.reason
    assert_nothing_left(cid, k8s=(core, ns))


def test_deleted_pod_is_restarted(kube, ignite_conn, data_cache, tmp_path):
    """Real: a user deletes worker-0's pod through the apiserver; the supervisor treats it as a lost task
    (retryable) and restarts the cluster. Simulated: the pods' running and exit."""
    core, ns = kube
    launcher, state = start(ignite_conn, data_cache, tmp_path, simulated_settings(ns))
    cid = state.cluster_id
    try:
        pods = wait_running(core, ns, cid, ["worker-0", "worker-1"], attempt=0)
        core.delete_namespaced_pod(pods["worker-0"].metadata.name, ns, grace_period_seconds=0)
        pods = wait_running(core, ns, cid, ["worker-0", "worker-1"], attempt=1)
        state = wait_for(lambda: launcher.status(cid).failures and launcher.status(cid), 30, "the failure recorded")
        assert "deleted" in state.failures[0]["detail"]
        for p in pods.values():
            end_pod(core, ns, p, 0)
        assert wait_final(launcher, cid).status is Status.SUCCEEDED
    finally:
        launcher.stop(cid)
    assert_nothing_left(cid, k8s=(core, ns))


def test_an_api_outage_is_waited_out_within_the_budget_and_named_past_it(kube, k8s_cluster, ignite_conn, data_cache,
                                                                          tmp_path, monkeypatch):
    """Real: the supervisor reaches the apiserver through a link the test cuts (``tests.support.netfault``: its
    connections reset, new ones refused, as while an apiserver restarts) and then freezes (bytes held, as with
    the apiserver under SIGSTOP: the shared control plane's own components would lose their leases if it were
    stopped); Ignite and the test reach everything directly. Simulated: the pods' running and exit. The freeze
    outlasts LOST_AFTER_S (20 s): what is tested is that the cluster is not taken for lost meanwhile."""
    from pathlib import Path
    from urllib.parse import urlparse

    from tests.support.netfault import CuttableLink

    core, ns = kube
    text = Path(k8s_cluster.kubeconfig).read_text()
    server = urlparse(core.api_client.configuration.host)
    with CuttableLink((server.hostname, server.port)) as link:
        via_link = tmp_path / "via-link.kubeconfig"
        via_link.write_text(text.replace(f"{server.hostname}:{server.port}", link.address))
        monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": str(via_link)}}))

        def chief_says(words: str, cid: str) -> bool:
            return words in launcher.output(cid)[0]

        launcher, state = start(ignite_conn, data_cache, tmp_path, simulated_settings(ns),
                                supervision={"outage_budget_s": 300})
        cid = state.cluster_id
        try:
            pods = wait_running(core, ns, cid, ["worker-0", "worker-1"], attempt=0)
            link.cut()
            wait_for(lambda: chief_says("did not answer", cid), 60, "the supervisor seeing the outage")
            wait_for(lambda: launcher.status(cid).heartbeat > time.time() - 3, 30, "a heartbeat during the outage")
            link.restore()
            wait_for(lambda: chief_says("answers again after", cid), 60, "the supervisor seeing the API back")
            state = launcher.status(cid)
            assert state.status is Status.RUNNING and state.restarts == 0 and not state.failures, state.failures
            assert {p.metadata.name for p in cluster_pods(core, ns, cid).values()} == \
                {p.metadata.name for p in pods.values()}, "a pod was replaced during an outage within the budget"

            # A frozen API server: the supervisor's calls wait (no error to retry), its heartbeat goes on.
            link.freeze()
            frozen = time.monotonic()

            def alive_through_the_freeze():
                state, alive = launcher.settled(cid)
                assert alive and state.status is Status.RUNNING, \
                    f"taken for {state.status.value} {time.monotonic() - frozen:.0f} s into the freeze"
                return time.monotonic() - frozen > LOST_AFTER_S + 5

            wait_for(alive_through_the_freeze, LOST_AFTER_S + 60, "a freeze longer than LOST_AFTER_S", poll=1)
            link.thaw()
            for p in pods.values():
                end_pod(core, ns, p, 0)
            state = wait_final(launcher, cid)
            assert state.status is Status.SUCCEEDED and state.restarts == 0
        finally:
            link.restore()
            launcher.stop(cid)
        assert_nothing_left(cid, k8s=(core, ns))

        # Past the budget the cluster fails, the outage named; its objects go once the API answers again.
        launcher, state = start(ignite_conn, data_cache, tmp_path, simulated_settings(ns),
                                supervision={"outage_budget_s": 3})
        cid = state.cluster_id
        try:
            wait_running(core, ns, cid, ["worker-0", "worker-1"], attempt=0)
            link.cut()
            state = wait_final(launcher, cid)
            assert state.status is Status.FAILED
            assert "has not answered for" in state.reason and "the outage budget is 3 s" in state.reason, \
                state.reason
            assert state.restarts == 0
        finally:
            link.restore()
            launcher.stop(cid)
    assert_nothing_left(cid, k8s=(core, ns))


def test_a_restart_is_handed_to_the_warm_standby_pods(kube, ignite_conn, data_cache, tmp_path):
    """``kubernetes.standby``. Real: the supervisor makes one warm pod per task once the attempt's pods are up
    (their own DNS names, a TF_CONFIG naming each other), a user deletes worker-1's pod, and the whole-cluster
    restart takes the warm pods instead of making new ones: they become the attempt's pods (relabelled, the
    cluster attempt annotated) and the go record in the cluster's state gives each its attempt. Simulated: the
    pods' running and exit (what a warm pod does with its signed go record: tests/cluster/k8s/test_standby.py)."""
    core, ns = kube
    launcher, state = start(ignite_conn, data_cache, tmp_path, simulated_settings(ns, standby=True),
                            command=("python", "-m", "ignite_tf.runtime", "--entry-point", "m:f", "--epochs", "1"))
    cid = state.cluster_id

    def pods():
        return {p.metadata.name: p for p in core.list_namespaced_pod(
            ns, label_selector=f"{objects.LABEL_CLUSTER}={cid}").items if not p.metadata.deletion_timestamp}

    warm = [f"{cid}-worker-0-s1", f"{cid}-worker-1-s1"]
    try:
        wait_for(lambda: all(n in pods() and pods()[n].status.phase == "Running" for n in warm), 120,
                 "the warm pods Running", poll=0.5)
        made = pods()
        assert made[warm[0]].spec.hostname == "worker-0-s1"
        env = {e.name: e.value for e in made[warm[0]].spec.containers[0].env}
        assert "worker-1-s1." in env["TF_CONFIG"] and env["IGNITE_TF_ATTEMPT"] == "1", env["TF_CONFIG"]
        core.delete_namespaced_pod(f"{cid}-worker-1-0", ns, grace_period_seconds=0)
        state = wait_for(lambda: (s := launcher.status(cid)).restarts and s.status is Status.RUNNING and s, 60,
                         "the restart up")
        now = pods()
        assert set(now) >= set(warm) and f"{cid}-worker-0-1" not in now, sorted(now)
        for name in warm:
            labels = now[name].metadata.labels
            assert "ignite-tf.io/standby" not in labels and labels[objects.LABEL_ATTEMPT] == "1", labels
            assert now[name].metadata.annotations[objects.ANNOTATION_CLUSTER_ATTEMPT] == "1"
        go = state.launcher[standby.GO_KEY]
        assert (go["generation"], go["attempt"]) == (1, 1), go
        # Signed with the key in the cluster's Secret (which the pods take by reference, never in their spec).
        secret = core.read_namespaced_secret(objects.secret_name(cid), ns)
        key = base64.b64decode(secret.data[standby.ENV_KEY]).decode()
        assert standby.signed(go, key, cid) and standby.ENV_KEY not in env, go
        for name in warm:
            end_pod(core, ns, now[name], 0)
        assert wait_final(launcher, cid).status is Status.SUCCEEDED
    finally:
        launcher.stop(cid)
    assert_nothing_left(cid, k8s=(core, ns))


def test_unschedulable_pod_ends_in_the_startup_deadline(kube, ignite_conn, data_cache, tmp_path):
    """Real scheduler: a pod whose node selector matches no node stays Pending; the start-up deadline ends
    the cluster (exit 3) with the scheduler's reason in the message, and nothing is left."""
    core, ns = kube
    settings = simulated_settings(ns, node_selector={local_k8s.HOST_LABEL: "no-such-node"})
    launcher, state = start(ignite_conn, data_cache, tmp_path, settings, startup_deadline_s=8)
    final = wait_final(launcher, state.cluster_id)
    assert final.exit_code == ExitCode.STARTUP_DEADLINE
    assert "Unschedulable" in final.reason and "didn't match Pod's node affinity/selector" in final.reason, final.reason
    assert_nothing_left(state.cluster_id, k8s=(core, ns))


def test_stop_and_deleting_the_owner_leave_nothing(kube, ignite_conn, data_cache, tmp_path, capsys, monkeypatch):
    """Real: `ignite-tf stop` stops a running cluster (the supervisor deletes the pods with their grace period,
    then the owner); deleting the owner ConfigMap by hand makes the garbage collector delete the rest and the
    supervisor stop; a supervisor killed with SIGKILL leaves pods that `stop` then deletes itself."""
    core, ns = kube
    monkeypatch.setenv("IGNITE_TF_ADDRESSES", ignite_conn.addresses_str)
    for how in ("cli-stop", "delete-owner", "supervisor-killed"):
        launcher, state = start(ignite_conn, data_cache, tmp_path, simulated_settings(ns),
                                cluster_id=f"{how}-{os.getpid()}")
        cid = state.cluster_id
        wait_running(core, ns, cid, ["worker-0", "worker-1"])
        if how == "cli-stop":
            assert cli_main(["stop", cid]) == 0
            assert f"{cid} stopped" in capsys.readouterr().out
        elif how == "delete-owner":
            objects.delete_owner(core, ns, cid)
            assert wait_final(launcher, cid).status is Status.STOPPED
        else:
            os.kill(launcher.status(cid).supervisor_pid, signal.SIGKILL)
            assert launcher.stop(cid).status is Status.STOPPED
        assert_nothing_left(cid, timeout=30, k8s=(core, ns))
        assert not cluster_pods(core, ns, cid, live_only=False)


def test_killing_the_airflow_task_leaves_nothing(kube, ignite_conn, data_cache, monkeypatch, tmp_path, run_root):
    """Real: TFClusterOperator(launcher="kubernetes") starts the cluster through Airflow's KubernetesHook;
    the deferred task's trigger ``on_kill`` (a user marks the task failed) and the operator's own
    ``on_kill`` (the worker kills a task that was not deferred) each stop it, and nothing of it is left.
    Stand-ins: the task context (a dict with the try number and an XCom store) instead of a scheduler."""
    import asyncio
    import threading
    from types import SimpleNamespace

    from airflow.sdk.exceptions import TaskDeferred

    from ignite_tf.operators.tensorflow import TFClusterOperator
    from tests.support.airflow import TaskContext, ignite_connection_env, migrate_db

    core, ns = kube
    migrate_db()
    for key, value in ignite_connection_env(ignite_conn).items():
        monkeypatch.setenv(key, value)
    dag = SimpleNamespace(dag_id=f"k8s_kill_{os.getpid()}")
    (tmp_path / "job").mkdir()

    def operator(**kw):
        return TFClusterOperator(task_id="train", cache=data_cache, command=["python", "train.py"],
                                 job_dir=str(tmp_path / "job"),
                                 workers=2, launcher="kubernetes", kubernetes=simulated_settings(ns),
                                 poll_interval=0.5, supervision={"grace_period_s": GRACE_S}, **kw)

    op = operator()
    context = TaskContext(dag, "manual__deferred")
    with pytest.raises(TaskDeferred) as deferred:
        op.execute(context)
    cid = context["ti"].xcoms["cluster_id"]
    wait_running(core, ns, cid, ["worker-0", "worker-1"])
    asyncio.run(deferred.value.trigger.on_kill())
    assert_nothing_left(cid, timeout=30, k8s=(core, ns))

    op2 = operator(deferrable=False)
    context2 = TaskContext(dag, "manual__not_deferred")
    runner = threading.Thread(target=lambda: _swallow(op2.execute, context2), daemon=True)
    runner.start()
    cid2 = wait_for(lambda: context2["ti"].xcoms.get("cluster_id"), 120, "cluster id")
    wait_running(core, ns, cid2, ["worker-0", "worker-1"])
    op2.on_kill()
    runner.join(timeout=60)
    assert_nothing_left(cid2, timeout=30, k8s=(core, ns))


def _swallow(fn, *args):
    try:
        fn(*args)
    except Exception:  # noqa: BLE001 - the killed task's own failure is expected here
        pass


def test_a_handed_over_supervisor_closes_its_pods_log_streams_at_once(kube, tmp_path):
    """``PodBackend.hand_over`` (a pod supervisor replaced: the pods run on under the next one) with 16 pods whose
    log streams never end. Real: the apiserver, the scheduler, the garbage collector, the log streams the backend
    follows. Simulated (kwok): the pods (Running, a log that never ends). The hand-over closes the streams at
    once, one bound for all (joined one by one, 2 s each, it took 32 s; the bound asserted leaves room for a
    loaded machine), and leaves no follower running."""
    import time

    from ignite_tf.cluster.k8s.pods import PodBackend
    from ignite_tf.cluster.k8s.settings import KubernetesSettings
    from ignite_tf.cluster.spec import build_spec

    core, ns = kube
    n = 16
    cid = f"handover-{os.getpid()}"
    spec = build_spec(cluster_id=cid, cache="c", mode="sync", workers=n, run_dir=tmp_path / "run",
                      job={"command": ["python", "train.py"], "job_dir": str(tmp_path)}, grace_period_s=GRACE_S)
    spec.folder.logs.mkdir(parents=True)
    settings = KubernetesSettings.parse(simulated_settings(ns))
    made = core.create_namespaced_config_map(ns, objects.owner_manifest(spec, settings))
    try:
        backend = PodBackend(spec, settings, ns, settings.image, core=core,
                             owner={"name": made.metadata.name, "uid": made.metadata.uid})
        for task in spec.tasks:
            backend.start(task, 0)
        wait_running(core, ns, cid, [t.name for t in spec.tasks])

        def following():
            backend.refresh()  # follows each pod whose container runs
            return len(backend.logs.streams) == n

        wait_for(following, 60, f"{n} log streams open", poll=0.5)
        started = time.monotonic()
        backend.hand_over()
        took = time.monotonic() - started
        assert took < 10.0, f"hand-over took {took:.1f}s"  # one bound for all; joined in turn: 32 s
        assert not backend.logs.streams and not [t for t in backend.logs.followers.values() if t.is_alive()]
    finally:
        objects.delete_owner(core, ns, cid)
    assert_nothing_left(cid, k8s=(core, ns))


def test_deployment_manifests_are_accepted_by_the_apiserver(k8s_cluster, k8s_namespace):
    """Real: the apiserver validates docker/k8s/*.yaml (Ignite StatefulSet and Services, the launcher's and the
    pod supervisor's RBAC) with a server-side dry run; and the example settings parse as KubernetesSettings."""
    from pathlib import Path

    import yaml
    from kubernetes import utils

    from ignite_tf.cluster.k8s.settings import KubernetesSettings

    folder = Path(__file__).resolve().parents[3] / "docker" / "k8s"
    for name in ("ignite.yaml", "launcher-rbac.yaml", "supervisor-rbac.yaml"):
        docs = [d for d in yaml.safe_load_all((folder / name).read_text()) if d]
        utils.create_from_yaml(k8s_cluster.api, yaml_objects=docs, namespace=k8s_namespace, dry_run="All")
    settings = KubernetesSettings.parse(yaml.safe_load((folder / "training.yaml").read_text()))
    assert settings.ignite_selector == "app=ignite"


def test_64_workers_are_placed_next_to_64_ignite_pods(k8s_cluster, k8s_ignite, k8s_namespace, monkeypatch,
                                                      tmp_path):
    """Placement at scale. Simulated (kwok): 64 Kubernetes nodes made by this test (as the cluster's own
    simulated nodes: tainted ignite-tf.io/simulated), a 64-server Ignite cluster — 64 stand-in pods labelled
    app=ignite named like a StatefulSet's (ignite-0 .. ignite-63, consistent id = pod name), one per
    simulated node, and the shard plan's partition map over those 64 servers — and what runs in the pods.
    Real: the launcher's placement (stand-in pod -> Kubernetes node, by pod name), the pod supervisor
    creating 64 worker pods (placement: required), the real scheduler, the state store in the Ignite pods.
    Every worker lands on the node of the Ignite pod its shard is next to; the time to all scheduled is
    printed."""
    import dataclasses
    import time
    import uuid

    from ignite_tf_dev import demo_data

    from ignite_tf.cluster.api import make_launcher, start_cluster
    from ignite_tf.connection import IgniteConnectionConfig
    from ignite_tf.etl import load
    from ignite_tf.plan.partitions import NodeInfo, PartitionMap
    from ignite_tf.plan.shards import ShardPlan, next_to_nodes

    n = 64
    core, ns = k8s_cluster.core, k8s_namespace
    use_local_k8s(monkeypatch, k8s_cluster)
    conn = IgniteConnectionConfig(addresses=list(k8s_ignite))
    monkeypatch.setenv("IGNITE_TF_ADDRESSES", ",".join(k8s_ignite))
    tag = uuid.uuid4().hex[:4]
    nodes = [f"e2e-{tag}-{i}" for i in range(n)]
    cache = f"k8s_place_{tag}"
    load(conn, cache, demo_data.tabular(200, seed=1), key="id")  # the memory estimate reads its columns
    launcher = cid = None
    try:
        for name in nodes:  # as ignite_tf_dev.k8s.cluster makes its simulated nodes
            core.create_node({"apiVersion": "v1", "kind": "Node", "metadata": {
                "name": name, "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                "labels": {local_k8s.NODE_KIND_LABEL: "simulated", local_k8s.HOST_LABEL: name,
                           "kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "type": "kwok"}},
                "spec": {"taints": [{"key": local_k8s.SIMULATED_NODE_TAINT, "value": "true",
                                     "effect": "NoSchedule"}]}})
        for i, name in enumerate(nodes):
            core.create_namespaced_pod(ns, {"metadata": {"name": f"ignite-{i}", "labels": {"app": "ignite"}}, "spec": {
                "nodeSelector": {local_k8s.HOST_LABEL: name}, "tolerations": [local_k8s.SIMULATED_TOLERATION],
                "containers": [{"name": "ignite", "image": "simulated/ignite:2.17"}]}})
        wait_for(lambda: sum(1 for p in core.list_namespaced_pod(ns, label_selector="app=ignite").items
                             if p.spec.node_name) == n, 300, "64 stand-in Ignite pods placed", poll=1)
        real = PartitionMap.discover(conn, cache)
        servers = {f"node-{i}": NodeInfo(f"node-{i}", f"ignite-{i}", f"10.250.0.{i}", 10800, order=i)
                   for i in range(n)}
        pm = dataclasses.replace(real, nodes=servers, primary=[f"node-{p % n}" for p in range(real.partitions)],
                                 backups=[[f"node-{(p + 1) % n}"] for p in range(real.partitions)],
                                 rows=[10] * real.partitions)
        plan = ShardPlan.build(pm, n, worker_hosts=next_to_nodes(pm, n))
        launcher = make_launcher(conn, kind="kubernetes", kubernetes=simulated_settings(
            ns, placement="required", ignite_selector="app=ignite", resources={}))
        job = tmp_path / "job"
        job.mkdir()
        (job / "train.py").write_text("print('simulated')\n")
        started = time.monotonic()
        state = start_cluster(cache, {"command": ["python", "train.py"], "job_dir": str(job)}, conn=conn,
                              plan=plan, run_root=tmp_path / "runs", launcher=launcher, startup_deadline_s=600,
                              grace_period_s=GRACE_S)
        cid = state.cluster_id

        def scheduled():
            pods = cluster_pods(core, ns, cid)
            return pods if len(pods) == n and all(p.spec.node_name for p in pods.values()) else None

        pods = wait_for(scheduled, 600, "64 worker pods scheduled", poll=0.5)
        print(f"64 workers: launch -> all scheduled {time.monotonic() - started:.1f}s")
        for i in range(n):
            assert pods[f"worker-{i}"].spec.node_name == nodes[int(plan.worker_hosts[i].split("-")[1])]
        # The plan carries the Ignite node map from the start (the start files); the achieved placement comes
        # once the workers are scheduled.
        wait_for(lambda: "local_workers" in (ShardPlan.load(f"{state.run_dir}/shard_plan.json").placement or {}),
                 120, "placement recorded")
        placed = ShardPlan.load(f"{state.run_dir}/shard_plan.json").placement
        assert placed["local_workers"] == n and placed["locality"] == placed["planned_locality"] == 1.0, placed
    finally:
        try:
            if launcher is not None and cid is not None:
                # The log streams of the 64 kwok pods never end: the supervisor closes them after one bound
                # for all (podlogs.FOLLOWERS_JOIN_S), so the stop is recorded by the supervisor itself, well
                # before its state could be taken for lost (state.LOST_AFTER_S), and it then exits.
                stopping = time.monotonic()
                stopped = launcher.stop(cid, timeout=120)
                print(f"64 workers: stop {time.monotonic() - stopping:.1f}s")
                assert (stopped.status, stopped.reason) == (Status.STOPPED, "stopped on request"), stopped.reason
        finally:
            for name in nodes:
                try:
                    core.delete_node(name)
                except Exception:  # noqa: BLE001 - one never made
                    pass
            client = conn.client()
            try:
                client.get_cache(cache).destroy()
            finally:
                client.close()
    assert_nothing_left(cid, k8s=(core, ns))
