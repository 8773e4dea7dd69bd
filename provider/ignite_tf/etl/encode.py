"""ETL encoding: the stable keys of loaded rows, and rows encoded as Ignite BinaryObjects with NumPy.

Keys are deterministic (a re-run overwrites the same entries): ``hash_keys`` for a non-integer key column,
``row_hash_keys`` for rows without a key. ``encode_rows`` writes many rows per pass, no per-row Python, into the
bytes of an ``OP_CACHE_PUT_ALL`` request, byte for byte what pyignite writes one object at a time.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from ignite_tf.etl.input import convert_column
from ignite_tf.typecodes import (
    COLUMN_CODES,
    COMPACT,
    FIXED,
    HAS_SCHEMA,
    LONG,
    NULL,
    OBJECT,
    OFFSET_1,
    OFFSET_2,
    USER_TYPE,
)

_HEADER = np.dtype([("code", "u1"), ("version", "u1"), ("flags", "<u2"), ("type_id", "<i4"), ("hash", "<i4"),
                    ("length", "<i4"), ("schema_id", "<i4"), ("schema_offset", "<i4")])
_NULL_WORD = np.uint64(0x6E756C6C2D726F77)  # the word a null contributes to a row hash


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
    arr = convert_column(values if not isinstance(values, list) else pd.Series(values, dtype=object),
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
class EncodedColumn:
    sql: str
    ctype: str
    values: np.ndarray  # fixed width: one value per row; string: the UTF-8 bytes of all rows
    nulls: np.ndarray | None
    offsets: np.ndarray | None = None  # string: row i is values[offsets[i]:offsets[i + 1]]


def encode_column(arr: pa.Array, sql: str, ctype: str) -> EncodedColumn:
    nulls = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else None
    if ctype == "string":
        _, off_buf, data_buf = arr.buffers()
        offsets = np.frombuffer(off_buf, dtype="<i8")[arr.offset:arr.offset + len(arr) + 1]
        data = np.frombuffer(data_buf, np.uint8) if data_buf is not None else np.zeros(0, np.uint8)
        return EncodedColumn(sql, ctype, data, nulls, offsets)
    return EncodedColumn(sql, ctype, _filled(arr, ctype).astype(FIXED[COLUMN_CODES[ctype]]), nulls)


def _scatter(buf: np.ndarray, starts: np.ndarray, rows: np.ndarray) -> None:
    buf[starts[:, None] + np.arange(rows.shape[1])] = rows


def encode_rows(keys: np.ndarray, cols: list[EncodedColumn], lo: int, hi: int, type_id: int, schema_id: int) -> bytes:
    """The payload of OP_CACHE_PUT_ALL for rows [lo, hi): count, then (Long key, BinaryObject value) pairs.

    The bytes are those pyignite writes for one object at a time (a compact footer; the server knows
    the schema from ``put_binary_type``).
    """
    if all(c.offsets is None and (c.nulls is None or not c.nulls[lo:hi].any()) for c in cols):
        return _encode_fixed(keys, cols, lo, hi, type_id, schema_id)
    return _encode_general(keys, cols, lo, hi, type_id, schema_id)


def _encode_general(keys: np.ndarray, cols: list[EncodedColumn], lo: int, hi: int, type_id: int,
                    schema_id: int) -> bytes:
    """``encode_rows`` for rows of different layouts (nulls, strings): every field written by scatter."""
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
    buf[entry_start] = LONG
    _scatter(buf, entry_start + 1, keys[lo:hi].astype("<i8").view(np.uint8).reshape(n, 8))
    start = entry_start + 9
    for j, c in enumerate(cols):
        pos = start + field_off[:, j]
        buf[pos] = COLUMN_CODES[c.ctype]
        ok = slice(None)
        if c.nulls is not None:
            ok = ~c.nulls[lo:hi]
            buf[pos[~ok]] = NULL
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
    header["code"], header["version"] = OBJECT, 1
    header["flags"] = USER_TYPE | HAS_SCHEMA | COMPACT | oflag
    header["type_id"], header["schema_id"] = type_id, schema_id
    header["length"], header["schema_offset"] = obj_len, 24 + data_len
    header["hash"] = _java_bytes_hash(buf, start + 24, np.broadcast_to(data_len, start.shape))
    return header.view(np.uint8).reshape(-1, 24)


def _offset_format(last: int) -> tuple[int, str, int]:
    """Byte width, dtype and header flag of a footer whose largest field offset is ``last``."""
    return (1, "u1", OFFSET_1) if last < 255 else (2, "<u2", OFFSET_2) if last < 65535 else (4, "<u4", 0)


def _encode_fixed(keys: np.ndarray, cols: list[EncodedColumn], lo: int, hi: int, type_id: int, schema_id: int) -> bytes:
    """``encode_rows`` for rows that all have the same layout (numbers, no nulls): column slices, no scatter."""
    n, nf = hi - lo, len(cols)
    sizes = np.array([1 + c.values.itemsize for c in cols])
    field_off = 24 + np.cumsum(sizes) - sizes
    data_len = int(sizes.sum())
    width, odt, oflag = _offset_format(int(field_off[-1]))
    rows = np.empty((n, 9 + 24 + data_len + nf * width), np.uint8)
    rows[:, 0] = LONG
    rows[:, 1:9] = keys[lo:hi].astype("<i8").view(np.uint8).reshape(n, 8)
    obj = rows[:, 9:]
    for off, c in zip(field_off, cols, strict=True):
        obj[:, off] = COLUMN_CODES[c.ctype]
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
