"""Ignite binary type codes and the column types users name: the one table of each.

``TABLE``: each Ignite binary type code with Ignite's short name (for messages), the Java class SQL reports in
``SYS.TABLE_COLUMNS.TYPE`` and, for fixed-size values, the little-endian NumPy dtype of its payload; the ETL
loader writes by it and the partition reader decodes by it. The BinaryObject header flags live here too: the
loader sets them and the reader reads them.

``COLUMN_TABLE``: the column types a user writes (a load's ``source.schema``, the CLI's ``--schema`` and
``--column``, ``load(schema=)``, a validation suite's ``type``), each with its type code, its SQL type, its
pyignite datatype and the pandas dtypes the reader's columns of it have. Every other list of column types
(the loader's, the validation's, the CLI's, the pipeline schema's) is derived from it or checked against it.

This module imports no NumPy until ``FIXED`` is first used: the CLI and the DAG parser list column types too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

BYTE, SHORT, INT, LONG, FLOAT, DOUBLE, CHAR, BOOL, STRING, UUID, DATE = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11
WRAPPED = 27  # a "binary object wrapper": int length, the object's bytes, int start offset
DECIMAL, TIMESTAMP, TIME = 30, 33, 36
NULL = 101
OBJECT = 103  # a BinaryObject

# BinaryObject header flags.
USER_TYPE, HAS_SCHEMA, HAS_RAW, OFFSET_1, OFFSET_2, COMPACT = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20


@dataclass(frozen=True)
class TypeCode:
    """One Ignite binary type: its ``code``, short ``name``, ``java`` class (None: no SQL column type) and
    NumPy ``dtype`` string of a fixed-size payload (None: variable size or not a primitive)."""

    code: int
    name: str
    java: str | None = None
    dtype: str | None = None


TABLE: tuple[TypeCode, ...] = (
    TypeCode(BYTE, "byte", "java.lang.Byte", "i1"),
    TypeCode(SHORT, "short", "java.lang.Short", "<i2"),
    TypeCode(INT, "int", "java.lang.Integer", "<i4"),
    TypeCode(LONG, "long", "java.lang.Long", "<i8"),
    TypeCode(FLOAT, "float", "java.lang.Float", "<f4"),
    TypeCode(DOUBLE, "double", "java.lang.Double", "<f8"),
    TypeCode(CHAR, "char", "java.lang.Character", "<u2"),
    TypeCode(BOOL, "bool", "java.lang.Boolean", "?"),
    TypeCode(STRING, "string", "java.lang.String"),
    TypeCode(UUID, "uuid"),
    TypeCode(DATE, "date"),
    TypeCode(DECIMAL, "decimal"),
    TypeCode(TIMESTAMP, "timestamp"),
    TypeCode(TIME, "time"),
    TypeCode(OBJECT, "object"),
)
BY_CODE = {t.code: t for t in TABLE}
TYPE_NAMES = {t.code: t.name for t in TABLE}
JAVA_TYPES = {t.java: t.code for t in TABLE if t.java}
"""``SYS.TABLE_COLUMNS.TYPE`` (a Java class name) -> type code."""
INT_KEYS = (BYTE, SHORT, INT, LONG)
SUPPORTED = {*(t.code for t in TABLE if t.dtype), STRING}
"""The codes the partition reader decodes."""


@dataclass(frozen=True)
class ColumnType:
    """One column type users name (see the module docstring)."""

    name: str
    code: int
    """The Ignite type code of its values."""
    sql: str
    """Its SQL type, as a table's column."""
    pyignite: str
    """pyignite's datatype class (in ``pyignite.datatypes``) of a binary type's field of it."""
    pandas: tuple[str, ...]
    """The pandas dtype names of the reader's column of it: without NULLs first, then with (if it differs)."""
    loadable: bool = True
    """A load writes it; the others are only read (columns of tables made elsewhere)."""


COLUMN_TABLE: tuple[ColumnType, ...] = (
    ColumnType("float32", FLOAT, "REAL", "FloatObject", ("float32",)),
    ColumnType("float64", DOUBLE, "DOUBLE", "DoubleObject", ("float64",)),
    ColumnType("int8", BYTE, "TINYINT", "ByteObject", ("int8", "Int8"), loadable=False),
    ColumnType("int16", SHORT, "SMALLINT", "ShortObject", ("int16", "Int16"), loadable=False),
    ColumnType("int32", INT, "INT", "IntObject", ("int32", "Int32")),
    ColumnType("int64", LONG, "BIGINT", "LongObject", ("int64", "Int64")),
    ColumnType("bool", BOOL, "BOOLEAN", "BoolObject", ("bool", "boolean")),
    ColumnType("string", STRING, "VARCHAR", "String", ("str",)),
)
COLUMN_TYPE = {t.name: t for t in COLUMN_TABLE}
LOADABLE = tuple(t.name for t in COLUMN_TABLE if t.loadable)
"""The column types a load writes, in the order messages list them."""
COLUMN_CODES = {t.name: t.code for t in COLUMN_TABLE if t.loadable}
"""A load's column type -> the code its values are written as."""


def name_of(code: int) -> str | int:
    """Ignite's name of a type code, for messages (the code itself when it has none here)."""
    return TYPE_NAMES.get(code, code)


def __getattr__(name: str):
    # FIXED needs NumPy: built on first use, so that importing the vocabulary does not import NumPy.
    if name == "FIXED":
        import numpy as np

        fixed = {t.code: np.dtype(t.dtype) for t in TABLE if t.dtype is not None}
        globals()["FIXED"] = fixed
        return fixed
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    FIXED: dict[int, np.dtype]
    """type code -> NumPy dtype of the fixed-size primitives (little-endian on the wire)."""
