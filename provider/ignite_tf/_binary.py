"""Ignite thin-client wire format for the reader: scan requests, and scan pages -> NumPy columns.

A scan page (``OP_QUERY_SCAN`` / ``OP_QUERY_SCAN_CURSOR_GET_PAGE`` response) is a row count, then for each
row the key and the value as Ignite binary data, then a ``more`` byte. Keys are typed primitives
(``long`` = type code 4 + 8 bytes). Values of SQL tables are BinaryObjects (type code 103), usually
wrapped in a type-27 "binary object wrapper" (``int length, bytes, int start offset``)::

    103 | version | flags:short | type id | hash code | length | schema id | schema offset |
    field, field, ... (each its type code, then its payload) | footer | [raw offset]

The footer holds each field's offset from the object start (1, 2 or 4 bytes wide, see the flags); a
*compact* footer holds offsets only, the field ids come from the type's registered schema (schema id ->
field ids). A NULL column is written as type code 101 in its place.

Two decoders:

* fast: when every row of a page has the same length and the same structure (header, footer, wrapper
  and the type codes of the wanted fields: always the case for fixed-size numeric columns without
  nulls), the page is an ``n x row_len`` byte matrix and each column is one strided slice of it.
* general: a short Python loop finds where each row starts (rows differ in length), then every column is
  gathered for all rows at once with NumPy fancy indexing; only strings are decoded row by row.

Which columns a cache has (names, field ids, type codes) comes from its SQL table, or for a plain cache
from the binary type registry: ``sql_layout``, ``registry_layout`` and ``select_columns``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from pyignite.utils import entity_id

from ignite_tf.errors import ConfigError, IgniteTFError

OP_RESOURCE_CLOSE, OP_QUERY_SCAN, OP_QUERY_SCAN_CURSOR_GET_PAGE = 0, 2000, 2001
TC_STRING = 9
TC_WRAPPED = 27
TC_NULL = 101
TC_OBJECT = 103

# type code -> NumPy dtype of the fixed-size primitives (little-endian on the wire).
FIXED: dict[int, np.dtype] = {
    1: np.dtype("i1"), 2: np.dtype("<i2"), 3: np.dtype("<i4"), 4: np.dtype("<i8"),
    5: np.dtype("<f4"), 6: np.dtype("<f8"), 7: np.dtype("<u2"), 8: np.dtype("?"),
}
SUPPORTED = {*FIXED, TC_STRING}
INT_KEYS = (1, 2, 3, 4)
TYPE_NAMES = {1: "byte", 2: "short", 3: "int", 4: "long", 5: "float", 6: "double", 7: "char", 8: "bool",
              9: "string", 11: "date", 10: "uuid", 30: "decimal", 33: "timestamp", 36: "time", TC_OBJECT: "object"}
# SYS.TABLE_COLUMNS.TYPE (a Java class name) -> type code.
JAVA_TYPES = {"java.lang.Byte": 1, "java.lang.Short": 2, "java.lang.Integer": 3, "java.lang.Long": 4,
              "java.lang.Float": 5, "java.lang.Double": 6, "java.lang.Character": 7, "java.lang.Boolean": 8,
              "java.lang.String": 9}

# BinaryObject header flags.
HAS_SCHEMA, HAS_RAW, OFFSET_1, OFFSET_2, COMPACT = 0x02, 0x04, 0x08, 0x10, 0x20
_I32 = struct.Struct("<i")
_SCAN = struct.Struct("<iHqibBiiB")  # len, op, query id, cache id, flags, filter (null), page size, partition, local
_BY_ID = struct.Struct("<iHqq")  # len, op, query id, cursor / resource id
# Header bytes that must be equal in every row of a fast page: all but the hash code (bytes 8..11).
_HEADER_STRUCT = (0, 1, 2, 3, 4, 5, 6, 7, *range(12, 24))


class DecodeError(IgniteTFError):
    """A page did not have the layout the reader expected (unsupported type, mixed value types...)."""


@dataclass(frozen=True)
class Field:
    """One value column: output ``name`` (lower case), Ignite ``field_id`` and wire ``type_code``."""

    name: str
    field_id: int
    type_code: int

    @property
    def dtype(self) -> np.dtype:
        return FIXED[self.type_code] if self.type_code in FIXED else np.dtype(object)


def dtype_of(type_code: int) -> np.dtype:
    return FIXED[type_code] if type_code in FIXED else np.dtype(object)


def null_fill(dtype: np.dtype):
    """What a NULL becomes in the column's data: NaN for floats, 0 / False for ints and bools, "" for strings."""
    if dtype.kind == "f":
        return np.nan
    return "" if dtype.kind == "O" else 0


def _gather(arr: np.ndarray, pos: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """``dtype`` values stored at byte positions ``pos`` of ``arr`` (any alignment)."""
    if dtype.itemsize == 1:
        return arr[pos].view(dtype)
    return arr[pos[:, None] + np.arange(dtype.itemsize)].view(dtype).reshape(-1)


_OFFSET_DTYPES = {1: np.dtype("u1"), 2: np.dtype("<u2"), 4: np.dtype("<i4")}


class PageDecoder:
    """Decodes the row region of scan pages of one cache into columns.

    :param key_name: output name of the key column.
    :param key_type: wire type code of the keys (an integer type; decoded to int64).
    :param fields: the value columns wanted. With ``value_type_id`` None the value itself is a primitive and
        ``fields`` holds that one column.
    :param value_type_id: type id of the BinaryObject values, None for primitive values.
    :param schema_fields: ``(type_id, schema_id) -> [field ids]``, for compact footers (looked up once per schema).
    """

    def __init__(self, key_name: str, key_type: int, fields: list[Field], value_type_id: int | None,
                 schema_fields: Callable[[int, int], list[int]]):
        if key_type not in INT_KEYS:
            raise ConfigError(f"key type {TYPE_NAMES.get(key_type, key_type)} is not supported by the partition "
                              f"reader: keys must be integers (byte/short/int/long)")
        self.key_name, self.key_type, self.fields = key_name, key_type, fields
        self.value_type_id = value_type_id
        self._schema_fields = schema_fields
        self._key_size = FIXED[key_type].itemsize
        self.fast_pages = 0
        self.slow_pages = 0
        self._plans: dict[tuple[int, int], tuple] = {}

    # -- entry point -------------------------------------------------------------------------------------
    def decode(self, buf: bytearray, start: int, end: int, count: int):
        """Rows ``count`` in ``buf[start:end]`` -> (columns, null masks). Null masks only for columns with nulls."""
        if count == 0:
            return self._empty(), {}
        arr = np.frombuffer(buf, np.uint8, end - start, start)
        kpos, vpos, row_end = self._bounds(buf, start, 1)
        row_len = row_end - start
        if row_len * count == end - start:
            out = self._decode_fast(arr, count, row_len, int(kpos[0]) - start, int(vpos[0]) - start)
            if out is not None:
                self.fast_pages += 1
                return out
        kpos, vpos, row_end = self._bounds(buf, start, count)
        if row_end != end:
            raise DecodeError(f"a scan page of {count} rows ends at byte {row_end}, expected {end}")
        self.slow_pages += 1
        return self._decode_general(arr, kpos - start, vpos - start)

    def _empty(self):
        cols = {self.key_name: np.empty(0, np.int64)}
        cols.update({f.name: np.empty(0, f.dtype) for f in self.fields})
        return cols

    # -- row boundaries (the one per-row Python loop) -----------------------------------------------------
    def _bounds(self, buf, pos: int, count: int):
        """Positions of each row's key payload and value (object start, or primitive type code); end of rows."""
        kpos = np.empty(count, np.int64)
        vpos = np.empty(count, np.int64)
        key_type, key_size, unpack = self.key_type, self._key_size, _I32.unpack_from
        for i in range(count):
            if buf[pos] != key_type:
                raise DecodeError(f"row {i} of a page has key type code {buf[pos]}, expected {key_type}")
            kpos[i] = pos + 1
            pos += 1 + key_size
            tc = buf[pos]
            if tc == TC_WRAPPED:
                (n,) = unpack(buf, pos + 1)
                vpos[i] = pos + 5 + unpack(buf, pos + 5 + n)[0]
                pos += 9 + n
            elif tc == TC_OBJECT:
                vpos[i] = pos
                pos += unpack(buf, pos + 12)[0]
            elif tc in FIXED:
                vpos[i] = pos
                pos += 1 + FIXED[tc].itemsize
            elif tc == TC_STRING:
                vpos[i] = pos
                pos += 5 + unpack(buf, pos + 1)[0]
            elif tc == TC_NULL:
                vpos[i] = pos
                pos += 1
            else:
                raise DecodeError(f"values of type {TYPE_NAMES.get(tc, tc)} are not supported by the reader")
        return kpos, vpos, pos

    # -- where each field is ------------------------------------------------------------------------------
    def _field_positions(self, arr: np.ndarray, vpos: np.ndarray):
        """Byte position of each wanted field's type code per row (-1: absent = NULL), plus structure positions.

        Structure positions are the bytes that fix a row's layout (header without hash code, footer, raw
        offset); the fast path checks they are equal in every row.
        """
        n = len(vpos)
        fpos = {f.name: np.full(n, -1, np.int64) for f in self.fields}
        if self.value_type_id is None:  # a primitive value is the one column
            for f in self.fields:
                fpos[f.name][:] = vpos
            return fpos, []
        is_obj = arr[vpos] == TC_OBJECT
        if not is_obj.all():
            bad = arr[vpos][~is_obj][0]
            if bad == TC_NULL:
                rows = np.flatnonzero(is_obj)
                sub, _ = self._field_positions(arr, vpos[rows])
                for name in fpos:
                    fpos[name][rows] = sub[name]
                return fpos, []
            raise DecodeError(f"a value has type code {bad}, expected BinaryObjects (103)")
        type_ids = _gather(arr, vpos + 4, np.dtype("<i4"))
        if (type_ids != self.value_type_id).any():
            other = int(type_ids[type_ids != self.value_type_id][0])
            raise DecodeError(f"the cache holds values of binary type {other} besides {self.value_type_id}: "
                              f"the reader needs one value type per cache")
        flags = _gather(arr, vpos + 2, np.dtype("<u2")).astype(np.int64)
        length = _gather(arr, vpos + 12, np.dtype("<i4")).astype(np.int64)
        schema_id = _gather(arr, vpos + 16, np.dtype("<i4")).astype(np.int64)
        schema_off = _gather(arr, vpos + 20, np.dtype("<i4")).astype(np.int64)
        structure: list[int] = [int(vpos[0]) + b for b in _HEADER_STRUCT] if n == 1 else []
        group_key = (schema_id << 16) | flags
        keys, inverse = np.unique(group_key, return_inverse=True)
        for g, key in enumerate(keys):
            rows = np.flatnonzero(inverse == g) if len(keys) > 1 else np.arange(n)
            flag = int(key) & 0xFFFF
            if not flag & HAS_SCHEMA:
                continue  # an object without fields: every column NULL
            width = 1 if flag & OFFSET_1 else 2 if flag & OFFSET_2 else 4
            entry = width if flag & COMPACT else 4 + width
            r0 = rows[0]
            foot0 = int(vpos[r0] + schema_off[r0])
            foot_end = int(vpos[r0] + length[r0]) - (4 if flag & HAS_RAW else 0)
            if flag & COMPACT:
                ids = self._schema_fields(self.value_type_id, int(key) >> 16)
            else:
                ids = [int(_I32.unpack_from(arr, foot0 + j)[0]) for j in range(0, foot_end - foot0, entry)]
            if n == 1:
                structure.extend(range(foot0, int(vpos[0] + length[0])))
            for f in self.fields:
                if f.field_id not in ids:
                    continue
                at = vpos[rows] + schema_off[rows] + ids.index(f.field_id) * entry + (entry - width)
                fpos[f.name][rows] = vpos[rows] + _gather(arr, at, _OFFSET_DTYPES[width])
        return fpos, structure

    # -- decoders -----------------------------------------------------------------------------------------
    def _decode_fast(self, arr, count, row_len, kpos0, vpos0):
        """All rows laid out like row 0 -> strided column slices; None when the page does not qualify.

        The layout (plan) of the previous page with the same row length is tried first: it is checked
        byte for byte against every row anyway, so reusing it is safe and saves rebuilding it per page.
        """
        rows = arr.reshape(count, row_len)
        plan = self._plans.get((row_len, vpos0))
        if plan is None or not (rows[:, plan[0]] == plan[1]).all():
            plan = self._fast_plan(arr[:row_len], row_len, kpos0, vpos0)
            if plan is None or not (rows[:, plan[0]] == plan[1]).all():
                return None
            self._plans[(row_len, vpos0)] = plan
        _, _, fixed, nulls = plan
        cols = {self.key_name: _strided(rows, kpos0, FIXED[self.key_type]).astype(np.int64, copy=False)}
        for f, p in fixed:
            cols[f.name] = _strided(rows, p + 1, f.dtype)
        masks = {}
        for f in nulls:
            cols[f.name] = np.full(count, null_fill(f.dtype), f.dtype)
            masks[f.name] = np.ones(count, bool)
        return cols, masks

    def _fast_plan(self, row, row_len, kpos0, vpos0):
        """(structure byte positions, their values in ``row``, [(fixed field, position)], [null fields])."""
        fpos, structure = self._field_positions(row, np.array([vpos0]))
        fixed, nulls = [], []
        for f in self.fields:
            p = int(fpos[f.name][0])
            if p < 0 or row[p] == TC_NULL:
                nulls.append(f)
                if p >= 0:
                    structure.append(p)
            elif row[p] == f.type_code and f.type_code in FIXED:
                fixed.append((f, p))
                structure.append(p)
            else:
                return None  # strings, or a type we must report: the general path does it
        structure += [0, int(vpos0)]
        if row[vpos0] == TC_OBJECT and self.value_type_id is not None and vpos0 > kpos0 + self._key_size:
            wrap = kpos0 + self._key_size  # wrapper: its type code, length and trailing start offset
            structure += [wrap, wrap + 1, wrap + 2, wrap + 3, wrap + 4, *range(row_len - 4, row_len)]
        idx = np.unique(np.asarray(structure, np.int64))
        return idx, row[idx].copy(), fixed, nulls

    def _decode_general(self, arr, kpos, vpos):
        n = len(kpos)
        cols = {self.key_name: _gather(arr, kpos, FIXED[self.key_type]).astype(np.int64, copy=False)}
        masks = {}
        fpos, _ = self._field_positions(arr, vpos)
        for f in self.fields:
            pos = fpos[f.name]
            present = pos >= 0
            codes = np.full(n, TC_NULL, np.uint8)
            codes[present] = arr[pos[present]]
            good = codes == f.type_code
            null = codes == TC_NULL
            if not (good | null).all():
                bad = int(codes[~(good | null)][0])
                raise DecodeError(f"column {f.name!r}: a row holds type {TYPE_NAMES.get(bad, bad)}, "
                                  f"expected {TYPE_NAMES.get(f.type_code, f.type_code)}")
            out = np.full(n, null_fill(f.dtype), f.dtype)
            if f.type_code in FIXED:
                out[good] = _gather(arr, pos[good] + 1, f.dtype)
            else:
                lens = _gather(arr, pos[good] + 1, np.dtype("<i4"))
                data = arr.data
                for i, p, ln in zip(np.flatnonzero(good).tolist(), (pos[good] + 5).tolist(), lens.tolist(),
                                    strict=True):
                    out[i] = str(data[p:p + ln], "utf-8")
            cols[f.name] = out
            if null.any():
                masks[f.name] = null
        return cols, masks


def _strided(rows: np.ndarray, offset: int, dtype: np.dtype) -> np.ndarray:
    """Column at byte ``offset`` of every row of the ``n x row_len`` matrix ``rows``, as a contiguous array."""
    return rows[:, offset:offset + dtype.itemsize].copy().view(dtype).reshape(-1)


# -- requests and responses --------------------------------------------------------------------------------
def scan_request(query_id: int, cache_id: int, page_size: int, partition: int) -> bytes:
    """``OP_QUERY_SCAN`` without filter. Not ``local``: a node that lost the primary forwards the query."""
    return _SCAN.pack(_SCAN.size - 4, OP_QUERY_SCAN, query_id, cache_id, 0, TC_NULL, page_size, partition, 0)


def by_id_request(op: int, query_id: int, resource_id: int) -> bytes:
    """``OP_QUERY_SCAN_CURSOR_GET_PAGE`` or ``OP_RESOURCE_CLOSE`` of a cursor."""
    return _BY_ID.pack(_BY_ID.size - 4, op, query_id, resource_id)


def parse_response(buf: bytearray, status_flags: bool) -> tuple[int, int, str | None]:
    """(start of the body, end of the packet, the server's error message or None).

    pyignite's receive buffer may be longer than the packet: the packet's own length says where it ends.
    """
    end = _I32.unpack_from(buf, 0)[0] + 4
    if status_flags:
        flags, pos = struct.unpack_from("<h", buf, 12)[0], 14
        pos += 12 if flags & 2 else 0  # topology changed: the new affinity version follows
        if not flags & 1:
            return pos, end, None
        pos += 4  # status code
    else:
        if _I32.unpack_from(buf, 12)[0] == 0:
            return 16, end, None
        pos = 16
    if buf[pos] != TC_STRING:
        return pos, end, "(no message)"
    return pos, end, bytes(buf[pos + 5:pos + 5 + _I32.unpack_from(buf, pos + 1)[0]]).decode("utf-8", "replace")


def first_row_types(buf: bytearray, pos: int) -> tuple[int, int, int | None]:
    """Key type code, value type code and value binary type id (None: primitive) of the row at ``pos``."""
    key_type = buf[pos]
    if key_type not in FIXED:
        raise ConfigError(f"keys of type {TYPE_NAMES.get(key_type, key_type)} are not supported by the "
                          f"partition reader: keys must be integers")
    pos += 1 + FIXED[key_type].itemsize
    if buf[pos] == TC_WRAPPED:
        n = _I32.unpack_from(buf, pos + 1)[0]
        pos += 5 + _I32.unpack_from(buf, pos + 5 + n)[0]
    if buf[pos] != TC_OBJECT:
        return key_type, buf[pos], None
    return key_type, TC_OBJECT, _I32.unpack_from(buf, pos + 4)[0]


# -- which columns a cache has -------------------------------------------------------------------------------
def sql_layout(sql: Callable, cache: str):
    """(key name, key type, value type id, {column: Field}, {column: Java type}) of the SQL table over
    ``cache``, columns in table order; None when the cache has no SQL table.

    :param sql: ``sql(query, args, names=False) -> rows`` (with ``names`` the first row is the column names).
    """
    tables = sql("SELECT SCHEMA_NAME, TABLE_NAME, KEY_ALIAS, KEY_TYPE_NAME, VALUE_TYPE_NAME FROM SYS.TABLES "
                 "WHERE CACHE_NAME = ?", [cache])
    if not tables:
        return None
    schema, table, key_alias, key_java, value_java = tables[0]
    types = dict(sql("SELECT COLUMN_NAME, TYPE FROM SYS.TABLE_COLUMNS WHERE SCHEMA_NAME = ? AND TABLE_NAME = ?",
                     [schema, table]))
    order = sql(f'SELECT * FROM "{schema}"."{table}" LIMIT 0', None, names=True)[0]
    if key_java not in JAVA_TYPES or JAVA_TYPES[key_java] not in INT_KEYS:
        raise ConfigError(f"table {table} of cache {cache!r} has a key of type {key_java}: the partition reader "
                          f"needs a single integer primary key column")
    names = [c for c in order if c not in (key_alias, "_KEY", "_VAL")]
    value_type_id = None if value_java in JAVA_TYPES else entity_id(value_java)
    fields = {c.lower(): Field(c.lower(), entity_id(c) if value_type_id else 0, JAVA_TYPES.get(types.get(c), -1))
              for c in names}
    return ((key_alias or "_key").lower(), JAVA_TYPES[key_java], value_type_id, fields,
            {c.lower(): types.get(c) for c in names})


def registry_layout(meta: dict) -> dict[str, Field]:
    """Columns of a binary type from the registry (``OP_GET_BINARY_TYPE``), in the order of its first schema."""
    schemas = meta.get("schema") or {}
    order = {fid: i for i, fid in enumerate(next(iter(schemas.values()), []))}
    fields = sorted(meta.get("binary_fields", []), key=lambda f: order.get(f["field_id"], len(order)))
    return {f["field_name"].lower(): Field(f["field_name"].lower(), f["field_id"], f["type_id"]) for f in fields}


def select_columns(cache: str, key_name: str, available: dict[str, Field], type_names: dict[str, str | None],
                   columns: list[str] | None) -> tuple[list[Field], list[str]]:
    """The wanted value fields (all decodable ones by default) and the names of undecodable ones left out."""
    skipped = [f.name for f in available.values() if f.type_code not in SUPPORTED]
    if columns is None:
        return [f for f in available.values() if f.type_code in SUPPORTED], skipped
    missing = [c for c in columns if c.lower() not in available and c.lower() != key_name]
    if missing:
        raise ConfigError(f"cache {cache!r} has no column(s) {missing} (columns: {[key_name, *available]})")
    wanted = [available[c.lower()] for c in dict.fromkeys(columns) if c.lower() != key_name]
    bad = [f"{f.name} ({type_names.get(f.name) or TYPE_NAMES.get(f.type_code, f.type_code)})"
           for f in wanted if f.type_code not in SUPPORTED]
    if bad:
        raise ConfigError(f"the partition reader cannot decode column(s) {bad} of cache {cache!r} "
                          f"(it reads numbers, booleans and strings): leave them out of columns=")
    return wanted, skipped
