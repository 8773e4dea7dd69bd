"""KubernetesLauncher: the ``Launcher`` whose tasks are pods (``launcher: kubernetes``).

Its supervisor — the supervision loop with the pod backend (``ignite_tf.cluster.k8s.pods``) — runs as a pod of its
own in the cluster's namespace (``ignite_tf.cluster.k8s.supervisor``, deployed by ``deploy``;
``kubernetes.supervisor: process``: a detached process on this host, as the local launcher's) and keeps the
cluster's state in the same store, so ``ps``, ``attach``, ``stop``, the operator and the trigger work unchanged;
``launch`` returns once the supervisor recorded the state, and this process may end at any time after. It talks to
Kubernetes through Airflow's connection (``kubernetes_default``: a kubeconfig or in-cluster), read from its
``AIRFLOW_CONN_*`` variable without importing Airflow where it can be (``ignite_tf.cluster.k8s.client``), else
through ``KubernetesHook``; the supervisor gets that connection, resolved here, through its environment. For a
fresh cluster it also makes the first attempt's task pods, which the supervisor takes (``deploy.start``).

With an object-store run root (``s3://...``, ``ignite_tf.runstore``) the pods need no volume: the run lives in
the store, where every reader finds it after the pods are gone, and the job folder and the user's modules
reach the pods as its ``code.zip``. With a folder as run root the run folder is shared with the pods
(``kubernetes.run_volume``, default a ``hostPath`` of it: one node, or a shared mount) and a job folder is
copied into it (``<run>/job``).
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import sys
import time
from pathlib import Path

from ignite_tf.cluster.environment import pass_through
from ignite_tf.cluster.k8s import client, deploy, objects, pods, standby
from ignite_tf.cluster.k8s.settings import DEFAULT_CONN_ID, KubernetesSettings, SupervisorMode
from ignite_tf.cluster.launcher import LauncherKind, SupervisedLauncher
from ignite_tf.cluster.spec import ClusterSpec
from ignite_tf.errors import ConfigError
from ignite_tf.runstore.layout import RunFolder
from ignite_tf.state import ClusterState, LocalStateStore, StateStore, store_to_env

STATE_TIMEOUT_S = 180.0  # the pod supervisor imports Airflow's Kubernetes hook before its first record


TASK_IMAGE_GROUP = "ignite_tf.task_image"
"""Entry points naming a function that returns the default task image. The source tree's development tooling
registers one (the image it builds for the local Kubernetes); an installed wheel has none."""


def default_image() -> str:
    """The task image when ``kubernetes.image`` is not set: the one an ``ignite_tf.task_image`` entry point names.

    :raises ConfigError: no such entry point is installed (or it fails): the user must give ``kubernetes.image``.
    """
    from importlib.metadata import entry_points

    found = sorted(entry_points(group=TASK_IMAGE_GROUP), key=lambda ep: ep.name)
    how = ("write the task image with `make image` (a docker-archive file), push it to a registry the cluster "
           "pulls from (`skopeo copy docker-archive:dist/ignite-tf-task.tar docker://REGISTRY/ignite-tf-task:TAG`), "
           "and set "
           "kubernetes.image (YAML training.kubernetes.image, `ignite-tf start --image`, "
           "TFClusterOperator(kubernetes={'image': ...}))")
    if not found:
        raise ConfigError(f"kubernetes.image is not set and there is no default task image: {how}")
    if len(found) > 1:
        raise ConfigError(f"kubernetes.image is not set and {len(found)} packages offer a default task image "
                          f"({', '.join(ep.value for ep in found)}): set kubernetes.image")
    try:
        return found[0].load()()
    except Exception as exc:  # noqa: BLE001 - any failure of the offered default is the same missing setting
        raise ConfigError(f"kubernetes.image is not set and the default task image of {found[0].value} "
                          f"failed ({type(exc).__name__}: {exc}): {how}") from exc


def kube_hook(conn_id: str):
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    return KubernetesHook(conn_id=conn_id)


def connection_env(conn_id: str, environ=None) -> dict[str, str]:
    """What the supervisor needs to reach Kubernetes: the Airflow connection (as an ``AIRFLOW_CONN_*``
    variable, resolved here from wherever Airflow keeps it) and ``KUBECONFIG``."""
    environ = os.environ if environ is None else environ
    env = {k: environ[k] for k in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
           if k in environ}
    var = f"AIRFLOW_CONN_{conn_id.upper()}"
    if var in environ:
        env[var] = environ[var]
        return env
    try:
        conn = kube_hook(conn_id).get_connection(conn_id)
        if conn.extra or conn.host:
            env[var] = conn.as_json() if hasattr(conn, "as_json") else json.dumps(
                {"conn_type": conn.conn_type, "extra": conn.extra_dejson})
    except Exception:  # noqa: BLE001 - no such connection: the hook falls back to KUBECONFIG / in-cluster
        pass
    return env


class KubernetesLauncher(SupervisedLauncher):
    """Tasks as pods next to their data. Its supervisor starts pods, which need the plan's workers and hosts:
    nothing starts before the plan (``Launcher.launching``).

    :param settings: ``KubernetesSettings`` (or its dict): namespace, image, resources, placement...
    """

    state_timeout_s = STATE_TIMEOUT_S

    def __init__(self, store: StateStore, conn=None, settings: KubernetesSettings | dict | None = None,
                 on_lost=None, run_store_conn_id: str | None = None):
        super().__init__(store, conn, on_lost, run_store_conn_id)
        self.settings = KubernetesSettings.parse(settings)

    def namespace(self) -> str:
        if self.settings.namespace:
            return self.settings.namespace
        try:
            return kube_hook(self.settings.conn_id).get_namespace() or "default"
        except Exception:  # noqa: BLE001 - no connection: the default namespace
            return "default"

    def prepare(self, spec: ClusterSpec) -> None:
        """Pod addresses in the spec, the job folder in the run folder, the pod backend's settings beside."""
        image = self.image()  # before anything talks to Kubernetes
        namespace = self.namespace()
        run_dir = Path(spec.run_dir)
        if not spec.run_store:  # a run store carries the job folder in its code.zip
            _share_job_dir(spec, run_dir)
        objects.with_pod_addresses(spec, namespace, self.settings)
        spec.folder.kubernetes.write_text(json.dumps({
            "settings": self.settings.to_dict(), "namespace": namespace, "image": image}, indent=2))

    def image(self) -> str:
        """The task image: the settings' own, or the one ``make image`` built (an error saying so when none)."""
        return self.settings.image or default_image()

    @property
    def in_cluster(self) -> bool:
        return self.settings.supervisor is SupervisorMode.POD

    def launch(self, spec: ClusterSpec, timeout: float | None = None) -> ClusterState:
        """With a pod supervisor: the root, the Secret and the supervisor's Deployment; returns once the
        supervisor pod recorded the state (the tasks may still be starting)."""
        if not self.in_cluster:
            return super().launch(spec, timeout)
        self.image()  # a missing image is the first thing to say, before what else is missing
        if isinstance(self.store, LocalStateStore):
            raise ConfigError("kubernetes.supervisor: pod needs the Ignite state store (a connection: "
                              "IGNITE_TF_ADDRESSES, or the operator's conn_id), which its pod reaches; a local "
                              "state folder is this host's only: give a connection or set kubernetes.supervisor: "
                              "process")
        existing = self.store.get(spec.cluster_id)
        if existing is not None and not existing.status.final and self.is_alive(existing):
            return existing  # idempotent: never a second cluster under one id
        self.prepare(spec)
        self.save_spec(spec, to_store=False)
        # The spec in the run store is for the run's readers: the supervisor gets it from its root ConfigMap and
        # the tasks need none, so it is written while the objects and the first pods are made (0.2-0.4 s).
        uploads = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ignite-tf-spec-upload")
        put = uploads.submit(self.put_spec, spec)
        uploads.shutdown(wait=False)
        k8s = json.loads(spec.folder.kubernetes.read_text())
        # As the supervisor pod: from the connection's variable without importing Airflow where it can (Airflow's
        # import was most of the launcher's own start-up: 4 s quiet, 20 s on a busy machine), else the hook.
        core = client.core_v1(self.settings.conn_id)
        # A fresh cluster's first pods start beside the supervisor's; a resumed one's attempt is the supervisor's.
        head_start = None if existing is not None else {
            "store_env": store_to_env(self.store),
            "run_store": self.run_store(spec.run_store) if spec.run_store else None,
            "conn": self.conn if self.conn is not None else getattr(self.store, "conn", None)}
        try:
            uid = deploy.start(core.api_client, spec, self.settings, k8s["namespace"], k8s["image"],
                                   self.secret_env(spec), head_start)
        finally:
            failed = put.exception()  # waits: nothing of the launch goes on writing after it returns
        if failed is not None:  # as when it was written first: no cluster without its spec in the run store
            objects.delete_owner(core, k8s["namespace"], spec.cluster_id)
            raise failed
        return deploy.wait_recorded(self.store, core, spec, k8s["namespace"], uid,
                                        self.state_timeout_s if timeout is None else timeout)

    def secret_env(self, spec: ClusterSpec) -> dict[str, str]:
        """What the cluster's Secret gives the supervisor pod (and every task pod through ``envFrom``): the Ignite
        connection (the state store's too), the run store's credentials, the user's passed variables and the
        cluster's own key (``standby.ENV_KEY``); none of this host's paths or settings."""
        conn = self.conn if self.conn is not None else getattr(self.store, "conn", None)
        env = conn.to_env() if conn is not None else {}
        env[standby.ENV_KEY] = standby.new_key()
        env.update(store_to_env(self.store))
        if spec.run_store:
            env.update(self.run_store_env())
        env.update(pass_through(spec.pass_env, os.environ, source=f"cluster {spec.cluster_id}: env"))
        return env

    def supervisor_command(self, spec: ClusterSpec) -> list[str]:
        return [sys.executable, "-m", pods.MODULE, str(spec.folder.spec), str(spec.folder.kubernetes)]

    def supervisor_env(self, spec: ClusterSpec, environ: dict[str, str] | None = None) -> dict[str, str]:
        env = super().supervisor_env(spec, environ)
        env.update(connection_env(self.settings.conn_id, environ))
        return env


def _share_job_dir(spec: ClusterSpec, run_dir: Path) -> None:
    """A job folder outside the run folder is copied into it: the run folder is what the pods see."""
    job_dir = spec.job.get("job_dir")
    if not job_dir or Path(job_dir).resolve().is_relative_to(run_dir.resolve()):
        return
    target = RunFolder(run_dir).job
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(job_dir, target, ignore=shutil.ignore_patterns("__pycache__", ".git"))
    spec.job = {**spec.job, "job_dir": str(target)}


def release(state: ClusterState, wait: float = 60.0) -> list[str]:
    """Delete a Kubernetes cluster's objects when its supervisor cannot (it was lost); returns what is left."""
    info = state.launcher or {}
    if info.get("kind") != LauncherKind.KUBERNETES:
        return []
    core = kube_hook(info.get("conn_id") or DEFAULT_CONN_ID).core_v1_client
    objects.delete_owner(core, info["namespace"], info["owner"])
    deadline = time.monotonic() + wait
    while True:
        left = objects.leftovers(core, info["namespace"], info["owner"])
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def check_settings(settings: dict | KubernetesSettings | None) -> KubernetesSettings:
    try:
        return KubernetesSettings.parse(settings)
    except TypeError as exc:
        raise ConfigError(f"kubernetes: {exc}") from None



