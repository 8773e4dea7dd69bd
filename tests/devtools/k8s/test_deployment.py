"""The local Kubernetes in a deployment's shape (``ignite_tf_dev.k8s.addons``): cluster DNS, the object store,
Ignite's own pods, pods that land on the real node by default.

Nothing here is simulated: every pod runs on the real node (kubelet + containerd + runc, the bridge network,
kube-proxy's Service rules); CoreDNS, s3proxy and the Ignite JVMs are real servers. The kwok nodes only
exist (their taint keeps these pods off them).
"""

from __future__ import annotations

import ipaddress
import json
import uuid

import pytest
from ignite_tf_dev.k8s import addons
from ignite_tf_dev.k8s import cluster as local_k8s
from ignite_tf_dev.k8s.images import task_image_ref

from tests.support.polling import wait_for

pytestmark = pytest.mark.timeout(3600)


def _run_pod(core, ns: str, name: str, script: str, **spec) -> tuple[object, str]:
    """Run ``python -c script`` in the task image with no placement setting; return the pod and its log."""
    container = spec.pop("container", {})
    core.create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": {
        "restartPolicy": "Never", **spec,
        "containers": [{"name": "main", "image": task_image_ref(), "imagePullPolicy": "Never",
                        "command": ["python", "-c", script], **container}]}})

    def finished():
        pod = core.read_namespaced_pod(name, ns)
        return pod if pod.status.phase in ("Succeeded", "Failed") else None

    pod = wait_for(finished, 300, f"pod {name} to finish", poll=0.5)
    log = core.read_namespaced_pod_log(name, ns, _preload_content=False).data.decode()
    assert pod.status.phase == "Succeeded", log
    return pod, log


def test_pods_resolve_services_through_cluster_dns(k8s_cluster, k8s_namespace):
    """A pod with no placement setting runs on the real node (the simulated nodes are tainted) and resolves a
    Service of its namespace by its short name and kubernetes.default by its full name through CoreDNS (the
    kube-dns Service at the kubelet's clusterDNS); with its service account token it talks to the apiserver
    over TLS at kubernetes.default.svc (the certificate covers that name and 10.96.0.1)."""
    core, ns = k8s_cluster.core, k8s_namespace
    dns_pods = core.list_namespaced_pod("kube-system", label_selector="k8s-app=kube-dns").items
    assert dns_pods and all(p.status.phase == "Running" for p in dns_pods)
    assert core.read_namespaced_service("kube-dns", "kube-system").spec.cluster_ip == addons.CLUSTER_DNS_IP
    svc = core.create_namespaced_service(ns, {"metadata": {"name": "probe"}, "spec": {
        "selector": {"app": "none"}, "ports": [{"port": 80}]}})
    script = (
        "import json, socket, ssl, urllib.request\n"
        "sa = '/var/run/secrets/kubernetes.io/serviceaccount'\n"
        "ctx = ssl.create_default_context(cafile=f'{sa}/ca.crt')\n"
        "req = urllib.request.Request('https://kubernetes.default.svc/api/v1/namespaces/' "
        "+ open(f'{sa}/namespace').read()"
        " + '/services/probe', headers={'Authorization': 'Bearer ' + open(f'{sa}/token').read()})\n"
        "svc = json.load(urllib.request.urlopen(req, context=ctx, timeout=10))\n"
        "print(json.dumps({'probe': socket.gethostbyname('probe'),\n"
        "  'api': socket.gethostbyname('kubernetes.default.svc.cluster.local'),\n"
        "  'resolv': open('/etc/resolv.conf').read(), 'via_api': svc['spec']['clusterIP']}))\n")
    from kubernetes import client

    client.RbacAuthorizationV1Api(k8s_cluster.api).create_namespaced_role_binding(ns, {
        "metadata": {"name": "view"}, "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                                                  "name": "view"},
        "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": ns}]})
    pod, log = _run_pod(core, ns, "dns", script)
    out = json.loads(log.strip().splitlines()[-1])
    assert pod.spec.node_name == local_k8s.node_name()
    assert out["probe"] == out["via_api"] == svc.spec.cluster_ip
    assert out["api"] == "10.96.0.1"
    assert f"nameserver {addons.CLUSTER_DNS_IP}" in out["resolv"]
    assert f"search {ns}.svc.{addons.CLUSTER_DOMAIN}" in out["resolv"]


def test_ignite_pods_form_one_cluster_reachable_at_their_pod_addresses(k8s_cluster, k8s_namespace, k8s_ignite):
    """docker/k8s/ignite.yaml (local overlay) runs 2 real Ignite pods that find each other with the Kubernetes
    IP finder; this host reaches each at its pod address with pyignite, their consistent ids are the pod
    names, and a pod reaches them by their DNS names under the headless Service. `make k8s-up`'s
    IGNITE_TF_ADDRESSES are those addresses."""
    from pyignite import Client

    pods = k8s_cluster.core.list_namespaced_pod(addons.IGNITE_NAMESPACE, label_selector="app=ignite").items
    by_ip = {p.status.pod_ip: p.metadata.name for p in pods}
    assert sorted(by_ip.values()) == ["ignite-0", "ignite-1"]
    assert {p.spec.node_name for p in pods} == {local_k8s.node_name()}
    assert sorted(a.split(":")[0] for a in k8s_ignite) == sorted(by_ip)
    assert all(ipaddress.ip_address(ip) in ipaddress.ip_network(local_k8s.POD_CIDR) for ip in by_ip)
    assert addons.exports(k8s_cluster.layout)["IGNITE_TF_ADDRESSES"] == ",".join(k8s_ignite)

    for address in k8s_ignite:  # each pod on its own: the thin-client port is open on the pod address
        host, port = address.split(":")
        client = Client(timeout=20)
        client.connect(host, int(port))
        try:
            with client.sql("SELECT CONSISTENT_ID FROM SYS.NODES WHERE IS_CLIENT = FALSE") as cur:
                assert sorted(r[0] for r in cur) == ["ignite-0", "ignite-1"]
        finally:
            client.close()
    cache, token = f"k8s_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    client = Client(timeout=20)
    client.connect([(a.split(":")[0], int(a.split(":")[1])) for a in k8s_ignite])
    try:
        client.get_or_create_cache(cache).put(1, token)
        names = [f"ignite-{i}.ignite-discovery.{addons.IGNITE_NAMESPACE}" for i in range(2)]
        script = ("import json\nfrom pyignite import Client\nc = Client(timeout=20)\n"
                  f"c.connect([(n, 10800) for n in {names}])\n"
                  f"print(json.dumps(c.get_cache('{cache}').get(1)))\n")
        _, log = _run_pod(k8s_cluster.core, k8s_namespace, "reader", script)
        assert json.loads(log.strip().splitlines()[-1]) == token
    finally:
        client.get_cache(cache).destroy()
        client.close()


def test_a_pod_reaches_the_object_store(k8s_cluster, k8s_namespace):
    """The object store `up` started (s3proxy, bucket ignite-tf) at the node's address: a pod given its
    endpoint and credentials through a Secret (envFrom, never in the pod spec) writes an object with s3fs,
    and this host reads it back at the same endpoint."""
    import fsspec

    store = addons.object_store(k8s_cluster.layout)
    assert store is not None
    env = addons.exports(k8s_cluster.layout)
    assert env["IGNITE_TF_RUN_ROOT"] == addons.RUN_ROOT and env["AWS_ENDPOINT_URL"] == store.endpoint
    k8s_cluster.core.create_namespaced_secret(ns := k8s_namespace, {"metadata": {"name": "store"},
                                                                    "stringData": store.env()})
    key, token = f"{addons.BUCKET}/tests/{ns}/hello.txt", uuid.uuid4().hex
    script = ("import fsspec\n"
              f"with fsspec.open('s3://{key}', 'w') as f: f.write('{token}')\nprint('written')\n")
    _run_pod(k8s_cluster.core, ns, "writer", script, container={"envFrom": [{"secretRef": {"name": "store"}}]})
    fs = fsspec.filesystem("s3", **store.storage_options())
    try:
        assert fs.cat(key).decode() == token
    finally:
        fs.rm(f"{addons.BUCKET}/tests/{ns}", recursive=True)
