"""The Kubernetes objects of one TensorFlow cluster, as manifests (pure functions of the spec and settings).

One ConfigMap (named after the cluster, holding its spec and the pod backend's settings: the root) owns
everything else: a Secret with the Ignite connection and the user's passed variables, a headless Service giving
every task a stable DNS name (``worker-0.<service>.<namespace>.svc``, as Kubeflow's TFJob does), one pod per
task attempt and the supervisor's Deployment (``ignite_tf.cluster.k8s.deploy``). Deleting the ConfigMap
garbage-collects the rest.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from ignite_tf.cluster.commands import task_command
from ignite_tf.cluster.k8s import startfiles
from ignite_tf.cluster.k8s.settings import TF_PORT, KubernetesSettings, Placement
from ignite_tf.cluster.spec import ClusterSpec, ClusterTask, Role
from ignite_tf.contract import ENV_JOB_DIR, ENV_RUN_STORE_NO_BACKUP, ENV_RUN_STORE_PROGRESS
from ignite_tf.reader.locality import ENV_NODE_NAME
from ignite_tf.runstore.layout import RunFolder

LABEL_CLUSTER = "ignite-tf.io/cluster"
LABEL_TASK = "ignite-tf.io/task"
LABEL_ROLE = "ignite-tf.io/role"
LABEL_ATTEMPT = "ignite-tf.io/attempt"
LABEL_SUPERVISOR_OF = "ignite-tf.io/supervisor-of"
"""On the supervisor's pods (not ``LABEL_CLUSTER``, which selects the task pods)."""
ANNOTATION_CLUSTER_ATTEMPT = "ignite-tf.io/cluster-attempt"
"""The supervisor's attempt of the whole cluster a pod belongs to (a re-adopting supervisor goes on from it)."""
SPEC_KEY = "cluster.json"
SETTINGS_KEY = "kubernetes.json"
ANNOTATION_MEMORY = "ignite-tf.io/memory-estimate"
CONTAINER = "task"
HOSTNAME_LABEL = "kubernetes.io/hostname"
POD_RUN_DIR = "/tmp/ignite-tf-run"
"""A pod's own staging folder for a run whose root is an object store (no volume: the run lives in the store)."""
LOST = 137
"""The exit status of a task pod that is gone without one: deleted, evicted, its node lost."""
DEADLINE_MARGIN_S = 60.0
"""A pod's ``activeDeadlineSeconds`` beyond ``kubernetes.max_runtime`` and the grace period: the supervisor stops
it first."""


def service_name(cluster_id: str) -> str:
    """A DNS-1035 label (a Service name must start with a letter)."""
    return cluster_id if cluster_id[:1].isalpha() else f"tf-{cluster_id}"[:63].rstrip("-")


def secret_name(cluster_id: str) -> str:
    return f"{cluster_id}-env"[:253]


def pod_name(cluster_id: str, task: ClusterTask, attempt: int) -> str:
    return f"{cluster_id}-{task.name}-{attempt}"


def task_dns(cluster_id: str, namespace: str, task: ClusterTask) -> str:
    return f"{task.name}.{service_name(cluster_id)}.{namespace}.svc"


def with_pod_addresses(spec: ClusterSpec, namespace: str, settings: KubernetesSettings) -> ClusterSpec:
    """The spec with every task addressed by its DNS name (TF_CONFIG is built from these).

    Pods on the pod network all use one port (each has its own IP); on the host network the ports chosen
    for this host are kept, so tasks sharing a node do not collide.
    """
    for t in spec.tasks:
        t.host = task_dns(spec.cluster_id, namespace, t)
        if not settings.host_network:
            t.port = TF_PORT
    return spec


def labels(spec: ClusterSpec, settings: KubernetesSettings, **extra: str) -> dict[str, str]:
    return {**settings.labels, "app.kubernetes.io/managed-by": "ignite-tf", LABEL_CLUSTER: spec.cluster_id,
            **extra}


def owner_ref(owner: dict[str, Any]) -> dict[str, Any]:
    meta = owner["metadata"]
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": meta["name"], "uid": meta["uid"],
            "blockOwnerDeletion": True}


def owner_manifest(spec: ClusterSpec, settings: KubernetesSettings,
                   backend: dict[str, Any] | None = None) -> dict[str, Any]:
    """The root; ``backend`` (settings, namespace, image) is what a supervisor pod needs beside the spec."""
    data = {SPEC_KEY: json.dumps(spec.to_dict(), indent=1)}
    if backend is not None:
        data[SETTINGS_KEY] = json.dumps(backend, indent=1)
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": spec.cluster_id, "labels": labels(spec, settings)}, "data": data}


def secret_manifest(spec: ClusterSpec, settings: KubernetesSettings, env: dict[str, str],
                    owner: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": secret_name(spec.cluster_id), "labels": labels(spec, settings),
                         "ownerReferences": [owner_ref(owner)]},
            "stringData": env}


def service_manifest(spec: ClusterSpec, settings: KubernetesSettings, owner: dict[str, Any]) -> dict[str, Any]:
    ports = sorted({t.port for t in spec.tasks})
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": service_name(spec.cluster_id), "labels": labels(spec, settings),
                         "ownerReferences": [owner_ref(owner)]},
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                     "selector": {LABEL_CLUSTER: spec.cluster_id},
                     "ports": [{"name": f"tf-{p}", "port": p, "targetPort": p} for p in ports]}}


def node_affinity(node: str | None, placement: Placement) -> dict[str, Any] | None:
    if node is None or placement is Placement.NONE:
        return None
    term = {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}]}
    if placement is Placement.REQUIRED:
        return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 100, "preference": term}]}}


# A task pod's CPU request unless the user gives one. Without any, the kubelet gives the pod's cgroup the
# minimum CPU weight (cpu.shares 2 against 102 for a 100m request): on a busy node the pod then yields the CPU
# to every other pod and process: TensorFlow's import in the pod took 10.0 s without a request, 4.4 s with
# 500m, 5.1 s with 250m, beside other load (docs/development/performance-log.md#k8s-pod-cpu). Small, so that a
# cluster and its standby pods still schedule on a small node: the weight is what matters here, not a reservation.
CPU_REQUEST = "250m"


def resources(settings: KubernetesSettings, memory: str) -> dict[str, dict[str, str]]:
    """The user's resources; memory request and limit default to the estimate, the CPU request to
    ``CPU_REQUEST`` unless a CPU request or limit is given (Kubernetes takes a lone limit as the request)."""
    requests = dict(settings.resources.get("requests") or {})
    limits = dict(settings.resources.get("limits") or {})
    if "cpu" not in limits:
        requests.setdefault("cpu", CPU_REQUEST)
    requests.setdefault("memory", limits.get("memory", memory))
    limits.setdefault("memory", requests["memory"])
    return {"requests": requests, "limits": limits}


def pull_policy(image: str) -> str:
    return "Never" if image.startswith("localhost/") else "IfNotPresent"


def run_volume(spec: ClusterSpec, settings: KubernetesSettings) -> tuple[list[dict], list[dict]]:
    """The pod volumes and mounts: the user's, and for a folder as run root the run folder at its own path."""
    volumes = [{**v["volume"]} for v in settings.volumes]
    mounts = [{**v["mount"]} for v in settings.volumes]
    if not spec.run_store:  # a run folder on the launching host is shared with the pods; a run store needs nothing
        run_dir = spec.run_dir
        run = settings.run_volume or {"hostPath": {"path": run_dir, "type": "DirectoryOrCreate"}}
        volumes.insert(0, {"name": "run", **run})
        mounts.insert(0, {"name": "run", "mountPath": run_dir})
    return volumes, mounts


def pod_network(settings: KubernetesSettings) -> dict[str, Any]:
    """The network of every pod of the cluster, task or supervisor: the supervisor reaches the Ignite state store
    at the addresses the tasks reach Ignite at, which with ``host_network`` are the host's."""
    return {"hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet"} if settings.host_network else {}


def pod_command(spec: ClusterSpec, task: ClusterTask) -> list[str]:
    """``task``'s local command (``ignite_tf.cluster.commands.task_command``) with the image's ``python`` for
    this interpreter."""
    return ["python" if a == sys.executable else a for a in task_command(spec, task)]


def pod_view(spec: ClusterSpec) -> ClusterSpec:
    """The spec as a pod sees it: with an object-store run root, its paths in the pod's own staging folder
    (``POD_RUN_DIR``; the plan and the code are fetched there by the pod's first process); else ``spec``."""
    if not spec.run_store:
        return spec
    folder = RunFolder(Path(POD_RUN_DIR) / spec.cluster_id)
    job = dict(spec.job)
    if job.get("job_dir"):
        job["job_dir"] = str(folder.code)  # the job folder was shipped in code.zip
    return dataclasses.replace(spec, run_dir=str(folder.path), job=job,
                               shard_plan_path=str(folder.shard_plan) if spec.shard_plan_path else None)


def task_env(spec: ClusterSpec, task: ClusterTask, attempt: int, store_env: dict[str, str],
             no_backup: bool = False) -> dict[str, str]:
    """The variables of ``task``'s pod for cluster attempt ``attempt`` (``spec``: as the pod sees it,
    ``pod_view``): the task's own, the state store's ``store_env`` (the runtime reports its epochs there; its
    login comes from the Secret) and the job folder; with an object-store run root, progress reports go to the
    store, and ``no_backup`` says the store held no backup as the pod was made (the task then asks nothing)."""
    env = spec.task_env(task, attempt)
    env.update(store_env)
    if spec.job.get("job_dir"):
        env[ENV_JOB_DIR] = spec.job["job_dir"]
    if spec.run_store:
        env[ENV_RUN_STORE_PROGRESS] = "1"
        if no_backup:
            env[ENV_RUN_STORE_NO_BACKUP] = "1"
    return env


def active_deadline(spec: ClusterSpec, runtime_left: float | None) -> int | None:
    """A pod's ``activeDeadlineSeconds`` for ``runtime_left`` seconds of ``kubernetes.max_runtime`` (None: no
    limit, no deadline): beyond the supervisor's own stop by the grace period and ``DEADLINE_MARGIN_S``, so that
    the pod ends by itself even if no supervisor is left to stop it."""
    if runtime_left is None:
        return None
    return max(1, int(runtime_left + spec.supervision.grace_period_s + DEADLINE_MARGIN_S))


def pod_manifest(spec: ClusterSpec, task: ClusterTask, attempt: int, *, namespace: str, settings: KubernetesSettings,
                 image: str, owner: dict[str, Any], argv: list[str], cwd: str, env: dict[str, str],
                 node: str | None, memory: str, deadline: int | None = None,
                 start_files: bool = False) -> dict[str, Any]:
    """One task attempt's pod. ``restartPolicy: Never``: the supervisor, not the kubelet, decides restarts
    (whole cluster or one worker, by mode), so a failed pod stays as evidence until it is replaced.
    ``deadline``: its ``activeDeadlineSeconds`` (``active_deadline``); ``start_files``: whether it mounts the
    cluster's start files (``ignite_tf.cluster.k8s.startfiles``)."""
    volumes, mounts = run_volume(spec, settings)
    container = {
        "name": CONTAINER, "image": image,
        "imagePullPolicy": pull_policy(image),
        "command": ["python", "-m", "ignite_tf.cluster.k8s.entry", cwd, "--", *argv],
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())]
        # The pod's own Kubernetes node, against which its reader measures locality (ignite_tf.reader.locality).
        + [{"name": ENV_NODE_NAME, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "envFrom": [{"secretRef": {"name": secret_name(spec.cluster_id)}}],
        "ports": [{"name": "tf", "containerPort": task.port, **({"hostPort": task.port} if settings.host_network
                                                                 else {})}],
        "readinessProbe": {"tcpSocket": {"port": task.port}, "periodSeconds": 1, "failureThreshold": 1},
        "resources": resources(settings, memory),
        "volumeMounts": mounts,
    }
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never", "hostname": task.name, "subdomain": service_name(spec.cluster_id),
        "enableServiceLinks": False, "terminationGracePeriodSeconds": int(spec.supervision.grace_period_s),
        "containers": [container], "volumes": volumes,
    }
    pod_spec.update(pod_network(settings))
    if not settings.dns:
        pod_spec["hostAliases"] = [{"ip": "127.0.0.1", "hostnames": [task_dns(spec.cluster_id, namespace, t)
                                                                     for t in spec.tasks]}]
    if settings.service_account:
        pod_spec["serviceAccountName"] = settings.service_account
    else:  # a task never calls the API: no token to request and mount (the kubelet's round trip at each start)
        pod_spec["automountServiceAccountToken"] = False
    if settings.node_selector:
        pod_spec["nodeSelector"] = dict(settings.node_selector)
    if settings.tolerations:
        pod_spec["tolerations"] = list(settings.tolerations)
    affinity = node_affinity(node, settings.placement) if task.role is Role.WORKER else None
    if affinity:
        pod_spec["affinity"] = affinity
    meta = {"name": pod_name(spec.cluster_id, task, attempt), "namespace": namespace,
            "labels": labels(spec, settings, **{LABEL_TASK: task.name, LABEL_ROLE: task.role.value,
                                                LABEL_ATTEMPT: str(attempt)}),
            "annotations": {ANNOTATION_MEMORY: memory}, "ownerReferences": [owner_ref(owner)]}
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": pod_spec}
    if deadline is not None:
        pod_spec["activeDeadlineSeconds"] = deadline
    if start_files:
        startfiles.mount(body, spec.cluster_id)
    return body


def delete_owner(core, namespace: str, cluster_id: str) -> bool:
    """Delete the cluster's owner (and through it everything); False when it was already gone."""
    from kubernetes.client.exceptions import ApiException

    try:
        core.delete_namespaced_config_map(cluster_id, namespace, propagation_policy="Background")
        return True
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise


def leftovers(core, namespace: str, cluster_id: str, supervisor: bool = True) -> list[str]:
    """The cluster's objects still in the namespace (empty: nothing left); ``supervisor``: its supervisor pods and
    its Secret too (False: for the supervisor pod itself, which the root's deletion ends last, and which may
    not read Secrets: ``deploy.ROLE_RULES``)."""
    selector = f"{LABEL_CLUSTER}={cluster_id}"
    out = [f"pod/{p.metadata.name}" for p in core.list_namespaced_pod(namespace, label_selector=selector).items]
    if supervisor:
        out += [f"pod/{p.metadata.name}" for p in core.list_namespaced_pod(
            namespace, label_selector=f"{LABEL_SUPERVISOR_OF}={cluster_id}").items]
    out += [f"service/{s.metadata.name}"
            for s in core.list_namespaced_service(namespace, label_selector=selector).items]
    if supervisor:
        out += [f"secret/{s.metadata.name}"
                for s in core.list_namespaced_secret(namespace, label_selector=selector).items]
    out += [f"configmap/{c.metadata.name}"
            for c in core.list_namespaced_config_map(namespace, label_selector=selector).items]
    return out


# -- what a pod's status says --------------------------------------------------------------------------------
def pod_ready(pod) -> bool:
    return pod is not None and any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def pod_started(pod) -> bool:
    return any(cs.state and (cs.state.running or cs.state.terminated) for cs in pod.status.container_statuses or [])


def pod_ended(pod) -> bool:
    """Whether the pod's task process is dead: its container terminated, or the pod failed or succeeded."""
    return pod_terminated(pod) is not None or pod.status.phase in ("Failed", "Succeeded")


def pod_waiting(pod):
    """The first container's ``waiting`` state (reason, message) of a pod not yet running, or None."""
    for cs in pod.status.container_statuses or []:
        if cs.state and cs.state.waiting:
            return cs.state.waiting
    return None


def pod_terminated(pod):
    """The task container's ``terminated`` state (exit code, reason), or None while it has not ended."""
    for cs in pod.status.container_statuses or []:
        if cs.name == CONTAINER and cs.state and cs.state.terminated:
            return cs.state.terminated
    return None


def exit_code(pod, deleted_by_us: bool) -> int | None:
    """The exit status of the task in ``pod`` (``deleted_by_us``: the supervisor deleted it, so its deletion is not
    a loss); None while it runs. ``LOST`` for a pod deleted behind the supervisor's back, evicted or on a lost
    node."""
    term = pod_terminated(pod)
    if term is not None:
        return int(term.exit_code)
    if pod.metadata.deletion_timestamp and not deleted_by_us:
        return LOST
    if pod.status.phase == "Failed":  # evicted, node lost: no container status to read
        return LOST
    if pod.status.phase == "Succeeded":
        return 0
    return None


def waiting_reason(pod, task: ClusterTask) -> str:
    """Why ``task``'s ``pod`` (None: none yet) is not up: the scheduler's reason for a Pending pod, its container's
    waiting reason (an image that cannot be pulled), or that its port does not answer yet."""
    if pod is None:
        return "no pod"
    for c in pod.status.conditions or []:
        if c.type == "PodScheduled" and c.status == "False":
            return f"Pending, not scheduled: {c.reason}: {c.message}"
    waiting = pod_waiting(pod)
    if waiting is not None:
        return f"{waiting.reason}: {waiting.message or ''}".strip(": ")
    return f"{pod.status.phase}, not listening on port {task.port} yet"
