"""Ignite binary format for the reader: the rows of scan pages -> NumPy columns.

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

Numeric columns asked to be ``stack``-ed come as one float32 matrix (the model's input) instead of separate
columns; in a fast page whose stacked fields share a type and are evenly spaced that is one strided copy.

Which columns a cache has comes from :mod:`ignite_tf.reader.layout`; requests and responses from
:mod:`ignite_tf.reader.scan`.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ignite_tf.errors import ConfigError, DecodeError
from ignite_tf.typecodes import (
    COMPACT,
    FIXED,
    HAS_RAW,
    HAS_SCHEMA,
    INT_KEYS,
    NULL,
    OBJECT,
    OFFSET_1,
    OFFSET_2,
    STRING,
    WRAPPED,
    name_of,
)

I32 = struct.Struct("<i")
# Header bytes that must be equal in every row of a fast page: all but the hash code (bytes 8..11).
_HEADER_STRUCT = (0, 1, 2, 3, 4, 5, 6, 7, *range(12, 24))


STACKED = "[stacked]"  # the batch entry of the stacked matrix: no column can have this name


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
    :param stack: names of numeric fields decoded into one float32 matrix ``STACKED`` of shape
        ``[rows, len(stack)]`` (NULLs filled, no masks) instead of separate columns.
    """

    def __init__(self, key_name: str, key_type: int, fields: list[Field], value_type_id: int | None,
                 schema_fields: Callable[[int, int], list[int]], stack: list[str] | None = None):
        if key_type not in INT_KEYS:
            raise ConfigError(f"key type {name_of(key_type)} is not supported by the partition "
                              f"reader: keys must be integers (byte/short/int/long)")
        by_name = {f.name: f for f in fields}
        bad = [n for n in stack or [] if n not in by_name or by_name[n].type_code not in FIXED]
        if bad:
            raise ConfigError(f"column(s) {bad} cannot be stacked into a float32 matrix: stack numeric columns "
                              f"that are read (read: {', '.join(by_name)})")
        self.stack = list(stack or [])
        # Membership per field and page: a list would cost len(stack) comparisons each (784 x 784 a page for
        # 28x28 images: 10 ms a page, most of a small-partition read).
        self._in_stack = frozenset(self.stack)
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
            return self.empty(), {}
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

    def empty(self) -> dict[str, np.ndarray]:
        """Columns of no rows."""
        cols = {self.key_name: np.empty(0, np.int64)}
        cols.update({f.name: np.empty(0, f.dtype) for f in self.fields if f.name not in self._in_stack})
        if self.stack:
            cols[STACKED] = np.empty((0, len(self.stack)), np.float32)
        return cols

    def _stacked(self, cols: dict, masks: dict) -> tuple[dict, dict]:
        """Move the ``stack`` columns (their data already NULL-filled) into the float32 matrix."""
        if not self.stack:
            return cols, masks
        n = len(cols[self.key_name])
        matrix = np.empty((n, len(self.stack)), np.float32)
        for j, name in enumerate(self.stack):
            matrix[:, j] = cols.pop(name)
            masks.pop(name, None)
        cols[STACKED] = matrix
        return cols, masks

    # -- row boundaries (the one per-row Python loop) -----------------------------------------------------
    def _bounds(self, buf, pos: int, count: int):
        """Positions of each row's key payload and value (object start, or primitive type code); end of rows."""
        kpos = np.empty(count, np.int64)
        vpos = np.empty(count, np.int64)
        key_type, key_size, unpack = self.key_type, self._key_size, I32.unpack_from
        for i in range(count):
            if buf[pos] != key_type:
                raise DecodeError(f"row {i} of a page has key type code {buf[pos]}, expected {key_type}")
            kpos[i] = pos + 1
            pos += 1 + key_size
            tc = buf[pos]
            if tc == WRAPPED:
                (n,) = unpack(buf, pos + 1)
                vpos[i] = pos + 5 + unpack(buf, pos + 5 + n)[0]
                pos += 9 + n
            elif tc == OBJECT:
                vpos[i] = pos
                pos += unpack(buf, pos + 12)[0]
            elif tc in FIXED:
                vpos[i] = pos
                pos += 1 + FIXED[tc].itemsize
            elif tc == STRING:
                vpos[i] = pos
                pos += 5 + unpack(buf, pos + 1)[0]
            elif tc == NULL:
                vpos[i] = pos
                pos += 1
            else:
                raise DecodeError(f"values of type {name_of(tc)} are not supported by the reader")
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
        is_obj = arr[vpos] == OBJECT
        if not is_obj.all():
            bad = arr[vpos][~is_obj][0]
            if bad == NULL:
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
                ids = [int(I32.unpack_from(arr, foot0 + j)[0]) for j in range(0, foot_end - foot0, entry)]
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
        _, _, fixed, nulls, run = plan
        key = _strided(arr, count, row_len, kpos0, FIXED[self.key_type])
        cols = {self.key_name: key.astype(np.int64, copy=False)}
        if run is not None:  # the stacked columns, evenly spaced in every row: one strided copy for all
            offset, step, dtype = run
            view = np.ndarray((count, len(self.stack)), dtype, buffer=arr, offset=offset, strides=(row_len, step))
            cols[STACKED] = view.astype(np.float32)
        for f, p in fixed:
            if run is None or f.name not in self._in_stack:
                cols[f.name] = _strided(arr, count, row_len, p + 1, f.dtype)
        masks = {}
        for f in nulls:
            cols[f.name] = np.full(count, null_fill(f.dtype), f.dtype)
            masks[f.name] = np.ones(count, bool)
        return (cols, masks) if run is not None else self._stacked(cols, masks)

    def _fast_plan(self, row, row_len, kpos0, vpos0):
        """(structure byte positions, their values in ``row``, [(fixed field, position)], [null fields],
        (offset, step, dtype) of the stacked fields when they have one type and are evenly spaced, else None)."""
        fpos, structure = self._field_positions(row, np.array([vpos0]))
        fixed, nulls = [], []
        for f in self.fields:
            p = int(fpos[f.name][0])
            if p < 0 or row[p] == NULL:
                nulls.append(f)
                if p >= 0:
                    structure.append(p)
            elif row[p] == f.type_code and f.type_code in FIXED:
                fixed.append((f, p))
                structure.append(p)
            else:
                return None  # strings, or a type we must report: the general path does it
        structure += [0, int(vpos0)]
        if row[vpos0] == OBJECT and self.value_type_id is not None and vpos0 > kpos0 + self._key_size:
            wrap = kpos0 + self._key_size  # wrapper: its type code, length and trailing start offset
            structure += [wrap, wrap + 1, wrap + 2, wrap + 3, wrap + 4, *range(row_len - 4, row_len)]
        idx = np.unique(np.asarray(structure, np.int64))
        return idx, row[idx].copy(), fixed, nulls, self._run(dict((f.name, (f, p)) for f, p in fixed))

    def _run(self, fixed: dict[str, tuple[Field, int]]):
        if not self.stack or any(n not in fixed for n in self.stack):
            return None
        where = [fixed[n][1] + 1 for n in self.stack]
        dtypes = {fixed[n][0].dtype for n in self.stack}
        dtype = dtypes.pop()
        step = where[1] - where[0] if len(where) > 1 else dtype.itemsize
        if dtypes or step < dtype.itemsize or where != [where[0] + step * j for j in range(len(where))]:
            return None
        return where[0], step, dtype

    def _decode_general(self, arr, kpos, vpos):
        n = len(kpos)
        cols = {self.key_name: _gather(arr, kpos, FIXED[self.key_type]).astype(np.int64, copy=False)}
        masks = {}
        fpos, _ = self._field_positions(arr, vpos)
        for f in self.fields:
            pos = fpos[f.name]
            present = pos >= 0
            codes = np.full(n, NULL, np.uint8)
            codes[present] = arr[pos[present]]
            good = codes == f.type_code
            null = codes == NULL
            if not (good | null).all():
                bad = int(codes[~(good | null)][0])
                raise DecodeError(f"column {f.name!r}: a row holds type {name_of(bad)}, "
                                  f"expected {name_of(f.type_code)}")
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
        return self._stacked(cols, masks)


def _strided(arr: np.ndarray, count: int, row_len: int, offset: int, dtype: np.dtype) -> np.ndarray:
    """Column at byte ``offset`` of each of the ``count`` rows of ``row_len`` bytes in ``arr``, as a contiguous
    array: one strided copy of ``dtype`` items (copying the ``n x itemsize`` bytes first cost 5x the CPU)."""
    return np.ndarray((count,), dtype, buffer=arr, offset=offset, strides=(row_len,)).copy()
