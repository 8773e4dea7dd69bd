"""The pod backend's cluster objects, all but its task pods: made as the cluster is set up, deleted at its end.

Before the first pod, a pod backend (``ignite_tf.cluster.k8s.pods``) makes the cluster's root (the owner
ConfigMap) and its Secret — unless it runs in a supervisor pod, whose launcher made them — and the headless
Service, and the start files (``ignite_tf.cluster.k8s.startfiles``) for an object-store run root. Meanwhile it
asks, in threads, what the first pods need to know from elsewhere: whether the run store holds a backup, and the
memory estimate (``ignite_tf.cluster.k8s.memory``, which sets the pods' limits: ``ignite_tf.cluster.k8s.oom``);
with a shard plan it finds the Kubernetes nodes of the Ignite nodes (``ignite_tf.cluster.k8s.placement``). At the
end it deletes the root, which garbage-collects everything, and waits until nothing of the cluster is left.
"""

from __future__ import annotations

import concurrent.futures
import os
import time
from functools import cached_property
from typing import Any

from ignite_tf.cluster.k8s import client, objects, standby, startfiles
from ignite_tf.cluster.k8s.client import api_exception
from ignite_tf.cluster.k8s.memory import estimate
from ignite_tf.cluster.k8s.oom import MemoryLimits
from ignite_tf.cluster.k8s.placement import WorkerPlacement
from ignite_tf.cluster.k8s.podlogs import PodLogs
from ignite_tf.cluster.k8s.settings import KubernetesSettings
from ignite_tf.cluster.launcher import LauncherKind
from ignite_tf.cluster.spec import ClusterSpec
from ignite_tf.cluster.supervision.backend import Backend, SetupError
from ignite_tf.runstore import LAYOUT, RunStore
from ignite_tf.runstore.credentials import environment_credentials

GONE_TIMEOUT_S = 60.0


class ClusterObjects(Backend):
    """A pod backend's set-up and clean-up (``PodBackend`` adds its task pods): in ``namespace``, from ``image``,
    with ``settings``; ``core``: a CoreV1Api (default the connection ``settings.conn_id``, see
    ``ignite_tf.cluster.k8s.client``); ``owner``: the root the launcher made (``{"name", "uid"}``, a pod
    supervisor's), ``ignite_hosts``: the Kubernetes node of each Ignite node as the launcher found them;
    ``store_env`` (the state store's variables for the pods), ``run_store`` and ``ignite_conn`` default to this
    process's own."""

    def __init__(self, spec: ClusterSpec, settings: KubernetesSettings, namespace: str, image: str, core=None,
                 owner: dict[str, str] | None = None, ignite_hosts: dict[str, str] | None = None,
                 store_env: dict[str, str] | None = None, run_store: RunStore | None = None, ignite_conn=None):
        super().__init__(spec)
        # A pod supervisor is given the root the launcher made ({"name", "uid"}); a detached one makes it.
        self.in_pod = owner is not None
        self.survives_supervisor = self.in_pod
        self.settings, self.namespace, self.image = settings, namespace, image
        self.owner: dict[str, Any] | None = owner
        self.logs = PodLogs(namespace, self._heartbeat)  # a pod supervisor records ``logs.followed`` in the state
        self.start_files = False  # the plan and code in a ConfigMap the pods mount (startfiles)
        self.backup_found: dict[tuple[int, int], bool] = {}  # (attempt, restarts) -> a backup in the store then
        self.backup_check: concurrent.futures.Future | None = None
        self.estimate_ahead: concurrent.futures.Future | None = None  # the memory estimate (``look_ahead``)
        self.memory = MemoryLimits(settings)  # the task pods' memory request and limit
        self.placement = WorkerPlacement(settings, ignite_hosts)  # where the workers are sent, and went
        self.cleaned = False
        # The state store's variables every pod gets; None: this process's own (a supervisor's, from the Secret).
        self.store_env = store_env
        self.ignite_conn = ignite_conn  # for the memory estimate's row width; None: this process's IGNITE_TF_*
        if core is not None:
            self.__dict__["core"] = core
        if run_store is not None:  # the launcher's, for its head start (``PodBackend.make_first_attempt``)
            self.__dict__["run_store"] = run_store

    @cached_property
    def core(self):
        return client.core_v1(self.settings.conn_id)

    def under_root(self, owner: dict[str, str], ignite_hosts: dict[str, str] | None) -> None:
        """The root the launcher made (``{"name", "uid"}``) and the Ignite nodes' hosts it found, given after
        this backend was made (the head start's, asking ahead while the root is made): as given to a pod
        supervisor's backend, it then makes neither the root nor the Secret."""
        self.owner, self.placement.hosts = owner, ignite_hosts
        self.in_pod = self.survives_supervisor = True

    def launcher_info(self) -> dict[str, Any]:
        info = {"kind": LauncherKind.KUBERNETES.value, "namespace": self.namespace, "owner": self.spec.cluster_id,
                "conn_id": self.settings.conn_id, "supervisor": self.settings.supervisor.value}
        if self.in_pod:
            info["owner_uid"] = self.owner["uid"]
        return info

    def prepare(self) -> None:
        self.event(f"Kubernetes: namespace {self.namespace}, image {self.image}")
        self._check_backup_ahead()
        try:
            self._create_objects()
        except Exception as exc:  # noqa: BLE001 - the loop records why and deletes what was made
            why = client.error_message(exc)
            raise SetupError(f"creating the cluster's Kubernetes objects failed: {why}") from exc

    def look_ahead(self) -> None:
        """The launcher's head start asks, in threads, what its first pods need from elsewhere while it makes the
        root, the Secret and the Deployment: whether the store holds a backup, and the memory estimate (the
        table's columns, asked from Ignite: about 0.1 s of the launch's path)."""
        self._check_backup_ahead()
        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ignite-tf-estimate")
        self.estimate_ahead = pool.submit(self._estimate)
        pool.shutdown(wait=False)

    def _estimate(self):
        return estimate(self.spec.job, self._plan(), self.settings.model_params, conn=self.ignite_conn)

    def _check_backup_ahead(self) -> None:
        """Ask the run store for a backup in a thread while the objects are created (its client is made then:
        seconds; one request after): the first start's pods are told the answer (``_backup_in_store``)."""
        if self.run_store is not None:
            pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ignite-tf-backup-check")
            self.backup_check = pool.submit(self.run_store.exists, LAYOUT.backup)
            pool.shutdown(wait=False)

    def _create_objects(self) -> None:
        if not self.in_pod:  # a pod supervisor's launcher made the root and the Secret
            self._create_owner()
        meta = {"metadata": {"name": self.owner["name"], "uid": self.owner["uid"]}}
        if not self.in_pod:
            self.core.create_namespaced_secret(self.namespace, objects.secret_manifest(
                self.spec, self.settings, self.secret_env(), meta))
        try:
            self.core.create_namespaced_service(self.namespace, objects.service_manifest(self.spec, self.settings,
                                                                                         meta))
        except api_exception() as exc:
            if exc.status != 409 or not self.in_pod:  # made by the supervisor this one replaces
                raise
        plan = self._plan()
        ahead, self.estimate_ahead = self.estimate_ahead, None
        est = ahead.result() if ahead is not None else self._estimate()
        for note in self.memory.choose(est, self.spec):
            self.event(note)
        if plan is not None and not self.placement.done:
            for note in self.placement.choose(self.core, self.namespace, plan, self.spec.shard_plan_path):
                self.event(note)
        self.start_files = self._create_start_files(meta)

    def _create_owner(self) -> None:
        ApiException = api_exception()
        body = objects.owner_manifest(self.spec, self.settings)
        for _ in range(2):
            try:
                made = self.core.create_namespaced_config_map(self.namespace, body)
                self.owner = {"name": made.metadata.name, "uid": made.metadata.uid}
                return
            except ApiException as exc:
                if exc.status != 409:
                    raise
            # Left by an earlier run under this id (its supervisor was lost): replace it.
            objects.delete_owner(self.core, self.namespace, self.spec.cluster_id)
            self._wait_gone()
        raise RuntimeError(f"could not create ConfigMap {self.spec.cluster_id} in namespace {self.namespace}")

    def _create_start_files(self, meta: dict[str, Any]) -> bool:
        """The shard plan and ``code.zip`` in the pods' start files (``startfiles``), for a run in an object
        store; whether they were made (else the pods fetch them from the store)."""
        files = startfiles.files_for(self.spec, self.run_store) if self.run_store is not None else None
        if files is None:
            return False
        body = startfiles.manifest(self.spec.cluster_id, objects.labels(self.spec, self.settings),
                                   objects.owner_ref(meta), files)
        if body is None:
            return False
        try:
            self.core.create_namespaced_config_map(self.namespace, body)
        except api_exception() as exc:
            if exc.status != 409 or not self.in_pod:  # made by the supervisor this one replaces
                raise
        return True

    @cached_property
    def cluster_key(self) -> str:
        """The cluster's key (``standby.ENV_KEY``): a pod supervisor's from its Secret, a process supervisor's
        made here (it makes the Secret: ``secret_env``). Empty: an older cluster's, whose restarts take new pods."""
        return os.environ.get(standby.ENV_KEY, "") if self.in_pod else standby.new_key()

    def secret_env(self) -> dict[str, str]:
        """What the cluster's Secret holds (every pod gets it through ``envFrom``): the Ignite connection, the
        user's passed variables, the cluster's key and, for an object-store run root, the store's credentials."""
        from ignite_tf.connection import IgniteConnectionConfig

        conn = IgniteConnectionConfig.from_env(os.environ)
        env = conn.to_env() if conn else {}
        env[standby.ENV_KEY] = self.cluster_key
        env.update({n: os.environ[n] for n in self.spec.pass_env if n in os.environ})
        if self.spec.run_store:  # the launcher gave them to us through our environment
            env.update(environment_credentials())
        return env

    @cached_property
    def run_store(self) -> RunStore | None:
        return RunStore(self.spec.run_store) if self.spec.run_store else None

    def _plan(self):
        if not self.spec.shard_plan_path:
            return None
        from ignite_tf.plan.shards import ShardPlan

        return ShardPlan.load(self.spec.shard_plan_path)

    def _wait_gone(self, timeout: float = GONE_TIMEOUT_S) -> list[str]:
        deadline = time.monotonic() + timeout
        while True:
            left = objects.leftovers(self.core, self.namespace, self.spec.cluster_id, supervisor=not self.in_pod)
            if not left or time.monotonic() > deadline:
                return left
            self._heartbeat()
            time.sleep(0.5)

    def _heartbeat(self) -> None:
        """While a release waits on the apiserver (64 pods ending): a supervisor that records nothing for
        ``LOST_AFTER_S`` is taken for lost, and its stop for the launcher's. A stop's wait (a restart's) beats
        through ``Supervisor.beat`` instead, which also hands a replaced supervisor over."""
        if self.host is not None:
            self.host.save()

    def release(self) -> None:
        """Delete the owner (garbage-collecting everything) and wait until nothing of the cluster is left."""
        if self.cleaned:
            return
        self.cleaned = True
        try:
            objects.delete_owner(self.core, self.namespace, self.spec.cluster_id)
            left = self._wait_gone()
            self.logs.end()
            self.event(f"Kubernetes objects of {self.spec.cluster_id} deleted" if not left
                       else f"still deleting after {GONE_TIMEOUT_S:.0f}s: {', '.join(left)}")
        except Exception as exc:  # noqa: BLE001 - report; the state must still be recorded
            self.event(f"deleting the Kubernetes objects of {self.spec.cluster_id} failed: {exc}")

    def _backup_in_store(self, attempt: int) -> bool:
        """Whether the run store holds a backup as a (re)start creates its pods: asked once per start of the
        cluster or of one task (the pods it replaces have ended, so none appears meanwhile from them). True
        when the store cannot say: the task then asks it itself. Without a supervisor (the launcher's head start:
        one start) asked once for all of its pods."""
        key = (attempt, self.host.restart_count() if self.host is not None else -1)
        if key not in self.backup_found:
            check, self.backup_check = self.backup_check, None  # prepare's, for the first start
            try:
                self.backup_found = {key: check.result() if check is not None else self.run_store.exists(LAYOUT.backup)}
            except Exception:  # noqa: BLE001 - the task reads the store itself
                self.backup_found = {key: True}
        return self.backup_found[key]

