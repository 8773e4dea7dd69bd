"""ETL input: a load's source read, its columns converted to checked Arrow arrays, names and keys checked.

Everything here runs before ``load`` touches Ignite. ``check_input`` looks at the whole input and collects
every problem (a bad value, a column mixing numbers and text, a bad name or key...) grouped by kind, then
raises one LoadError that names the rows and columns of the first examples of each kind; nothing is
written. ``COLUMN_TYPES`` are the column types a load knows (the names a spec's ``source.schema``, the CLI's
``--schema``/``--column`` and ``load(schema=)`` take); ``read_schema`` reads a schema file.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ignite_tf.errors import LoadError
from ignite_tf.typecodes import COLUMN_CODES, COLUMN_TYPE, FIXED, LOADABLE

COLUMN_TYPES = {name: COLUMN_TYPE[name].sql for name in LOADABLE}
"""A load's column type -> its SQL type (the vocabulary is ``ignite_tf.typecodes.COLUMN_TABLE``)."""
SUFFIXES = (".csv", ".parquet", ".pq")
ROW_KEY = "row_key"  # the key column of rows loaded without an integer key column (a hash)

# column type -> the Arrow type its values are converted to: its NumPy dtype's, and large strings for text
ARROW_TYPES = {name: pa.from_numpy_dtype(FIXED[code]) if code in FIXED else pa.large_string()
               for name, code in COLUMN_CODES.items()}
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
    target = ARROW_TYPES[ctype]
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


def _conversion_problem(arr: pa.Array, name: str, ctype: str) -> tuple[pa.Array | None, str | None]:
    """``arr`` as ``ctype``, or None and a message naming the first bad rows."""
    try:
        return _cast(arr, ctype), None
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        rows = _bad_rows(arr, ctype)
    if not rows:
        return None, f"column {name!r}: values of type {arr.type} cannot become {ctype}"
    examples = "; ".join(f"row {r}, column {name!r}: {arr[r].as_py()!r} is not {ctype}" for r in rows)
    return None, f"{examples} (rows count from 0; fix the input or declare another type in schema)"


def convert_column(values, name: str, ctype: str, where: str) -> pa.Array:
    out, problem = _conversion_problem(_to_arrow(values), name, ctype)
    if problem:
        raise LoadError(f"{where}: {problem}")
    return out


# A number as text (what a CSV reader would parse as one). NaN and infinity spelled out are left aside:
# "nan" may be a missing number or a word (a name), so it decides nothing about a column.
_NUMBER = r"^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$"
_NAN_OR_INF = r"^\s*[+-]?(nan|inf|infinity)\s*$"


def _mixed_problem(arr: pa.Array, name: str) -> str | None:
    """A message when an undeclared text column holds both numbers and other text, else None."""
    number = pc.fill_null(pc.match_substring_regex(arr, _NUMBER), False).to_numpy(zero_copy_only=False)
    if not number.any():
        return None
    neutral = pc.fill_null(pc.match_substring_regex(arr, _NAN_OR_INF, ignore_case=True), True)
    text = ~number & ~neutral.to_numpy(zero_copy_only=False)
    if not text.any():
        return None
    n_number, n_text = int(number.sum()), int(text.sum())
    odd, usual = ("text", "a number") if n_text <= n_number else ("a number", "text")
    odd_rows = np.flatnonzero(text if n_text <= n_number else number)
    usual_row = int(np.flatnonzero(number if n_text <= n_number else text)[0])
    shown = "; ".join(f"row {r}: {arr[int(r)].as_py()!r} is {odd}" for r in odd_rows[:3])
    more = f" (and {len(odd_rows) - 3} more)" if len(odd_rows) > 3 else ""
    return (f"column {name!r} mixes numbers and text ({n_number} number(s), {n_text} text value(s)): {shown}{more}, "
            f"row {usual_row}: {arr[usual_row].as_py()!r} is {usual}; fix the values, or declare the column's type "
            f"(a number type refuses the text, string keeps every value as text)")


def _name_problem(name: str, what: str) -> str | None:
    if not _IDENT.match(name) or name.upper() in _RESERVED:
        return (f"{what} {name!r} is not a usable SQL identifier (letters, digits and _, not starting with a "
                f"digit, not an SQL keyword): rename it")
    return None


def check_name(name: str, what: str, where: str) -> None:
    problem = _name_problem(name, what)
    if problem:
        raise LoadError(f"{where}: {problem}")


def _key_problem(arr: pa.Array, name: str) -> str | None:
    if arr.null_count:
        rows = np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False))[:5].tolist()
        return (f"key column {name!r} has {arr.null_count} null value(s), at rows {rows}: a key must identify "
                f"every row; fill them, or load with key=None")
    dup = np.flatnonzero(pd.Series(arr.to_pandas()).duplicated(keep=False).to_numpy())
    if len(dup):
        shown = ", ".join(f"row {r} = {arr[int(r)].as_py()!r}" for r in dup[:6]) + (", ..." if len(dup) > 6 else "")
        return (f"key column {name!r} has duplicate values ({shown}): a key must identify one row; choose "
                f"another key column, or load with key=None")
    return None


# -- the whole input checked at once ----------------------------------------------------------------------
class InputProblems:
    """What is wrong with a load's input, by kind (bad values, mixed columns, names, keys...).

    ``raise_if_any`` raises one LoadError with the first examples of every kind, so a file with several
    kinds of problems is fixed in one round rather than one error at a time. Its ``report`` has the input's
    ``source`` and ``rows_in``.
    """

    SHOWN_PER_KIND = 3

    def __init__(self, where: str):
        self.where, self.rows = where, 0
        self.kinds: dict[str, list[str]] = {}

    def add(self, kind: str, message: str | None) -> None:
        if message:
            self.kinds.setdefault(kind, []).append(message)

    def raise_if_any(self) -> None:
        if not self.kinds:
            return
        shown = []
        for kind, messages in self.kinds.items():
            shown += messages[:self.SHOWN_PER_KIND]
            if len(messages) > self.SHOWN_PER_KIND:
                shown.append(f"{len(messages) - self.SHOWN_PER_KIND} more column(s) with {kind}")
        report = {"source": self.where, "rows_in": self.rows}
        if len(shown) == 1:
            raise LoadError(f"{self.where}: {shown[0]}", report)
        listed = "; ".join(f"({i}) {m}" for i, m in enumerate(shown, 1))
        raise LoadError(f"{self.where}: {len(self.kinds)} kind(s) of problems ({', '.join(self.kinds)}), nothing "
                        f"was loaded: {listed}", report)


@dataclass
class CheckedInput:
    """A load's input, read, checked and converted: the columns to load, in order, with their types."""

    where: str
    rows: int
    types: dict[str, str]
    arrays: dict[str, pa.Array]
    ignored: list[str] = field(default_factory=list)


def check_input(source, schema: dict[str, str] | None, key: str | None) -> CheckedInput:
    """Read ``source`` and check all of it; LoadError with every kind of problem found (see ``load``).

    :param schema: column -> COLUMN_TYPES key; only these columns (and ``key``) are loaded. None: every
        column, typed from the data; a text column then must not mix numbers and other text.
    :param key: the key column (lower case), or None.
    """
    raw, where = _read_source(source, schema)
    problems = InputProblems(where)
    columns: dict[str, object] = {}
    for name, values in raw:
        if name.lower() in columns:
            problems.add("column names", f"two columns are named {name!r} to SQL, which ignores case: rename one")
        columns[name.lower()] = values
    schema = {str(k).lower(): v for k, v in (schema or {}).items()} or None
    bad = {k: v for k, v in (schema or {}).items() if v not in COLUMN_TYPES}
    if bad:
        problems.add("schema", f"schema: unknown type(s) {bad}; use one of {list(COLUMN_TYPES)}")
    missing = [c for c in [*(schema or {}), *([key] if key else [])] if c not in columns]
    if missing:
        what = "key column" if missing == [key] else "column(s)"
        problems.add("missing columns", f"{what} {', '.join(map(repr, missing))} not found; available: "
                                        f"{', '.join(columns) or '(none)'}")
    names = [*schema, *([key] if key and key not in schema else [])] if schema else list(columns)
    names = [n for n in names if n in columns and n not in bad]
    for name in names:
        problems.add("column names", _name_problem(name, "column"))
    rows = problems.rows = len(next(iter(columns.values()))) if columns else 0
    if rows == 0:
        problems.add("empty input", f"the input is empty ({len(names)} columns, no rows): nothing to load")
        problems.raise_if_any()
    types, arrays = {}, {}
    for name in names:
        arr = _to_arrow(columns[name])
        ctype = (schema or {}).get(name) or infer_type(arr.type)
        if ctype is None:
            problems.add("unloadable types", f"column {name!r} has type {arr.type}, which cannot be loaded; "
                                              f"convert it, or declare it in schema= as one of {list(COLUMN_TYPES)}")
            continue
        if ctype == "string" and name not in (schema or {}):
            problems.add("columns mixing numbers and text", _mixed_problem(arr, name))
        converted, problem = _conversion_problem(arr, name, ctype)
        problems.add("values of the wrong type", problem)
        if converted is not None:
            types[name], arrays[name] = ctype, converted
    if key in arrays:
        problems.add("key problems", _key_problem(arrays[key], key))
    integer_key = key in types and types[key] in ("int32", "int64")
    if not integer_key and ROW_KEY in names:
        problems.add("column names", f"column {ROW_KEY!r} is where ignite-tf puts hashed keys: rename it, or "
                                     f"name an integer key column with key=")
    if integer_key and names == [key]:
        problems.add("missing columns", f"only the key column {key!r} was given; a table needs at least one more "
                                        f"column")
    problems.raise_if_any()
    return CheckedInput(where, rows, types, arrays, [c for c in columns if c not in names])


def read_schema(path: str | Path) -> dict[str, str]:
    """A schema file: a JSON or YAML mapping of column name -> type (a COLUMN_TYPES key)."""
    from ignite_tf.documents import read_yaml

    data = read_yaml(path, lambda problem: LoadError(f"schema file {path}: {problem}"))
    if not isinstance(data, dict) or not data:
        raise LoadError(f"schema file {path}: must be a mapping of column name -> type, e.g. "
                        f"{{\"score\": \"float64\", \"name\": \"string\"}} (got {type(data).__name__})")
    bad = {str(k): v for k, v in data.items() if v not in COLUMN_TYPES}
    if bad:
        raise LoadError(f"schema file {path}: unknown type(s) {bad}; use one of {', '.join(COLUMN_TYPES)}")
    return {str(k): v for k, v in data.items()}
