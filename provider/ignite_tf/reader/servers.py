"""Every Ignite server's thin-client address, asked from the cluster itself.

pyignite connects to the addresses it is given and finds no others, so a client given one address (a
Kubernetes Service such as ``ignite:10800``) sends every scan to whichever node answers there, and that node
forwards each scan to the partition's primary. The cluster knows its servers: ``SYS.NODES`` lists each
server's node id, consistent id and addresses, and Ignite 2.17 publishes each node's thin-client port as its
``clientListenerPort`` attribute (``SYS.NODE_ATTRIBUTES``). So a connection's addresses are seeds: the first
one that answers tells where all the servers are, and a reader connects to each of them (one connection per
node, which is what pyignite's partition awareness opens for the addresses it is given), so that each scan
goes to its partition's primary.

What was found is kept per process for each seed list (a reader is opened every epoch); a reader that finds a
planned primary it has no connection to asks again (``refresh=True``, at most every ``REFRESH_MIN_S``). Where the
cluster cannot say (its system views refused to this user) or its addresses do not answer, the seeds are
used as given, as before.
"""

from __future__ import annotations

import ipaddress
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from ignite_tf.connection import IgniteConnectionConfig, sql
from ignite_tf.errors import IgniteUnavailableError
from ignite_tf.ports import listening

CLIENT_PORT_ATTRIBUTE = "clientListenerPort"
"""The node attribute holding a server's thin-client port (set by Ignite's ClientListenerProcessor)."""
PROBE_TIMEOUT_S = 1.0
"""How long to wait for a TCP connect to an address a node lists, when choosing one this process reaches."""

_NODES_SQL = "SELECT NODE_ID, CONSISTENT_ID, ADDRESSES, HOSTNAMES, NODE_ORDER FROM SYS.NODES WHERE IS_CLIENT = FALSE"
_PORTS_SQL = "SELECT NODE_ID, VALUE FROM SYS.NODE_ATTRIBUTES WHERE NAME = ?"
REFRESH_MIN_S = 10.0
"""Asking the cluster again for one seed list waits at least this long after the last time."""

log = logging.getLogger(__name__)
_known: dict[tuple, tuple[float, tuple[ServerNode, ...]]] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class ServerNode:
    """One server node of the cluster.

    :param node_id: the node id (a UUID, new at every start of the node).
    :param consistent_id: the node's stable name (a pod name in ``docker/k8s/ignite.yaml``).
    :param host: the address this process reaches the node's thin-client port at; None when none answered.
    :param port: the node's thin-client port (None when the node publishes none).
    :param addresses: every address the node lists, as the cluster reports them.
    :param order: the node's join order.
    """

    node_id: str
    consistent_id: str
    host: str | None
    port: int | None
    addresses: tuple[str, ...] = ()
    order: int = 0

    @property
    def address(self) -> tuple[str, int] | None:
        return (self.host, self.port) if self.host and self.port else None


def server_nodes(client) -> list[ServerNode]:
    """The cluster's server nodes, in join order, each with an address this process reaches it at.

    :param client: a connected pyignite client (any node answers the queries).
    """
    connected = {str(c.uuid): (c.host, c.port) for c in client._nodes if c.uuid is not None and c.alive}
    ports = {str(node): int(value) for node, value in sql(client, _PORTS_SQL, [CLIENT_PORT_ATTRIBUTE])
             if str(value or "").isdigit()}
    rows = sql(client, _NODES_SQL)
    seed_loopback = any(_loopback(h) for h, _ in connected.values())
    choices: dict[str, list[str]] = {}
    nodes: dict[str, ServerNode] = {}
    for node_id, consistent_id, addresses, hostnames, order in rows:
        nid = str(node_id)
        listed = tuple(_listed(addresses) + _listed(hostnames))
        port = ports.get(nid) or (connected[nid][1] if nid in connected else None)
        nodes[nid] = ServerNode(nid, str(consistent_id), None, port, listed, int(order or 0))
        if nid in connected:
            nodes[nid] = replace(nodes[nid], host=connected[nid][0], port=connected[nid][1])
        elif port:
            choices[nid] = _ordered(listed, seed_loopback)
    for nid, host in _first_reachable(choices, {n: nodes[n].port for n in choices}).items():
        nodes[nid] = replace(nodes[nid], host=host)
    return sorted(nodes.values(), key=lambda n: n.order)


def discover(conn: IgniteConnectionConfig, *, refresh: bool = False) -> tuple[ServerNode, ...]:
    """The servers of the cluster that ``conn``'s addresses (seeds) lead to; kept per process and seed list.

    :param refresh: ask the cluster again (a node joined, left or restarted since).
    """
    key = _key(conn)
    with _lock:
        if key in _known and (not refresh or time.monotonic() - _known[key][0] < REFRESH_MIN_S):
            return _known[key][1]
    client = conn.client(partition_aware=False)  # one seed answering is enough
    try:
        found = tuple(server_nodes(client))
    finally:
        client.close()
    with _lock:
        _known[key] = (time.monotonic(), found)
    return found


def all_servers(conn: IgniteConnectionConfig, *, refresh: bool = False) -> IgniteConnectionConfig:
    """``conn`` with every reachable server's thin-client address instead of its seeds (one per node, so a
    partition-aware client holds one connection to each); the seeds when no server could be placed."""
    return _widened(conn, discover(conn, refresh=refresh))


def connect(conn: IgniteConnectionConfig, *, refresh: bool = False):
    """A partition-aware pyignite client connected to every server (see ``all_servers``), and the servers by
    node id ({} when the cluster could not say). Falls back to the seeds, as given, when the cluster cannot
    list its servers or their addresses do not answer.

    :raises IgniteUnavailableError: no seed answered either.
    """
    try:
        found = discover(conn, refresh=refresh)
    except IgniteUnavailableError:
        raise
    except Exception as exc:  # noqa: BLE001 - e.g. SYS views refused to this user: read as before, via the seeds
        log.warning("could not list the Ignite servers through %s (%s): using the given addresses only",
                    conn.addresses_str, exc)
        return conn.client(), {}
    target = _widened(conn, found)
    if target is not conn:
        try:
            return target.client(), {s.node_id: s for s in found}
        except IgniteUnavailableError:
            forget(conn)  # moved since: the seeds still lead to the cluster
    return conn.client(), {s.node_id: s for s in found}


def forget(conn: IgniteConnectionConfig | None = None) -> None:
    """Drop what was found for ``conn`` (default: for every seed list)."""
    with _lock:
        if conn is None:
            _known.clear()
        else:
            _known.pop(_key(conn), None)


def _widened(conn: IgniteConnectionConfig, found: tuple[ServerNode, ...]) -> IgniteConnectionConfig:
    addresses = tuple(dict.fromkeys(n.address for n in found if n.address))
    return replace(conn, addresses=addresses) if addresses else conn


def _key(conn: IgniteConnectionConfig) -> tuple:
    return conn.addresses, conn.use_ssl, conn.username


def _listed(value) -> list[str]:
    """``[10.0.0.5, 127.0.0.1]`` (how SYS.NODES prints a collection) -> its items."""
    if isinstance(value, (list, tuple, set)):
        return [str(v) for v in value]
    return [a.strip() for a in str(value or "").strip("[]").split(",") if a.strip()]


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return host == "localhost"


def _ordered(listed: tuple[str, ...], seed_loopback: bool) -> list[str]:
    """Addresses to try: routable ones first (a loopback address names whichever machine tries it), loopback
    ones only when the seed itself was a loopback address (a cluster on this machine); IPv6 link-local never."""
    routable = [a for a in listed if not _loopback(a) and not a.lower().startswith("fe80")]
    loop = [a for a in listed if _loopback(a)] if seed_loopback else []
    return list(dict.fromkeys(loop + routable if seed_loopback else routable))


def _first_reachable(choices: dict[str, list[str]], ports: dict[str, int | None]) -> dict[str, str]:
    """Per node, the first of its addresses whose thin-client port accepts a TCP connection."""
    if not choices:
        return {}

    def probe(nid: str) -> tuple[str, str | None]:
        return nid, next((h for h in choices[nid] if listening(ports[nid], h, PROBE_TIMEOUT_S)), None)

    with ThreadPoolExecutor(max_workers=min(16, len(choices))) as pool:
        return {nid: host for nid, host in pool.map(probe, list(choices)) if host}
