"""ETL load: rows from a DataFrame, CSV or Parquet file into an Ignite SQL table (stage 1 of the data path).

The table and its cache share one name. Rows are converted and checked in full before the first write,
encoded with NumPy straight into Ignite BinaryObject bytes (many rows per pass, no per-row Python) and
sent with the thin-client ``OP_CACHE_PUT_ALL`` in batches. Keys are deterministic, so a re-run overwrites
the same entries instead of adding new ones: a load is idempotent and a failed one is finished by
running it again.

    report = load(conn, "digits", "digits.parquet", key="id")

Values: NaN in a float column is a value; None / pd.NA (and NaN outside float columns, the pandas way)
and an empty CSV cell are SQL NULL. A DataFrame's index is not loaded (``reset_index()`` to load it).
Row numbers in messages count data rows from 0.

This module holds the load itself (the table, the batched writes, the report); reading and checking the
input is in :mod:`ignite_tf.etl.input`, the keys and the BinaryObject encoding in :mod:`ignite_tf.etl.encode`.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import pyarrow as pa

from ignite_tf.connection import IgniteConnectionConfig, sql
from ignite_tf.errors import LoadError
from ignite_tf.etl.encode import EncodedColumn, encode_column, encode_rows, hash_keys, row_hash_keys
from ignite_tf.etl.input import (
    COLUMN_TYPES,
    ROW_KEY,
    SUFFIXES,
    check_input,
    check_name,
    infer_type,
    read_schema,
)
from ignite_tf.typecodes import BY_CODE, COLUMN_CODES, COLUMN_TYPE

__all__ = ["COLUMN_TYPES", "ROW_KEY", "SUFFIXES", "LoadReport", "hash_keys", "infer_type", "load",
           "read_schema", "row_hash_keys"]

_JAVA_TO_TYPE = {BY_CODE[code].java: ctype for ctype, code in COLUMN_CODES.items()}
_OP_CACHE_PUT_ALL = 1004
MAX_REQUEST_BYTES = 2 << 20  # one put-all request at most (about 500 rows of 784 float columns)


@dataclass
class LoadReport:
    """What a load did; JSON-able through ``to_dict()`` (it travels through Airflow XCom).

    :param key_column: the primary-key column (lower case): the integer ``key`` column, or ``row_key``.
    :param key_mode: ``column`` (integer key column), ``hashed_column`` (hash of a non-integer key
        column) or ``row_hash`` (hash of the whole row).
    :param rows_in: rows in the input.
    :param rows_written: rows sent to Ignite (after collapsing duplicate rows in ``row_hash`` mode).
    :param rows_in_cache: ``SELECT COUNT(*)`` of the table after the load (-1 when not reached).
    :param duplicates_collapsed: identical input rows that became one entry (``row_hash`` mode).
    """

    cache: str
    table: str
    key_column: str
    rows_in: int = 0
    rows_written: int = 0
    batches_written: int = 0
    rows_in_cache: int = -1
    created_table: bool = False
    seconds: float = 0.0
    duplicates_collapsed: int = 0
    key_mode: str = ""
    value_type: str = ""
    source: str = ""
    columns: dict[str, str] = field(default_factory=dict)
    columns_ignored: list[str] = field(default_factory=list)
    rows_per_second: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


# -- the table and the writes ----------------------------------------------------------------------------
def _check_table(client, cache: str, table: str, want: dict[str, str], key_sql: str) -> str | None:
    """The existing table's value type, None when there is no table; LoadError when it does not match."""
    found = sql(client, "SELECT CACHE_NAME, VALUE_TYPE_NAME, KEY_ALIAS FROM SYS.TABLES "
                         "WHERE SCHEMA_NAME = 'PUBLIC' AND TABLE_NAME = ?", [table])
    if not found:
        if sql(client, "SELECT CACHE_NAME FROM SYS.CACHES WHERE CACHE_NAME = ?", [cache]):
            raise LoadError(f"cache {cache!r} exists but is not the SQL table PUBLIC.{table}: "
                            f"load into another cache name, or destroy that cache first")
        return None
    owner, value_type, key_alias = found[0]
    if owner != cache:
        raise LoadError(f"table PUBLIC.{table} exists with cache {owner!r}, not {cache!r}: "
                        f"load into another name, or DROP TABLE {table} first")
    have = {name: _JAVA_TO_TYPE.get(java, java) for name, java in sql(
        client, "SELECT COLUMN_NAME, TYPE FROM SYS.TABLE_COLUMNS WHERE SCHEMA_NAME = 'PUBLIC' AND TABLE_NAME = ? "
                "AND COLUMN_NAME NOT IN ('_KEY', '_VAL')", [table])}
    problems = []
    if key_alias and key_alias != key_sql:
        problems.append(f"primary key is {key_alias.lower()!r} there, {key_sql.lower()!r} in the input")
    for name in sorted(set(have) | set(want)):
        if name not in want:
            problems.append(f"column {name.lower()!r} ({have[name]}) only in the table")
        elif name not in have:
            problems.append(f"column {name.lower()!r} ({want[name]}) only in the input")
        elif have[name] != want[name]:
            problems.append(f"column {name.lower()!r} is {have[name]} ({COLUMN_TYPES.get(have[name], '?')}) in the "
                            f"table but {want[name]} ({COLUMN_TYPES[want[name]]}) in the input")
    if problems:
        raise LoadError(f"table {table} (cache {cache!r}) exists with another schema: {'; '.join(problems)}. "
                        f"Declare a matching schema=, load into another cache name, or DROP TABLE {table}")
    return value_type


class _Payload:
    """Writes pre-encoded bytes into a pyignite query (pyignite's own Map would encode row by row)."""

    @staticmethod
    def from_python(stream, value):
        stream.write(value)


def _put_all(client, cache_id: int, payload: bytes) -> None:
    from pyignite.exceptions import CacheError
    from pyignite.queries import Query
    from pyignite.queries.cache_info import CacheInfo

    conn = client.random_node
    query = Query(_OP_CACHE_PUT_ALL, [("cache_info", CacheInfo), ("data", _Payload)])
    result = query.perform(conn, query_params={
        "cache_info": CacheInfo(cache_id=cache_id, protocol_context=conn.protocol_context), "data": payload})
    if result.status != 0:
        raise CacheError(result.message)


def _rows_per_request(keys: np.ndarray, cols: list[EncodedColumn], batch_size: int, type_id: int,
                      s_id: int) -> int:
    """``batch_size``, fewer for wide rows: a request stays within ``MAX_REQUEST_BYTES``.

    3,000 rows of 784 float columns made one 12 MB put-all, which the nodes (and their backup messages to
    each other) could not finish within the client's timeout on a busy machine; retries only sent it again.
    """
    probe = min(len(keys), 64)
    if not probe:
        return batch_size
    row_bytes = len(encode_rows(keys, cols, 0, probe, type_id, s_id)) / probe
    return max(1, min(batch_size, int(MAX_REQUEST_BYTES // row_bytes)))


def _retry(fn, attempts: int = 4):
    """``fn()``, again after a lost connection (pyignite then picks another node). Each step is idempotent."""
    from pyignite.exceptions import CacheError, ReconnectError

    for attempt in range(attempts):
        try:
            return fn()
        except (OSError, EOFError, ReconnectError, CacheError) as exc:
            # A node that has just joined answers SQL before its system views exist.
            transient = not isinstance(exc, CacheError) or 'Schema "SYS" not found' in str(exc)
            if attempt == attempts - 1 or not transient:
                raise
            time.sleep(0.5 * (attempt + 1))


def load(conn: IgniteConnectionConfig, cache: str, source, *, schema: dict[str, str] | None = None,
         key: str | None = None, batch_size: int = 10_000, backups: int = 1, template: str = "partitioned",
         client=None, on_batch: Callable[[LoadReport], None] | None = None) -> LoadReport:
    """Write the rows of ``source`` into the Ignite SQL table ``cache`` (created when missing).

    Everything is converted and checked before the first write, so bad input writes nothing. Keys are
    deterministic (see ``key``): running the same load again overwrites the same entries.

    :param conn: the cluster to load into.
    :param cache: name of the cache and of its SQL table (``PUBLIC.<CACHE>``).
    :param source: a pandas DataFrame, or the path of a ``.csv`` or ``.parquet`` file.
    :param schema: column name -> one of COLUMN_TYPES' keys; only these columns are loaded. Default: every
        column, typed from the data; a text column holding both numbers and other text is then refused.
    :param key: an integer column becomes the ``BIGINT PRIMARY KEY``; any other column is hashed into
        ``ROW_KEY`` (see ``hash_keys``). None: ``ROW_KEY`` is a hash of the whole row, so identical rows
        collapse into one entry (counted in ``duplicates_collapsed``).
    :param batch_size: rows per ``OP_CACHE_PUT_ALL`` request; fewer when that many rows would pass
        ``MAX_REQUEST_BYTES`` (wide rows).
    :param backups: backup copies of each partition, for a table that does not exist yet.
    :param template: Ignite cache template of a new table (``partitioned``, or one in the node config).
    :param client: a connected pyignite ``Client`` to use instead of opening one from ``conn``.
    :param on_batch: called with the report after each batch written (progress logging).
    :raises LoadError: bad input (nothing written; one error with the first examples of every kind of
        problem found), a table with another schema, or a failed write;
        ``.report`` says what was written, and running the load again completes it.
    :raises IgniteUnavailableError: no node reachable at ``conn``'s addresses.
    """
    started = time.monotonic()
    report = LoadReport(cache=str(cache), table=str(cache).upper(), key_column="")
    try:
        check_name(str(cache), "cache name", "load")
        check_name(template, "template", "load")
        if batch_size < 1:
            raise LoadError(f"batch_size must be at least 1 (got {batch_size})")
        cols, keys = _prepare(report, source, schema, key)
        own = client is None
        client = conn.client() if own else client
        try:
            _write(client, conn, report, cols, keys, batch_size, backups, template, on_batch)
        finally:
            if own:
                client.close()
    except LoadError as exc:
        report.seconds = round(time.monotonic() - started, 3)
        exc.report = exc.report or report.to_dict()
        raise
    report.seconds = round(time.monotonic() - started, 3)
    report.rows_per_second = round(report.rows_written / max(report.seconds, 1e-9), 1)
    return report


def _prepare(report: LoadReport, source, schema: dict | None,
             key: str | None) -> tuple[list[EncodedColumn], np.ndarray]:
    """Read, check and convert the whole input; fill the report's input fields. Nothing touches Ignite."""
    key = key.lower() if key else None
    try:
        checked = check_input(source, schema, key)
    except LoadError as exc:  # refused input: the report says what was read, and that nothing was written
        report.source, report.rows_in = exc.report.get("source", ""), exc.report.get("rows_in", 0)
        exc.report = {}
        raise
    where, types, arrays = checked.where, checked.types, checked.arrays
    report.source, report.columns_ignored, report.rows_in = where, checked.ignored, checked.rows
    integer_key = key is not None and types[key] in ("int32", "int64")
    value_names = [c for c in types if c != key or not integer_key]
    if integer_key:
        report.key_mode, report.key_column = "column", key
        keys = arrays[key].to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        report.key_mode, report.key_column = ("hashed_column" if key else "row_hash"), ROW_KEY
        keys = hash_keys(arrays[key], types[key]) if key else row_hash_keys(arrays, types)
        first = np.sort(np.unique(keys, return_index=True)[1])
        if len(first) < checked.rows and key:
            raise LoadError(f"{where}: two values of key column {key!r} hash to the same key; "
                            f"load with an integer key column instead")
        if len(first) < checked.rows:
            report.duplicates_collapsed = checked.rows - len(first)
            keys = keys[first]
            arrays = {k: v.take(pa.array(first)) for k, v in arrays.items()}
    report.columns = {report.key_column: "int64", **{c: types[c] for c in value_names}}
    return [encode_column(arrays[c], c.upper(), types[c]) for c in value_names], keys


def _write(client, conn, report: LoadReport, cols: list[EncodedColumn], keys: np.ndarray, batch_size: int, backups: int,
           template: str, on_batch) -> None:
    from pyignite import datatypes as dt
    from pyignite.exceptions import CacheError, ReconnectError
    from pyignite.utils import cache_id, entity_id, schema_id

    cache, table, key_sql = report.cache, report.table, report.key_column.upper()
    want = {key_sql: "int64", **{c.sql: c.ctype for c in cols}}
    fields = OrderedDict((c.sql, getattr(dt, COLUMN_TYPE[c.ctype].pyignite)) for c in cols)
    try:
        value_type = _retry(lambda: _check_table(client, cache, table, want, key_sql))
        report.created_table = value_type is None
        if value_type is None:
            # Ignite keeps binary metadata after DROP TABLE: a name per schema lets a re-created table change types.
            value_type = f"ignite_tf.{cache}_{hashlib.blake2b(repr(want).encode(), digest_size=4).hexdigest()}"
            ddl = (f"CREATE TABLE IF NOT EXISTS {table} ({key_sql} BIGINT PRIMARY KEY, "
                   f"{', '.join(f'{c.sql} {COLUMN_TYPES[c.ctype]}' for c in cols)}) WITH \"template={template},"
                   f"backups={backups},cache_name={cache},value_type={value_type}\"")
            _retry(lambda: sql(client, ddl))
        report.value_type = value_type
        _retry(lambda: client.put_binary_type(value_type, schema=fields))
    except (CacheError, OSError, EOFError, ReconnectError) as exc:
        raise LoadError(f"preparing table {table} on {conn.addresses_str} failed, nothing was written: "
                        f"{exc.__class__.__name__}: {exc}") from None

    type_id, s_id, c_id = entity_id(value_type), schema_id(fields), cache_id(cache)
    step = _rows_per_request(keys, cols, batch_size, type_id, s_id)
    for lo in range(0, len(keys), step):
        hi = min(lo + step, len(keys))
        payload = encode_rows(keys, cols, lo, hi, type_id, s_id)
        try:
            _retry(lambda: _put_all(client, c_id, payload))  # noqa: B023 - called right here
        except (CacheError, OSError, EOFError, ReconnectError) as exc:
            hint = " (the data region is full: give the nodes more memory, or load with backups=0)" \
                if "memory" in str(exc).lower() else ""
            raise LoadError(
                f"writing batch {report.batches_written + 1} (rows {lo}..{hi - 1}) into {table} on "
                f"{conn.addresses_str} failed: {exc.__class__.__name__}: {exc}{hint}. {report.rows_written} of "
                f"{len(keys)} rows ({report.batches_written} batches) were written before it. The load is "
                f"idempotent: run it again to complete it") from None
        report.rows_written, report.batches_written = hi, report.batches_written + 1
        if on_batch is not None:
            on_batch(report)
    try:
        report.rows_in_cache = int(_retry(lambda: sql(client, f"SELECT COUNT(*) FROM {table}"))[0][0])
    except (CacheError, OSError, EOFError, ReconnectError) as exc:
        raise LoadError(f"all {report.rows_written} rows were written to {table}, but counting them failed: "
                        f"{exc}") from None
    if report.rows_in_cache < report.rows_written:
        raise LoadError(f"{report.rows_written} rows were written to {table} but it holds {report.rows_in_cache}: "
                        f"entries were lost (a node left?); run the load again")
