"""Measured locality: the share of a worker's rows that an Ignite node on the worker's own machine served.

The reader counts the rows each Ignite node served (``PartitionReader.node_rows()``, by consistent id). Which
of those nodes are "on the worker's machine" depends on where the worker runs:

- in a Kubernetes pod (``IGNITE_TF_NODE_NAME`` set, from the downward API's ``spec.nodeName``): a node is
  local when its pod runs on the worker's Kubernetes node. Ignite pods are matched to Kubernetes nodes by
  their consistent id = pod name (:func:`ignite_tf.cluster.k8s.placement.ignite_node_hosts`); the launcher
  records that map in the shard plan (``placement["ignite_nodes"]``). Rows of a node the map lacks count as
  ``unmatched_rows`` (not local); with no map at all (placement ``none``) the locality is unknown (None);
- anywhere else: a node is local when the address the worker reached it at is one of this host's addresses
  (a loopback address, or one a socket can bind to here).

A record (``measure``) is plain JSON; ``combine`` adds records up (a worker's epochs, or all workers).
"""

from __future__ import annotations

import functools
import ipaddress
import socket
from typing import Any

from ignite_tf.ports import port_free

ENV_NODE_NAME = "IGNITE_TF_NODE_NAME"
"""The Kubernetes node a task's pod runs on (the pod manifest sets it from the downward API's spec.nodeName)."""
BY_HOST = "host"
BY_KUBERNETES_NODE = "kubernetes node"


@functools.lru_cache(maxsize=256)
def is_this_host(host: str | None) -> bool:
    """Whether ``host`` (a name or an address) is this machine: loopback, or an address a socket binds to here."""
    if not host:
        return False
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addresses = {sockaddr[0].split("%")[0] for *_, sockaddr in infos}
    # Only an address of one of this host's own interfaces can be bound here.
    return any(ipaddress.ip_address(a).is_loopback or (":" not in a and port_free(0, a)) for a in addresses)


def measure(node_rows: dict[str, int], node_hosts: dict[str, str | None], *, kubernetes_node: str | None = None,
            ignite_nodes: dict[str, str] | None = None) -> dict[str, Any]:
    """One worker's measured locality.

    :param node_rows: rows served per Ignite node (consistent id), as the reader counted them.
    :param node_hosts: consistent id -> the address the reader reached that node at.
    :param kubernetes_node: the worker pod's Kubernetes node (None: not in a pod; compare hosts).
    :param ignite_nodes: Ignite consistent id -> Kubernetes node of its pod (with ``kubernetes_node``).
    """
    rows = sum(node_rows.values())
    local = unmatched = 0
    for node, n in node_rows.items():
        if kubernetes_node is not None:
            where = (ignite_nodes or {}).get(node)
            unmatched += n if where is None else 0
            local += n if where == kubernetes_node else 0
        elif is_this_host(node_hosts.get(node)):
            local += n
    known = rows and (kubernetes_node is None or bool(ignite_nodes))
    return {"rows": rows, "local_rows": local, "unmatched_rows": unmatched, "by_node": dict(sorted(node_rows.items())),
            "by": BY_KUBERNETES_NODE if kubernetes_node is not None else BY_HOST,
            "where": kubernetes_node if kubernetes_node is not None else socket.gethostname(),
            "locality": round(local / rows, 4) if known else None}


def combine(*records: dict[str, Any] | None) -> dict[str, Any] | None:
    """The sum of measured-locality records (None when there is none): rows, local rows, rows per node."""
    records = tuple(r for r in records if r)
    if not records:
        return None
    by_node: dict[str, int] = {}
    for r in records:
        for node, n in (r.get("by_node") or {}).items():
            by_node[node] = by_node.get(node, 0) + int(n)
    rows = sum(int(r.get("rows", 0)) for r in records)
    local = sum(int(r.get("local_rows", 0)) for r in records)
    known = rows and any(r.get("locality") is not None for r in records)
    out = {"rows": rows, "local_rows": local, "unmatched_rows": sum(int(r.get("unmatched_rows", 0)) for r in records),
           "by_node": dict(sorted(by_node.items())), "locality": round(local / rows, 4) if known else None}
    kinds = {r.get("by") for r in records} - {None}
    if len(kinds) == 1:
        out["by"] = kinds.pop()
    return out


def describe(record: dict[str, Any] | None, planned: float | None = None) -> str:
    """``87.5% of 12,000 rows read from an Ignite node on the same host (planned 100.0%); node-0 6,000, ...``"""
    if not record or not record.get("rows"):
        return "no rows read yet"
    by = record.get("by", BY_HOST)
    if record.get("locality") is None:
        return f"{record['rows']:,} rows read; locality unknown (no Ignite node matched to a Kubernetes node)"
    text = f"{record['locality'] * 100:.1f}% of {record['rows']:,} rows read from an Ignite node on the same {by}"
    if planned is not None:
        text += f" (planned {planned * 100:.1f}%)"
    if record.get("unmatched_rows"):
        text += f", {record['unmatched_rows']:,} from nodes not matched to a Kubernetes node"
    nodes = ", ".join(f"{k} {v:,}" for k, v in (record.get("by_node") or {}).items())
    return f"{text}; {nodes}" if nodes else text
