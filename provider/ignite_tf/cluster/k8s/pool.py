"""Warm pools (``kubernetes.warm_pool: SECONDS``): a cluster's first attempt on pods that are already warm.

A Kubernetes launch pays, before its first step, what a local one does not: the pods' scheduling, the kubelet's
start of each container and one TensorFlow import per pod, side by side on the node (the local launcher forks
its tasks from one process that imported TensorFlow once). Retraining starts the same job in the same
namespace again and again; with ``warm_pool`` the supervisor of a sync cluster that succeeded leaves, once its
tasks have ended, one warm pod per task on the node where that task ran (``keep``): the pod imports what the
fork server imports and the run store's client, then waits, for at most ``warm_pool`` seconds. The next cluster
with ``warm_pool`` in the namespace whose tasks fit those pods (the same image, memory, credentials, variables
and, with placement, nodes) runs its first attempt on them (``WarmPool.take``): its supervisor hands each pod
the task's command and environment (TF_CONFIG addresses the pods by their IPs: their names belong to the pool)
and makes them its own (labels, owner); the launcher leaves the first pods to it (``waiting``).

The objects: a pool's root ConfigMap ``<cluster>-pool`` (label ``LABEL``: the cluster that left it), which owns
a Secret with the cluster's credentials (the pods' ``envFrom``) and the pods. A pod ends by itself when nobody
took it in time; an expired pool is deleted by the next cluster with ``warm_pool`` that ends in the namespace
(``sweep``), or by ``kubectl delete configmap -l ignite-tf.io/pool``.

Handing a pod over goes through the state store, which both sides reach already (no port is opened in a pool
pod): under ``pool/<pod uid>`` the claiming supervisor first reserves the pod (``StateStore.post``: one caller
wins), then, once it has every task's pod, replaces the reservation with the go (the command, the working
folder and the variables that differ from the pod's, as for a standby pod). A pod that is not taken in time
closes its own entry the same way (``post``) and ends, so it is never handed over after it stopped waiting.
The credentials are compared without being stored anywhere else: each pod carries a salted scrypt digest of
the Secret's content (``verifier``), which the claimer checks against its own.

Only for clusters whose standby pods would work the same way (sync, pod network, DNS, runtime tasks) with a
pod supervisor and an object-store run root (a pool pod has no shared folder and none of the cluster's start
files: it fetches the plan and the code from the store once it is handed a task).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import os
import secrets
import sys
import time
from typing import Any

from ignite_tf import timeline
from ignite_tf.cluster.commands import task_cwd
from ignite_tf.cluster.k8s import entry, objects, standby, startfiles
from ignite_tf.cluster.k8s.settings import Placement, SupervisorMode
from ignite_tf.cluster.spec import ClusterTask, Role
from ignite_tf.cluster.state import Status
from ignite_tf.contract import ENV_RUN_STORE, STORE_ENV, TASKBOOT_DIR, exit_now

MODULE = "ignite_tf.cluster.k8s.pool"
LABEL = "ignite-tf.io/pool"
"""On a pool's objects: the id of the cluster that left it (removed from a pod that is taken)."""
ANNOTATION_UNTIL = "ignite-tf.io/pool-until"  # unix time after which the pod stops waiting
ANNOTATION_VERIFIER = "ignite-tf.io/pool-credentials"  # salted scrypt digest of the Secret's content
ANNOTATION_ENV = "ignite-tf.io/pool-env"  # the cluster's own variables (spec.env) the pod imported with
ENV_UNTIL = "IGNITE_TF_POOL_UNTIL"
ENV_POD_UID = "IGNITE_TF_POD_UID"
POLL_S = 0.1
MARGIN_S = 5.0  # a pod this close to its end is not taken
RESERVED_S = 30.0  # a reservation without a go this long after the pod's end: the claimer died, the pod ends
SCRYPT = {"n": 2 ** 14, "r": 8, "p": 1, "dklen": 32}
WAITING = "pool: TensorFlow imported, waiting for a cluster"


def mail_key(pod_uid: str) -> str:
    return f"pool/{pod_uid}"


def verifier(secret_env: dict[str, str], salt: bytes | None = None) -> str:
    """``salt$digest`` of ``secret_env`` (scrypt: a digest that is slow to search, salted per pool)."""
    salt = secrets.token_bytes(16) if salt is None else salt
    digest = hashlib.scrypt(json.dumps(secret_env, sort_keys=True).encode(), salt=salt, **SCRYPT)
    return f"{base64.b64encode(salt).decode()}${base64.b64encode(digest).decode()}"


def verifies(secret_env: dict[str, str], given: str) -> bool:
    try:
        salt = base64.b64decode(given.split("$", 1)[0])
    except (ValueError, IndexError):
        return False
    return secrets.compare_digest(verifier(secret_env, salt), given)


def wanted(backend) -> bool:
    """Whether ``backend``'s cluster makes and takes pool pods (see the module docstring)."""
    s = backend.settings
    return (s.warm_pool > 0 and s.supervisor is SupervisorMode.POD and bool(backend.spec.run_store)
            and standby.fits(backend))


def waiting(core, namespace: str, image: str) -> bool:
    """Whether the namespace has pool pods of ``image`` still waiting (the launcher then leaves the first pods
    to its supervisor, which may take them)."""
    now = time.time()
    return any(_open(p, now) and p.spec.containers[0].image == image
               for p in core.list_namespaced_pod(namespace, label_selector=LABEL).items)


def _open(pod, now: float) -> bool:
    until = float((pod.metadata.annotations or {}).get(ANNOTATION_UNTIL, 0))
    return (pod.status.phase == "Running" and not pod.metadata.deletion_timestamp and bool(pod.status.pod_ip)
            and until - MARGIN_S > now)


def _literal_env(container) -> dict[str, str]:
    return {e.name: e.value for e in container.env or [] if e.value is not None}


def _quantities(resources) -> dict[str, dict[str, Any]]:
    from kubernetes.utils import parse_quantity

    def parsed(values):
        return {k: parse_quantity(v) for k, v in (values or {}).items()}

    if isinstance(resources, dict):
        return {"requests": parsed(resources.get("requests")), "limits": parsed(resources.get("limits"))}
    return {"requests": parsed(resources.requests), "limits": parsed(resources.limits)}


# -- the supervisor's side ------------------------------------------------------------------------------------
class WarmPool:
    """A pod supervisor's use of warm pools: ``take`` for its first attempt, ``keep`` at its end."""

    def __init__(self, backend):
        self.backend = backend
        self.taken: dict[str, str] | None = None  # task -> pod, once the first attempt was decided
        self.nodes: dict[str, str] = {}  # task -> the Kubernetes node its pod ran on (as last listed)

    def note_nodes(self) -> None:
        """Remember each task's node (its pool pod goes there: next to the same data), each listing."""
        for task in self.backend.spec.tasks:
            pod = self.backend.task_pod(task)
            if pod is not None and pod.spec.node_name:
                self.nodes[task.name] = pod.spec.node_name

    # -- taking ------------------------------------------------------------------------------------------------
    def take(self, task: ClusterTask, attempt: int) -> bool:
        """Run ``task``'s part of the cluster's first attempt on a pool pod, when every task has one."""
        b = self.backend
        if attempt != 0 or not b.in_pod or b.host is None or not wanted(b):
            return False
        if self.taken is None:
            try:
                self.taken = self.claim()
            except Exception as exc:  # noqa: BLE001 - the pool is only faster: new pods do the same
                b.event(f"warm pool: not used ({type(exc).__name__}: {str(exc)[:200]})")
                self.taken = {}
        if task.name not in self.taken:
            return False
        b.next_attempt(task)
        b.current[task.name] = self.taken[task.name]
        return True

    def candidates(self) -> list:
        """The namespace's pool pods this cluster may take: waiting, of its image, credentials and variables."""
        b, now = self.backend, time.time()
        checked: dict[str, bool] = {}
        env = json.dumps(b.spec.env, sort_keys=True)
        out = []
        for pod in b.core.list_namespaced_pod(b.namespace, label_selector=LABEL).items:
            notes = pod.metadata.annotations or {}
            if not _open(pod, now) or pod.spec.containers[0].image != b.image or notes.get(ANNOTATION_ENV) != env:
                continue
            given = notes.get(ANNOTATION_VERIFIER, "")
            if given not in checked:
                checked[given] = verifies(b.secret_env(), given)
            if checked[given]:
                out.append(pod)
        return out

    def choose(self, pods: list) -> dict[str, Any]:
        """A pod for every task (its memory, and with placement its node), or {} when some task has none."""
        b = self.backend
        left, chosen = list(pods), {}
        for task in b.spec.tasks:
            resources = _quantities(objects.resources(b.settings, b.memory_for(task)))
            node = b.wanted[task.index] if task.role is Role.WORKER and task.index < len(b.wanted) else None
            fits = [p for p in left if _quantities(p.spec.containers[0].resources) == resources]
            if node and b.settings.placement is not Placement.NONE:
                near = [p for p in fits if p.spec.node_name == node]
                fits = near if near or b.settings.placement is Placement.REQUIRED else fits
            if not fits:
                return {}
            chosen[task.name] = fits[0]
            left.remove(fits[0])
        return chosen

    def claim(self) -> dict[str, str]:
        """Reserve, adopt and start a pool pod per task (all or none); task -> pod name."""
        b = self.backend
        store, cluster_id = b.host.store, b.spec.cluster_id
        chosen = self.choose(self.candidates())
        if not chosen:
            return {}
        reserved: dict[str, dict[str, Any]] = {}
        for name, pod in chosen.items():
            record = {"reserved": cluster_id, "time": time.time()}
            if not store.post(mail_key(pod.metadata.uid), record):
                for n, r in reserved.items():  # taken by another cluster meanwhile: give back ours
                    store.replace_mail(mail_key(chosen[n].metadata.uid), r, None)
                b.event(f"warm pool: pod {pod.metadata.name} was taken by another cluster; new pods")
                return {}
            reserved[name] = record
        spec = dataclasses.replace(b.pod_spec, tasks=[dataclasses.replace(t, host=chosen[t.name].status.pod_ip)
                                                      for t in b.pod_spec.tasks])
        for task in spec.tasks:
            pod = chosen[task.name]
            argv = b.command_for(spec, task)
            body = b.pod_body(spec, task, 0, b.pod_env(spec, task, 0), argv)
            body["metadata"]["annotations"][objects.ANNOTATION_CLUSTER_ATTEMPT] = "0"
            patch = [{"op": "replace", "path": f"/metadata/{k}", "value": body["metadata"][k]}
                     for k in ("labels", "annotations", "ownerReferences")]
            if "activeDeadlineSeconds" in body["spec"]:  # max_runtime: a pod may be given a deadline, not a later one
                patch.append({"op": "add", "path": "/spec/activeDeadlineSeconds",
                              "value": body["spec"]["activeDeadlineSeconds"]})
            b.core.patch_namespaced_pod(pod.metadata.name, b.namespace, patch)
            wanted_env = {e["name"]: e["value"] for e in body["spec"]["containers"][0]["env"] if "value" in e}
            go = {"go": standby.go_record(_literal_env(pod.spec.containers[0]), wanted_env), "argv": argv,
                  "cwd": task_cwd(spec, task), "cluster_id": cluster_id}
            if not store.replace_mail(mail_key(pod.metadata.uid), reserved[task.name], go):
                raise RuntimeError(f"the reservation of pool pod {pod.metadata.name} went")
        b.event("warm pool: first attempt on the warm pods " + ", ".join(
            f"{t} -> {p.metadata.name} ({p.spec.node_name})" for t, p in chosen.items()))
        return {t: p.metadata.name for t, p in chosen.items()}

    # -- keeping -----------------------------------------------------------------------------------------------
    def keep(self, status: Status) -> list[str]:
        """At the cluster's end (its tasks stopped): a pool of one warm pod per task when it succeeded; the pods."""
        b = self.backend
        if status is not Status.SUCCEEDED or not b.in_pod or not wanted(b):
            return []
        if set(self.nodes) != {t.name for t in b.spec.tasks}:
            b.event("warm pool: not made (the nodes of the tasks' pods were not seen)")
            return []
        try:
            sweep(b.core, b.namespace, b.host.store if b.host is not None else None)
            return self._make()
        except Exception as exc:  # noqa: BLE001 - only a faster next start
            b.event(f"warm pool: not made ({type(exc).__name__}: {str(exc)[:200]})")
            return []

    def _make(self) -> list[str]:
        b, s = self.backend, self.backend.settings
        until = time.time() + s.warm_pool
        cluster_id, secret_env = b.spec.cluster_id, b.secret_env()
        name = f"{cluster_id}-pool-{secrets.token_hex(2)}"  # a cluster run again under its id may leave another
        meta = {"labels": {**s.labels, "app.kubernetes.io/managed-by": "ignite-tf", LABEL: cluster_id}}
        root = b.core.create_namespaced_config_map(b.namespace, {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **meta},
            "data": {"until": str(until)}})
        owner = objects.owner_ref({"metadata": {"name": root.metadata.name, "uid": root.metadata.uid}})
        secret = f"{name}-env"
        b.core.create_namespaced_secret(b.namespace, {
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": secret, **meta, "ownerReferences": [owner]}, "stringData": secret_env})
        notes = {ANNOTATION_UNTIL: str(until), ANNOTATION_VERIFIER: verifier(secret_env),
                 ANNOTATION_ENV: json.dumps(b.spec.env, sort_keys=True)}
        env = {**b.spec.env, ENV_RUN_STORE: b.spec.run_store,
               "PYTHONPATH": TASKBOOT_DIR, ENV_UNTIL: str(until),
               **{k: v for k, v in b.pod_env(b.pod_spec, b.spec.tasks[0], 0, ask_store=False).items()
                  if k in STORE_ENV}}
        made = []
        for task in b.spec.tasks:
            body = b.pod_body(b.pod_spec, task, 0, env, [])
            body["metadata"] = {"name": f"{name}-{task.name}", **meta, "annotations": {
                **body["metadata"]["annotations"], **notes}, "ownerReferences": [owner]}
            spec = body["spec"]
            for key in ("hostname", "subdomain", "activeDeadlineSeconds"):
                spec.pop(key, None)
            spec["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [  # where its task ran: next to the same data
                    {"key": "metadata.name", "operator": "In", "values": [self.nodes[task.name]]}]}]}}}
            container = spec["containers"][0]
            container["command"] = ["python", "-m", MODULE]
            container["env"] = [e for e in container["env"] if "valueFrom" in e] + [
                {"name": ENV_POD_UID, "valueFrom": {"fieldRef": {"fieldPath": "metadata.uid"}}}]
            container["env"] += [{"name": k, "value": v} for k, v in sorted(env.items())]
            container["envFrom"] = [{"secretRef": {"name": secret}}]
            spec["volumes"] = [v for v in spec.get("volumes", []) if v["name"] != startfiles.VOLUME]
            container["volumeMounts"] = [m for m in container.get("volumeMounts", [])
                                         if m["name"] != startfiles.VOLUME]
            b.core.create_namespaced_pod(b.namespace, body)
            made.append(body["metadata"]["name"])
        b.event(f"warm pool: {', '.join(made)} wait {s.warm_pool:g}s for the next cluster in {b.namespace}")
        return made


def sweep(core, namespace: str, store=None, now: float | None = None) -> list[str]:
    """Delete the namespace's pools past their end (their pods and Secret go with them) and, given the state
    ``store``, their pods' entries in it; the pools' names."""
    now = time.time() if now is None else now
    gone = []
    expired = [root for root in core.list_namespaced_config_map(namespace, label_selector=LABEL).items
               if float((root.data or {}).get("until", 0)) + RESERVED_S + MARGIN_S < now]
    # A pod that was taken left its pool (and removed its entry when it took it): only the pool's own are left.
    pods = core.list_namespaced_pod(namespace, label_selector=LABEL).items if expired and store is not None else []
    for root in expired:
        for pod in pods:
            if root.metadata.uid in {ref.uid for ref in pod.metadata.owner_references or []}:
                key = mail_key(pod.metadata.uid)
                if (got := store.mail(key)) is not None:
                    store.replace_mail(key, got, None)
        objects.delete_owner(core, namespace, root.metadata.name)
        gone.append(root.metadata.name)
    return gone


# -- the pod's side --------------------------------------------------------------------------------------------
def wait_for_go(store, key: str, until: float) -> dict[str, Any] | None:
    """The go posted for this pod; None when nobody took it in time (its entry is then closed); ``{"expired":
    CLUSTER}`` when a cluster reserved it and never handed it its task (that cluster's supervisor was lost)."""
    while True:
        try:
            got = store.mail(key)
        except Exception as exc:  # noqa: BLE001 - a store hiccup: ask again
            print(f"pool: state store: {exc}", file=sys.stderr, flush=True)
            got = False
        now = time.time()
        if got:
            if "go" in got:
                return got
            if "closed" in got:
                return None
            if "reserved" in got and now > until + RESERVED_S and store.replace_mail(key, got, {"closed": now}):
                return {"expired": got["reserved"]}
        elif got is None and now > until and store.post(key, {"closed": now}):
            return None
        time.sleep(POLL_S)


def become(record: dict[str, Any]) -> None:
    """Run the task the go names in this process; never returns."""
    go = record["go"]
    for k in go.get("unset", []):
        os.environ.pop(k, None)
    os.environ.update(go.get("set", {}))
    os.environ.pop(timeline.ENV_CARRIED, None)  # the pod's own start is not this cluster's
    timeline.carry("pool_go")
    path = entry.prepare(record["cwd"], start_dir=None)  # the pool's pod has none of the cluster's start files
    sys.path[:0] = [p for p in path if p != TASKBOOT_DIR]
    sys.stdout.flush()
    standby.become({}, record["argv"])


def main() -> None:
    key, until = mail_key(os.environ[ENV_POD_UID]), float(os.environ[ENV_UNTIL])
    standby.preload()
    standby.store_client(os.environ.get(ENV_RUN_STORE, ""))
    print(f"[ignite-tf] {WAITING}", flush=True)
    from ignite_tf.cluster.state import store_from_env

    store = store_from_env()
    if store is None:
        sys.exit("pool: no state store in the environment")
    record = wait_for_go(store, key, until)
    if record is None:
        print("[ignite-tf] pool: not taken in time; ending", flush=True)
        exit_now(0)
    if "expired" in record:  # maybe made that cluster's already: it ends as a lost task, which is restarted
        print(f"[ignite-tf] pool: reserved by cluster {record['expired']} and never handed its task; ending",
              flush=True)
        exit_now(128 + 15)
    print(f"[ignite-tf] pool: taken by cluster {record.get('cluster_id')}", flush=True)
    try:  # this pod left its pool (its claimer relabelled it first): nobody looks for it under this key again
        store.replace_mail(key, record, None)
    except Exception as exc:  # noqa: BLE001 - an entry left behind costs a few hundred bytes
        print(f"pool: state store: {exc}", file=sys.stderr, flush=True)
    become(record)


if __name__ == "__main__":
    main()
