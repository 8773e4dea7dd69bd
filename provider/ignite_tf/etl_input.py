"""ETL input: a load's source read, its columns converted to checked Arrow arrays, names and keys checked.

Everything here runs before ``load`` touches Ignite: a bad value, name or key raises a LoadError that
names the row and column, and nothing is written. ``COLUMN_TYPES`` are the column types a load knows.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ignite_tf.errors import LoadError

COLUMN_TYPES = {"float32": "REAL", "float64": "DOUBLE", "int32": "INT", "int64": "BIGINT", "bool": "BOOLEAN",
                "string": "VARCHAR"}
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
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# H2 (Ignite's SQL engine) keywords that cannot be unquoted column or table names, plus Ignite's hidden columns.
_RESERVED = set(
    "ALL AND ARRAY AS BETWEEN BOTH CASE CHECK CONSTRAINT CROSS CURRENT_DATE CURRENT_TIME CURRENT_TIMESTAMP "
    "CURRENT_USER DISTINCT EXCEPT EXISTS FALSE FETCH FOR FOREIGN FROM FULL GROUP HAVING IF ILIKE IN INNER "
    "INTERSECT INTERSECTS INTERVAL IS JOIN LEADING LEFT LIKE LIMIT LOCALTIME LOCALTIMESTAMP MINUS NATURAL NOT "
    "NULL OFFSET ON OR ORDER PRIMARY QUALIFY REGEXP RIGHT ROW ROWNUM ROWS SELECT SYSDATE SYSTIME SYSTIMESTAMP "
    "TABLE TODAY TOP TRAILING TRUE UNION UNIQUE UNKNOWN USING VALUES WHERE WINDOW WITH _ROWID_ _KEY _VAL".split())


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
