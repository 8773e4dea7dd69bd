"""What makes the local Kubernetes look like a deployment: cluster DNS, an object store and Ignite in pods.

* cluster DNS: CoreDNS as the DNS add-on (``k8s/addons/coredns.yaml``: Deployment ``k8s-app=kube-dns`` in
  kube-system, Service ``kube-dns`` at :data:`CLUSTER_DNS_IP`, which the kubelet hands to pods);
* the object store: s3proxy (:mod:`ignite_tf_dev.objstore`) on all of this host's addresses, advertised at the
  node's address so that pods and this host use the same endpoint; bucket :data:`BUCKET`;
* Ignite: ``docker/k8s/ignite.yaml`` as it is for a real cluster, with a local overlay
  (:func:`local_ignite_manifest`: the locally made image, 2 replicas on the one real node, a 512m heap) in
  namespace :data:`IGNITE_NAMESPACE`. Its pods are reached at their pod addresses (the bridge routes them).

:func:`exports` gives the variables a shell needs to use all of it (``make k8s-up`` prints them).
"""

from __future__ import annotations

import subprocess
import time
from string import Template

import yaml

from ignite_tf.errors import IgniteTFError
from ignite_tf_dev import SOURCE_TREE, objstore
from ignite_tf_dev.k8s import images
from ignite_tf_dev.k8s.layout import CONF_DIR, Layout

CLUSTER_DNS_IP = "10.96.0.10"  # in cluster.SERVICE_CIDR; the kubelet's clusterDNS
CLUSTER_DOMAIN = "cluster.local"
BUCKET = "ignite-tf"
RUN_ROOT = f"s3://{BUCKET}/runs"
IGNITE_MANIFEST = SOURCE_TREE / "docker" / "k8s" / "ignite.yaml"
IGNITE_NAMESPACE = "ignite"
IGNITE_SELECTOR = "app=ignite"  # as ignite.yaml labels its pods
IGNITE_REPLICAS = 2
IGNITE_HEAP = "512m"
THIN_CLIENT_PORT = 10800


def kubectl(layout: Layout, *args: str, stdin: str | None = None, timeout: float = 60) -> str:
    proc = subprocess.run([str(layout.bin / "kubectl"), f"--kubeconfig={layout.kubeconfig}", *args], input=stdin,
                          capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise IgniteTFError(f"kubectl {' '.join(args)} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    return proc.stdout


def _wait(check, timeout: float, what: str, explain) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise IgniteTFError(f"{what} not reached in {timeout:.0f}s:\n{explain()}")
        time.sleep(0.5)


def _ready_pods(layout: Layout, namespace: str, selector: str) -> list[dict]:
    pods = yaml.safe_load(kubectl(layout, "get", "pods", "-n", namespace, "-l", selector, "-o", "json"))["items"]
    return [p for p in pods if p["metadata"].get("deletionTimestamp") is None and any(
        c["type"] == "Ready" and c["status"] == "True" for c in p.get("status", {}).get("conditions", []))]


def _describe(layout: Layout, namespace: str, selector: str) -> str:
    try:
        return kubectl(layout, "describe", "pods", "-n", namespace, "-l", selector)[-3000:]
    except IgniteTFError as exc:
        return str(exc)


# -- cluster DNS ---------------------------------------------------------------------------------------
def start_dns(layout: Layout, timeout: float = 120) -> None:
    """Apply the CoreDNS add-on and wait until its pod is Ready (idempotent)."""
    text = Template((CONF_DIR / "addons" / "coredns.yaml").read_text()).substitute(
        image=images.coredns_image_ref(), dns_ip=CLUSTER_DNS_IP, domain=CLUSTER_DOMAIN)
    kubectl(layout, "apply", "-f", "-", stdin=text)
    _wait(lambda: _ready_pods(layout, "kube-system", "k8s-app=kube-dns"), timeout, "a Ready CoreDNS pod",
          lambda: _describe(layout, "kube-system", "k8s-app=kube-dns"))


# -- object store --------------------------------------------------------------------------------------
def start_object_store(layout: Layout, node_ip: str) -> objstore.ObjectStore:
    """s3proxy on 0.0.0.0, advertised at the node's address (pods reach it there), with bucket ``ignite-tf``."""
    return objstore.start(layout.objstore, host="0.0.0.0", advertise=node_ip, buckets=[BUCKET])


def object_store(layout: Layout) -> objstore.ObjectStore | None:
    return objstore.running(layout.objstore)


def stop_object_store(layout: Layout) -> bool:
    return objstore.stop(layout.objstore, wipe=True)


# -- Ignite --------------------------------------------------------------------------------------------
def local_ignite_manifest(replicas: int = IGNITE_REPLICAS, heap: str = IGNITE_HEAP) -> str:
    """``docker/k8s/ignite.yaml`` for this one-real-node cluster: the local image (never pulled), every
    replica on the real node (no one-per-node anti-affinity), a small heap and matching requests."""
    docs = list(yaml.safe_load_all(IGNITE_MANIFEST.read_text()))
    for doc in docs:
        if doc["kind"] != "StatefulSet":
            continue
        doc["spec"]["replicas"] = replicas
        pod = doc["spec"]["template"]["spec"]
        pod.pop("affinity", None)
        (container,) = pod["containers"]
        container["image"] = images.ignite_image_ref()
        container["imagePullPolicy"] = "Never"
        for env in container["env"]:
            if env["name"] == "JVM_OPTS":
                env["value"] = f"-Xms{heap} -Xmx{heap}"
        container["resources"] = {"requests": {"memory": "1Gi", "cpu": "100m"}, "limits": {"memory": "1536Mi"}}
    return yaml.safe_dump_all(docs, sort_keys=False)


def deploy_ignite(layout: Layout, namespace: str = IGNITE_NAMESPACE, timeout: float = 240) -> list[str]:
    """Apply the local overlay of ignite.yaml in ``namespace`` and wait until every replica is Ready;
    returns the thin-client addresses (``POD_IP:10800``). Idempotent."""
    if f"namespace/{namespace}" not in kubectl(layout, "get", "namespaces", "-o", "name").split():
        kubectl(layout, "create", "namespace", namespace)
    kubectl(layout, "apply", "-n", namespace, "-f", "-", stdin=local_ignite_manifest())
    deadline = time.monotonic() + timeout
    _wait(lambda: len(_ready_pods(layout, namespace, IGNITE_SELECTOR)) >= IGNITE_REPLICAS, timeout,
          f"{IGNITE_REPLICAS} Ready Ignite pods in {namespace}", lambda: _describe(layout, namespace, IGNITE_SELECTOR))
    addresses = ignite_addresses(layout, namespace)
    # A pod is Ready once its thin-client port is open, which can be before its node has joined the others
    # and its SQL schema SYS exists: wait until every node answers that it sees them all.
    last: list[str] = []

    def formed() -> bool:
        last[:] = [_server_count(a) for a in addresses]
        return last == [str(IGNITE_REPLICAS)] * len(addresses)

    _wait(formed, max(deadline - time.monotonic(), 30), f"the Ignite pods {addresses} to form one cluster",
          lambda: f"servers seen by each: {last}")
    return addresses


def _server_count(address: str) -> str:
    """How many server nodes the Ignite node at ``address`` sees (or the error)."""
    from pyignite import Client

    host, port = address.rsplit(":", 1)
    client = Client(timeout=5)
    try:
        client.connect(host, int(port))
        with client.sql("SELECT COUNT(*) FROM SYS.NODES WHERE IS_CLIENT = FALSE") as cur:
            return str(next(iter(cur))[0])
    except Exception as exc:  # noqa: BLE001 - not ready yet; shown if it never is
        return f"{type(exc).__name__}: {exc}"[:200]
    finally:
        client.close()


def ignite_addresses(layout: Layout, namespace: str = IGNITE_NAMESPACE) -> list[str]:
    """The Ready Ignite pods' thin-client addresses, in pod-name order."""
    pods = sorted(_ready_pods(layout, namespace, IGNITE_SELECTOR), key=lambda p: p["metadata"]["name"])
    return [f"{p['status']['podIP']}:{THIN_CLIENT_PORT}" for p in pods]


def exports(layout: Layout, namespace: str = IGNITE_NAMESPACE) -> dict[str, str]:
    """What a shell sets to use this cluster as a deployment: the kubeconfig, the Ignite pods, the run root on
    the object store and the store's endpoint and credentials (the variables boto3 and s3fs read)."""
    out = {"KUBECONFIG": str(layout.kubeconfig)}
    addresses = ignite_addresses(layout, namespace)
    if addresses:
        out["IGNITE_TF_ADDRESSES"] = ",".join(addresses)
    store = object_store(layout)
    if store is not None:
        out["IGNITE_TF_RUN_ROOT"] = RUN_ROOT
        out.update(store.env())
    return out
