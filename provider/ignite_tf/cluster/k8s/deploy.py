"""The pod supervisor's launch, from the launcher's side (``kubernetes.supervisor: pod``, the default).

The launcher (``KubernetesLauncher.launch``) calls ``start``: the supervisor's identity (``rbac_manifests``,
made when missing), the cluster's root (the owner ConfigMap, holding the spec and the pod backend's settings),
its Secret (the Ignite login, the state store, the run store's credentials, the user's passed variables) and a
Deployment of one supervisor pod (``deployment_manifest``), whose process is ``ignite_tf.cluster.k8s.supervisor``;
for a fresh cluster also the first attempt's task pods (``make_first_pods``: the head start), which that
supervisor takes as its own. Then ``wait_recorded`` waits until the supervisor records the cluster's state, and
says why its pod is not up when it does not.
"""

from __future__ import annotations

import concurrent.futures
import sys
import time
from typing import Any

from ignite_tf.cluster.k8s import objects, placement, supervisor
from ignite_tf.cluster.k8s.settings import KubernetesSettings, Placement
from ignite_tf.cluster.spec import ClusterSpec
from ignite_tf.errors import ConfigError, IgniteTFError
from ignite_tf.state import ClusterState, StateStore

SERVICE_ACCOUNT = "ignite-tf-supervisor"
RBAC_FILE = "docker/k8s/supervisor-rbac.yaml"
# Namespaced only: the nodes next to the Ignite nodes (placement) are found by the launcher, which may read them.
ROLE_RULES = [
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["create", "get", "list", "watch", "delete", "patch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get"]},
    {"apiGroups": [""], "resources": ["services"], "verbs": ["create", "get", "list", "delete"]},
    # The root ConfigMap: read at start (its uid), deleted at the end; the pods' start files (startfiles). No
    # Secret: the pods take the cluster's by reference, and the root's deletion collects it with the rest.
    {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create", "get", "list", "delete"]},
]


def rbac_manifests(namespace: str) -> list[dict[str, Any]]:
    """The supervisor's ServiceAccount, Role and RoleBinding in ``namespace`` (the objects of
    ``docker/k8s/supervisor-rbac.yaml`` for ``namespace``): nothing cluster-wide, so they go with the namespace."""
    subject = [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}]
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": SERVICE_ACCOUNT},
         "rules": ROLE_RULES},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": SERVICE_ACCOUNT},
         "subjects": subject,
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SERVICE_ACCOUNT}},
    ]


def ensure_rbac(api_client, namespace: str) -> None:
    """Create what of ``rbac_manifests`` is missing; a launcher without the right to must have them applied.

    :raises ConfigError: the launcher may not create them, and they are not there.
    """
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    create = {"ServiceAccount": lambda b: core.create_namespaced_service_account(namespace, b),
              "Role": lambda b: rbac.create_namespaced_role(namespace, b),
              "RoleBinding": lambda b: rbac.create_namespaced_role_binding(namespace, b)}
    for body in rbac_manifests(namespace):
        try:
            create[body["kind"]](body)
        except ApiException as exc:
            if exc.status == 409:  # there already (made by us before, or by the team's admin)
                if body["kind"] == "Role":
                    _update_role(rbac, namespace, body)
                continue
            if exc.status == 404:  # the namespace: a ServiceAccount is its first object we make
                raise ConfigError(
                    f"Kubernetes namespace {namespace!r} does not exist: create it (`kubectl create namespace "
                    f"{namespace}`) or set kubernetes.namespace to an existing one") from None
            if exc.status == 403:
                raise ConfigError(
                    f"the Kubernetes launcher may not create the supervisor's {body['kind']} "
                    f"{body['metadata']['name']} in namespace {namespace}: have an admin apply {RBAC_FILE} "
                    f"(`kubectl apply -n {namespace} -f {RBAC_FILE}`), or set kubernetes.supervisor: "
                    f"process") from None
            raise


def _update_role(rbac, namespace: str, body: dict) -> None:
    """Give a Role made by an earlier version the rules of this one (a supervisor missing a right fails at start);
    one the launcher may not update is the team admin's, who applies ``RBAC_FILE`` of this version."""
    from kubernetes.client.exceptions import ApiException

    try:
        rbac.patch_namespaced_role(body["metadata"]["name"], namespace, {"rules": body["rules"]})
    except ApiException as exc:
        if exc.status != 403:
            raise


def supervisor_name(cluster_id: str) -> str:
    return f"{objects.service_name(cluster_id)[:52]}-supervisor"


def deployment_manifest(spec: ClusterSpec, settings: KubernetesSettings, image: str,
                        owner: dict[str, Any]) -> dict[str, Any]:
    """One supervisor pod, replaced by Kubernetes whenever it goes; owned by the root, like every other object."""
    marks = {**objects.labels(spec, settings), objects.LABEL_SUPERVISOR_OF: spec.cluster_id}
    marks.pop(objects.LABEL_CLUSTER)  # the cluster's label selects its task pods (the Service, the backend)
    volumes, mounts = objects.run_volume(spec, settings)
    container = {
        "name": supervisor.CONTAINER, "image": image, "imagePullPolicy": objects.pull_policy(image),
        "command": ["python", "-m", supervisor.MODULE, supervisor.CONFIG_DIR],
        "env": [{"name": supervisor.ENV_POD_NAME, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "PYTHONUNBUFFERED", "value": "1"}],
        "envFrom": [{"secretRef": {"name": objects.secret_name(spec.cluster_id)}}],
        "volumeMounts": [{"name": "cluster", "mountPath": supervisor.CONFIG_DIR, "readOnly": True}, *mounts],
        "resources": {"requests": {"cpu": "50m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
    }
    template = {
        "metadata": {"labels": marks},
        "spec": {
            "serviceAccountName": SERVICE_ACCOUNT, "restartPolicy": "Always", "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 30, "containers": [container],
            "volumes": [{"name": "cluster", "configMap": {"name": spec.cluster_id}}, *volumes],
            "tolerations": [{"key": f"node.kubernetes.io/{t}", "operator": "Exists", "effect": "NoExecute",
                             "tolerationSeconds": supervisor.NODE_GONE_S} for t in ("not-ready", "unreachable")],
            **objects.pod_network(settings),
        },
    }
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": supervisor_name(spec.cluster_id), "labels": marks,
                         "ownerReferences": [objects.owner_ref(owner)]},
            # Recreate: a new supervisor pod is made once the old one is gone (and its main() waits for that too).
            "spec": {"replicas": 1, "strategy": {"type": "Recreate"},
                     "selector": {"matchLabels": {objects.LABEL_SUPERVISOR_OF: spec.cluster_id}},
                     "template": template}}


def ignite_hosts(core, spec: ClusterSpec, settings: KubernetesSettings, namespace: str) -> dict[str, str] | None:
    """Which Kubernetes node holds each Ignite node of the shard plan (``placement.ignite_node_hosts``), found here
    with the launcher's right to read nodes; None when placement needs none (no plan, or placement ``none``
    without ``ignite_selector``).

    :raises IgniteTFError: they cannot be listed and the placement needs them.
    """
    if not spec.shard_plan_path or (settings.placement is Placement.NONE and not settings.ignite_selector):
        return None
    from ignite_tf.plan.shards import ShardPlan

    plan = ShardPlan.load(spec.shard_plan_path)
    try:
        return placement.ignite_node_hosts(core, list(plan.partition_map.nodes.values()), settings, namespace)
    except Exception as exc:  # noqa: BLE001 - with placement none the map only serves the measurement
        if settings.placement is Placement.NONE:
            return {}
        raise IgniteTFError(f"placement {settings.placement.value}: the Kubernetes nodes of the Ignite nodes "
                            f"could not be found ({str(exc)[:300]}); give the launcher the right to read nodes "
                            f"(docker/k8s/launcher-rbac.yaml), or set kubernetes.placement: none") from exc


def start(api_client, spec: ClusterSpec, settings: KubernetesSettings, namespace: str, image: str,
          secret_env: dict[str, str], head_start: dict[str, Any] | None = None) -> str:
    """Create the root, the Secret and the supervisor's Deployment (replacing a root left under this id);
    returns the root's uid, which the supervisor records in the state (``launcher.owner_uid``).

    ``head_start`` (a fresh cluster: ``store_env``, the state store's variables, ``run_store``, the launcher's
    ``RunStore`` or None, ``conn``, the Ignite connection the Secret gives the pods): the first attempt's pods
    are made here too, right after the Deployment (``make_first_pods``), so that they start while the
    supervisor's pod does, which takes them as its own (or makes them, should this fail)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    core = client.CoreV1Api(api_client)
    # In threads: the head start's questions (a backup? the estimate) while the root, the Secret and the
    # Deployment are made; the RBAC objects beside the Ignite pods' lookup, before anything of the cluster exists.
    first = None if head_start is None else first_pods_backend(core, spec, settings, namespace, image, **head_start)
    pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ignite-tf-rbac")
    rbac = pool.submit(ensure_rbac, api_client, namespace)
    pool.shutdown(wait=False)
    try:
        hosts = ignite_hosts(core, spec, settings, namespace)
    finally:
        rbac.result()  # waits (and raises): nothing of the launch goes on after it returns or fails
    body = objects.owner_manifest(spec, settings, {"settings": settings.to_dict(), "namespace": namespace,
                                                   "image": image, "ignite_nodes": hosts})
    for _ in range(2):
        try:
            made = core.create_namespaced_config_map(namespace, body)
            break
        except ApiException as exc:
            if exc.status != 409:
                raise
        objects.delete_owner(core, namespace, spec.cluster_id)  # an earlier cluster's, under this id
        supervisor.wait_until(lambda: not objects.leftovers(core, namespace, spec.cluster_id), 120,
              f"the objects of an earlier cluster {spec.cluster_id} to be deleted")
    else:
        raise IgniteTFError(f"could not create ConfigMap {spec.cluster_id} in namespace {namespace}")
    owner = {"metadata": {"name": made.metadata.name, "uid": made.metadata.uid}}
    core.create_namespaced_secret(namespace, objects.secret_manifest(spec, settings, secret_env, owner))
    client.AppsV1Api(api_client).create_namespaced_deployment(
        namespace, deployment_manifest(spec, settings, image, owner))
    if first is not None:
        make_first_pods(first, owner["metadata"], hosts)
    return made.metadata.uid


def first_pods_backend(core, spec: ClusterSpec, settings: KubernetesSettings, namespace: str, image: str,
                       store_env: dict[str, str], run_store=None, conn=None):
    """The pod backend of the launcher's head start, already asking what its pods need (``look_ahead``)."""
    from ignite_tf.cluster.k8s.pods import PodBackend

    backend = PodBackend(spec, settings, namespace, image, core=core, store_env=store_env, run_store=run_store,
                         ignite_conn=conn)
    backend.look_ahead()
    return backend


def make_first_pods(backend, owner: dict[str, str], hosts: dict[str, str] | None) -> list[str]:
    """The launcher's head start (see ``start``) by ``backend`` (``first_pods_backend``) under the root ``owner``:
    the pods made, none when it failed (the supervisor makes them, saying why in the log if it fails too)."""
    backend.under_root(owner, hosts)
    spec = backend.spec
    try:
        return backend.make_first_attempt()
    except Exception as exc:  # noqa: BLE001 - only a head start: the supervisor makes what is missing
        print(f"[ignite-tf] cluster {spec.cluster_id}: the launcher could not make the first pods "
              f"({str(exc)[:200]}); its supervisor makes them", file=sys.stderr)
        return []


def wait_recorded(store: StateStore, core, spec: ClusterSpec, namespace: str, owner_uid: str,
                  timeout: float) -> ClusterState:
    """The state the supervisor pod recorded for the root ``owner_uid``; on timeout, why its pod is not up."""
    deadline = time.monotonic() + timeout
    next_look = time.monotonic() + POD_LOOK_S
    selector = f"{objects.LABEL_SUPERVISOR_OF}={spec.cluster_id}"
    while time.monotonic() < deadline:
        state = store.get(spec.cluster_id)
        if state is not None and (state.launcher or {}).get("owner_uid") == owner_uid:
            return state
        if time.monotonic() >= next_look:  # an image the node cannot get never starts: say so now, not at the end
            next_look = time.monotonic() + POD_LOOK_S
            stuck = [p for p in core.list_namespaced_pod(namespace, label_selector=selector).items
                     if getattr(objects.pod_waiting(p), "reason", None) in IMAGE_ERRORS]
            if stuck:
                objects.delete_owner(core, namespace, spec.cluster_id)
                raise ConfigError(
                    f"the supervisor pod of cluster {spec.cluster_id} cannot start: {_pod_status(stuck[0])}. The "
                    f"image ({stuck[0].spec.containers[0].image}) must be one the nodes can pull: push it to a "
                    f"registry and set kubernetes.image (or, on the local Kubernetes, `make image` imports it)")
        time.sleep(0.2)
    pods = core.list_namespaced_pod(namespace, label_selector=selector)
    why = "; ".join(_pod_status(p) for p in pods.items) or "no supervisor pod (see the Deployment's events)"
    objects.delete_owner(core, namespace, spec.cluster_id)
    raise IgniteTFError(f"the supervisor pod of cluster {spec.cluster_id} did not record its state in "
                        f"{timeout:.0f}s: {why}")


POD_LOOK_S = 2.0
IMAGE_ERRORS = frozenset({"ErrImagePull", "ImagePullBackOff", "ErrImageNeverPull", "InvalidImageName"})
"""A container's waiting reasons that no wait mends: the node cannot get the image."""


def _pod_status(pod) -> str:
    for cs in pod.status.container_statuses or []:
        if cs.state and cs.state.waiting:
            return f"pod {pod.metadata.name}: {cs.state.waiting.reason} {cs.state.waiting.message or ''}".strip()
        if cs.state and cs.state.terminated:
            return f"pod {pod.metadata.name}: exited {cs.state.terminated.exit_code} ({cs.state.terminated.reason})"
    return f"pod {pod.metadata.name}: {pod.status.phase}"
