"""Data-local placement: which Kubernetes node hosts each Ignite node, so each worker can go there.

Two deployments are recognised:

- Ignite as pods in the same Kubernetes cluster (``kubernetes.ignite_selector``, e.g. ``app=ignite``): an
  Ignite node is the pod whose name is its consistent id (a StatefulSet that sets ``consistentId`` to the
  pod name, as ``docker/k8s/ignite.yaml`` does), or whose IP is the node's address;
- Ignite on hosts that are Kubernetes nodes: the node whose ``ignite-tf.io/host`` label is the Ignite node's
  consistent id or host, or whose name or addresses are the Ignite node's host; failing that, the pod (in any
  namespace) whose address is the Ignite node's host, so Ignite's pods are found with no setting.

The result is recorded in the shard plan (``placement``: wanted and actual node per worker, the share of
rows the plan lets each read locally, and ``ignite_nodes``: the Kubernetes node of each Ignite node) and
printed in the chief's output. The workers' readers measure what they really read against ``ignite_nodes``
and their own node (``ignite_tf.reader.locality``); ``measured`` puts that beside the plan's figures. A pod
backend keeps one cluster's choice and its result in a ``WorkerPlacement``.
"""

from __future__ import annotations

from typing import Any

from ignite_tf.cluster.k8s.client import error_message
from ignite_tf.cluster.k8s.settings import HOST_LABEL, KubernetesSettings, Placement


def ignite_node_hosts(core, nodes: list, settings: KubernetesSettings, namespace: str) -> dict[str, str]:
    """Ignite consistent id -> name of the Kubernetes node hosting it (nodes that cannot be found are left out)."""
    out: dict[str, str] = {}
    if settings.ignite_selector:
        pods = core.list_namespaced_pod(settings.ignite_namespace or namespace,
                                        label_selector=settings.ignite_selector).items
        for node in nodes:
            for pod in pods:
                if not pod.spec.node_name:
                    continue
                if node.consistent_id in (pod.metadata.name, pod.spec.hostname) or node.host == pod.status.pod_ip:
                    out[node.consistent_id] = pod.spec.node_name
                    break
        return out
    k8s_nodes = core.list_node().items
    for node in nodes:
        # A loopback address names no machine (simulated nodes all report 127.0.0.1): match by id only.
        host = None if _loopback(node.host) else node.host
        for kn in k8s_nodes:
            names = {kn.metadata.name, (kn.metadata.labels or {}).get(HOST_LABEL)}
            names |= {a.address for a in (kn.status.addresses or []) if not _loopback(a.address)}
            if node.consistent_id in names or (host is not None and host in names):
                out[node.consistent_id] = kn.metadata.name
                break
    out.update(_by_pod_address(core, [n for n in nodes if n.consistent_id not in out and not _loopback(n.host)]))
    return out


def _by_pod_address(core, nodes: list) -> dict[str, str]:
    """Ignite nodes running as pods that no ``ignite_selector`` names (the deployed shape's defaults): the pod
    at each node's address, in any namespace. Pod addresses are unique in a cluster; a pod on its node's network
    has the node's address and was matched by it already. Needs the right to list pods cluster-wide
    (``docker/k8s/launcher-rbac.yaml`` grants it); without it these nodes stay unmatched."""
    out: dict[str, str] = {}
    for node in nodes:
        try:
            pods = core.list_pod_for_all_namespaces(field_selector=f"status.podIP={node.host}").items
        except Exception:  # noqa: BLE001 - no right to list pods: the measurement says "unmatched"
            return out
        running = [p for p in pods if p.spec.node_name and not p.spec.host_network]
        if len(running) == 1:
            out[node.consistent_id] = running[0].spec.node_name
    return out


def _loopback(address: str | None) -> bool:
    return not address or address.startswith("127.") or address in ("::1", "localhost")


def wanted_nodes(plan, hosts: dict[str, str]) -> list[str | None]:
    """Per worker, the Kubernetes node next to the Ignite node the plan put it with."""
    return [hosts.get(h) if h else None for h in plan.worker_hosts]


def achieved(plan, wanted: list[str | None], actual: list[str | None], mode: Placement,
             ignite_nodes: dict[str, str] | None = None) -> dict[str, Any]:
    """What placement achieved: per worker wanted vs actual node, and the share of rows the plan lets it read
    on the node that holds them (epoch 0: planned, not measured).

    :param ignite_nodes: Ignite consistent id -> Kubernetes node (``ignite_node_hosts``); default: what
        ``wanted`` tells of the Ignite nodes that have a worker next to them.
    """
    shards = plan.shards(0)
    rows = sum(s.rows for s in shards) or 1
    workers, local_rows = [], 0
    for s, want, got in zip(shards, wanted, actual, strict=True):
        local = want is not None and want == got
        local_rows += s.local_rows if local else 0
        workers.append({"worker": s.worker, "ignite_node": plan.worker_hosts[s.worker], "wanted": want,
                        "node": got, "local": local, "rows": s.rows})
    # The plan's own bound: balancing may give a worker rows of another node even when every worker is local.
    planned = sum(s.local_rows for s in shards) / rows
    if ignite_nodes is None:
        ignite_nodes = {h: w for h, w in zip(plan.worker_hosts, wanted, strict=True) if h and w}
    return {"mode": mode.value, "workers": workers, "locality": round(local_rows / rows, 4),
            "planned_locality": round(planned, 4), "local_workers": sum(w["local"] for w in workers),
            "ignite_nodes": dict(sorted(ignite_nodes.items()))}


def measured(result: dict[str, Any], reads: list[dict[str, Any]]) -> dict[str, Any]:
    """``result`` (from ``achieved``) with each worker's measured locality (its ``ClusterState.reads`` entry)
    beside the planned one, and ``measured_locality`` over all workers."""
    from ignite_tf.reader.locality import combine

    by_worker = {r.get("worker"): r for r in reads}
    workers = [{**w, "measured": (by_worker.get(w["worker"]) or {}).get("locality")} for w in result["workers"]]
    total = combine(*reads)
    return {**result, "workers": workers, "measured_locality": total["locality"] if total else None}


def describe(result: dict[str, Any]) -> str:
    lines = [f"placement ({result['mode']}): {result['local_workers']}/{len(result['workers'])} workers next to "
             f"their data, {result['locality'] * 100:.1f}% of rows read locally as planned "
             f"(the shard plan allows {result['planned_locality'] * 100:.1f}%)"
             + (f", {result['measured_locality'] * 100:.1f}% measured"
                if result.get("measured_locality") is not None else "")]
    for w in result["workers"]:
        seen = f", measured {w['measured'] * 100:.1f}% local" if w.get("measured") is not None else ""
        lines.append(f"  worker-{w['worker']}: Ignite node {w['ignite_node']} on {w['wanted'] or '(unknown)'}, "
                     f"pod on {w['node']} ({'local' if w['local'] else 'remote'}), {w['rows']} rows{seen}")
    return "\n".join(lines)


class WorkerPlacement:
    """Where one cluster's workers are sent and where they went, for its pod backend: ``choose`` before the first
    pods, ``node_for`` each worker's pod, ``record`` once every worker is scheduled. ``hosts``: Ignite node ->
    Kubernetes node as the launcher found them (a pod supervisor may not list nodes); None: listed here."""

    def __init__(self, settings: KubernetesSettings, hosts: dict[str, str] | None = None):
        self.settings, self.hosts = settings, hosts
        self.wanted: list[str | None] = []  # per worker, the node next to its Ignite node
        self.ignite_nodes: dict[str, str] | None = None  # Ignite consistent id -> Kubernetes node, when found
        # Placement is recorded once the workers are scheduled: for the affinity's result, and with any
        # placement where Ignite's pods are known, for the map that measured locality needs (ignite_nodes).
        self.done = settings.placement is Placement.NONE and not settings.ignite_selector

    def choose(self, core, namespace: str, plan, plan_path: str) -> list[str]:
        """Find the Kubernetes node of each Ignite node of ``plan`` and the node each worker is wanted on; with
        Ignite's nodes known, put them in the plan (saved at ``plan_path``). Returns what to say.

        :raises Exception: the nodes could not be listed and the placement needs them.
        """
        notes = []
        try:
            hosts = self.hosts if self.hosts is not None else ignite_node_hosts(
                core, list(plan.partition_map.nodes.values()), self.settings, namespace)
        except Exception as exc:  # noqa: BLE001 - without placement the map only serves the measurement
            if self.settings.placement is not Placement.NONE:
                raise
            notes.append(f"Ignite pods ({self.settings.ignite_selector}) not listed: {error_message(exc)}; "
                         f"measured locality is unknown")
            hosts = {}
        # With placement none this is where the data is, not where the workers are sent (no affinity).
        self.wanted, self.ignite_nodes = wanted_nodes(plan, hosts), hosts
        notes.append(f"placement {self.settings.placement.value}: Ignite nodes on Kubernetes nodes "
                     + (", ".join(f"{k} -> {v}" for k, v in sorted(hosts.items())) or "(none found)"))
        if hosts and plan.placement is None:
            # The workers measure locality against this map as soon as they read; their plan is the one in the
            # start files, made next, before the achieved placement is recorded (``record``).
            plan.placement = {"ignite_nodes": dict(sorted(hosts.items()))}
            plan.save(plan_path)
        return notes

    def node_for(self, worker: int) -> str | None:
        """The node worker ``worker``'s pod is wanted on (None: anywhere)."""
        return self.wanted[worker] if worker < len(self.wanted) else None

    def record(self, plan, nodes: list[str]) -> str:
        """Put what placement achieved, the workers being on ``nodes``, in ``plan`` (not saved); what to say."""
        result = achieved(plan, self.wanted or [None] * len(nodes), nodes, self.settings.placement,
                          self.ignite_nodes)
        plan.placement = result
        return describe(result)
