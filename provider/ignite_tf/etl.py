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
"""

from __future__ import annotations

import csv
import hashlib
import re
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.errors import LoadError

COLUMN_TYPES = {"float32": "REAL", "float64": "DOUBLE", "int32": "INT", "int64": "BIGINT", "bool": "BOOLEAN",
                "string": "VARCHAR"}
ROW_KEY = "row_key"
SUFFIXES = (".csv", ".parquet", ".pq")

# column type -> (Ignite binary type code, little-endian NumPy dtype, Arrow type, Java class in SYS.TABLE_COLUMNS)
_WIRE = {
    "float32": (5, "<f4", pa.float32(), "java.lang.Float"),
    "float64": (6, "<f8", pa.float64(), "java.lang.Double"),
    "int32": (3, "<i4", pa.int32(), "java.lang.Integer"),
    "int64": (4, "<i8", pa.int64(), "java.lang.Long"),
    "bool": (8, "u1", pa.bool_(), "java.lang.Boolean"),
    "string": (9, None, pa.large_string(), "java.lang.String"),
}
_JAVA_TO_TYPE = {w[3]: t for t, w in _WIRE.items()}
_TC_NULL = 101
_OP_CACHE_PUT_ALL = 1004
_HEADER = np.dtype([("code", "u1"), ("version", "u1"), ("flags", "<u2"), ("type_id", "<i4"), ("hash", "<i4"),
                    ("length", "<i4"), ("schema_id", "<i4"), ("schema_offset", "<i4")])
_USER_TYPE, _HAS_SCHEMA, _OFFSET_1, _OFFSET_2, _COMPACT_FOOTER = 0x01, 0x02, 0x08, 0x10, 0x20
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# H2 (Ignite's SQL engine) keywords that cannot be unquoted column or table names, plus Ignite's hidden columns.
_RESERVED = set(
    "ALL AND ARRAY AS BETWEEN BOTH CASE CHECK CONSTRAINT CROSS CURRENT_DATE CURRENT_TIME CURRENT_TIMESTAMP "
    "CURRENT_USER DISTINCT EXCEPT EXISTS FALSE FETCH FOR FOREIGN FROM FULL GROUP HAVING IF ILIKE IN INNER "
    "INTERSECT INTERSECTS INTERVAL IS JOIN LEADING LEFT LIKE LIMIT LOCALTIME LOCALTIMESTAMP MINUS NATURAL NOT "
    "NULL OFFSET ON OR ORDER PRIMARY QUALIFY REGEXP RIGHT ROW ROWNUM ROWS SELECT SYSDATE SYSTIME SYSTIMESTAMP "
    "TABLE TODAY TOP TRAILING TRUE UNION UNIQUE UNKNOWN USING VALUES WHERE WINDOW WITH _ROWID_ _KEY _VAL".split())
_NULL_WORD = np.uint64(0x6E756C6C2D726F77)  # the word a null contributes to a row hash


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


# -- reading and converting the input ------------------------------------------------------------------
def _read_source(source, schema: dict | None) -> tuple[list[tuple[str, object]], str]:
    """The input's (name, column) pairs (pandas or Arrow), and a description of the input for messages."""
    if isinstance(source, pd.DataFrame):
        return [(str(name), series) for name, series in source.items()], "DataFrame"
    if not isinstance(source, (str, Path)):
        raise LoadError(f"source must be a pandas DataFrame or a path to a {'/'.join(SUFFIXES)} file, "
                        f"not {type(source).__name__}")
    path = Path(source)
    where = str(path)
    if path.suffix.lower() not in SUFFIXES:
        raise LoadError(f"source {where}: unsupported file type {path.suffix or '(none)'!r}; "
                        f"give a {', '.join(SUFFIXES)} file or a pandas DataFrame")
    if not path.is_file():
        raise LoadError(f"source {where}: no such file (working directory {Path.cwd()})")
    try:
        if path.suffix.lower() == ".csv":
            import pyarrow.csv as pcsv

            with open(path, newline="", encoding="utf-8-sig") as fh:
                names = next(csv.reader(fh), [])
            # Declared columns are read as text and converted here, so a bad value gets its row and column.
            declared = {str(n).lower() for n in schema or {}}
            types = {n: pa.large_string() for n in names if n.lower() in declared}
            table = pcsv.read_csv(path, convert_options=pcsv.ConvertOptions(
                column_types=types, null_values=[""], strings_can_be_null=True, quoted_strings_can_be_null=True))
        else:
            import pyarrow.parquet as pq

            table = pq.read_table(path)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise LoadError(f"source {where}: cannot be read ({exc})") from None
    return [(name, table.column(i)) for i, name in enumerate(table.column_names)], where


def _to_arrow(values) -> pa.Array:
    """An Arrow array of a column. NaN in a float column is a value; elsewhere (pandas' way) it is missing."""
    if isinstance(values, (pa.Array, pa.ChunkedArray)):
        return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values
    is_float = isinstance(values.dtype, np.dtype) and values.dtype.kind == "f"
    try:
        return pa.array(values, from_pandas=not is_float)
    except (pa.ArrowInvalid, pa.ArrowTypeError):
        # Mixed Python objects: go through their text form; the declared type's parser checks each value.
        return pa.array([None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else str(v)
                         for v in values], pa.large_string())


def infer_type(arrow_type: pa.DataType) -> str | None:
    """The column type (a COLUMN_TYPES key) for an Arrow type, or None when it has none."""
    if pa.types.is_floating(arrow_type) and arrow_type.bit_width >= 32:
        return "float32" if arrow_type.bit_width == 32 else "float64"
    if pa.types.is_integer(arrow_type):
        small = arrow_type.bit_width < 32 or (arrow_type.bit_width == 32 and pa.types.is_signed_integer(arrow_type))
        return "int32" if small else "int64"
    if pa.types.is_boolean(arrow_type):
        return "bool"
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return "string"
    return None


def _cast(arr: pa.Array, ctype: str) -> pa.Array:
    target = _WIRE[ctype][2]
    if ctype in ("int32", "int64"):
        if pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type):
            try:
                return arr.cast(target)
            except pa.ArrowInvalid:  # "3.0" as pandas writes ints of a column that had nulls
                arr = arr.cast(pa.float64())
        if pa.types.is_floating(arr.type):  # an int column with missing values arrives as float + NaN
            arr = pc.if_else(pc.is_nan(arr), pa.scalar(None, arr.type), arr)
    out = arr.cast(target)
    if ctype == "float32" and pa.types.is_floating(arr.type) and arr.type.bit_width > 32:
        src, dst = arr.to_numpy(zero_copy_only=False), out.to_numpy(zero_copy_only=False)
        if np.any(np.isinf(dst) & np.isfinite(src)):
            raise pa.ArrowInvalid("float32 overflow")
    return out


def _bad_rows(arr: pa.Array, ctype: str, limit: int = 3) -> list[int]:
    """Rows whose value does not convert, found by bisecting over slices (about 2 passes per row found)."""
    bad, start = [], 0
    while len(bad) < limit and start < len(arr):
        lo, hi = start, len(arr)
        try:
            _cast(arr.slice(lo, hi - lo), ctype)
            break
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        while hi - lo > 1:  # the first bad row is in [lo, hi)
            mid = (lo + hi) // 2
            try:
                _cast(arr.slice(lo, mid - lo), ctype)
                lo = mid
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                hi = mid
        bad.append(lo)
        start = lo + 1
    return bad


def _convert(values, name: str, ctype: str, where: str) -> pa.Array:
    arr = _to_arrow(values)
    try:
        return _cast(arr, ctype)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        rows = _bad_rows(arr, ctype)
    if not rows:
        raise LoadError(f"{where}, column {name!r}: values of type {arr.type} cannot become {ctype}")
    examples = "; ".join(f"row {r}, column {name!r}: {arr[r].as_py()!r} is not {ctype}" for r in rows)
    raise LoadError(f"{where}: {examples} (rows count from 0; fix the input or declare another type in schema)")


def _check_name(name: str, what: str, where: str) -> None:
    if not _IDENT.match(name) or name.upper() in _RESERVED:
        raise LoadError(f"{where}: {what} {name!r} is not a usable SQL identifier (letters, digits and _, "
                        f"not starting with a digit, not an SQL keyword): rename it")


# -- stable keys ---------------------------------------------------------------------------------------
def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 arrays (NumPy wraps on overflow, which is what it needs)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _word(text: str) -> np.uint64:
    return np.uint64(int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little"))


def _filled(arr: pa.Array, ctype: str) -> np.ndarray:
    """The values as NumPy, nulls as 0 (the null mask is kept apart)."""
    return arr.fill_null(pa.scalar(False if ctype == "bool" else 0, arr.type)).to_numpy(zero_copy_only=False)


def _value_words(arr: pa.Array, ctype: str) -> np.ndarray:
    """One uint64 per value that depends only on the value (not on process, platform or float width)."""
    if ctype == "string":
        words = np.array([int.from_bytes(hashlib.blake2b(v.encode(), digest_size=8).digest(), "little")
                          if v is not None else 0 for v in arr.to_pylist()], dtype=np.uint64)
    elif ctype in ("float32", "float64"):
        f = _filled(arr, ctype).astype(np.float64)
        f = np.where(np.isnan(f), np.float64("nan"), f) + 0.0  # one NaN; -0.0 + 0.0 == +0.0
        words = f.view(np.uint64)
    else:
        words = _filled(arr, ctype).astype(np.int64).view(np.uint64)
    if arr.null_count:
        words = np.where(arr.is_null().to_numpy(zero_copy_only=False), _NULL_WORD, words)
    return words


def hash_keys(values, column_type: str = "string") -> np.ndarray:
    """Keys (63-bit, non-negative int64) that ``load`` gives rows of a non-integer ``key`` column.

    ``cache.get(int(hash_keys(["alice"])[0]))`` reads the row whose key column holds ``"alice"``.

    :param values: the key values (list, NumPy array, pandas Series or Arrow array).
    :param column_type: the key column's type (a COLUMN_TYPES key).
    """
    arr = _convert(values if not isinstance(values, list) else pd.Series(values, dtype=object),
                   "key", column_type, "hash_keys")
    h = _mix(_word("ignite_tf.key.v1") ^ _value_words(arr, column_type))
    return (h >> np.uint64(1)).astype(np.int64)


def row_hash_keys(columns: dict[str, pa.Array], schema: dict[str, str]) -> np.ndarray:
    """Keys that ``load`` gives rows when no ``key`` is named: a hash of every column's name and value."""
    n = len(next(iter(columns.values())))
    h = np.full(n, _word("ignite_tf.row.v1"), dtype=np.uint64)
    for name in sorted(columns):  # column order in the input does not change the keys
        h = _mix(h ^ _word(name.lower()))
        h = _mix(h ^ _value_words(columns[name], schema[name]))
    return (h >> np.uint64(1)).astype(np.int64)


# -- encoding rows as Ignite BinaryObjects ---------------------------------------------------------------
@dataclass
class _Col:
    sql: str
    ctype: str
    values: np.ndarray  # fixed width: one value per row; string: the UTF-8 bytes of all rows
    nulls: np.ndarray | None
    offsets: np.ndarray | None = None  # string: row i is values[offsets[i]:offsets[i + 1]]


def _columnar(arr: pa.Array, sql: str, ctype: str) -> _Col:
    nulls = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None
    if ctype == "string":
        _, off_buf, data_buf = arr.buffers()
        offsets = np.frombuffer(off_buf, dtype="<i8")[arr.offset:arr.offset + len(arr) + 1]
        data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
        return _Col(sql, ctype, data, nulls, offsets)
    return _Col(sql, ctype, _filled(arr, ctype).astype(_WIRE[ctype][1]), nulls)


def _scatter(buf: np.ndarray, starts: np.ndarray, rows: np.ndarray) -> None:
    buf[starts[:, None] + np.arange(rows.shape[1])] = rows


def _encode(keys: np.ndarray, cols: list[_Col], lo: int, hi: int, type_id: int, schema_id: int) -> bytes:
    """The payload of OP_CACHE_PUT_ALL for rows [lo, hi): count, then (Long key, BinaryObject value) pairs.

    The bytes are those pyignite writes for one object at a time (a compact footer; the server knows
    the schema from ``put_binary_type``).
    """
    if all(c.offsets is None and (c.nulls is None or not c.nulls[lo:hi].any()) for c in cols):
        return _encode_fixed(keys, cols, lo, hi, type_id, schema_id)
    return _encode_general(keys, cols, lo, hi, type_id, schema_id)


def _encode_general(keys: np.ndarray, cols: list[_Col], lo: int, hi: int, type_id: int, schema_id: int) -> bytes:
    """``_encode`` for rows of different layouts (nulls, strings): every field written by scatter."""
    n, nf = hi - lo, len(cols)
    sizes = np.empty((n, nf), np.int64)  # bytes of each field: type code + value, or one NULL byte
    for j, c in enumerate(cols):
        sizes[:, j] = 5 + np.diff(c.offsets[lo:hi + 1]) if c.ctype == "string" else 1 + c.values.itemsize
        if c.nulls is not None:
            sizes[c.nulls[lo:hi], j] = 1
    field_off = 24 + np.cumsum(sizes, axis=1) - sizes
    data_len = sizes.sum(axis=1)
    last = int(field_off[:, -1].max())
    width, odt, oflag = _offset_format(last)
    obj_len = 24 + data_len + nf * width
    entry_start = 4 + np.cumsum(9 + obj_len) - (9 + obj_len)
    buf = np.zeros(4 + int((9 + obj_len).sum()), np.uint8)
    buf[:4] = np.array([n], "<i4").view(np.uint8)
    buf[entry_start] = _WIRE["int64"][0]
    _scatter(buf, entry_start + 1, keys[lo:hi].astype("<i8").view(np.uint8).reshape(n, 8))
    start = entry_start + 9
    for j, c in enumerate(cols):
        pos = start + field_off[:, j]
        buf[pos] = _WIRE[c.ctype][0]
        ok = slice(None)
        if c.nulls is not None:
            ok = ~c.nulls[lo:hi]
            buf[pos[~ok]] = _TC_NULL
        if c.ctype != "string":
            _scatter(buf, pos[ok] + 1, c.values[lo:hi][ok].view(np.uint8).reshape(-1, c.values.itemsize))
            continue
        begin, lens, at = c.offsets[lo:hi][ok], np.diff(c.offsets[lo:hi + 1])[ok], pos[ok] + 1
        _scatter(buf, at, lens.astype("<i4").view(np.uint8).reshape(-1, 4))
        run = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        buf[np.repeat(at + 4, lens) + run] = c.values[np.repeat(begin, lens) + run]
    _scatter(buf, start + 24 + data_len, field_off.astype(odt).view(np.uint8).reshape(n, nf * width))
    _scatter(buf, start, _headers(buf, start, obj_len, data_len, oflag, type_id, schema_id))
    return buf.tobytes()


def _headers(buf, start, obj_len, data_len, oflag: int, type_id: int, schema_id: int) -> np.ndarray:
    """The 24-byte BinaryObject headers, as rows of bytes, of objects whose fields are already in ``buf``."""
    header = np.zeros(len(start), _HEADER)
    header["code"], header["version"] = 103, 1
    header["flags"] = _USER_TYPE | _HAS_SCHEMA | _COMPACT_FOOTER | oflag
    header["type_id"], header["schema_id"] = type_id, schema_id
    header["length"], header["schema_offset"] = obj_len, 24 + data_len
    header["hash"] = _java_bytes_hash(buf, start + 24, np.broadcast_to(data_len, start.shape))
    return header.view(np.uint8).reshape(-1, 24)


def _offset_format(last: int) -> tuple[int, str, int]:
    """Byte width, dtype and header flag of a footer whose largest field offset is ``last``."""
    return (1, "u1", _OFFSET_1) if last < 255 else (2, "<u2", _OFFSET_2) if last < 65535 else (4, "<u4", 0)


def _encode_fixed(keys: np.ndarray, cols: list[_Col], lo: int, hi: int, type_id: int, schema_id: int) -> bytes:
    """``_encode`` for rows that all have the same layout (numbers, no nulls): column slices, no scatter."""
    n, nf = hi - lo, len(cols)
    sizes = np.array([1 + c.values.itemsize for c in cols])
    field_off = 24 + np.cumsum(sizes) - sizes
    data_len = int(sizes.sum())
    width, odt, oflag = _offset_format(int(field_off[-1]))
    rows = np.empty((n, 9 + 24 + data_len + nf * width), np.uint8)
    rows[:, 0] = _WIRE["int64"][0]
    rows[:, 1:9] = keys[lo:hi].astype("<i8").view(np.uint8).reshape(n, 8)
    obj = rows[:, 9:]
    for off, c in zip(field_off, cols, strict=True):
        obj[:, off] = _WIRE[c.ctype][0]
        obj[:, off + 1:off + 1 + c.values.itemsize] = c.values[lo:hi].view(np.uint8).reshape(n, -1)
    obj[:, 24 + data_len:] = np.frombuffer(field_off.astype(odt).tobytes(), np.uint8)
    start = np.arange(n) * rows.shape[1] + 9
    obj[:, :24] = _headers(rows.reshape(-1), start, obj.shape[1], data_len, oflag, type_id, schema_id)
    return np.array([n], "<i4").tobytes() + rows.tobytes()


def _java_bytes_hash(buf: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Java's ``Arrays.hashCode(byte[])`` of each field-data region: Ignite's hash of a BinaryObject."""
    # 31**i mod 2**32 (uint32 wraps), as int64 so that products with bytes fit
    pow31 = np.concatenate([[1], np.cumprod(np.full(int(lens.max()), 31, np.uint32), dtype=np.uint32)])
    pow31 = pow31.astype(np.int64)
    step = np.diff(starts)
    if (lens == lens[0]).all() and (step == (step[0] if len(step) else 0)).all():
        # Equal, equally spaced regions (the usual all-numeric rows): one strided view and a product.
        width, stride = int(lens[0]), int(step[0]) if len(step) else 0
        rows = np.lib.stride_tricks.as_strided(buf[starts[0]:], (len(starts), width), (stride, 1))
        h = rows.view(np.int8).astype(np.int64) @ pow31[width - 1::-1] + pow31[width]
    else:
        run = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
        data = buf[np.repeat(starts, lens) + run].view(np.int8).astype(np.int64)
        h = np.add.reduceat(data * pow31[np.repeat(lens, lens) - 1 - run], np.cumsum(lens) - lens) + pow31[lens]
    return (h & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


# -- the table and the writes ----------------------------------------------------------------------------
def _sql(client, query: str, args: list | None = None) -> list[list]:
    with client.sql(query, query_args=args) as cursor:
        return [list(row) for row in cursor]


def _check_table(client, cache: str, table: str, want: dict[str, str], key_sql: str) -> str | None:
    """The existing table's value type, None when there is no table; LoadError when it does not match."""
    found = _sql(client, "SELECT CACHE_NAME, VALUE_TYPE_NAME, KEY_ALIAS FROM SYS.TABLES "
                         "WHERE SCHEMA_NAME = 'PUBLIC' AND TABLE_NAME = ?", [table])
    if not found:
        if _sql(client, "SELECT CACHE_NAME FROM SYS.CACHES WHERE CACHE_NAME = ?", [cache]):
            raise LoadError(f"cache {cache!r} exists but is not the SQL table PUBLIC.{table}: "
                            f"load into another cache name, or destroy that cache first")
        return None
    owner, value_type, key_alias = found[0]
    if owner != cache:
        raise LoadError(f"table PUBLIC.{table} exists with cache {owner!r}, not {cache!r}: "
                        f"load into another name, or DROP TABLE {table} first")
    have = {name: _JAVA_TO_TYPE.get(java, java) for name, java in _sql(
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


def _key_problems(arr: pa.Array, name: str, where: str) -> None:
    if arr.null_count:
        rows = np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[:5].tolist()
        raise LoadError(f"{where}: key column {name!r} has {arr.null_count} null value(s), at rows {rows}: "
                        f"a key must identify every row; fill them, or load with key=None")
    dup = np.flatnonzero(pd.Series(arr.to_pandas()).duplicated(keep=False).to_numpy())
    if len(dup):
        shown = ", ".join(f"row {r} = {arr[int(r)].as_py()!r}" for r in dup[:6]) + (", ..." if len(dup) > 6 else "")
        raise LoadError(f"{where}: key column {name!r} has duplicate values ({shown}): a key must identify "
                        f"one row; choose another key column, or load with key=None")


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
        column, typed from the data.
    :param key: an integer column becomes the ``BIGINT PRIMARY KEY``; any other column is hashed into
        ``ROW_KEY`` (see ``hash_keys``). None: ``ROW_KEY`` is a hash of the whole row, so identical rows
        collapse into one entry (counted in ``duplicates_collapsed``).
    :param batch_size: rows per ``OP_CACHE_PUT_ALL`` request.
    :param backups: backup copies of each partition, for a table that does not exist yet.
    :param template: Ignite cache template of a new table (``partitioned``, or one in the node config).
    :param client: a connected pyignite ``Client`` to use instead of opening one from ``conn``.
    :param on_batch: called with the report after each batch written (progress logging).
    :raises LoadError: bad input (nothing written), a table with another schema, or a failed write;
        ``.report`` says what was written, and running the load again completes it.
    :raises IgniteUnavailableError: no node reachable at ``conn``'s addresses.
    """
    started = time.monotonic()
    report = LoadReport(cache=str(cache), table=str(cache).upper(), key_column="")
    try:
        _check_name(str(cache), "cache name", "load")
        _check_name(template, "template", "load")
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


def _prepare(report: LoadReport, source, schema: dict | None, key: str | None) -> tuple[list[_Col], np.ndarray]:
    """Read, check and convert the whole input; fill the report's input fields. Nothing touches Ignite."""
    raw, where = _read_source(source, schema)
    report.source = where
    columns: dict[str, object] = {}
    for name, values in raw:
        if name.lower() in columns:
            raise LoadError(f"{where}: two columns are named {name!r} to SQL, which ignores case: rename one")
        columns[name.lower()] = values
    schema = {str(k).lower(): v for k, v in (schema or {}).items()} or None
    bad = {k: v for k, v in (schema or {}).items() if v not in COLUMN_TYPES}
    if bad:
        raise LoadError(f"schema: unknown type(s) {bad}; use one of {list(COLUMN_TYPES)}")
    key = key.lower() if key else None
    missing = [c for c in [*(schema or {}), *([key] if key else [])] if c not in columns]
    if missing:
        what = "key column" if missing == [key] else "column(s)"
        raise LoadError(f"{where}: {what} {', '.join(map(repr, missing))} not found; "
                        f"available: {', '.join(columns) or '(none)'}")
    names = [*schema, *([key] if key and key not in schema else [])] if schema else list(columns)
    report.columns_ignored = [c for c in columns if c not in names]
    for name in names:
        _check_name(name, "column", where)
    report.rows_in = rows = len(columns[names[0]]) if names else 0
    if rows == 0:
        raise LoadError(f"{where}: the input is empty ({len(names)} columns, no rows): nothing to load")
    types, arrays = {}, {}
    for name in names:
        ctype = (schema or {}).get(name) or infer_type(_to_arrow(columns[name]).type)
        if ctype is None:
            raise LoadError(f"{where}: column {name!r} has type {_to_arrow(columns[name]).type}, which cannot be "
                            f"loaded; convert it, or declare it in schema= as one of {list(COLUMN_TYPES)}")
        types[name], arrays[name] = ctype, _convert(columns[name], name, ctype, where)

    value_names = [c for c in names if c != key or types[c] not in ("int32", "int64")]
    if key and types[key] in ("int32", "int64"):
        report.key_mode, report.key_column = "column", key
        _key_problems(arrays[key], key, where)
        keys = arrays[key].to_numpy(zero_copy_only=False).astype(np.int64)
    else:
        report.key_mode, report.key_column = ("hashed_column" if key else "row_hash"), ROW_KEY
        if ROW_KEY in names:
            raise LoadError(f"{where}: column {ROW_KEY!r} is where ignite-tf puts hashed keys: rename it, or "
                            f"name an integer key column with key=")
        if key:
            _key_problems(arrays[key], key, where)
        keys = hash_keys(arrays[key], types[key]) if key else row_hash_keys(arrays, types)
        first = np.sort(np.unique(keys, return_index=True)[1])
        if len(first) < rows and key:
            raise LoadError(f"{where}: two values of key column {key!r} hash to the same key; "
                            f"load with an integer key column instead")
        if len(first) < rows:
            report.duplicates_collapsed = rows - len(first)
            keys = keys[first]
            arrays = {k: v.take(pa.array(first)) for k, v in arrays.items()}
    if not value_names:
        raise LoadError(f"{where}: only the key column {key!r} was given; a table needs at least one more column")
    report.columns = {report.key_column: "int64", **{c: types[c] for c in value_names}}
    return [_columnar(arrays[c], c.upper(), types[c]) for c in value_names], keys


def _write(client, conn, report: LoadReport, cols: list[_Col], keys: np.ndarray, batch_size: int, backups: int,
           template: str, on_batch) -> None:
    from pyignite import datatypes as dt
    from pyignite.exceptions import CacheError, ReconnectError
    from pyignite.utils import cache_id, entity_id, schema_id

    cache, table, key_sql = report.cache, report.table, report.key_column.upper()
    want = {key_sql: "int64", **{c.sql: c.ctype for c in cols}}
    ignite_types = {"float32": dt.FloatObject, "float64": dt.DoubleObject, "int32": dt.IntObject,
                    "int64": dt.LongObject, "bool": dt.BoolObject, "string": dt.String}
    fields = OrderedDict((c.sql, ignite_types[c.ctype]) for c in cols)
    try:
        value_type = _retry(lambda: _check_table(client, cache, table, want, key_sql))
        report.created_table = value_type is None
        if value_type is None:
            # Ignite keeps binary metadata after DROP TABLE: a name per schema lets a re-created table change types.
            value_type = f"ignite_tf.{cache}_{hashlib.blake2b(repr(want).encode(), digest_size=4).hexdigest()}"
            ddl = (f"CREATE TABLE IF NOT EXISTS {table} ({key_sql} BIGINT PRIMARY KEY, "
                   f"{', '.join(f'{c.sql} {COLUMN_TYPES[c.ctype]}' for c in cols)}) WITH \"template={template},"
                   f"backups={backups},cache_name={cache},value_type={value_type}\"")
            _retry(lambda: _sql(client, ddl))
        report.value_type = value_type
        _retry(lambda: client.put_binary_type(value_type, schema=fields))
    except (CacheError, OSError, EOFError, ReconnectError) as exc:
        raise LoadError(f"preparing table {table} on {conn.addresses_str} failed, nothing was written: "
                        f"{exc.__class__.__name__}: {exc}") from None

    type_id, s_id, c_id = entity_id(value_type), schema_id(fields), cache_id(cache)
    for lo in range(0, len(keys), batch_size):
        hi = min(lo + batch_size, len(keys))
        payload = _encode(keys, cols, lo, hi, type_id, s_id)
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
        report.rows_in_cache = int(_retry(lambda: _sql(client, f"SELECT COUNT(*) FROM {table}"))[0][0])
    except (CacheError, OSError, EOFError, ReconnectError) as exc:
        raise LoadError(f"all {report.rows_written} rows were written to {table}, but counting them failed: "
                        f"{exc}") from None
    if report.rows_in_cache < report.rows_written:
        raise LoadError(f"{report.rows_written} rows were written to {table} but it holds {report.rows_in_cache}: "
                        f"entries were lost (a node left?); run the load again")
