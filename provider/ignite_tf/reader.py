"""The partition reader: rows of Ignite cache partitions as column-wise NumPy batches.

Each partition is scanned on its primary node (thin-client ``OP_QUERY_SCAN`` with the partition number,
then ``OP_QUERY_SCAN_CURSOR_GET_PAGE``): pyignite's partition awareness only routes single-key
operations, so the reader holds one connection per node and picks the node itself, from the thin-client
affinity mapping (primaries) and ``SYS.PARTITION_STATES`` (backups). The request and response bytes are
its own; pages are decoded straight into columns by :mod:`ignite_tf._binary`.

Failover, and why every key comes out exactly once: when a node fails (refused, or broken mid-scan) or a
scan errors, the partition's scan restarts from the beginning on the next node (primary, backups, then
any live node) and every key already yielded for that partition is dropped from the restarted scan.
So the reader remembers the keys of the partition in flight (8 bytes a row of that one partition), on
top of one page and one batch: memory grows with ``page_size``, ``batch_size`` and the largest partition,
never with the cache.

NULLs: float columns get NaN; int, bool and string columns of a batch holding a NULL come as
``numpy.ma.MaskedArray`` (data 0 / False / ""); ``tf_dataset`` feeds the filled data.

    with PartitionReader(conn, "churn", batch_size=1024) as reader:
        for batch in reader.batches([ReadTask(p) for p in my_partitions]):
            batch["id"], batch["f0"], ...
"""

from __future__ import annotations

import functools
import itertools
import re
import socket
import struct
import time
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

import numpy as np
from pyignite.api.affinity import cache_get_node_partitions
from pyignite.api.binary import get_binary_type
from pyignite.exceptions import ReconnectError
from pyignite.utils import cache_id as _cache_id

from ignite_tf import _binary as wire
from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.errors import CacheNotFoundError, ConfigError, IgniteUnavailableError

HASH_SPACE = 2**64
_FAILURES = (OSError, EOFError, ReconnectError)
_MASK = "?"  # prefix of a column's NULL mask inside the reader's page chunks


@dataclass(frozen=True)
class ReadTask:
    """One unit of reading: the rows of ``partition`` whose ``key_hash`` lies in ``[hash_lo, hash_hi)``.

    :param partition: partition number.
    :param hash_lo: lowest key hash kept (inclusive), in the uint64 space of :func:`key_hash`.
    :param hash_hi: first key hash not kept; the default ``2**64`` keeps the whole partition.
    """

    partition: int
    hash_lo: int = 0
    hash_hi: int = HASH_SPACE

    def __post_init__(self):
        if isinstance(self.partition, np.integer):  # keep the task JSON-able
            object.__setattr__(self, "partition", int(self.partition))
        if not isinstance(self.partition, int) or isinstance(self.partition, bool) or self.partition < 0:
            raise ConfigError(f"ReadTask.partition must be a partition number >= 0 (got {self.partition!r})")
        if not 0 <= self.hash_lo < self.hash_hi <= HASH_SPACE:
            raise ConfigError(f"ReadTask of partition {self.partition}: need 0 <= hash_lo < hash_hi <= 2**64 "
                              f"(got [{self.hash_lo}, {self.hash_hi}))")

    @property
    def whole(self) -> bool:
        return self.hash_lo == 0 and self.hash_hi == HASH_SPACE

    def split(self, parts: int) -> list[ReadTask]:
        """``parts`` disjoint tasks whose union is this one (equal slices of the hash range)."""
        if parts < 1:
            raise ConfigError(f"ReadTask.split: parts must be >= 1 (got {parts})")
        step = (self.hash_hi - self.hash_lo) / parts
        bounds = [self.hash_lo + round(step * i) for i in range(parts)] + [self.hash_hi]
        return [ReadTask(self.partition, lo, hi) for lo, hi in itertools.pairwise(bounds) if lo < hi]

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ReadTask:
        return cls(int(data["partition"]), int(data.get("hash_lo", 0)), int(data.get("hash_hi", HASH_SPACE)))

    @classmethod
    def coerce(cls, task: ReadTask | int | dict) -> ReadTask:
        if isinstance(task, ReadTask):
            return task
        return cls.from_dict(task) if isinstance(task, dict) else cls(int(task))


_GAMMA, _M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def key_hash(keys: np.ndarray) -> np.ndarray:
    """splitmix64 of int64 keys, as uint64: ``z = k + 0x9E3779B97F4A7C15; z = (z ^ z>>30) * 0xBF58476D1CE4E5B9;
    z = (z ^ z>>27) * 0x94D049BB133111EB; z ^ z>>31`` (all mod 2**64; Steele, Lea & Flood 2014).

    Stable across processes, platforms and versions, so a shard plan computed once splits the same way
    on every worker.

    :param keys: integer keys (any integer dtype; taken as int64).
    """
    z = np.asarray(keys).astype(np.int64).view(np.uint64) + _GAMMA
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


@functools.lru_cache(maxsize=64)
def _resolve(host: str) -> str:
    try:
        return socket.gethostbyname(host)
    except OSError:
        return host


class _NodeFailed(Exception):
    """The connection to a node failed, or the node answered a scan with an error."""

    def __init__(self, message: str, connection_lost: bool):
        super().__init__(message)
        self.connection_lost = connection_lost


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
    :param backups: partition -> [(host, port), ...] of its backups; default: from ``SYS.PARTITION_STATES``.
    :param failover_timeout: seconds to keep retrying a partition on other nodes before giving up.
    """

    def __init__(self, conn: IgniteConnectionConfig, cache: str, *, columns: list[str] | None = None,
                 batch_size: int = 1024, page_size: int = 1024,
                 primaries: dict[int, tuple[str, int]] | None = None,
                 backups: dict[int, list[tuple[str, int]]] | None = None, failover_timeout: float = 60.0):
        if batch_size < 1 or page_size < 1:
            raise ConfigError(f"batch_size and page_size must be >= 1 (got {batch_size}, {page_size})")
        self.cache, self.batch_size, self.page_size = cache, batch_size, page_size
        self.failover_timeout = failover_timeout
        self.stats: dict = {"rows": 0, "pages": 0, "bytes": 0, "pages_per_node": {}, "failovers": 0,
                            "fast_pages": 0, "slow_pages": 0, "partitions": 0}
        self._client = conn.client()
        try:
            names = self._client.get_cache_names()
            if cache not in names:
                raise CacheNotFoundError(f"cache {cache!r} not found on {conn.addresses_str} "
                                         f"(caches: {', '.join(sorted(names)) or 'none'})")
            self.cache_id = _cache_id(cache)
            self._conns = [c for c in self._client._nodes if c.uuid is not None]
            self._dead: set[int] = set()
            self._qids = itertools.count(1)
            self._schemas: dict[tuple[int, int], list[int]] = {}
            self.partitions, group_id = self._cache_info()
            self._primary = self._route_primaries(primaries)
            self._backups = self._route_backups(backups, group_id)
            self.key_column, fields, value_type_id, key_type, self.skipped_columns = self._discover(columns)
            self._decoder = wire.PageDecoder(self.key_column, key_type, fields, value_type_id, self._schema_fields)
        except BaseException:
            self._client.close()
            raise
        self.schema: dict[str, np.dtype] = {self.key_column: np.dtype(np.int64)}
        self.schema.update({f.name: f.dtype for f in fields})

    # -- cluster metadata --------------------------------------------------------------------------------
    def _sql(self, query: str, args: list | None = None, names: bool = False) -> list[list]:
        with self._client.sql(query, query_args=args, include_field_names=names) as cursor:
            return [list(r) for r in cursor]

    def _cache_info(self) -> tuple[int, int]:
        rows = self._sql("SELECT AFFINITY, CACHE_GROUP_ID FROM SYS.CACHES WHERE CACHE_NAME = ?", [self.cache])
        affinity, group_id = rows[0] if rows else ("", self.cache_id)
        match = re.search(r"parts=(\d+)", affinity or "")
        return (int(match.group(1)) if match else 1024), int(group_id)

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

    def _discover(self, columns):
        """Key column, value fields, value type id, key type code and skipped columns of the cache."""
        layout = wire.sql_layout(self._sql, self.cache) or self._layout_by_scan()
        key_name, key_type, value_type_id, available, type_names = layout
        wanted, skipped = wire.select_columns(self.cache, key_name, available, type_names, columns)
        return key_name, wanted, value_type_id, key_type, skipped

    def _layout_by_scan(self):
        """A cache without SQL table: key and value types from its first row, fields from the type registry."""
        conn = self._conns[0]
        buf, pos, end = self._request(conn, wire.scan_request(next(self._qids), self.cache_id, 1, -1))
        cursor, count = struct.unpack_from("<qi", buf, pos)
        if buf[end - 1]:
            self._close_cursor(conn, cursor)
        if count == 0:
            return "_key", 4, None, {}, {}
        key_type, value_type, type_id = wire.first_row_types(buf, pos + 12)
        if type_id is None:
            return "_key", key_type, None, {"_val": wire.Field("_val", 0, value_type)}, {}
        meta = get_binary_type(conn, type_id).value
        for schema_id, ids in (meta.get("schema") or {}).items():
            self._schemas[(type_id, schema_id)] = ids
        return "_key", key_type, type_id, wire.registry_layout(meta), {}

    def _schema_fields(self, type_id: int, schema_id: int) -> list[int]:
        if (type_id, schema_id) not in self._schemas:
            for conn in self._live():
                result = get_binary_type(conn, type_id)
                if result.status == 0 and result.value.get("type_exists"):
                    for sid, ids in result.value["schema"].items():
                        self._schemas[(type_id, sid)] = ids
                    break
        if (type_id, schema_id) not in self._schemas:
            raise wire.DecodeError(f"binary schema {schema_id} of type {type_id} is not registered on the cluster")
        return self._schemas[(type_id, schema_id)]

    # -- wire ----------------------------------------------------------------------------------------------
    def _live(self) -> list:
        return [c for i, c in enumerate(self._conns) if i not in self._dead]

    def _request(self, conn, data: bytes) -> tuple[bytearray, int, int]:
        """Send one request; return (response, start of its body, end of the packet). Raises _NodeFailed."""
        try:
            buf = conn.request(data)
        except _FAILURES as exc:
            raise _NodeFailed(f"{conn.host}:{conn.port}: {exc.__class__.__name__}: {exc}", True) from None
        pos, end, error = wire.parse_response(buf, conn.protocol_context.is_status_flags_supported())
        if error is not None:
            raise _NodeFailed(f"{conn.host}:{conn.port} answered: {error}", False)
        self.stats["bytes"] += end
        return buf, pos, end

    def _close_cursor(self, conn, cursor: int) -> None:
        try:
            self._request(conn, wire.by_id_request(wire.OP_RESOURCE_CLOSE, next(self._qids), cursor))
        except _NodeFailed:
            pass  # the node is gone or the cursor already closed: nothing left to free

    def _pages(self, index: int, partition: int) -> Iterator[tuple[dict, dict]]:
        """Decoded pages of one scan of ``partition`` on node ``index``; closes the cursor if abandoned."""
        conn = self._conns[index]
        buf, pos, end = self._request(conn, wire.scan_request(next(self._qids), self.cache_id, self.page_size,
                                                         partition))
        cursor = struct.unpack_from("<q", buf, pos)[0]
        pos += 8
        node = f"{conn.host}:{conn.port}"
        more = False
        try:
            while True:
                count = struct.unpack_from("<i", buf, pos)[0]
                more = bool(buf[end - 1])
                self.stats["pages"] += 1
                self.stats["pages_per_node"][node] = self.stats["pages_per_node"].get(node, 0) + 1
                yield self._decoder.decode(buf, pos + 4, end - 1, count)
                if not more:
                    return
                more = False  # the server frees the cursor itself when a request on it fails
                buf, pos, end = self._request(conn, wire.by_id_request(wire.OP_QUERY_SCAN_CURSOR_GET_PAGE,
                                                                  next(self._qids), cursor))
                more = True
        finally:
            if more:
                self._close_cursor(conn, cursor)

    def _candidates(self, partition: int) -> list[int]:
        order = [self._primary.get(partition), *self._backups.get(partition, []), *range(len(self._conns))]
        return [i for i in dict.fromkeys(order) if i is not None and i not in self._dead]

    def _read_task(self, task: ReadTask) -> Iterator[dict]:
        """Pages of one task, filtered to its hash range, each key once even across failovers.

        A page comes as one dict: the columns, and ``"?column"`` NULL masks of the columns with NULLs.
        """
        seen: list[np.ndarray] = []
        skip = None
        deadline = time.monotonic() + self.failover_timeout
        errors: list[str] = []
        while True:
            for index in self._candidates(task.partition):
                pages = self._pages(index, task.partition)
                try:
                    for cols, masks in pages:
                        keys = cols[self.key_column]
                        keep = None
                        if not task.whole:
                            h = key_hash(keys)
                            keep = h >= np.uint64(task.hash_lo)
                            if task.hash_hi < HASH_SPACE:
                                keep &= h < np.uint64(task.hash_hi)
                        if skip is not None:
                            fresh = ~np.isin(keys, skip)
                            keep = fresh if keep is None else keep & fresh
                        chunk = {**cols, **{_MASK + k: m for k, m in masks.items()}}
                        if keep is not None and not keep.all():
                            chunk = {k: v[keep] for k, v in chunk.items()}
                        seen.append(chunk[self.key_column])
                        yield chunk
                    self.stats["partitions"] += 1
                    return
                except _NodeFailed as exc:
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
            if not self._live():
                self._reconnect_all()

    def _reconnect_all(self) -> None:
        """Every node failed: try them all again (a restarted node, or a network blip)."""
        for i, conn in enumerate(self._conns):
            conn.reconnect()
            if conn.alive:
                self._dead.discard(i)

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
        for task in tasks:
            pages = self._read_task(task)
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
        if pending:
            yield self._finish(_concat(chunks, self.key_column))

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
            return {name: np.empty(0, dtype) for name, dtype in self.schema.items()}
        out = {}
        for name in self.schema:
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


__all__ = ["HASH_SPACE", "PartitionReader", "ReadTask", "key_hash", "tf_dataset"]
