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

Here: the task pods' lifecycle (start, observe, stop, delete) and the adoption of a replaced supervisor's pods
(``ignite_tf.cluster.k8s.adoption``). Elsewhere: the cluster's other objects, made at set-up and deleted at the end
(``ignite_tf.cluster.k8s.clusterobjects``); the manifests and what a pod's status says (``objects``); the pods'
memory limits and their growth after an OOMKill (``oom``); where the workers go (``placement``); the warm standby
pods (``standby``).
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import threading
import time
from functools import cached_property
from pathlib import Path
from typing import Any

from ignite_tf.cluster.commands import task_cwd
from ignite_tf.cluster.k8s import adoption, objects, standby
from ignite_tf.cluster.k8s.client import api_exception
from ignite_tf.cluster.k8s.clusterobjects import ClusterObjects
from ignite_tf.cluster.k8s.settings import KubernetesSettings
from ignite_tf.cluster.spec import ClusterSpec, ClusterTask, Role
from ignite_tf.cluster.supervision.loop import Supervisor
from ignite_tf.cluster.supervision.policy import Observation
from ignite_tf.contract import ENV_STATE_STORE, STORE_ENV
from ignite_tf.runstore import LAYOUT, RunStore
from ignite_tf.state import ExitCode, store_from_env

MODULE = "ignite_tf.cluster.k8s.pods"  # ``python -m`` this: a supervisor process (``kubernetes.supervisor: process``)
LIST_EVERY_S = 0.5
STOP_POLL_S = 0.1  # while stopped pods end: a restart waits on this
OWNER_CHECK_S = 2.0


class PodBackend(ClusterObjects):
    """Tasks as pods in ``namespace``, from ``image``, with ``settings`` (the arguments: ``ClusterObjects``, which
    makes and deletes the cluster's other objects): each task's pods started, observed and deleted, and a replaced
    supervisor's pods adopted (``ignite_tf.cluster.k8s.adoption``)."""

    poll_s = LIST_EVERY_S

    def __init__(self, spec: ClusterSpec, settings: KubernetesSettings, namespace: str, image: str, core=None,
                 owner: dict[str, str] | None = None, ignite_hosts: dict[str, str] | None = None,
                 store_env: dict[str, str] | None = None, run_store: RunStore | None = None, ignite_conn=None):
        super().__init__(spec, settings, namespace, image, core, owner, ignite_hosts, store_env, run_store,
                         ignite_conn)
        self.handed_over = False
        self.command_for = objects.pod_command
        self.attempts: dict[str, int] = {}
        self.current: dict[str, str] = {}  # task -> its pod's name
        self.pods: dict[str, Any] = {}  # pod name -> V1Pod, as last listed
        self.ours_deleted: set[str] = set()
        self.marked: set[tuple[str, str]] = set()  # (pod, moment) of the chief's timeline written
        self._owner_checked = 0.0
        self.warm = standby.WarmPods(self)  # a sync cluster's pods for its next restart (``kubernetes.standby``)

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

    @cached_property
    def pod_spec(self) -> ClusterSpec:
        """The spec as a pod sees it (``objects.pod_view``)."""
        return objects.pod_view(self.spec)

    def progress(self, task: ClusterTask) -> dict[str, Any] | None:
        """A pod's progress report: from the run store when the pods share no folder with us."""
        if self.run_store is None:
            return super().progress(task)
        try:
            return self.run_store.read_json(LAYOUT.progress(task.name))
        except Exception:  # noqa: BLE001 - not there yet, or a store hiccup: no report this round
            return None

    def describe(self) -> str:
        return f"the Kubernetes API (namespace {self.namespace})"

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
            self.host.record_launcher(adoption.FOLLOWED_KEY, self.logs.followed(self.pods))

    def _mark_chief(self, pod) -> None:
        """The chief pod's scheduling and start, as this poll saw them, in the start-up's timeline."""
        for moment, reached in (("chief_scheduled", bool(pod.spec.node_name)),
                                ("chief_running", objects.pod_started(pod))):
            if reached and (pod.metadata.name, moment) not in self.marked and self.host is not None:
                self.marked.add((pod.metadata.name, moment))
                self.host.mark(moment)

    def _record_placement(self) -> None:
        if self.placement.done:
            return
        workers = [t for t in self.spec.tasks if t.role is Role.WORKER]
        actual = [getattr(self.pods.get(self.current.get(t.name, "")), "spec", None) for t in workers]
        if not all(a is not None and a.node_name for a in actual):
            return
        plan = self._plan()
        if plan is None:
            self.placement.done = True
            return
        note = self.placement.record(plan, [a.node_name for a in actual])
        plan.save(self.spec.shard_plan_path)
        if self.run_store is not None:
            self.run_store.put_file(self.spec.shard_plan_path, LAYOUT.shard_plan)
        self.placement.done = True
        self.event(note)

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
        store_env = self.store_env if self.store_env is not None else {
            k: os.environ[k] for k in STORE_ENV if k in os.environ}
        no_backup = bool(spec.run_store) and ask_store and not self._backup_in_store(attempt)
        return objects.task_env(spec, task, attempt, store_env, no_backup)

    def pod_body(self, spec: ClusterSpec, task: ClusterTask, n: int, env: dict[str, str],
                 argv: list[str]) -> dict[str, Any]:
        """The manifest of ``task``'s pod number ``n`` running ``argv`` with ``env`` (``spec``: the pod spec)."""
        node = self.placement.node_for(task.index) if task.role is Role.WORKER else None
        return objects.pod_manifest(
            spec, task, n, namespace=self.namespace, settings=self.settings, image=self.image,
            owner={"metadata": self.owner}, argv=argv, cwd=task_cwd(spec, task), env=env, node=node,
            memory=self.memory.for_task(task), deadline=objects.active_deadline(self.spec, self._runtime_left()),
            start_files=self.start_files)

    def _made_by_launcher(self, name: str, attempt: int) -> bool:
        """Whether the pod ``name`` already there is this root's, of cluster attempt ``attempt``, not being deleted:
        one the launcher made (``make_first_attempt``) for this supervisor to take."""
        if not self.in_pod:
            return False
        return adoption.made_by_launcher(self.core.read_namespaced_pod(name, self.namespace), self.owner["uid"],
                                         attempt)

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
            self._after_oom(pod)
        up = starting and code is None and objects.pod_ready(pod)
        return Observation(task.name, code, up=up,
                           detail=self._exit_detail(task) if code not in (None, 0) else "",
                           waiting=objects.waiting_reason(pod, task) if starting and not up else "",
                           host=pod.spec.node_name or "" if pod is not None else "")

    def _exit_code(self, task: ClusterTask, pod) -> int | None:
        if pod is None:  # deleted by someone else, and already gone
            return objects.LOST if task.name in self.current else None
        return objects.exit_code(pod, pod.metadata.name in self.ours_deleted)

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
            return self.memory.oom_detail(where, pod)
        return f"{where}: {term.reason or 'terminated'}"

    def _after_oom(self, pod) -> None:
        """A pod that ended: if OOMKilled at an estimated limit, the pods made from now on get a larger one
        (``MemoryLimits.after_oom``) and the warm standby pods, made at the old limit, are replaced."""
        note = self.memory.after_oom(pod)
        if note is None:
            return
        self.event(note)
        names = self.warm.drop()
        if names:
            self.event(f"standby: warm pods {', '.join(names)} made at the old memory limit deleted")

    def _runtime_left(self) -> float | None:
        if not self.settings.max_runtime:
            return None
        if self.host is None:  # the launcher's head start: the cluster starts now
            return self.settings.max_runtime
        return self.settings.max_runtime - (time.time() - self.host.started_at())

    def lost(self) -> str | None:
        left = self._runtime_left()
        if left is not None and left <= 0:
            return f"kubernetes.max_runtime ({self.settings.max_runtime:.0f}s) reached: stopping"
        now = time.monotonic()
        if now - self._owner_checked >= OWNER_CHECK_S:
            self._owner_checked = now
            if not adoption.owner_alive(self.core, self.namespace, self.spec.cluster_id, self.owner["uid"]):
                return (f"ConfigMap {self.spec.cluster_id} (the owner of every object of this cluster) was "
                        f"deleted: stopping")
        return None

    def adopt(self, previous) -> int | None:
        """A replaced pod supervisor's cluster (``ignite_tf.cluster.k8s.adoption``): its pods (each task's newest)
        and how much of their logs is copied; the attempt of the whole cluster to go on from. None: ``previous``
        is another root's (a fresh start)."""
        if not self.in_pod or not adoption.ours(previous, self.owner["uid"]):
            return None
        pods = self.core.list_namespaced_pod(self.namespace,
                                             label_selector=f"{objects.LABEL_CLUSTER}={self.spec.cluster_id}").items
        pods = self.warm.adopt(pods)
        found = adoption.adopted(pods)
        self.attempts.update(found.attempts)
        self.current.update(found.current)
        self.logs.copied = adoption.followed(previous)
        # A limit grown after an OOMKill (``MemoryLimits.after_oom``) is the adopted pods' own: kept for the next.
        self.memory.adopt(pods, self.spec.chief.name)
        self.placement.done = True  # recorded by the supervisor that placed them
        self.event(f"supervisor restarted: re-adopting pods {', '.join(sorted(self.current.values())) or '(none)'} "
                   f"(cluster attempt {found.attempt})")
        return found.attempt

    def hand_over(self) -> None:
        """Leave the pods to the next supervisor: stop copying logs (it goes on from ``adoption.followed``)."""
        self.handed_over = True
        self.logs.hand_over()
        if self.host is not None:
            self.host.record_launcher(adoption.FOLLOWED_KEY, self.logs.followed(self.pods))

    def close(self) -> None:
        if not self.handed_over:
            self.release()



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
