"""Adoption: a replaced pod supervisor's cluster taken over by the next one, and the root that keeps it alive.

A pod supervisor's pod may go while its cluster trains (deleted, evicted, its node lost); the Deployment makes a
new one (``ignite_tf.cluster.k8s.supervisor``), whose pod backend takes the running task pods as its own
(``PodBackend.adopt``) without restarting any healthy task. What it goes on from is what those pods and the
recorded state say: each task's newest pod and its number, the cluster attempt they belong to
(``objects.ANNOTATION_CLUSTER_ATTEMPT``), and how much of each pod's log the old supervisor copied
(``launcher.followed`` in the state, written as it hands over). A cluster is its supervisor's only while its root
(the owner ConfigMap, ``objects.owner_manifest``) is the one it was made under (``owner_alive``); pods the
launcher made for it under that root are its own too (``made_by_launcher``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ignite_tf.cluster.k8s import objects
from ignite_tf.cluster.k8s.client import api_exception
from ignite_tf.retries import transient

FOLLOWED_KEY = "followed"
"""In ``ClusterState.launcher``: pod name -> the bytes of its log copied so far (``PodLogs.followed``)."""


@dataclass
class Adopted:
    """What a replaced supervisor's task pods say: each task's newest pod (``current``) and its number
    (``attempts``), and the cluster attempt to go on from (``attempt``)."""

    attempts: dict[str, int] = field(default_factory=dict)
    current: dict[str, str] = field(default_factory=dict)
    attempt: int = 0


def ours(previous, owner_uid: str) -> bool:
    """Whether the recorded state ``previous`` (a ``ClusterState``) is of the cluster under the root ``owner_uid``
    (else another root's: a fresh start under the same id)."""
    return (previous.launcher or {}).get("owner_uid") == owner_uid


def adopted(pods: list) -> Adopted:
    """Each task's newest pod among ``pods`` (a replaced supervisor's task pods, as listed) and the newest cluster
    attempt among them."""
    found = Adopted()
    for pod in sorted(pods, key=lambda p: int(p.metadata.labels.get(objects.LABEL_ATTEMPT, 0))):
        task, n = (pod.metadata.labels.get(objects.LABEL_TASK),
                   int(pod.metadata.labels.get(objects.LABEL_ATTEMPT, 0)))
        if task is None:
            continue
        found.attempts[task], found.current[task] = n, pod.metadata.name
        found.attempt = max(found.attempt,
                            int((pod.metadata.annotations or {}).get(objects.ANNOTATION_CLUSTER_ATTEMPT, 0)))
    return found


def followed(previous) -> dict[str, int]:
    """How much of each pod's log the supervisor that recorded ``previous`` copied (it goes on from there)."""
    return {name: int(n) for name, n in ((previous.launcher or {}).get(FOLLOWED_KEY) or {}).items()}


def made_by_launcher(pod, owner_uid: str, attempt: int) -> bool:
    """Whether ``pod`` is of the root ``owner_uid``, of cluster attempt ``attempt``, not being deleted: one the
    launcher made (its head start) for the supervisor to take."""
    owners = {ref.uid for ref in pod.metadata.owner_references or []}
    return (owner_uid in owners and not pod.metadata.deletion_timestamp
            and (pod.metadata.annotations or {}).get(objects.ANNOTATION_CLUSTER_ATTEMPT) == str(attempt))


def owner_alive(core, namespace: str, cluster_id: str, owner_uid: str) -> bool:
    """Whether the root of ``cluster_id`` (the ConfigMap named after it) is still the one of uid ``owner_uid`` and
    not being deleted; an API hiccup is not a deletion."""
    try:
        cm = core.read_namespaced_config_map(cluster_id, namespace)
    except api_exception() as exc:
        return exc.status != 404
    except Exception as exc:
        if transient(exc):  # the API server away (connection refused, a timeout): not an answer either
            return True
        raise
    return cm.metadata.uid == owner_uid and not cm.metadata.deletion_timestamp
