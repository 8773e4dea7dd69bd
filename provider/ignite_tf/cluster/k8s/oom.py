"""The memory limit of a cluster's task pods: the estimate's (``ignite_tf.cluster.k8s.memory``) or the user's, and
its growth after an OOMKill.

Every task pod's request and limit is the estimate unless ``kubernetes.resources`` gives memory; a sync cluster's
workers but the chief get the estimate of their own cost (``MemoryEstimate.for_peer``) while the estimate sizes
them apart. A task OOMKilled at a limit the estimate chose makes every pod made after it get ``OOM_GROWTH`` times
that limit: the estimate is measured on 2 CPUs and a first attempt, a restarted task or a larger node may need
more, and a restart at the same limit would be killed again at the same point (issue 24: a restored attempt's
peak climbed while it trained, on both workers, until the kernel killed it at the estimate). A limit the user set
is theirs to change (the failure says so). A pod supervisor that replaces another keeps a limit grown by its
predecessor: it is the adopted pods' own (``MemoryLimits.adopt``).
"""

from __future__ import annotations

import math

from ignite_tf.cluster.k8s import objects
from ignite_tf.cluster.k8s.memory import MemoryEstimate, parse_mib
from ignite_tf.cluster.k8s.settings import KubernetesSettings
from ignite_tf.cluster.spec import ClusterSpec, ClusterTask, Mode, Role

OOM_GROWTH = 1.5
"""A task OOMKilled at the estimated limit: the pods made after it get this many times that limit."""


def limit_of(pod) -> str | None:
    """The memory limit of ``pod``'s task container (a quantity such as ``560Mi``), None when it has none."""
    for c in pod.spec.containers:
        if c.name == objects.CONTAINER and c.resources and c.resources.limits:
            return c.resources.limits.get("memory")
    return None


def describe_limit(pod) -> str:
    """``pod``'s memory limit as a failure names it: the quantity and, where it differs, in MiB."""
    limit = limit_of(pod)
    if limit is None:
        return "(none)"
    mib = parse_mib(limit)
    return f"{limit} ({mib:.0f} MiB)" if mib else str(limit)


def grown(limit_mib: float) -> int:
    """The limit in MiB after an OOMKill at ``limit_mib``: ``OOM_GROWTH`` times it, rounded up to 16 MiB."""
    return int(math.ceil(limit_mib * OOM_GROWTH / 16) * 16)


def _largest(quantities: list[str]) -> str:
    return max(quantities, key=lambda q: parse_mib(q) or 0.0, default="")


class MemoryLimits:
    """The memory request and limit of one cluster's task pods, as its pod backend gives them (``settings``: its
    ``KubernetesSettings``, whose ``resources`` may set memory). The methods return what to say in the cluster's
    log; the backend says it."""

    def __init__(self, settings: KubernetesSettings):
        self.settings = settings
        self.limit = ""  # every task pod's, but ``peer_limit``'s
        self.peer_limit = ""  # a sync cluster's workers but the chief, when the estimate sizes them apart
        self.estimate = ""
        self.grown: set[str] = set()  # pods OOMKilled at an estimated limit, already counted
        self.adopted = ""  # the largest limit of a replaced pod supervisor's pods (``adopt``)
        self.adopted_peer = ""  # ... of those but the chief's

    def choose(self, est: MemoryEstimate, spec: ClusterSpec) -> list[str]:
        """Set the limits from the estimate ``est`` of ``spec``'s tasks, the user's resources and the adopted pods'
        limits; returns what to say."""
        notes = []
        self.estimate = est.quantity()
        given = objects.resources(self.settings, est.quantity())
        self.limit = given["limits"]["memory"]
        notes.append(est.describe())
        peer = est.for_peer()
        if spec.mode is Mode.SYNC and spec.workers > 1 and self.limit == est.quantity() \
                and given["requests"]["memory"] == est.quantity() and peer.quantity() != est.quantity():
            # The chief alone saves the model: the others are measured apart (``Baseline.peer_param_bytes``).
            self.peer_limit = peer.quantity()
            notes.append(peer.describe())
        if (parse_mib(self.adopted) or 0.0) > (parse_mib(self.limit) or 0.0):
            self.limit = self.adopted
            notes.append(f"memory: the re-adopted pods' limit {self.limit} (grown after an OOMKill) kept for new pods")
        if self.peer_limit and (parse_mib(self.adopted_peer) or 0.0) > parse_mib(self.peer_limit):
            self.peer_limit = ""  # grown after an OOMKill: every task gets self.limit
        if given["limits"]["memory"] != est.quantity() or given["requests"]["memory"] != est.quantity():
            notes.append(f"memory set by kubernetes.resources: request {given['requests']['memory']}, limit "
                         f"{given['limits']['memory']} (estimate {est.quantity()})")
        return notes

    def for_task(self, task: ClusterTask) -> str:
        """The memory request and limit of ``task``'s pods: ``peer_limit`` for a sync worker but the chief while
        the estimate sizes them apart, else ``limit``."""
        return self.peer_limit if self.peer_limit and task.role is Role.WORKER and task.index > 0 else self.limit

    def after_oom(self, pod) -> str | None:
        """A pod OOMKilled at a limit the estimate chose (no memory in ``kubernetes.resources``): the pods made from
        now on get ``OOM_GROWTH`` times its limit. Returns what to say when the limits changed (then the pods made
        at the old limit, such as warm standby pods, are to be replaced), None when they did not."""
        term = objects.pod_terminated(pod) if pod is not None else None
        if term is None or term.reason != "OOMKilled" or pod.metadata.name in self.grown:
            return None
        given = self.settings.resources
        if any("memory" in (given.get(kind) or {}) for kind in ("requests", "limits")):
            return None
        self.grown.add(pod.metadata.name)
        old = parse_mib(limit_of(pod)) or parse_mib(self.limit) or 0.0
        larger = grown(old)
        peers, self.peer_limit = self.peer_limit, ""  # from now on every task gets self.limit
        if larger > (parse_mib(self.limit) or 0.0):
            self.limit = f"{larger}Mi"
            return (f"pod {pod.metadata.name} OOMKilled at its estimated memory limit {old:.0f}Mi (estimate "
                    f"{self.estimate}): the pods made from now on get {self.limit} (x{OOM_GROWTH})")
        if peers:
            return (f"pod {pod.metadata.name} OOMKilled at its estimated memory limit {old:.0f}Mi: every pod "
                    f"made from now on gets the chief's {self.limit} (at least x{OOM_GROWTH})")
        return None  # a pod of the same attempt, at the same limit, already grew it

    def oom_detail(self, where: str, pod) -> str:
        """Why the OOMKilled ``pod`` (``where``: which pod on which node) failed, and what changes it."""
        limit = describe_limit(pod)
        if pod.metadata.name in self.grown:
            return (f"{where}: OOMKilled at its memory limit {limit} (estimate {self.estimate}); "
                    f"a restart's pods get {self.limit}, or set kubernetes.resources.limits.memory")
        return (f"{where}: OOMKilled at its memory limit {limit} (estimate {self.estimate}); "
                f"raise kubernetes.resources.limits.memory or lower batch_size")

    def adopt(self, pods: list, chief: str) -> None:
        """The limits of a replaced supervisor's ``pods`` (``chief``: the chief task's name): one grown after an
        OOMKill is theirs, and kept for the pods made next (``choose``)."""
        self.adopted = _largest([limit_of(p) or "" for p in pods])
        self.adopted_peer = _largest([limit_of(p) or "" for p in pods
                                      if p.metadata.labels.get(objects.LABEL_TASK) not in (None, chief)])
