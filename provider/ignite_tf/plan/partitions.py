"""Partition discovery: which node holds which partition of a cache, and how many rows each has.

``PartitionMap.discover(conn, cache)`` asks the running cluster:
- primaries from the thin-client affinity request (the mapping pyignite's partition awareness uses),
- backups from the ``SYS.PARTITION_STATES`` view,
- nodes (id, consistent id, host, thin-client port) from ``SYS.NODES`` and each node's ``clientListenerPort``
  attribute (:mod:`ignite_tf.reader.servers`): the connection's addresses are only seeds,
- rows per partition, computed on the server with one ``GROUP BY`` over the partition of each key
  (the RendezvousAffinityFunction formula, for ``BIGINT`` keys of SQL tables), or by counting a scan of
  each partition otherwise.

The map round-trips through JSON because it travels through Airflow XCom.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from ignite_tf.connection import IgniteConnectionConfig, sql
from ignite_tf.errors import CacheNotFoundError, IgniteTFError, TopologyChangedError
from ignite_tf.reader.servers import connect, server_nodes

_U32 = 4294967296


@dataclass(frozen=True)
class NodeInfo:
    """One server node. ``port`` is its thin-client port when this client reaches it, else None."""

    node_id: str
    consistent_id: str
    host: str
    port: int | None
    order: int = 0

    @property
    def address(self) -> str | None:
        return f"{self.host}:{self.port}" if self.port else None


@dataclass
class PartitionMap:
    """Where every partition of ``cache`` lives, and its size.

    ``primary[p]`` is the node id of partition p's primary, ``backups[p]`` its backup node ids and ``rows[p]``
    its number of rows (primary copies only).
    """

    cache: str
    cache_id: int
    partitions: int
    backup_count: int
    nodes: dict[str, NodeInfo]
    primary: list[str]
    backups: list[list[str]]
    rows: list[int]
    affinity_version: tuple[int, int] = (0, 0)
    key_column: str | None = None
    discovered_at: float = field(default_factory=time.time)

    # -- queries -----------------------------------------------------------------------------------------
    @property
    def total_rows(self) -> int:
        return sum(self.rows)

    def partitions_of(self, node_id: str) -> list[int]:
        return [p for p, n in enumerate(self.primary) if n == node_id]

    def owners(self, partition: int) -> list[NodeInfo]:
        """Primary first, then backups: the order in which a reader should try nodes."""
        return [self.nodes[n] for n in [self.primary[partition], *self.backups[partition]] if n in self.nodes]

    def primary_addresses(self) -> dict[int, tuple[str, int]]:
        """partition -> (host, port) of its primary, for the partition reader."""
        out = {}
        for p, n in enumerate(self.primary):
            node = self.nodes.get(n)
            if node and node.port:
                out[p] = (node.host, node.port)
        return out

    def backup_addresses(self) -> dict[int, list[tuple[str, int]]]:
        return {
            p: [(self.nodes[n].host, self.nodes[n].port) for n in bs if n in self.nodes and self.nodes[n].port]
            for p, bs in enumerate(self.backups)
        }

    def summary(self) -> str:
        """A per-node table: partitions as primary and backup, rows held as primary."""
        prim = Counter(self.primary)
        back = Counter(n for bs in self.backups for n in bs)
        rows: Counter = Counter()
        for p, n in enumerate(self.primary):
            rows[n] += self.rows[p]
        empty = sum(1 for r in self.rows if r == 0)
        lines = [
            f"PartitionMap of cache '{self.cache}': {self.partitions} partitions, {self.backup_count} backup(s), "
            f"{self.total_rows} rows, {len(self.nodes)} server node(s), affinity version "
            f"{self.affinity_version[0]}.{self.affinity_version[1]}",
            f"  {'node':<12} {'address':<22} {'primary':>8} {'backup':>8} {'rows':>10} {'rows %':>7}",
        ]
        for node in sorted(self.nodes.values(), key=lambda n: n.order):
            share = 100.0 * rows[node.node_id] / self.total_rows if self.total_rows else 0.0
            lines.append(
                f"  {node.consistent_id[:12]:<12} {node.address or node.host:<22} {prim[node.node_id]:>8} "
                f"{back[node.node_id]:>8} {rows[node.node_id]:>10} {share:>6.1f}%")
        nonzero = [r for r in self.rows if r]
        if nonzero:
            lines.append(f"  rows per partition: min {min(nonzero)}, max {max(nonzero)}, "
                         f"mean {self.total_rows / len(nonzero):.1f} (non-empty), {empty} empty")
        return "\n".join(lines)

    # -- JSON --------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["affinity_version"] = list(self.affinity_version)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PartitionMap:
        data = dict(data)
        data["nodes"] = {k: NodeInfo(**v) for k, v in data["nodes"].items()}
        data["affinity_version"] = tuple(data.get("affinity_version", (0, 0)))
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> PartitionMap:
        return cls.from_dict(json.loads(text))

    # -- discovery ---------------------------------------------------------------------------------------
    @classmethod
    def discover(cls, conn: IgniteConnectionConfig, cache: str, *, count_rows: bool = True,
                 client=None) -> PartitionMap:
        """Read the cache's partition layout from the running cluster.

        :param conn: how to reach the cluster.
        :param cache: cache name (for SQL tables created by ignite-tf, the table name).
        :param count_rows: also count rows per partition (one server-side query for BIGINT-keyed tables).
        """
        own = client is None
        client = client or connect(conn)[0]
        try:
            return _discover(client, cache, count_rows)
        finally:
            if own:
                client.close()

    def diff(self, other: PartitionMap) -> list[str]:
        """What changed between two maps of the same cache, in words (empty when nothing did)."""
        changes = []
        left = sorted(set(self.nodes) - set(other.nodes))
        joined = sorted(set(other.nodes) - set(self.nodes))
        for n in left:
            changes.append(f"node {self.nodes[n].consistent_id} ({n}) left")
        for n in joined:
            changes.append(f"node {other.nodes[n].consistent_id} ({n}) joined")
        moved = sum(1 for a, b in zip(self.primary, other.primary, strict=False) if a != b)
        if moved:
            changes.append(f"{moved} partition(s) changed primary node")
        if self.partitions != other.partitions:
            changes.append(f"partition count {self.partitions} -> {other.partitions}")
        return changes

    def check_current(self, conn: IgniteConnectionConfig, client=None) -> PartitionMap:
        """Re-discover the layout and raise ``TopologyChangedError`` if nodes or primaries moved."""
        current = PartitionMap.discover(conn, self.cache, count_rows=False, client=client)
        changes = self.diff(current)
        if changes:
            raise TopologyChangedError(
                f"the PartitionMap of cache '{self.cache}' no longer matches the cluster: " + "; ".join(changes)
                + ". Re-run partition discovery and re-plan the shards.")
        return current


def _discover(client, cache: str, count_rows: bool) -> PartitionMap:
    """The steps of ``PartitionMap.discover``: cache -> nodes -> primaries -> backups -> key column -> rows."""
    cache_id, group_id, backup_count, affinity = _cache_row(client, cache)
    nodes = _server_nodes(client)
    primary, version = _primaries(client, cache, cache_id, affinity)
    backups = _backups(client, group_id, len(primary), nodes)
    table = sql(client, "SELECT SCHEMA_NAME, TABLE_NAME, KEY_ALIAS, KEY_TYPE_NAME FROM SYS.TABLES "
                        "WHERE CACHE_NAME = ?", [cache])
    key_column = str(table[0][2]).lower() if table and table[0][2] else None
    rows = _count_rows(client, cache, table, affinity, len(primary)) if count_rows else [0] * len(primary)
    return PartitionMap(
        cache=cache, cache_id=int(cache_id), partitions=len(primary), backup_count=int(backup_count or 0),
        nodes=nodes, primary=primary, backups=backups, rows=rows, affinity_version=version, key_column=key_column,
    )


def _cache_row(client, cache: str) -> list:
    """(cache id, cache group id, backups, affinity description) of ``cache``; CacheNotFoundError naming the others."""
    found = sql(client, "SELECT CACHE_ID, CACHE_GROUP_ID, BACKUPS, AFFINITY FROM SYS.CACHES WHERE CACHE_NAME = ?",
                [cache])
    if not found:
        names = sorted(r[0] for r in sql(client, "SELECT CACHE_NAME FROM SYS.CACHES WHERE CACHE_TYPE = 'USER'"))
        raise CacheNotFoundError(f"cache '{cache}' not found on the cluster (caches: {', '.join(names) or 'none'})")
    return found[0]


def _server_nodes(client) -> dict[str, NodeInfo]:
    """Server nodes by node id, each with the thin-client address this process reaches it at (``port`` None
    when no address of the node answered)."""
    nodes: dict[str, NodeInfo] = {}
    for s in server_nodes(client):
        reached = s.address is not None
        host = s.host if reached else _first_address(",".join(s.addresses))
        nodes[s.node_id] = NodeInfo(s.node_id, s.consistent_id, host, s.port if reached else None, s.order)
    return nodes


def _primaries(client, cache: str, cache_id: int, affinity: str | None) -> tuple[list[str], tuple]:
    """The primary node of each partition and the affinity version, from the thin-client affinity request
    (the real affinity the cluster routes keys with)."""
    from pyignite.api.affinity import cache_get_node_partitions

    result = None
    for conn in [c for c in client._nodes if c.alive]:
        result = cache_get_node_partitions(conn, cache_id)
        if result.status == 0:
            break
    if result is None or result.status != 0:
        raise IgniteTFError(f"the affinity request for cache '{cache}' failed: "
                            f"{getattr(result, 'message', 'no live connection')}")
    mapping = result.value["partition_mapping"].get(cache_id, {})
    if not mapping.get("is_applicable", False):
        raise IgniteTFError(f"cache '{cache}' has no partition affinity a thin client can use "
                            f"(replicated or custom affinity): partition-level placement needs a PARTITIONED cache")
    parts_match = re.search(r"parts=(\d+)", affinity or "")
    n_parts = int(parts_match.group(1)) if parts_match else mapping.get("number_of_partitions", 0)
    primary = [""] * n_parts
    for node_uuid, parts in mapping["node_mapping"].items():
        for p in parts:
            primary[p] = str(node_uuid)
    missing = [p for p, n in enumerate(primary) if not n]
    if missing:
        raise TopologyChangedError(
            f"cache '{cache}': {len(missing)} partition(s) have no primary node (e.g. {missing[:5]}); "
            f"the cluster is rebalancing or lost nodes: retry once the topology is stable")
    return primary, tuple(result.value["version"])


def _backups(client, group_id: int, n_parts: int, nodes: dict[str, NodeInfo]) -> list[list[str]]:
    """The owning backup nodes of each partition, in node order."""
    backups: list[list[str]] = [[] for _ in range(n_parts)]
    for node_id, part, is_primary in sql(
            client, "SELECT NODE_ID, PARTITION_ID, IS_PRIMARY FROM SYS.PARTITION_STATES "
                    f"WHERE CACHE_GROUP_ID = {int(group_id)} AND STATE = 'OWNING'"):
        if not is_primary and part < n_parts:
            backups[part].append(str(node_id))
    for bs in backups:
        bs.sort(key=lambda n: nodes[n].order if n in nodes else 0)
    return backups


def _count_rows(client, cache: str, table: list, affinity: str | None, n_parts: int) -> list[int]:
    """Rows per partition: one server-side GROUP BY for a BIGINT-keyed table, else a scan per partition."""
    mask_match = re.search(r"mask=(-?\d+)", affinity or "")
    mask = int(mask_match.group(1)) if mask_match else -1
    if table and table[0][3] in ("java.lang.Long", "long") and affinity and "Rendezvous" in affinity:
        return _count_rows_sql(client, table[0][0], table[0][1], n_parts, mask)
    return _count_rows_scan(client, cache, n_parts)


def _first_address(addresses: str | None) -> str:
    items = [a.strip() for a in (addresses or "").strip("[]").split(",") if a.strip()]
    routable = [a for a in items if not a.startswith(("127.", "0:0:0", "::1"))]
    return (routable or items or ["127.0.0.1"])[0]


def partition_sql(key: str, parts: int, mask: int) -> str:
    """SQL expression giving the partition of a BIGINT key, as Ignite's RendezvousAffinityFunction computes it.

    Java: ``h = Long.hashCode(k) = (int)(k ^ (k >>> 32))``; with a power-of-two partition count
    ``(h ^ (h >>> 16)) & mask``, else ``abs(h % parts)``. H2 has no shifts, so unsigned 32-bit halves are
    taken with integer division (with a floor correction for negative keys).
    """
    upper = f"CASEWHEN({key} >= 0, {key} / {_U32}, {_U32 - 1} - ((-{key} - 1) / {_U32}))"
    h = f"BITXOR(BITAND({key}, {_U32 - 1}), {upper})"  # unsigned 32-bit view of the Java int hash
    if mask >= 0:
        return f"BITAND(BITXOR({h}, {h} / 65536), {mask})"
    signed = f"CASEWHEN({h} >= 2147483648, {h} - {_U32}, {h})"
    return f"ABS(MOD({signed}, {parts}))"


def _count_rows_sql(client, schema: str, table: str, n_parts: int, mask: int) -> list[int]:
    rows = [0] * n_parts
    expr = partition_sql("_KEY", n_parts, mask)
    for part, count in sql(client, f'SELECT {expr} AS P, COUNT(*) FROM "{schema}"."{table}" GROUP BY P'):
        rows[int(part)] = int(count)
    return rows


def _count_rows_scan(client, cache: str, n_parts: int) -> list[int]:
    # For caches without a BIGINT-keyed SQL table: count each partition's entries with a scan.
    cache_obj = client.get_cache(cache)
    rows = [0] * n_parts
    for p in range(n_parts):
        with cache_obj.scan(page_size=4096, partitions=p) as cursor:
            rows[p] = sum(1 for _ in cursor)
    return rows
