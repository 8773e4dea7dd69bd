"""Warm standby pods (``kubernetes.standby: true``): a restart of a sync cluster handed to pods that are ready.

A sync cluster restarts whole when one worker is lost, and each new pod used to pay its scheduling, start and
TensorFlow's import (about 5 of the 15.5 s from a deleted pod to the next epoch) before it could restore. With
``standby`` the pod supervisor keeps (``WarmPods``, asked by its pod backend), once the cluster is up, one
more pod per task: ``python -m ignite_tf.cluster.k8s.standby -- python -m ignite_tf.runtime ...`` under the usual
first process (``ignite_tf.cluster.k8s.entry``: start files, shipped code, taskboot), which imports what the fork
server imports (``ignite_tf.cluster.forkserver.PRELOAD``), reads what the fork server's hook reads (the columns and
the label's classes) and imports the run store's client (``warm``), and then waits. At the next whole-cluster
restart the supervisor writes a go record into the cluster's state (``GO_KEY`` in ``ClusterState.launcher``): the
generation, the cluster attempt and their HMAC-SHA256 under the cluster's own key (``ENV_KEY``: made at the
launch, in the cluster's Secret, which only its pods and its supervisor take). Each standby pod of that
generation reads it from the state store, checks the signature, sets the attempt (nothing else: its
environment, run store, code and module are the ones it was made with) and runs the task's module in-process
(as a task forked from the fork server does). The state store is open to every holder of the Ignite
connection; a go record they write is refused for want of the key, and the pod keeps waiting. The old
attempt's pods have ended by then (``PodBackend.stop`` waits for it), so the standby restores the newest
backup. The next generation is made once the restarted attempt is up and has recorded an epoch (its imports
would otherwise take the CPU from the restore).

A standby generation's pods have their own names and DNS names (``<task>-s<generation>``, in the cluster's
headless Service), and the TF_CONFIG they were made with names those: the pods of a generation address each
other only. The go record travels through the state store the pods already write to (no port is opened
in a standby pod).

Cost: each task's memory twice (a standby pod requests what its task pod requests) and one TensorFlow import
per task beside the training once per attempt; hence off by default. Used for sync clusters whose tasks run
the runtime (an ``entry_point``); a user command may configure TensorFlow before importing it, so its pods
start as before.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import os
import runpy
import secrets
import sys
import time
import traceback
from typing import Any

from ignite_tf import timeline
from ignite_tf.cluster import forkserver
from ignite_tf.cluster.k8s import client, objects
from ignite_tf.cluster.spec import ClusterSpec, ClusterTask, Mode
from ignite_tf.contract import ENV_ATTEMPT, ENV_CLUSTER_ID, ENV_RUN_STORE, exit_now

MODULE = "ignite_tf.cluster.k8s.standby"
GO_KEY = "standby_go"
"""In ``ClusterState.launcher``: ``{"generation": K, "attempt": N, "mac": HEX}`` (``go``)."""
ENV_KEY = "IGNITE_TF_CLUSTER_KEY"
"""The cluster's own key (hex), in its Secret: signs the go records. Task processes do not get it."""
ENV_GENERATION = "IGNITE_TF_STANDBY_GENERATION"
LABEL = "ignite-tf.io/standby"
"""On a standby pod until the supervisor hands it an attempt (then removed)."""
POLL_S = 0.1  # a poll is one small read of the state (per pod: 10 a second, while the cluster trains)
WAITING = "standby: TensorFlow imported, waiting for an attempt"
"""What a standby pod prints once it is warm (in its own log)."""
ASK_S = 2.0  # how often a restarted attempt's epochs are asked for before its next warm generation


def hostname(task_name: str, generation: int) -> str:
    return f"{task_name}-s{generation}"


def generation_of(pod_hostname: str) -> int:
    """The standby generation a pod's hostname names (0: a task pod made as such)."""
    head, _, tail = pod_hostname.rpartition("-s")
    return int(tail) if head and tail.isdigit() else 0


def command(argv: list[str]) -> list[str] | None:
    """The standby's command for a task's ``argv``, or None when that task cannot wait warm (not ``python -m
    MODULE ...``: a user command)."""
    return [argv[0], "-m", MODULE, "--", *argv] if forkserver.module_of(argv, python=None) else None


def new_key() -> str:
    """A cluster's key (``ENV_KEY``), made once at its launch."""
    return secrets.token_hex(32)


def _mac(key: str, cluster_id: str, generation: int, attempt: int) -> str:
    message = f"{cluster_id}\0{int(generation)}\0{int(attempt)}".encode()
    return hmac.new(bytes.fromhex(key), message, hashlib.sha256).hexdigest()


def go(key: str, cluster_id: str, generation: int, attempt: int) -> dict[str, Any]:
    """The go record that hands ``attempt`` to the standby pods of ``generation``."""
    return {"generation": generation, "attempt": attempt, "mac": _mac(key, cluster_id, generation, attempt)}


def signed(record: Any, key: str, cluster_id: str) -> bool:
    """Whether ``record`` is a go record made with ``key`` for ``cluster_id``."""
    try:
        return hmac.compare_digest(str(record["mac"]), _mac(key, cluster_id, record["generation"], record["attempt"]))
    except (KeyError, TypeError, ValueError):
        return False


def fits(backend) -> bool:
    """Whether ``backend``'s cluster (a ``PodBackend``'s) can run its attempts on warm pods: sync, on the pod network
    with DNS, every task the runtime (a user command may configure TensorFlow before importing it)."""
    s = backend.settings
    return (backend.spec.mode is Mode.SYNC and s.dns and not s.host_network
            and all(command(backend.command_for(backend.pod_spec, t)) for t in backend.spec.tasks))


# -- the supervisor's side ------------------------------------------------------------------------------------
class WarmPods:
    """The warm pods a pod supervisor keeps for its sync cluster's next restart. ``backend``: the cluster's
    ``PodBackend`` (``ignite_tf.cluster.k8s.pods``), which asks ``keep`` each poll and ``take`` at each task's
    start, and whose pods, manifests and state these use."""

    def __init__(self, backend):
        self.backend = backend
        self.pods: dict[str, str] = {}  # task -> its warm pod's name
        self.generation = 0
        self.made = 0.0  # when the generation's pods were made (monotonic)
        self.use: dict[int, bool] = {}  # cluster attempt -> whether it was handed to the warm pods
        self.up_since: float | None = None  # when every task's pod was first seen up (unix time)
        self.asked = 0.0

    def wanted(self) -> bool:
        return self.backend.settings.standby and fits(self.backend)

    def spec(self, generation: int) -> ClusterSpec:
        """The pod spec with every task addressed by its standby pod of ``generation``."""
        b = self.backend
        service = objects.service_name(b.spec.cluster_id)
        tasks = [dataclasses.replace(t, host=f"{hostname(t.name, generation)}.{service}.{b.namespace}.svc")
                 for t in b.pod_spec.tasks]
        return dataclasses.replace(b.pod_spec, tasks=tasks)

    def keep(self) -> None:
        """One warm pod per task for the next attempt: the first generation once every task's pod is up, a
        later one once the restarted attempt has also recorded an epoch (``trained_since_up``). A generation
        with a pod that ended or went is replaced whole (its pods address each other)."""
        b = self.backend
        if not self.wanted() or b.host is None or b.cleaned:
            return
        if self.pods:
            names = list(self.pods.values())
            settled = time.monotonic() - self.made > 5 * b.poll_s  # made, but maybe not listed yet
            broken = [n for n in names if (n not in b.pods and settled) or (
                n in b.pods and (objects.pod_ended(b.pods[n]) or b.pods[n].metadata.deletion_timestamp))]
            if broken:
                b.event(f"standby pod {broken[0]} ended: replacing its generation")
                self.drop()
            return
        if not all(objects.pod_ready(b.task_pod(t)) for t in b.spec.tasks):
            self.up_since = None
            return
        if self.generation and not self.trained_since_up():
            return
        self.generation += 1
        gen, spec = self.generation, self.spec(self.generation)
        made = {}
        for task in spec.tasks:
            env = b.pod_env(spec, task, b.host.cluster_attempt() + 1, ask_store=False)
            env[ENV_GENERATION] = str(gen)
            body = b.pod_body(spec, task, b.attempts.get(task.name, 0) + 1, env, command(b.command_for(spec, task)))
            body["metadata"]["name"] = f"{b.spec.cluster_id}-{task.name}-s{gen}"
            body["metadata"]["labels"][LABEL] = str(gen)
            body["spec"]["hostname"] = hostname(task.name, gen)
            b.core.create_namespaced_pod(b.namespace, body)
            made[task.name] = body["metadata"]["name"]
        self.pods, self.made = made, time.monotonic()
        b.event(f"standby: warm pods {', '.join(made.values())} made for the next restart")

    def trained_since_up(self) -> bool:
        """Whether a restarted attempt recorded an epoch since all its pods were up: the next generation's
        TensorFlow imports wait for it, so that they do not take the CPU from its restore and first epoch."""
        now = time.time()
        if self.up_since is None:
            self.up_since, self.asked = now, now
        if now - self.asked < ASK_S:
            return False
        self.asked = now
        b = self.backend
        try:
            return any(float(e.get("time", 0)) > self.up_since for e in b.host.epochs())
        except Exception:  # noqa: BLE001 - a store hiccup: ask again later
            return False

    def take(self, task: ClusterTask, attempt: int) -> bool:
        """Hand ``task``'s part of ``attempt`` to its warm pod, when every task has one (decided once per
        attempt: the pods of one attempt address either all standbys or all new pods)."""
        b = self.backend
        if attempt not in self.use:
            live = [b.pods.get(n) for n in self.pods.values()]
            self.use = {attempt: bool(self.pods) and b.host is not None and bool(b.cluster_key)
                        and set(self.pods) == {t.name for t in b.spec.tasks}
                        and all(p is not None and not objects.pod_ended(p) and not p.metadata.deletion_timestamp
                                for p in live)}
        if not self.use[attempt] or task.name not in self.pods:
            return False
        name = self.pods.pop(task.name)
        # One record for the attempt's every task; saved by the loop once the attempt's tasks are started.
        b.host.record_launcher(GO_KEY, go(b.cluster_key, b.spec.cluster_id, self.generation, attempt))
        n = b.next_attempt(task)
        try:
            b.core.patch_namespaced_pod(name, b.namespace, {"metadata": {
                "labels": {LABEL: None, objects.LABEL_ATTEMPT: str(n)},
                "annotations": {objects.ANNOTATION_CLUSTER_ATTEMPT: str(attempt)}}})
        except Exception as exc:  # noqa: BLE001 - only a re-adopting supervisor reads these
            b.event(f"standby: labelling pod {name} failed: {client.error_message(exc)}")
        b.current[task.name] = name
        if not self.pods:
            b.event(f"standby: attempt {attempt} handed to the warm pods of generation {self.generation}")
        return True

    def drop(self) -> list[str]:
        """Delete the warm pods (a generation that broke, or made at a memory limit since grown); their names."""
        names = list(self.pods.values())
        self.pods = {}
        if names:
            self.backend.delete(names, 0)
        return names

    def adopt(self, pods: list) -> list:
        """A replaced supervisor's pods: its warm ones are deleted, not adopted (the next generation is made
        afresh, numbered above every earlier one); returns the others."""
        warm = [p for p in pods if LABEL in (p.metadata.labels or {})]
        self.generation = max([generation_of(p.spec.hostname or "") for p in pods], default=0)
        if warm:
            self.backend.delete([p.metadata.name for p in warm], 0)
        return [p for p in pods if p not in warm]


# -- the pod's side --------------------------------------------------------------------------------------------
def preload() -> None:
    for name in forkserver.PRELOAD:
        forkserver.load(name)


def warm(argv: list[str]) -> None:
    """What the task does first that does not depend on its attempt, done while waiting: the fork server's hook
    for its module (the runtime's ``preload``: the columns and the label's classes from Ignite) and the run
    store's client modules (s3fs and its botocore: a second or more of the backup's first read). A failure is
    only reported: the task meets it again and reports it itself."""
    hook = forkserver.HOOKS.get(argv[2])
    for what, step in ((hook, lambda: forkserver.call_hook(hook, argv[3:])),
                       ("the run store's client", lambda: store_client(os.environ.get(ENV_RUN_STORE, "")))):
        if what is None:
            continue
        try:
            step()
        except BaseException as exc:  # noqa: BLE001 - see above
            print(f"standby: {what} failed ({type(exc).__name__}: {exc}); the task does it itself", flush=True)


def store_client(url: str) -> None:
    """Import the run store's client modules for ``url`` (nothing for a folder)."""
    from ignite_tf.runstore import RunStore, is_remote

    if is_remote(url):
        RunStore(url).fs  # noqa: B018 - imports the store's fsspec implementation


def wait_for_go(generation: int, cluster_id: str, key: str, store=None) -> int | None:
    """The attempt handed to this pod's ``generation`` by a go record signed with ``key``, read from the state
    store; None when the cluster ended first. A record not signed with ``key`` is refused (said once each)."""
    if store is None:
        from ignite_tf.state import store_from_env

        store = store_from_env()
    if store is None:
        sys.exit("standby: no state store in the environment")
    refused: list[Any] = []
    while True:
        try:
            state = store.get(cluster_id, records=False)  # one read: epochs and reads are of no use here
        except Exception as exc:  # noqa: BLE001 - a store hiccup: ask again
            print(f"standby: state store: {exc}", file=sys.stderr, flush=True)
            state = None
        if state is not None:
            record = (state.launcher or {}).get(GO_KEY)
            if isinstance(record, dict) and record.get("generation") == generation:
                if signed(record, key, cluster_id):
                    return int(record["attempt"])
                if record not in refused:
                    refused.append(record)
                    print(f"[ignite-tf] standby: a go record for generation {generation} not signed with this "
                          "cluster's key was refused; waiting", flush=True)
            if state.status.final:
                return None
        time.sleep(POLL_S)


def become(attempt: int, argv: list[str]) -> None:
    """Run ``argv`` (``python -m MODULE ARGS``) in this process as cluster attempt ``attempt``; never returns."""
    code = 1
    try:
        os.environ[ENV_ATTEMPT] = str(int(attempt))
        timeline.carry("standby_go")
        sys.argv = [argv[2], *argv[3:]]
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - the task's failure is its exit status
        traceback.print_exc()
    finally:
        exit_now(code)


def main(argv: list[str]) -> None:
    if len(argv) < 4 or argv[0] != "--" or argv[2] != "-m":
        sys.exit(f"usage: python -m {MODULE} -- python -m MODULE [ARGS...]")
    key = os.environ.pop(ENV_KEY, "")  # the task that runs here needs it no more than any other task
    if not key:
        sys.exit(f"standby: no {ENV_KEY} in the environment (the cluster's Secret gives it): nothing can be trusted")
    timeline.carry("standby_started")
    preload()
    warm(argv[1:])
    print(f"[ignite-tf] {WAITING}", flush=True)
    attempt = wait_for_go(int(os.environ[ENV_GENERATION]), os.environ[ENV_CLUSTER_ID], key)
    if attempt is None:
        print("[ignite-tf] standby: the cluster ended; not needed", flush=True)
        exit_now(0)
    become(attempt, argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
