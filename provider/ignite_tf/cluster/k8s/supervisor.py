"""The pod supervisor (``kubernetes.supervisor: pod``, the default): a cluster's supervisor as a pod of its own.

The launcher (``ignite_tf.cluster.k8s.deploy``) makes the cluster's root object (the owner ConfigMap, holding the
spec and the pod backend's settings), its Secret and a Deployment of one supervisor pod, all in the cluster's
namespace, then waits until that pod records the cluster's state. From then on the launching process (a CLI, an
Airflow task, a worker pod of KubernetesExecutor) may end or die: nothing of the training depends on it. This
module is that pod's process (``python -m ignite_tf.cluster.k8s.supervisor CONFIG_DIR``: ``main``).

Every object (the Secret, the Service, the task pods, the Deployment) is owned by the root ConfigMap, never by
the supervisor's pod, so deleting the root cascades to everything while a replaced supervisor deletes nothing.
If the supervisor's pod dies (deleted, evicted, its node lost), the Deployment makes a new one; it waits for
the old one to be gone, reads the recorded state from the Ignite state store and re-adopts the running task
pods (``PodBackend.adopt``) without restarting any healthy task; the chief's log goes on where the old one
stopped copying (``launcher.followed`` in the state). A SIGTERM to the supervisor is a hand-over, not a stop:
a stop is a request in the state store (``StateStore.request_stop``).

When the cluster ends the supervisor deletes the root (its own Deployment goes with it), after the logs are in
the run store and the final state is recorded.

The supervisor's identity in the cluster is the ServiceAccount ``ignite-tf-supervisor`` with the Role of
``docker/k8s/supervisor-rbac.yaml`` (``deploy.RBAC_FILE``): the launcher creates them when missing, or a team's
admin applies that file once per namespace. It holds no cluster-wide right: which Kubernetes nodes hold the
Ignite nodes (placement) the launcher finds and hands over in the root.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from ignite_tf.cluster.k8s import objects
from ignite_tf.cluster.k8s.settings import KubernetesSettings
from ignite_tf.cluster.spec import ClusterSpec
from ignite_tf.contract import ENV_STATE_STORE
from ignite_tf.errors import IgniteTFError
from ignite_tf.state import LOST_AFTER_S, ExitCode, store_from_env

MODULE = "ignite_tf.cluster.k8s.supervisor"
CONTAINER = "supervisor"
CONFIG_DIR = "/etc/ignite-tf/cluster"
"""Where the root ConfigMap (``objects.SPEC_KEY``, ``objects.SETTINGS_KEY``) is mounted in the supervisor's pod."""
ENV_POD_NAME = "IGNITE_TF_SUPERVISOR_POD"
HANDED_OVER = 3
"""Exit status of a supervisor that left its tasks to its successor (its pod was deleted)."""


def wait_until(check, timeout: float, what: str) -> None:
    """Until ``check()`` is true, polling; on ``timeout`` seconds an error saying what was waited for."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise IgniteTFError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.5)


class _Tee:
    """The supervisor's output to its pod log and to ``logs/supervisor.log`` (kept in the run store)."""

    def __init__(self, stream, path: Path):
        self.stream, self.file = stream, open(path, "a", buffering=1)  # noqa: SIM115 - for the process's life

    def write(self, text: str) -> int:
        self.file.write(text)
        return self.stream.write(text)

    def flush(self) -> None:
        self.file.flush()
        self.stream.flush()


def in_cluster_core():
    from kubernetes import client, config

    config.load_incluster_config()
    return client.CoreV1Api()


NODE_GONE_S = 30
"""Seconds before Kubernetes replaces a supervisor whose node is not ready or unreachable (default 300)."""
ALONE_TIMEOUT_S = 120.0
"""Seconds a new supervisor pod waits for its predecessor's pod to be gone (``wait_alone``)."""
REPLACED_S = NODE_GONE_S + ALONE_TIMEOUT_S
"""At most this long between a supervisor pod's last heartbeat and its successor's first (its node given up,
then its pod waited for), beyond ``LOST_AFTER_S``: the cluster's ``lost_after_s`` adds it, so that no reader (a
watching trigger, a retry's ``release_lost``) takes a cluster being handed over for lost."""


def wait_alone(core, namespace: str, cluster_id: str, me: str, timeout: float = ALONE_TIMEOUT_S) -> None:
    """Until no other supervisor pod of this cluster runs (a deleted predecessor finishing its hand-over)."""
    def alone():
        pods = core.list_namespaced_pod(namespace,
                                        label_selector=f"{objects.LABEL_SUPERVISOR_OF}={cluster_id}").items
        return not [p for p in pods if p.metadata.name != me and p.status.phase in ("Pending", "Running")]

    wait_until(alone, timeout, f"the previous supervisor pod of {cluster_id} to end")


def main(argv: list[str] | None = None) -> int:
    """``python -m ignite_tf.cluster.k8s.supervisor CONFIG_DIR``: the supervisor pod's process.

    Exits 0 once the cluster's end is recorded (whatever the outcome), ``HANDED_OVER`` when its pod was deleted
    while the cluster runs (its successor goes on)."""
    from ignite_tf.cluster.k8s.pods import PodBackend
    from ignite_tf.cluster.supervision.loop import Supervisor
    from ignite_tf.runstore import LAYOUT, RunFolder, RunStore

    argv = sys.argv[1:] if argv is None else argv
    config = Path(argv[0] if argv else CONFIG_DIR)
    spec = ClusterSpec.from_dict(json.loads((config / objects.SPEC_KEY).read_text()))
    k8s = json.loads((config / objects.SETTINGS_KEY).read_text())
    namespace, settings = k8s["namespace"], KubernetesSettings.parse(k8s["settings"])
    store = store_from_env()
    if store is None:
        print(f"error: no state store configured ({ENV_STATE_STORE}; the cluster's Secret gives it)", file=sys.stderr)
        return int(ExitCode.INTERNAL_ERROR)
    core = in_cluster_core()
    try:
        root = core.read_namespaced_config_map(spec.cluster_id, namespace)
    except Exception as exc:  # noqa: BLE001 - no root: the cluster was deleted while this pod started
        print(f"the root ConfigMap {spec.cluster_id} is not readable ({str(exc)[:200]}): nothing to supervise")
        return 0
    owner = {"name": root.metadata.name, "uid": root.metadata.uid}
    wait_alone(core, namespace, spec.cluster_id, os.environ.get(ENV_POD_NAME, ""))
    previous = store.get(spec.cluster_id)
    ours = previous is not None and (previous.launcher or {}).get("owner_uid") == owner["uid"]
    if ours and previous.status.final:  # ended, and this pod came back before the root was deleted
        objects.delete_owner(core, namespace, spec.cluster_id)
        return 0
    if spec.run_store:  # the launching host's staging folder means nothing here: this pod's own
        staging = RunFolder(Path(objects.POD_RUN_DIR) / "supervisor" / spec.cluster_id)
        spec = dataclasses.replace(spec, run_dir=str(staging.path),
                                   shard_plan_path=str(staging.shard_plan) if spec.shard_plan_path else None)
    folder = spec.folder
    folder.logs.mkdir(parents=True, exist_ok=True)
    if spec.run_store:  # what an earlier supervisor copied to the store
        run = RunStore(spec.run_store)
        if spec.shard_plan_path:
            Path(spec.shard_plan_path).parent.mkdir(parents=True, exist_ok=True)
            run.get_file(LAYOUT.shard_plan, spec.shard_plan_path)
        if ours:  # before the log mirror starts: it removes from the store what the folder lacks
            run.get_dir(LAYOUT.logs, folder.logs)
    sys.stdout = _Tee(sys.stdout, folder.supervisor_log)
    backend = PodBackend(spec, settings, namespace, k8s["image"], core=core, owner=owner,
                         ignite_hosts=k8s.get("ignite_nodes"))
    supervisor = Supervisor(spec, store, backend)
    # A pid means nothing outside this pod: nobody may signal it (stop is a request in the state store).
    supervisor.state.supervisor_pid = 0
    supervisor.state.supervisor_host = f"pod/{namespace}/{os.environ.get(ENV_POD_NAME, '?')}"
    supervisor.state.lost_after_s = LOST_AFTER_S + REPLACED_S  # a successor pod may take that long to beat
    try:
        supervisor.run()
    finally:
        store.close()
    return HANDED_OVER if backend.handed_over else 0


if __name__ == "__main__":
    sys.exit(main())
