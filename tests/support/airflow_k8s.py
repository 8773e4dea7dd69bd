"""Airflow's KubernetesExecutor on the local Kubernetes, for tests: the real services on this host (API server,
scheduler with KubernetesExecutor, DAG processor, triggerer), their task workers as pods of the task image.

What the worker pods get, from ``docker/k8s/airflow-worker-pod.yaml`` as a user fills it in:
* the task image (imported into the real node, never pulled), running as the launcher's service account
  (``docker/k8s/launcher-rbac.yaml`` applied in the test's namespace, its node-reading binding made for it);
* the execution API at the address this host has on the pods' network (the real node's address), where the
  API server listens on every address;
* the connections (Ignite, with its password) and the object store's credentials from a Secret;
* a ``hostPath`` of the test's folder at its own path, a shortcut of this one-node dev cluster: the DAG folder,
  the task logs (the API server reads them where the pods wrote them) and the model registry. A deployment
  uses a DAG bundle, remote logging and a registry on object storage instead.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import yaml
from ignite_tf_dev.k8s import addons as local_k8s_addons
from ignite_tf_dev.k8s import cluster as local_k8s
from ignite_tf_dev.k8s import images

from tests.support.airflow_services import REPO, AirflowServices

WORKER_POD = REPO / "docker" / "k8s" / "airflow-worker-pod.yaml"
LAUNCHER_RBAC = REPO / "docker" / "k8s" / "launcher-rbac.yaml"
CONNECTIONS_SECRET = "airflow-worker-connections"  # as the worker pod template names it


def apply_launcher_rbac(layout, namespace: str) -> str:
    """launcher-rbac.yaml in ``namespace``, its cluster-wide binding named for it; returns that binding's name
    (cluster-scoped: the caller deletes it)."""
    docs = list(yaml.safe_load_all(LAUNCHER_RBAC.read_text()))
    binding = f"ignite-tf-launcher-nodes-{namespace}"
    for doc in docs:
        if doc["kind"] == "ClusterRoleBinding":
            doc["metadata"]["name"] = binding
            for subject in doc["subjects"]:
                subject["namespace"] = namespace
    local_k8s_addons.kubectl(layout, "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump_all(docs))
    return binding


def create_connections_secret(core, namespace: str, values: dict[str, str]) -> None:
    data = {k: base64.b64encode(v.encode()).decode() for k, v in values.items()}
    core.create_namespaced_secret(namespace, {"metadata": {"name": CONNECTIONS_SECRET}, "data": data})


def worker_pod_template(dest: Path, *, execution_api: str, shared: Path, env: dict[str, str]) -> Path:
    """The shipped worker pod template with this cluster's image, execution API, the ``shared`` folder (hostPath
    at its own path) and ``env`` (no secrets: those come from the Secret) filled in; written to ``dest``."""
    pod = yaml.safe_load(WORKER_POD.read_text())
    (container,) = pod["spec"]["containers"]
    container["image"] = images.task_image_ref()
    container["imagePullPolicy"] = "Never"
    for item in container["env"]:
        if item["name"] == "AIRFLOW__CORE__EXECUTION_API_SERVER_URL":
            item["value"] = execution_api
    container["env"] += [{"name": k, "value": v} for k, v in env.items()]
    container["volumeMounts"] = [{"name": "shared", "mountPath": str(shared)}]
    pod["spec"]["volumes"] = [{"name": "shared", "hostPath": {"path": str(shared), "type": "Directory"}}]
    pod["spec"]["nodeSelector"] = {local_k8s.NODE_KIND_LABEL: "real"}
    dest.write_text(yaml.safe_dump(pod, sort_keys=False))
    return dest


def kubernetes_executor_services(root: Path, namespace: str, kubeconfig: str, host_env: dict[str, str],
                                 pod_env: dict[str, str]) -> AirflowServices:
    """Services (not started) on ``root/dags`` whose executor is KubernetesExecutor in ``namespace``: the API
    server on every address, its execution API at the real node's address for the pods and this host alike."""
    svc = AirflowServices(root / "home", root / "dags", host_env)
    execution_api = f"http://{local_k8s.node_ip()}:{svc.api_port}/execution/"
    logs = root / "home" / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    template = worker_pod_template(root / "worker-pod.yaml", execution_api=execution_api, shared=root, env={
        "AIRFLOW__CORE__DAGS_FOLDER": str(root / "dags"), "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(logs),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30", **pod_env})
    svc.env.update({
        "AIRFLOW__CORE__EXECUTOR": "KubernetesExecutor",
        "AIRFLOW__API__HOST": "0.0.0.0",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": execution_api,
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(logs),
        "AIRFLOW__KUBERNETES_EXECUTOR__NAMESPACE": namespace,
        "AIRFLOW__KUBERNETES_EXECUTOR__POD_TEMPLATE_FILE": str(template),
        "AIRFLOW__KUBERNETES_EXECUTOR__IN_CLUSTER": "False",
        "AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE": kubeconfig,
        "AIRFLOW__KUBERNETES_EXECUTOR__WORKER_PODS_CREATION_BATCH_SIZE": "4",
        "AIRFLOW__KUBERNETES_EXECUTOR__DELETE_WORKER_PODS": "True",
        "AIRFLOW__KUBERNETES_EXECUTOR__DELETE_WORKER_PODS_ON_FAILURE": "False",
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": kubeconfig}}),
    })
    return svc
