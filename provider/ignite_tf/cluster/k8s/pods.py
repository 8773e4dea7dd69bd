"""The pod backend: a cluster's tasks as pods, supervised by the same loop and policy as local processes.

The supervisor pod (``ignite_tf.cluster.k8s.supervisor``, the default) or ``python -m ignite_tf.cluster.k8s.pods
CLUSTER_JSON K8S_JSON`` (a detached process on the launching host, ``kubernetes.supervisor: process``) runs
``Supervisor`` (``ignite_tf.cluster.supervision``) with this backend. It creates the cluster's owner ConfigMap
and the Secret (for a pod supervisor the launcher made them) and the headless Service, then one pod per task. A pod
is up when Ready; it ended with its container's exit status (137 for a pod deleted behind the supervisor's back,
evicted, or on a lost node); a pod not up says why (the scheduler's reason for a Pending pod, an image that cannot
be pulled) for the start-up deadline's message; an OOMKilled pod names its limit and the memory estimate. Pods run
with ``restartPolicy: Never``: the kubelet never restarts a task behind the supervisor's back. A deleted owner
ConfigMap stops the cluster.

Every pod's output is streamed into ``<run>/logs/<task>.log`` (``ignite_tf.cluster.k8s.podlogs``), so logs
outlive the pods; with an object-store run root the supervisor copies those files to the store as they grow
(``ignite_tf.runstore.mirror``), and the pods get no volume of the run: each works in its own staging folder
(``objects.POD_RUN_DIR``), takes the shard plan and the shipped code from its start files
(``ignite_tf.cluster.k8s.startfiles``: a ConfigMap made here) or the store (``ignite_tf.cluster.k8s.entry``) and
copies its backup, model, events and progress reports there (``ignite_tf.runstore.sync``); the store's credentials
reach it through the cluster's Secret only. When the supervisor ends — success, failure or stop — it deletes the
owner, which garbage-collects everything, and waits until nothing of the cluster is left.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib
import json
import math
import os
import sys
import threading
import time
from functools import cached_property
from pathlib import Path
from typing import Any

from ignite_tf.cluster.commands import task_command, task_cwd
from ignite_tf.cluster.k8s import client, objects, placement, standby, startfiles
from ignite_tf.cluster.k8s.memory import estimate, parse_mib
from ignite_tf.cluster.k8s.podlogs import PodLogs
from ignite_tf.cluster.k8s.settings import KubernetesSettings, Placement
from ignite_tf.cluster.launcher import LauncherKind
from ignite_tf.cluster.spec import ClusterSpec, ClusterTask, Role
from ignite_tf.cluster.supervision.backend import Backend, SetupError
from ignite_tf.cluster.supervision.loop import Supervisor
from ignite_tf.cluster.supervision.policy import Observation
from ignite_tf.contract import (
    ENV_JOB_DIR,
    ENV_RUN_STORE_NO_BACKUP,
    ENV_RUN_STORE_PROGRESS,
    ENV_STATE_STORE,
    STORE_ENV,
    Mode,
)
from ignite_tf.runstore import LAYOUT, RunFolder, RunStore
from ignite_tf.runstore.credentials import environment_credentials
from ignite_tf.state import ExitCode, store_from_env

MODULE = "ignite_tf.cluster.k8s.pods"  # ``python -m`` this: the pod supervisor
LIST_EVERY_S = 0.5
GONE_TIMEOUT_S = 60.0
STOP_POLL_S = 0.1  # while stopped pods end: a restart waits on this
OWNER_CHECK_S = 2.0
DEADLINE_MARGIN_S = 60.0  # a pod's activeDeadlineSeconds beyond max_runtime: the supervisor stops it first
LOST = 137  # the exit status of a pod that is gone without one: deleted, evicted, its node lost
# A task OOMKilled at the estimated limit: the pods made after it get this many times that limit. The estimate
# is measured on 2 CPUs and a first attempt; a restarted task or a larger node may need more, and a restart at
# the same limit would be killed again at the same point (issue 24: a restored attempt's peak climbed while it
# trained, on both workers, until the kernel killed it at the estimate).
OOM_GROWTH = 1.5


def pod_command(spec: ClusterSpec, task: ClusterTask) -> list[str]:
    """The local command with the image's ``python`` for this interpreter."""
    return ["python" if a == sys.executable else a for a in task_command(spec, task)]


def api_exception():
    from kubernetes.client.exceptions import ApiException

    return ApiException


class PodBackend(Backend):
    """Tasks as pods in ``namespace``, from ``image``, with ``settings``; ``core``: a CoreV1Api (default
    the connection ``settings.conn_id``, see ``ignite_tf.cluster.k8s.client``); ``store_env`` (the state
    store's variables for the pods), ``run_store`` and ``ignite_conn`` default to this process's own."""

    poll_s = LIST_EVERY_S

    def __init__(self, spec: ClusterSpec, settings: KubernetesSettings, namespace: str, image: str, core=None,
                 owner: dict[str, str] | None = None, ignite_hosts: dict[str, str] | None = None,
                 store_env: dict[str, str] | None = None, run_store: RunStore | None = None, ignite_conn=None):
        super().__init__(spec)
        # Ignite node -> Kubernetes node as the launcher found them (a pod supervisor may not list nodes).
        self.ignite_hosts = ignite_hosts
        # A pod supervisor is given the root the launcher made ({"name", "uid"}); a detached one makes it.
        self.in_pod = owner is not None
        self.survives_supervisor = self.in_pod
        self.handed_over = False
        self.settings, self.namespace, self.image = settings, namespace, image
        self.command_for = pod_command
        self.attempts: dict[str, int] = {}
        self.current: dict[str, str] = {}  # task -> its pod's name
        self.pods: dict[str, Any] = {}  # pod name -> V1Pod, as last listed
        self.ours_deleted: set[str] = set()
        self.logs = PodLogs(namespace, self._heartbeat)  # a pod supervisor records ``logs.followed`` in the state
        self.marked: set[tuple[str, str]] = set()  # (pod, moment) of the chief's timeline written
        self.start_files = False  # the plan and code in a ConfigMap the pods mount (startfiles)
        self.backup_found: dict[tuple[int, int], bool] = {}  # (attempt, restarts) -> a backup in the store then
        self.backup_check: concurrent.futures.Future | None = None
        self.estimate_ahead: concurrent.futures.Future | None = None  # the memory estimate (``look_ahead``)
        self.owner: dict[str, Any] | None = owner
        self.wanted: list[str | None] = []
        self.ignite_nodes: dict[str, str] | None = None  # Ignite consistent id -> Kubernetes node, when found
        self.memory = ""
        self.memory_peer = ""  # a sync cluster's workers but the chief, when the estimate sizes them apart
        self.memory_estimate = ""
        self.memory_grown: set[str] = set()  # pods OOMKilled at an estimated limit, already counted
        self.memory_adopted = ""  # the largest limit of a replaced pod supervisor's pods (``adopt``)
        self.memory_adopted_peer = ""  # ... of those but the chief's
        # Placement is recorded once the workers are scheduled: for the affinity's result, and with any
        # placement where Ignite's pods are known, for the map that measured locality needs (ignite_nodes).
        self.placement_done = settings.placement is Placement.NONE and not settings.ignite_selector
        self._owner_checked = 0.0
        self.cleaned = False
        # The state store's variables every pod gets; None: this process's own (a supervisor's, from the Secret).
        self.store_env = store_env
        self.ignite_conn = ignite_conn  # for the memory estimate's row width; None: this process's IGNITE_TF_*
        self.warm = standby.WarmPods(self)  # a sync cluster's pods for its next restart (``kubernetes.standby``)
        if core is not None:
            self.__dict__["core"] = core
        if run_store is not None:  # the launcher's, for its head start (``make_first_attempt``)
            self.__dict__["run_store"] = run_store

    @cached_property
    def core(self):
        return client.core_v1(self.settings.conn_id)

    def under_root(self, owner: dict[str, str], ignite_hosts: dict[str, str] | None) -> None:
        """The root the launcher made (``{"name", "uid"}``) and the Ignite nodes' hosts it found, given after
        this backend was made (the head start's, asking ahead while the root is made): as given to a pod
        supervisor's backend, it then makes neither the root nor the Secret."""
        self.owner, self.ignite_hosts = owner, ignite_hosts
        self.in_pod = self.survives_supervisor = True

    def launcher_info(self) -> dict[str, Any]:
        info = {"kind": LauncherKind.KUBERNETES.value, "namespace": self.namespace, "owner": self.spec.cluster_id,
                "conn_id": self.settings.conn_id, "supervisor": self.settings.supervisor.value}
        if self.in_pod:
            info["owner_uid"] = self.owner["uid"]
        return info

    # -- set-up and clean-up -------------------------------------------------------------------------------
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
        self.memory_estimate = est.quantity()
        given = objects.resources(self.settings, est.quantity())
        self.memory = given["limits"]["memory"]
        self.event(est.describe())
        peer = est.for_peer()
        if self.spec.mode is Mode.SYNC and self.spec.workers > 1 and self.memory == est.quantity() \
                and given["requests"]["memory"] == est.quantity() and peer.quantity() != est.quantity():
            # The chief alone saves the model: the others are measured apart (``Baseline.peer_param_bytes``).
            self.memory_peer = peer.quantity()
            self.event(peer.describe())
        if (parse_mib(self.memory_adopted) or 0.0) > (parse_mib(self.memory) or 0.0):
            self.memory = self.memory_adopted
            self.event(f"memory: the re-adopted pods' limit {self.memory} (grown after an OOMKill) kept for new pods")
        if self.memory_peer and (parse_mib(self.memory_adopted_peer) or 0.0) > parse_mib(self.memory_peer):
            self.memory_peer = ""  # grown after an OOMKill: every task gets self.memory
        if given["limits"]["memory"] != est.quantity() or given["requests"]["memory"] != est.quantity():
            self.event(f"memory set by kubernetes.resources: request {given['requests']['memory']}, limit "
                       f"{given['limits']['memory']} (estimate {est.quantity()})")
        if plan is not None and not self.placement_done:
            try:
                hosts = self.ignite_hosts if self.ignite_hosts is not None else placement.ignite_node_hosts(
                    self.core, list(plan.partition_map.nodes.values()), self.settings, self.namespace)
            except Exception as exc:  # noqa: BLE001 - without placement the map only serves the measurement
                if self.settings.placement is not Placement.NONE:
                    raise
                self.event(f"Ignite pods ({self.settings.ignite_selector}) not listed: "
                           f"{client.error_message(exc)}; measured locality is unknown")
                hosts = {}
            # With placement none this is where the data is, not where the workers are sent (no affinity).
            self.wanted, self.ignite_nodes = placement.wanted_nodes(plan, hosts), hosts
            self.event(f"placement {self.settings.placement.value}: Ignite nodes on Kubernetes nodes "
                       + (", ".join(f"{k} -> {v}" for k, v in sorted(hosts.items())) or "(none found)"))
            if hosts and plan.placement is None:
                # The workers measure locality against this map as soon as they read; their plan is the one in
                # the start files, made next, before the achieved placement is recorded (``_record_placement``).
                plan.placement = {"ignite_nodes": dict(sorted(hosts.items()))}
                plan.save(self.spec.shard_plan_path)
        self.start_files = self._create_start_files(meta)

    def make_first_attempt(self) -> list[str]:
        """The launcher's head start for a fresh cluster with a pod supervisor: the Service, the start files and
        the first attempt's pods, made beside the supervisor's Deployment instead of once its pod runs (its
        scheduling, Python and imports: seconds on every start). The supervisor takes these pods as its own
        when it starts its tasks (``start``: a pod of this root and attempt already there) and makes whatever is
        missing, so the launcher may die at any moment of this. Returns the pods made."""
        if self.backup_check is None:  # else asked already (``look_ahead``)
            self._check_backup_ahead()
        self._create_objects()
        for task in self.spec.tasks:
            self.start(task, 0)
        return [self.current[t.name] for t in self.spec.tasks]

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
        if self.run_store is None:
            return False
        files = {}
        if self.spec.shard_plan_path and Path(self.spec.shard_plan_path).is_file():
            files[startfiles.PLAN] = Path(self.spec.shard_plan_path).read_bytes()
        if self.spec.job.get("shipped"):
            here = self.spec.folder.code_zip  # the launcher's copy, when it ran on this host
            shipped = here.read_bytes() if here.is_file() else self.run_store.read_bytes(LAYOUT.code_zip)
            if shipped is None:
                return False
            files[startfiles.CODE] = shipped
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
    def pod_spec(self) -> ClusterSpec:
        """The spec as a pod sees it: with an object-store run root, its paths in the pod's own staging folder
        (the plan and the code are fetched there by the pod's first process)."""
        if not self.spec.run_store:
            return self.spec
        folder = RunFolder(Path(objects.POD_RUN_DIR) / self.spec.cluster_id)
        job = dict(self.spec.job)
        if job.get("job_dir"):
            job["job_dir"] = str(folder.code)  # the job folder was shipped in code.zip
        return dataclasses.replace(self.spec, run_dir=str(folder.path), job=job,
                                   shard_plan_path=str(folder.shard_plan) if self.spec.shard_plan_path else None)

    @cached_property
    def run_store(self) -> RunStore | None:
        return RunStore(self.spec.run_store) if self.spec.run_store else None

    def progress(self, task: ClusterTask) -> dict[str, Any] | None:
        """A pod's progress report: from the run store when the pods share no folder with us."""
        if self.run_store is None:
            return super().progress(task)
        try:
            return self.run_store.read_json(LAYOUT.progress(task.name))
        except Exception:  # noqa: BLE001 - not there yet, or a store hiccup: no report this round
            return None

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

    # -- pods ----------------------------------------------------------------------------------------------
    def refresh(self) -> None:
        pods = self.core.list_namespaced_pod(self.namespace,
                                             label_selector=f"{objects.LABEL_CLUSTER}={self.spec.cluster_id}").items
        self.pods = {p.metadata.name: p for p in pods}
        for task in self.spec.tasks:
            pod = self.pods.get(self.current.get(task.name, ""))
            gone = pod is None or (pod.metadata.deletion_timestamp and pod.metadata.name not in self.ours_deleted)
            if gone and task.name in self.current:
                self._owner_checked = 0.0  # a pod deleted behind our back: first see whether the owner went
            if pod is None:
                continue
            if objects.pod_started(pod):
                self.logs.follow(self.core, pod.metadata.name, self.spec.log_path(task))
            if task is self.spec.chief:
                self._mark_chief(pod)
        self._record_placement()
        self.warm.keep()
        if self.in_pod and self.host is not None:
            self.host.state.launcher["followed"] = self.logs.followed(self.pods)

    def _mark_chief(self, pod) -> None:
        """The chief pod's scheduling and start, as this poll saw them, in the start-up's timeline."""
        for moment, reached in (("chief_scheduled", bool(pod.spec.node_name)),
                                ("chief_running", objects.pod_started(pod))):
            if reached and (pod.metadata.name, moment) not in self.marked and self.host is not None:
                self.marked.add((pod.metadata.name, moment))
                self.host.mark(moment)

    def _record_placement(self) -> None:
        if self.placement_done:
            return
        workers = [t for t in self.spec.tasks if t.role is Role.WORKER]
        actual = [getattr(self.pods.get(self.current.get(t.name, "")), "spec", None) for t in workers]
        if not all(a is not None and a.node_name for a in actual):
            return
        plan = self._plan()
        if plan is None:
            self.placement_done = True
            return
        result = placement.achieved(plan, self.wanted or [None] * len(workers), [a.node_name for a in actual],
                                    self.settings.placement, self.ignite_nodes)
        plan.placement = result
        plan.save(self.spec.shard_plan_path)
        if self.run_store is not None:
            self.run_store.put_file(self.spec.shard_plan_path, LAYOUT.shard_plan)
        self.placement_done = True
        self.event(placement.describe(result))

    def start(self, task: ClusterTask, attempt: int) -> int:
        if self.warm.take(task, attempt):
            return 0
        n = self.next_attempt(task)
        spec = self.pod_spec
        body = self.pod_body(spec, task, n, self.pod_env(spec, task, attempt), self.command_for(spec, task))
        body["metadata"]["annotations"][objects.ANNOTATION_CLUSTER_ATTEMPT] = str(attempt)
        try:
            self.core.create_namespaced_pod(self.namespace, body)
        except api_exception() as exc:
            if exc.status != 409 or not self._made_by_launcher(body["metadata"]["name"], attempt):
                raise
            self.event(f"pod {body['metadata']['name']} made by the launcher (head start): taken as this task's")
        self.current[task.name] = body["metadata"]["name"]
        return 0

    def next_attempt(self, task: ClusterTask) -> int:
        """The number of ``task``'s next pod (its attempts, each restart of the task or of the cluster)."""
        self.attempts[task.name] = self.attempts.get(task.name, -1) + 1
        return self.attempts[task.name]

    def pod_env(self, spec: ClusterSpec, task: ClusterTask, attempt: int, ask_store: bool = True) -> dict[str, str]:
        """The variables of ``task``'s pod for cluster attempt ``attempt``; ``ask_store``: whether the run store
        is asked for a backup now (a warm pod's attempt comes later: it asks itself)."""
        env = spec.task_env(task, attempt)
        # The runtime reports epochs to the same state store (its connection comes from the Secret).
        env.update(self.store_env if self.store_env is not None
                   else {k: os.environ[k] for k in STORE_ENV if k in os.environ})
        if spec.job.get("job_dir"):
            env[ENV_JOB_DIR] = spec.job["job_dir"]
        if spec.run_store:
            env[ENV_RUN_STORE_PROGRESS] = "1"
            if ask_store and not self._backup_in_store(attempt):
                env[ENV_RUN_STORE_NO_BACKUP] = "1"
        return env

    def memory_for(self, task: ClusterTask) -> str:
        """The memory request and limit of ``task``'s pods: ``memory_peer`` for a sync worker but the chief
        while the estimate sizes them apart, else ``memory``."""
        return self.memory_peer if self.memory_peer and task.role is Role.WORKER and task.index > 0 else self.memory

    def pod_body(self, spec: ClusterSpec, task: ClusterTask, n: int, env: dict[str, str],
                 argv: list[str]) -> dict[str, Any]:
        """The manifest of ``task``'s pod number ``n`` running ``argv`` with ``env`` (``spec``: the pod spec)."""
        node = None
        if task.role is Role.WORKER and task.index < len(self.wanted):
            node = self.wanted[task.index]
        body = objects.pod_manifest(
            spec, task, n, namespace=self.namespace, settings=self.settings, image=self.image,
            owner={"metadata": self.owner}, argv=argv, cwd=task_cwd(spec, task), env=env, node=node,
            memory=self.memory_for(task))
        left = self._runtime_left()
        if left is not None:  # the pod ends by itself even if no supervisor is left to stop it
            body["spec"]["activeDeadlineSeconds"] = max(1, int(left + self.spec.supervision.grace_period_s
                                                                + DEADLINE_MARGIN_S))
        if self.start_files:
            startfiles.mount(body, self.spec.cluster_id)
        return body

    def _made_by_launcher(self, name: str, attempt: int) -> bool:
        """Whether the pod ``name`` already there is this root's, of cluster attempt ``attempt``, not being deleted:
        one the launcher made (``make_first_attempt``) for this supervisor to take."""
        if not self.in_pod:
            return False
        pod = self.core.read_namespaced_pod(name, self.namespace)
        owners = {ref.uid for ref in pod.metadata.owner_references or []}
        return (self.owner["uid"] in owners and not pod.metadata.deletion_timestamp
                and (pod.metadata.annotations or {}).get(objects.ANNOTATION_CLUSTER_ATTEMPT) == str(attempt))

    def _backup_in_store(self, attempt: int) -> bool:
        """Whether the run store holds a backup as a (re)start creates its pods: asked once per start of the
        cluster or of one task (the pods it replaces have ended, so none appears meanwhile from them). True
        when the store cannot say: the task then asks it itself. Without a supervisor (the launcher's head start:
        one start) asked once for all of its pods."""
        key = (attempt, self.host.state.restarts if self.host is not None else -1)
        if key not in self.backup_found:
            check, self.backup_check = self.backup_check, None  # prepare's, for the first start
            try:
                self.backup_found = {key: check.result() if check is not None else self.run_store.exists(LAYOUT.backup)}
            except Exception:  # noqa: BLE001 - the task reads the store itself
                self.backup_found = {key: True}
        return self.backup_found[key]

    def task_pod(self, task: ClusterTask):
        """``task``'s current pod as last listed (None: none, or gone)."""
        return self.pods.get(self.current.get(task.name, ""))

    def delete(self, names: list[str], grace: float) -> None:
        """Delete the pods ``names`` (ours: their ends are not losses), with ``grace`` seconds to end."""
        ApiException = api_exception()
        for name in names:
            self.ours_deleted.add(name)
            try:
                self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=int(grace))
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def _wait_pods_ended(self, names: list[str], timeout: float) -> None:
        """Until each pod is gone or its container has ended: a dead task writes nothing more (no backup), so
        its replacement may start while the kubelet still tears the old pod down (``release`` waits for
        every object to be gone at the end)."""
        deadline = time.monotonic() + timeout
        while names and time.monotonic() < deadline:
            self.refresh()
            names = [n for n in names if n in self.pods and not objects.pod_ended(self.pods[n])]
            if names:
                if self.host is not None:  # a restart's wait: a replaced supervisor hands over from here
                    self.host.beat()
                time.sleep(STOP_POLL_S)
        for n in names:
            sys.stdout.write(f"[ignite-tf] pod {n} still terminating after {timeout:.0f}s\n")

    def stop(self, tasks: list[ClusterTask], grace: float) -> dict[str, int]:
        names = [self.current[t.name] for t in tasks if t.name in self.current]
        self.delete(names, grace)
        self._wait_pods_ended(names, grace + 30)
        self.logs.end(names)
        return {}

    def observe(self, task: ClusterTask, *, starting: bool) -> Observation:
        pod = self.task_pod(task)
        code = self._exit_code(task, pod)
        if code not in (None, 0):
            self._grow_memory_after_oom(pod)
        up = starting and code is None and objects.pod_ready(pod)
        return Observation(task.name, code, up=up,
                           detail=self._exit_detail(task) if code not in (None, 0) else "",
                           waiting=self._waiting_reason(task) if starting and not up else "",
                           host=pod.spec.node_name or "" if pod is not None else "")

    def _exit_code(self, task: ClusterTask, pod) -> int | None:
        if pod is None:
            return LOST if task.name in self.current else None  # deleted by someone else, and already gone
        term = objects.pod_terminated(pod)
        if term is not None:
            return int(term.exit_code)
        if pod.metadata.deletion_timestamp and pod.metadata.name not in self.ours_deleted:
            return LOST
        if pod.status.phase == "Failed":  # evicted, node lost: no container status to read
            return LOST
        if pod.status.phase == "Succeeded":
            return 0
        return None

    def _exit_detail(self, task: ClusterTask) -> str:
        pod = self.task_pod(task)
        name = self.current.get(task.name, "?")
        if pod is None or (pod.metadata.deletion_timestamp and name not in self.ours_deleted):
            return f"pod {name} deleted"
        term = objects.pod_terminated(pod)
        where = f"pod {name} on {pod.spec.node_name}"
        if term is None:
            return f"{where}: {pod.status.reason or pod.status.phase} {pod.status.message or ''}".strip()
        if term.reason == "OOMKilled":
            limit = _memory_limit(pod)
            if pod.metadata.name in self.memory_grown:
                return (f"{where}: OOMKilled at its memory limit {limit} (estimate {self.memory_estimate}); "
                        f"a restart's pods get {self.memory}, or set kubernetes.resources.limits.memory")
            return (f"{where}: OOMKilled at its memory limit {limit} (estimate {self.memory_estimate}); "
                    f"raise kubernetes.resources.limits.memory or lower batch_size")
        return f"{where}: {term.reason or 'terminated'}"

    def _grow_memory_after_oom(self, pod) -> None:
        """A pod OOMKilled at a limit the estimate chose (no memory in ``kubernetes.resources``): the pods made
        from now on get ``OOM_GROWTH`` times its limit, and the warm standby pods, made at the old limit, are
        replaced. A limit the user set is theirs to change (the failure says so)."""
        term = objects.pod_terminated(pod) if pod is not None else None
        if term is None or term.reason != "OOMKilled" or pod.metadata.name in self.memory_grown:
            return
        given = self.settings.resources
        if any("memory" in (given.get(kind) or {}) for kind in ("requests", "limits")):
            return
        self.memory_grown.add(pod.metadata.name)
        old = parse_mib(_memory_limit_quantity(pod)) or parse_mib(self.memory) or 0.0
        grown = int(math.ceil(old * OOM_GROWTH / 16) * 16)
        peers, self.memory_peer = self.memory_peer, ""  # from now on every task gets self.memory
        if grown > (parse_mib(self.memory) or 0.0):
            self.memory = f"{grown}Mi"
            self.event(f"pod {pod.metadata.name} OOMKilled at its estimated memory limit {old:.0f}Mi (estimate "
                       f"{self.memory_estimate}): the pods made from now on get {self.memory} (x{OOM_GROWTH})")
        elif peers:
            self.event(f"pod {pod.metadata.name} OOMKilled at its estimated memory limit {old:.0f}Mi: every pod "
                       f"made from now on gets the chief's {self.memory} (at least x{OOM_GROWTH})")
        else:
            return  # a pod of the same attempt, at the same limit, already grew it
        names = self.warm.drop()
        if names:
            self.event(f"standby: warm pods {', '.join(names)} made at the old memory limit deleted")

    def _waiting_reason(self, task: ClusterTask) -> str:
        pod = self.task_pod(task)
        if pod is None:
            return "no pod"
        for c in pod.status.conditions or []:
            if c.type == "PodScheduled" and c.status == "False":
                return f"Pending, not scheduled: {c.reason}: {c.message}"
        waiting = objects.pod_waiting(pod)
        if waiting is not None:
            return f"{waiting.reason}: {waiting.message or ''}".strip(": ")
        return f"{pod.status.phase}, not listening on port {task.port} yet"

    def _runtime_left(self) -> float | None:
        if not self.settings.max_runtime:
            return None
        if self.host is None:  # the launcher's head start: the cluster starts now
            return self.settings.max_runtime
        return self.settings.max_runtime - (time.time() - self.host.state.started_at)

    def lost(self) -> str | None:
        left = self._runtime_left()
        if left is not None and left <= 0:
            return f"kubernetes.max_runtime ({self.settings.max_runtime:.0f}s) reached: stopping"
        now = time.monotonic()
        if now - self._owner_checked >= OWNER_CHECK_S:
            self._owner_checked = now
            if not self._owner_alive():
                return (f"ConfigMap {self.spec.cluster_id} (the owner of every object of this cluster) was "
                        f"deleted: stopping")
        return None

    def adopt(self, previous) -> int | None:
        """A replaced pod supervisor's cluster: its pods (each task's newest) and how much of their logs is copied;
        the attempt of the whole cluster to go on from. None: ``previous`` is another root's (a fresh start)."""
        if not self.in_pod or (previous.launcher or {}).get("owner_uid") != self.owner["uid"]:
            return None
        pods = self.core.list_namespaced_pod(self.namespace,
                                             label_selector=f"{objects.LABEL_CLUSTER}={self.spec.cluster_id}").items
        pods = self.warm.adopt(pods)
        attempt = 0
        for pod in sorted(pods, key=lambda p: int(p.metadata.labels.get(objects.LABEL_ATTEMPT, 0))):
            task, n = (pod.metadata.labels.get(objects.LABEL_TASK),
                       int(pod.metadata.labels.get(objects.LABEL_ATTEMPT, 0)))
            if task is None:
                continue
            self.attempts[task], self.current[task] = n, pod.metadata.name
            attempt = max(attempt, int((pod.metadata.annotations or {}).get(objects.ANNOTATION_CLUSTER_ATTEMPT, 0)))
        self.logs.copied = {n: int(c) for n, c in ((previous.launcher or {}).get("followed") or {}).items()}
        # A limit grown after an OOMKill (``_grow_memory_after_oom``) is the adopted pods' own: kept for the next.
        self.memory_adopted = max((_memory_limit_quantity(p) or "" for p in pods), key=lambda q: parse_mib(q) or 0.0,
                                  default="")
        chief = self.spec.chief.name
        self.memory_adopted_peer = max((_memory_limit_quantity(p) or "" for p in pods
                                        if p.metadata.labels.get(objects.LABEL_TASK) not in (None, chief)),
                                       key=lambda q: parse_mib(q) or 0.0, default="")
        self.placement_done = True  # recorded by the supervisor that placed them
        self.event(f"supervisor restarted: re-adopting pods {', '.join(sorted(self.current.values())) or '(none)'} "
                   f"(cluster attempt {attempt})")
        return attempt

    def hand_over(self) -> None:
        """Leave the pods to the next supervisor: stop copying logs (it goes on from ``followed``)."""
        self.handed_over = True
        self.logs.hand_over()
        if self.host is not None:
            self.host.state.launcher["followed"] = self.logs.followed(self.pods)

    def close(self) -> None:
        if not self.handed_over:
            self.release()

    def _owner_alive(self) -> bool:
        ApiException = api_exception()
        try:
            cm = self.core.read_namespaced_config_map(self.spec.cluster_id, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return False
            return True  # an API hiccup is not a deletion
        return cm.metadata.uid == self.owner["uid"] and not cm.metadata.deletion_timestamp


def _memory_limit_quantity(pod) -> str | None:
    for c in pod.spec.containers:
        if c.name == objects.CONTAINER and c.resources and c.resources.limits:
            return c.resources.limits.get("memory")
    return None


def _memory_limit(pod) -> str:
    limit = _memory_limit_quantity(pod)
    if limit is None:
        return "(none)"
    mib = parse_mib(limit)
    return f"{limit} ({mib:.0f} MiB)" if mib else str(limit)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print(f"usage: python -m {MODULE} CLUSTER_JSON K8S_JSON", file=sys.stderr)
        return int(ExitCode.INTERNAL_ERROR)
    spec = ClusterSpec.load(argv[0])
    k8s = json.loads(Path(argv[1]).read_text())
    store = store_from_env()
    if store is None:
        print(f"error: no state store configured ({ENV_STATE_STORE})", file=sys.stderr)
        return int(ExitCode.INTERNAL_ERROR)
    # The Kubernetes client's import (a second of the path to the first pod) beside the state store's first write.
    threading.Thread(target=importlib.import_module, args=("kubernetes.client",), daemon=True).start()
    try:
        backend = PodBackend(spec, KubernetesSettings.parse(k8s["settings"]), k8s["namespace"], k8s["image"])
        return int(Supervisor(spec, store, backend).run())
    finally:
        store.close()


if __name__ == "__main__":
    sys.exit(main())
