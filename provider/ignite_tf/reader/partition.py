"""The partition reader: rows of Ignite cache partitions as column-wise NumPy batches.

Each partition is scanned on its primary node (thin-client ``OP_QUERY_SCAN`` with the partition number,
then ``OP_QUERY_SCAN_CURSOR_GET_PAGE``): pyignite's partition awareness only routes single-key
operations, so the reader holds one connection per node and picks the node itself, from the thin-client
affinity mapping or a shard plan (primaries) and, once a node fails, ``SYS.PARTITION_STATES`` (backups).
The connection's addresses are seeds: every server's address comes from the cluster
(:mod:`ignite_tf.reader.servers`), so one Service address still reaches every primary. ``stats["rows_per_node"]``
counts the rows each node served (by node id; ``servers`` names them), what measured locality is made of.
The request and response bytes are its own; pages are decoded straight into columns by
:mod:`ignite_tf.reader.binary`. Scans are pipelined (:mod:`ignite_tf.reader.scan`): the next page of a partition and
the first pages of the next ``scans_ahead`` partitions are asked for before the current page is decoded.

Failover, and why every key comes out exactly once: when a node fails (refused, or broken mid-scan) or a
scan errors, the partition's scan restarts from the beginning on the next node (primary, backups, then
any live node) and every key already yielded for that partition is dropped from the restarted scan.
So the reader remembers the keys of the partition in flight (8 bytes a row of that one partition), on
top of one batch, ``scans_ahead + 2`` pages and one page's worth of rows of small partitions read ahead:
memory grows with ``page_size``, ``batch_size`` and the largest partition, never with the cache.

NULLs: float columns get NaN; int, bool and string columns of a batch holding a NULL come as
``numpy.ma.MaskedArray`` (data 0 / False / ""); ``tf_dataset`` feeds the filled data.

    with PartitionReader(conn, "churn", batch_size=1024) as reader:
        for batch in reader.batches([ReadTask(p) for p in my_partitions]):
            batch["id"], batch["f0"], ...
"""

from __future__ import annotations

import functools
import re
import socket
import struct
import time
from collections.abc import Iterable, Iterator

import numpy as np
from pyignite.api.affinity import cache_get_node_partitions
from pyignite.api.binary import get_binary_type
from pyignite.utils import cache_id as _cache_id

from ignite_tf.connection import IgniteConnectionConfig, sql
from ignite_tf.errors import CacheNotFoundError, ConfigError, IgniteUnavailableError
from ignite_tf.reader import binary as wire
from ignite_tf.reader import layout as _layout
from ignite_tf.reader import servers as _servers
from ignite_tf.reader.binary import STACKED
from ignite_tf.reader.scan import NodeFailed, NodeScans, scan_request
from ignite_tf.reader.tasks import HASH_SPACE, HashFilter, ReadTask, key_hash

_MASK = "?"  # prefix of a column's NULL mask inside the reader's page chunks
MAX_SCANS_AHEAD = 64  # scans in flight at most, when small partitions are read ahead


@functools.lru_cache(maxsize=64)
def _resolve(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


class PartitionReader:
    """Reads partitions of ``cache`` into ``{column: ndarray}`` batches of ``batch_size`` rows.

    :param conn: where the cluster is.
    :param cache: cache (or SQL table's cache) name.
    :param columns: value columns to read (case-insensitive); default all of a supported type. The key
        column always comes first.
    :param batch_size: rows per batch (the last batch may be shorter).
    :param page_size: rows per scan page fetched from a node.
    :param primaries: partition -> (host, port) of its primary, e.g. ``PartitionMap.primary_addresses()``;
        default: asked from the cluster.
    :param backups: partition -> [(host, port), ...] of its backups; default: from ``SYS.PARTITION_STATES``,
        asked the first time a scan has to leave its primary.
    :param failover_timeout: seconds to keep retrying a partition on other nodes before giving up.
    :param scans_ahead: scans of the next tasks sent before the current task is read (0: one at a time).
    :param stack: numeric columns (among those read) delivered as one float32 matrix ``batch[STACKED]`` of
        shape ``[rows, len(stack)]``, NULLs filled (NaN for floats, 0 for the rest), instead of separately.
    :param layout: what another reader found about the cache (its ``layout``: partitions and columns), so
        this one does not ask the cluster again (a dataset opens a reader per epoch).
    :param key_filter: ``key_filter(keys) -> bool array``: only rows it keeps are read (a held-out evaluation
        split, ``ignite_tf.plan.split``); None reads every row.
    :param fingerprint: fingerprint every task read (``self.fingerprints``, :mod:`ignite_tf.reader.fingerprint`);
        a callable is also called with ``(task, fingerprint)`` as each task is read to its end.
    """

    def __init__(self, conn: IgniteConnectionConfig, cache: str, *, columns: list[str] | None = None,
                 batch_size: int = 1024, page_size: int = 1024,
                 primaries: dict[int, tuple[str, int]] | None = None,
                 backups: dict[int, list[tuple[str, int]]] | None = None, failover_timeout: float = 60.0,
                 scans_ahead: int = 4, stack: list[str] | None = None, layout: tuple | None = None,
                 key_filter=None, fingerprint=False):
        if batch_size < 1 or page_size < 1 or scans_ahead < 0:
            raise ConfigError(f"batch_size and page_size must be >= 1 and scans_ahead >= 0 (got {batch_size}, "
                              f"{page_size}, {scans_ahead})")
        self.cache, self.batch_size, self.page_size = cache, batch_size, page_size
        self.failover_timeout, self.scans_ahead = failover_timeout, scans_ahead
        self.key_filter = key_filter
        self.stats: dict = {"rows": 0, "pages": 0, "bytes": 0, "pages_per_node": {}, "failovers": 0,
                            "fast_pages": 0, "slow_pages": 0, "partitions": 0, "rows_per_node": {}}
        self._client, self.servers = _servers.connect(conn)
        try:
            names = self._client.get_cache_names()
            if cache not in names:
                raise CacheNotFoundError(f"cache {cache!r} not found on {conn.addresses_str} "
                                         f"(caches: {', '.join(sorted(names)) or 'none'})")
            self.cache_id = _cache_id(cache)
            self._conns = _one_per_node(self._client._nodes)
            self._scans = NodeScans(self._conns, self.cache_id, page_size, self.stats)
            self._dead = self._scans.dead
            self._schemas: dict[tuple[int, int], list[int]] = {}
            if layout is None:
                layout = (*self._cache_info(), _layout.sql_layout(self._sql, cache) or self._layout_by_scan())
            self.layout = layout
            self.partitions, self._group_id, table = layout
            self._primary = self._route_primaries(primaries)
            if primaries is not None and len(self._primary) < len(primaries):
                # A planned primary this reader has no connection to: a node joined or moved since the servers
                # were found. Find them again once (a stale route would still be read, forwarded).
                self._reconnect(conn, primaries)
            self._backup_addresses, self._backups = backups, None
            self.key_column, fields, value_type_id, key_type, self.skipped_columns = self._discover(table, columns)
            self._decoder = wire.PageDecoder(self.key_column, key_type, fields, value_type_id, self._schema_fields,
                                             [c.lower() for c in stack or []])
            self._scans.decode = self._decoder.decode
        except BaseException:
            self._client.close()
            raise
        self.schema: dict[str, np.dtype] = {self.key_column: np.dtype(np.int64)}
        self.schema.update({f.name: f.dtype for f in fields})
        self.fingerprints = _fingerprinter(fingerprint, self.key_column, self._decoder.stack)
        self._hashed = self.fingerprints is not None or isinstance(key_filter, HashFilter)  # every page's key hash

    # -- cluster metadata --------------------------------------------------------------------------------
    def _sql(self, query: str, args: list | None = None, names: bool = False) -> list[list]:
        self._scans.quiesce()
        return sql(self._client, query, args, names=names)

    def _cache_info(self) -> tuple[int, int]:
        rows = self._sql("SELECT AFFINITY, CACHE_GROUP_ID FROM SYS.CACHES WHERE CACHE_NAME = ?", [self.cache])
        affinity, group_id = rows[0] if rows else ("", self.cache_id)
        match = re.search(r"parts=(\d+)", affinity or "")
        return (int(match.group(1)) if match else 1024), int(group_id)

    def _reconnect(self, conn: IgniteConnectionConfig, primaries) -> None:
        client, found = _servers.connect(conn, refresh=True)
        conns = _one_per_node(client._nodes)
        if len(conns) <= len(self._conns):
            client.close()
            return
        self._client.close()
        self._client, self.servers, self._conns = client, found, conns
        self._scans = NodeScans(self._conns, self.cache_id, self.page_size, self.stats)  # decode: set by __init__
        self._dead = self._scans.dead
        self._primary = self._route_primaries(primaries)

    def node_rows(self) -> dict[str, int]:
        """Rows served by each node so far, by consistent id (node id when the node is not known by name)."""
        return {(self.servers[n].consistent_id if n in self.servers else n): rows
                for n, rows in self.stats["rows_per_node"].items()}

    def locality(self, *, kubernetes_node: str | None = None, ignite_nodes: dict[str, str] | None = None) -> dict:
        """Measured locality of what this reader read so far (:func:`ignite_tf.reader.locality.measure`)."""
        from ignite_tf.reader.locality import measure

        names = {str(c.uuid): (self.servers[str(c.uuid)].consistent_id if str(c.uuid) in self.servers
                               else str(c.uuid)) for c in self._conns}
        hosts = {names[str(c.uuid)]: c.host for c in self._conns}
        return measure(self.node_rows(), hosts, kubernetes_node=kubernetes_node, ignite_nodes=ignite_nodes)

    def _index(self, address) -> int | None:
        """Our connection to the node at ``(host, port)`` (host names and IPs both match)."""
        host, port = _resolve(address[0]), int(address[1])
        return next((i for i, c in enumerate(self._conns) if (_resolve(c.host), c.port) == (host, port)), None)

    def _route_primaries(self, primaries) -> dict[int, int]:
        if primaries is not None:
            return {int(p): i for p, a in primaries.items() if (i := self._index(a)) is not None}
        by_uuid = {c.uuid: i for i, c in enumerate(self._conns)}
        result = cache_get_node_partitions(self._conns[0], self.cache_id)
        mapping = result.value["partition_mapping"].get(self.cache_id, {}) if result.status == 0 else {}
        return {p: by_uuid[u] for u, parts in (mapping.get("node_mapping") or {}).items() if u in by_uuid
                for p in parts}

    def _backup_routes(self) -> dict[int, list[int]]:
        if self._backups is None:
            try:
                self._backups = self._route_backups(self._backup_addresses, self._group_id)
            except Exception:  # noqa: BLE001 - backups only order the failover: any live node serves a scan
                self._backups = {}
        return self._backups

    def _route_backups(self, backups, group_id: int) -> dict[int, list[int]]:
        if backups is not None:
            return {int(p): [i for a in addrs if (i := self._index(a)) is not None] for p, addrs in backups.items()}
        by_uuid = {c.uuid: i for i, c in enumerate(self._conns)}
        out: dict[int, list[int]] = {}
        rows = self._sql("SELECT NODE_ID, PARTITION_ID FROM SYS.PARTITION_STATES "
                         f"WHERE CACHE_GROUP_ID = {int(group_id)} AND IS_PRIMARY = FALSE AND STATE = 'OWNING'")
        for node_id, part in rows:
            if node_id in by_uuid:
                out.setdefault(int(part), []).append(by_uuid[node_id])
        return out

    def _discover(self, table, columns):
        """Key column, value fields, value type id, key type code and skipped columns of the cache."""
        key_name, key_type, value_type_id, available, type_names = table
        wanted, skipped = _layout.select_columns(self.cache, key_name, available, type_names, columns)
        return key_name, wanted, value_type_id, key_type, skipped

    def _layout_by_scan(self):
        """A cache without SQL table: key and value types from its first row, fields from the type registry."""
        conn = self._conns[0]
        buf, pos, end = self._scans.request(0, lambda qid: scan_request(qid, self.cache_id, 1, -1))
        cursor, count = struct.unpack_from("<qi", buf, pos)
        if buf[end - 1]:
            self._scans.close_cursor(0, cursor)
        if count == 0:
            return "_key", 4, None, {}, {}
        key_type, value_type, type_id = _layout.first_row_types(buf, pos + 12)
        if type_id is None:
            return "_key", key_type, None, {"_val": wire.Field("_val", 0, value_type)}, {}
        meta = get_binary_type(conn, type_id).value
        for schema_id, ids in (meta.get("schema") or {}).items():
            self._schemas[(type_id, schema_id)] = ids
        return "_key", key_type, type_id, _layout.registry_layout(meta), {}

    def _schema_fields(self, type_id: int, schema_id: int) -> list[int]:
        if (type_id, schema_id) not in self._schemas:
            for i in self._scans.alive():
                self._scans.quiesce(i)  # pyignite's request below must find nothing of ours on the socket
                if i in self._dead:
                    continue
                result = get_binary_type(self._conns[i], type_id)
                if result.status == 0 and result.value.get("type_exists"):
                    for sid, ids in result.value["schema"].items():
                        self._schemas[(type_id, sid)] = ids
                    break
        if (type_id, schema_id) not in self._schemas:
            raise wire.DecodeError(f"binary schema {schema_id} of type {type_id} is not registered on the cluster")
        return self._schemas[(type_id, schema_id)]

    def _candidates(self, partition: int) -> Iterator[int]:
        """Live nodes to scan ``partition`` on: its primary, then (looked up only now) its backups, then any."""
        tried = set()
        primary = self._primary.get(partition)
        if primary is not None and primary not in self._dead:
            tried.add(primary)
            yield primary
        for i in [*self._backup_routes().get(partition, []), *range(len(self._conns))]:
            if i not in tried and i not in self._dead:
                tried.add(i)
                yield i

    def _read_task(self, task: ReadTask, sent: tuple[int, int] | None = None) -> Iterator[dict]:
        """Pages of one task, filtered to its hash range, each key once even across failovers.

        ``sent``: (node, request id) of a scan of the task's partition sent ahead. A page comes as one dict: the
        columns, and ``"?column"`` NULL masks of the columns with NULLs.
        """
        seen: list[np.ndarray] = []
        skip = None
        deadline = time.monotonic() + self.failover_timeout
        errors: list[str] = []
        while True:
            for index in self._candidates(task.partition):
                qid = None
                if sent is not None and sent[0] == index:
                    qid = sent[1]
                elif sent is not None:
                    self._scans.discard(*sent)  # sent ahead to a node no longer first in line
                sent = None
                pages = self._scans.pages(index, task.partition, qid)
                node = str(self._conns[index].uuid)
                try:
                    for cols, masks in pages:
                        yield self._page(task, cols, masks, skip, seen, node)
                    self.stats["partitions"] += 1
                    if self.fingerprints is not None:
                        self.fingerprints.finish(task)
                    return
                except NodeFailed as exc:
                    errors.append(str(exc))
                    if exc.connection_lost:
                        self._dead.add(index)
                    self.stats["failovers"] += 1
                    skip = np.unique(np.concatenate(seen)) if seen else None
                    seen = [skip] if skip is not None else []
                finally:
                    pages.close()
            if time.monotonic() > deadline:
                raise IgniteUnavailableError(
                    f"partition {task.partition} of cache {self.cache!r} could not be read from any node within "
                    f"{self.failover_timeout:.0f}s; last errors: {errors[-3:]}")
            time.sleep(0.5)
            if not self._scans.alive():
                self._scans.reconnect_all()

    def _page(self, task: ReadTask, cols: dict, masks: dict, skip, seen: list, node: str) -> dict:
        """One decoded page of ``task``: its rows in the task's hash range, not read before a failover
        (``skip``), fingerprinted, then through ``key_filter``; the keys noted in ``seen``.

        The keys' hash is computed once, for whichever of the hash range, the fingerprint and a
        ``HashFilter`` needs it.
        """
        keys = cols[self.key_column]
        hashes = key_hash(keys) if not task.whole or self._hashed else None
        keep = None
        if not task.whole:
            keep = hashes >= np.uint64(task.hash_lo)
            if task.hash_hi < HASH_SPACE:
                keep &= hashes < np.uint64(task.hash_hi)
        if skip is not None:
            fresh = ~np.isin(keys, skip)
            keep = fresh if keep is None else keep & fresh
        chunk = {**cols, **{_MASK + k: m for k, m in masks.items()}} if masks else cols
        if keep is not None and not keep.all():
            chunk = {k: v[keep] for k, v in chunk.items()}
            hashes = None if hashes is None else hashes[keep]
        seen.append(chunk[self.key_column])
        if self.fingerprints is not None:  # the task's every row, as validation read it
            self.fingerprints.add(task, chunk, hashes)
        if self.key_filter is not None:  # after the fingerprint, which covers every row
            kept = self.key_filter.keep(hashes) if isinstance(self.key_filter, HashFilter) else \
                self.key_filter(chunk[self.key_column])
            chunk = _subset(chunk, np.asarray(kept, dtype=bool))
        served = self.stats["rows_per_node"]
        served[node] = served.get(node, 0) + len(chunk[self.key_column])
        return chunk

    # -- batches -------------------------------------------------------------------------------------------
    def batches(self, tasks: Iterable[ReadTask | int]) -> Iterator[dict[str, np.ndarray]]:
        """Batches of exactly ``batch_size`` rows (the last one shorter) from the tasks, in order.

        :param tasks: ``ReadTask`` objects, or partition numbers for whole partitions.
        """
        tasks = [ReadTask.coerce(t) for t in tasks]
        bad = [t.partition for t in tasks if t.partition >= self.partitions]
        if bad:
            raise ConfigError(f"cache {self.cache!r} has {self.partitions} partitions; no partition(s) {bad}")
        chunks: list[dict] = []
        pending = 0
        ahead: dict[int, tuple[int, int]] = {}  # task position -> (node, request id) of its scan, sent early
        try:
            for i, task in enumerate(tasks):
                self._send_ahead(tasks, i, ahead)  # before this task's first wait, so the nodes work meanwhile
                pages = self._read_task(task, ahead.pop(i, None))
                try:
                    for chunk in pages:
                        chunks.append(chunk)
                        pending += len(chunk[self.key_column])
                        while pending >= self.batch_size:
                            rows = _concat(chunks, self.key_column)
                            chunks = [{k: v[self.batch_size:] for k, v in rows.items()}]
                            pending -= self.batch_size
                            yield self._finish({k: v[:self.batch_size] for k, v in rows.items()})
                finally:
                    pages.close()  # an abandoned read closes its server cursor now, not at garbage collection
        finally:
            for index, qid in ahead.values():
                self._scans.discard(index, qid)
        if pending:
            yield self._finish(_concat(chunks, self.key_column))

    def _send_ahead(self, tasks: list[ReadTask], i: int, ahead: dict[int, tuple[int, int]]) -> None:
        """Scans of tasks ``i .. i+scans_ahead`` on their primaries, where not sent yet; past those (unless
        ``scans_ahead`` is 0), scans of the next whole partitions the plan counted while their rows together
        fit in one page, up to ``MAX_SCANS_AHEAD``: with a few rows a partition, every partition would
        otherwise cost a round trip for those few rows (a first block of 6,000 rows in 1,024 partitions was
        read in half the time)."""
        small = 0
        last = i + max(self.scans_ahead, MAX_SCANS_AHEAD if self.scans_ahead else 0)
        for j in range(i, min(len(tasks), last + 1)):
            if j > i + self.scans_ahead:
                small += tasks[j].rows
                if not tasks[j].whole or tasks[j].rows == 0 or small > self.page_size:
                    break
            index = self._primary.get(tasks[j].partition)
            if j in ahead or index is None or index in self._dead:
                continue
            try:
                ahead[j] = (index, self._scans.send_scan(index, tasks[j].partition))
            except NodeFailed:
                self._dead.add(index)  # its task fails over when its turn comes

    def _finish(self, chunk: dict) -> dict[str, np.ndarray]:
        self.stats["rows"] += len(chunk[self.key_column])
        self.stats["fast_pages"], self.stats["slow_pages"] = self._decoder.fast_pages, self._decoder.slow_pages
        out = {}
        for name, values in chunk.items():
            mask = chunk.get(_MASK + name)
            if name.startswith(_MASK):
                continue
            if mask is not None and values.dtype.kind != "f" and mask.any():
                values = np.ma.MaskedArray(values, mask, fill_value=wire.null_fill(values.dtype))
            out[name] = values
        return out

    def read_all(self, tasks: Iterable[ReadTask | int]) -> dict[str, np.ndarray]:
        """All rows of the tasks in one dict of columns (for tests and small data)."""
        parts = list(self.batches(tasks))
        if not parts:
            return self._decoder.empty()
        out = {}
        for name in parts[0]:
            arrays = [b[name] for b in parts]
            masked = any(isinstance(a, np.ma.MaskedArray) for a in arrays)
            out[name] = np.ma.concatenate(arrays) if masked else np.concatenate(arrays)
        return out

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> PartitionReader:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _subset(chunk: dict[str, np.ndarray], keep: np.ndarray | None) -> dict[str, np.ndarray]:
    return chunk if keep is None or keep.all() else {k: v[keep] for k, v in chunk.items()}


def _fingerprinter(fingerprint, key_column: str, stack: list[str]):
    if not fingerprint:
        return None
    from ignite_tf.reader.fingerprint import Fingerprinter

    return Fingerprinter(key_column, stack, on_task=fingerprint if callable(fingerprint) else None)


def _one_per_node(conns: list) -> list:
    """The connected pyignite connections, one per node (two addresses of one node give the node once)."""
    out, seen = [], set()
    for c in conns:
        if c.uuid is not None and c.uuid not in seen:
            seen.add(c.uuid)
            out.append(c)
    return out


def _concat(chunks: list[dict], key: str) -> dict:
    """One chunk of all; a NULL mask missing from a chunk means no NULL there."""
    if len(chunks) == 1:
        return chunks[0]
    names = dict.fromkeys(k for c in chunks for k in c)
    return {k: np.concatenate([c[k] if k in c else np.zeros(len(c[key]), bool) for c in chunks]) for k in names}


def tf_dataset(conn: IgniteConnectionConfig, cache: str, tasks: Iterable[ReadTask | int], *,
               columns: list[str] | None = None, batch_size: int = 1024, page_size: int = 1024,
               prefetch: int | None = -1, label: str | None = None, include_key: bool = True):
    """A ``tf.data.Dataset`` of the reader's batches: ``{column: tensor}``, or ``(features, label)``.

    Each pass over the dataset (each epoch) opens a fresh reader and reads the tasks again.

    :param conn: where the cluster is.
    :param cache: cache name.
    :param tasks: ``ReadTask`` objects or partition numbers (read in this order).
    :param columns: value columns (the label included); default all.
    :param batch_size: rows per element.
    :param page_size: rows per scan page.
    :param prefetch: ``Dataset.prefetch`` buffer; -1 is ``tf.data.AUTOTUNE``, None for no prefetch.
    :param label: column yielded apart, as the second item of ``(features, label)`` pairs.
    :param include_key: keep the key column among the features.
    """
    import tensorflow as tf

    tasks = [ReadTask.coerce(t) for t in tasks]
    kwargs = {"columns": columns, "batch_size": batch_size, "page_size": page_size}
    with PartitionReader(conn, cache, **kwargs) as probe:
        schema, key = dict(probe.schema), probe.key_column
    if label is not None and label.lower() not in schema:
        raise ConfigError(f"label {label!r} is not a column of cache {cache!r} (columns: {list(schema)})")
    label = label.lower() if label else None
    names = [n for n in schema if n != label and (include_key or n != key)]

    def spec(name):
        dtype = schema[name]
        return tf.TensorSpec([None], tf.string if dtype.kind == "O" else tf.as_dtype(dtype))

    def generate():
        with PartitionReader(conn, cache, **kwargs) as reader:
            for batch in reader.batches(tasks):
                batch = {k: v.filled(wire.null_fill(v.dtype)) if isinstance(v, np.ma.MaskedArray) else v
                         for k, v in batch.items()}
                features = {n: batch[n] for n in names}
                yield (features, batch[label]) if label else features

    signature = {n: spec(n) for n in names}
    if label:
        signature = (signature, spec(label))
    ds = tf.data.Dataset.from_generator(generate, output_signature=signature)
    return ds.prefetch(prefetch) if prefetch is not None else ds


__all__ = ["HASH_SPACE", "STACKED", "PartitionReader", "ReadTask", "key_hash", "tf_dataset"]
