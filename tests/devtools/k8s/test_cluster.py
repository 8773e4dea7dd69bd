"""The local Kubernetes (``make k8s-up``): real control plane, simulated (kwok) nodes, one real node.

Real in every test: etcd, kube-apiserver, kube-scheduler, kube-controller-manager (their placement,
Job and garbage-collection decisions). Simulated: what a kwok node "runs" — its pods change phase and exit
as the pod's annotations say; no process starts. Real on the real node: kubelet, containerd, runc, the
bridge CNI network and the task image's Python.
"""

from __future__ import annotations

import json
import uuid
from importlib.metadata import version

import pytest
from ignite_tf_dev.k8s import cluster as local_k8s
from ignite_tf_dev.k8s.images import task_image_ref

from tests.support.polling import wait_for

# The first test to use the session cluster may build it (about 30 minutes on a cold 2-core machine);
# every wait inside a test is bounded on its own.
pytestmark = pytest.mark.timeout(3600)

SIMULATED = ["sim-0", "sim-1", "sim-2"]


def _affinity(key: str, values: list[str]) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": key, "operator": "In", "values": values}]}]}}}


def _sim_pod(name: str, host: str | None = None, exit_code: int | None = None, owner: dict | None = None,
             untolerated: bool = False) -> dict:
    meta: dict = {"name": name, "annotations": {}}
    if exit_code is not None:
        meta["annotations"] = {local_k8s.EXIT_CODE_ANNOTATION: str(exit_code), local_k8s.RUN_FOR_ANNOTATION: "300ms"}
    if owner:
        meta["ownerReferences"] = [owner]
    spec = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "simulated/never-pulled:1"}],
            "tolerations": [] if untolerated else [local_k8s.SIMULATED_TOLERATION],
            "affinity": _affinity(local_k8s.HOST_LABEL, [host]) if host
            else _affinity(local_k8s.NODE_KIND_LABEL, ["simulated"])}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _pod(core, ns: str, name: str):
    return core.read_namespaced_pod(name, ns)


def _finished(core, ns: str, name: str):
    pod = _pod(core, ns, name)
    return pod if pod.status.phase in ("Succeeded", "Failed") else None


def test_scheduler_places_pods_by_node_affinity(k8s_cluster, k8s_namespace):
    """Real scheduler, simulated nodes: each pod lands on the node its affinity names; a pod whose affinity
    matches no node, and one that asks for a simulated node without tolerating their taint, stay Pending."""
    core, ns = k8s_cluster.core, k8s_namespace
    for i, host in enumerate(reversed(SIMULATED)):
        core.create_namespaced_pod(ns, _sim_pod(f"placed-{i}", host))
    core.create_namespaced_pod(ns, _sim_pod("nowhere", "no-such-host"))
    core.create_namespaced_pod(ns, _sim_pod("untolerated", "sim-1", untolerated=True))

    for i, host in enumerate(reversed(SIMULATED)):
        pod = wait_for(lambda i=i: _pod(core, ns, f"placed-{i}").spec.node_name and _pod(core, ns, f"placed-{i}"),
                       60, f"pod placed-{i} to be scheduled")
        assert pod.spec.node_name == host
        wait_for(lambda i=i: _pod(core, ns, f"placed-{i}").status.phase == "Running", 60, f"placed-{i} Running")

    def unschedulable(name):
        pod = _pod(core, ns, name)
        cond = [c for c in pod.status.conditions or [] if c.type == "PodScheduled"]
        return cond and cond[0].status == "False" and cond[0].reason == "Unschedulable" and cond[0]

    for name in ("nowhere", "untolerated"):
        cond = wait_for(lambda name=name: unschedulable(name), 60, f"{name} to be reported unschedulable")
        assert _pod(core, ns, name).spec.node_name is None
    assert "untolerated taint" in cond.message and local_k8s.SIMULATED_NODE_TAINT in cond.message


@pytest.mark.parametrize("code, phase, reason", [(0, "Succeeded", "Completed"), (1, "Failed", "Error"),
                                                 (137, "Failed", "OOMKilled")])
def test_simulated_pod_ends_with_chosen_exit_code(k8s_cluster, k8s_namespace, code, phase, reason):
    """Simulated: the pod's exit code comes from its annotation (kwok stage k8s/kwok/pod-exit.yaml).
    Real: the scheduler's placement and the apiserver's pod status."""
    core, ns = k8s_cluster.core, k8s_namespace
    core.create_namespaced_pod(ns, _sim_pod("exits", exit_code=code))
    pod = wait_for(lambda: _finished(core, ns, "exits"), 60, f"the pod to end with exit code {code}")
    term = pod.status.container_statuses[0].state.terminated
    assert (pod.status.phase, term.exit_code, term.reason) == (phase, code, reason)
    assert pod.spec.node_name in SIMULATED


def test_deleting_owner_garbage_collects_its_pods(k8s_cluster, k8s_namespace):
    """Real: the Job controller creates the pods, the garbage collector deletes them with their owner (a Job,
    and separately a ConfigMap owning hand-made pods). Simulated: the pods' running and completing."""
    core, batch, ns = k8s_cluster.core, k8s_cluster.batch, k8s_namespace
    job = batch.create_namespaced_job(ns, {"metadata": {"name": "owner-job"}, "spec": {
        "parallelism": 2, "completions": 2, "backoffLimit": 0, "template": {"spec": {
            "restartPolicy": "Never", "affinity": _affinity(local_k8s.NODE_KIND_LABEL, ["simulated"]),
            "tolerations": [local_k8s.SIMULATED_TOLERATION],
            "containers": [{"name": "main", "image": "simulated/never-pulled:1"}]}}}})
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}
    for i in range(3):
        core.create_namespaced_pod(ns, _sim_pod(f"owned-{i}", owner=ref))
    core.create_namespaced_pod(ns, _sim_pod("unowned"))

    def job_pods():
        return core.list_namespaced_pod(ns, label_selector=f"batch.kubernetes.io/job-name={job.metadata.name}").items

    wait_for(lambda: len(job_pods()) == 2, 60, "the Job's 2 pods")
    wait_for(lambda: (batch.read_namespaced_job(job.metadata.name, ns).status.succeeded or 0) == 2, 60,
             "the Job to complete")
    batch.delete_namespaced_job(job.metadata.name, ns, propagation_policy="Background")
    core.delete_namespaced_config_map("owner", ns, propagation_policy="Background")

    def names():
        return sorted(p.metadata.name for p in core.list_namespaced_pod(ns).items)

    wait_for(lambda: names() == ["unowned"], 120, "the owned pods to be garbage-collected")


def test_real_pod_runs_task_image_and_reaches_ignite(k8s_cluster, k8s_namespace, ignite_cluster, ignite_client):
    """Real end to end: kubelet + containerd run the task image (imported, never pulled) on the real node;
    inside, Python imports TensorFlow and ignite_tf and reads a value this test wrote into the session's
    Ignite nodes through their thin-client ports. The pod uses the host's network (the Ignite nodes listen on
    127.0.0.1 only); the apiserver fetches its log from the kubelet."""
    core, ns = k8s_cluster.core, k8s_namespace
    cache, token = f"k8s_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    ignite_client.get_or_create_cache(cache).put(1, token)
    ports = [n.client_port for n in ignite_cluster.live_nodes()]
    script = (
        "import json, tensorflow as tf, ignite_tf\n"
        "from pyignite import Client\n"
        f"c = Client(timeout=20); c.connect([('127.0.0.1', p) for p in {ports}])\n"
        "with c.sql('SELECT COUNT(*) FROM SYS.NODES WHERE IS_CLIENT = FALSE') as cur: servers = next(iter(cur))[0]\n"
        f"print(json.dumps({{'tf': tf.__version__, 'servers': servers, 'value': c.get_cache('{cache}').get(1)}}))\n"
    )
    core.create_namespaced_pod(ns, {"metadata": {"name": "task"}, "spec": {
        "restartPolicy": "Never", "hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet",
        "nodeSelector": {local_k8s.HOST_LABEL: "real-0"},
        "containers": [{"name": "task", "image": task_image_ref(), "imagePullPolicy": "Never",
                        "command": ["python", "-c", script]}]}})
    try:
        pod = wait_for(lambda: _finished(core, ns, "task"), 600, "the task pod to finish", poll=1)
        log = core.read_namespaced_pod_log("task", ns, _preload_content=False).data.decode()
        ignite_client.get_cache(cache).destroy()
    except BaseException:
        ignite_client.get_cache(cache).destroy()
        raise
    assert pod.status.phase == "Succeeded", log
    assert pod.spec.node_name == local_k8s.node_name()
    result = json.loads(log.strip().splitlines()[-1])
    assert result == {"tf": version("tensorflow"), "servers": len(ports), "value": token}


def test_kubernetes_hook_connects_through_airflow_connection(k8s_cluster, k8s_namespace, monkeypatch):
    """Real: Airflow's KubernetesHook (cncf-kubernetes) against the local apiserver, configured only by an
    Airflow connection (kube_config_path + namespace) given in the environment."""
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    monkeypatch.setenv("AIRFLOW_CONN_K8S_LOCAL", json.dumps({"conn_type": "kubernetes", "extra": {
        "kube_config_path": k8s_cluster.kubeconfig, "namespace": k8s_namespace}}))
    hook = KubernetesHook(conn_id="k8s_local")
    assert hook.get_namespace() == k8s_namespace
    nodes = {n.metadata.name for n in hook.core_v1_client.list_node().items}
    assert set(SIMULATED) | {local_k8s.node_name()} <= nodes
    hook.core_v1_client.create_namespaced_pod(k8s_namespace, _sim_pod("via-hook", exit_code=0))
    pod = wait_for(lambda: _finished(hook.core_v1_client, k8s_namespace, "via-hook"), 60, "the hook's pod")
    assert hook.get_pod("via-hook", k8s_namespace).status.phase == pod.status.phase == "Succeeded"


def test_up_again_leaves_the_running_cluster_alone(k8s_cluster):
    """Real: a second `up` on a running cluster returns at once and restarts nothing."""
    before = local_k8s.running(k8s_cluster.layout)
    assert local_k8s.up(3, k8s_cluster.layout) == k8s_cluster.layout.kubeconfig
    assert local_k8s.running(k8s_cluster.layout) == before


def test_down_with_nothing_running_is_harmless(tmp_path):
    """Real: `down` on a folder where nothing was started stops nothing and changes nothing."""
    assert local_k8s.down(local_k8s.Layout(tmp_path)) == []


def test_down_puts_back_the_host_settings_a_killed_start_left(tmp_path):
    """Real: a start killed before its `down` leaves its record of the host and the kubelet's sysctls changed;
    the next `down` (which `up` runs first) writes the recorded values back. Needs root, like the cluster."""
    from pathlib import Path

    from ignite_tf_dev.k8s import host as local_k8s_host

    layout = local_k8s.Layout(tmp_path)
    knob = Path("/proc/sys/vm/overcommit_memory")
    original = knob.read_text().strip()
    local_k8s_host.save_host_state(layout.host_state)
    try:
        knob.write_text("1" if original != "1" else "0")  # what the kubelet does on start
        assert local_k8s.down(layout) == []
        assert knob.read_text().strip() == original
        assert not layout.host_state.exists()
    finally:
        knob.write_text(original)
