"""Ignite binary type codes: the one table that the ETL loader writes by and the partition reader decodes by.

Each code has Ignite's short name (for messages), the Java class SQL reports in ``SYS.TABLE_COLUMNS.TYPE``
and, for fixed-size values, the little-endian NumPy dtype of its payload. ``COLUMN_CODES`` maps a load's
column types (``ignite_tf.etl.input.COLUMN_TYPES``) to the code each is written as. The BinaryObject header
flags live here too: the loader sets them and the reader reads them.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    ``dtype`` of a fixed-size payload (None: variable size or not a primitive)."""

    code: int
    name: str
    java: str | None = None
    dtype: np.dtype | None = None


TABLE: tuple[TypeCode, ...] = (
    TypeCode(BYTE, "byte", "java.lang.Byte", np.dtype("i1")),
    TypeCode(SHORT, "short", "java.lang.Short", np.dtype("<i2")),
    TypeCode(INT, "int", "java.lang.Integer", np.dtype("<i4")),
    TypeCode(LONG, "long", "java.lang.Long", np.dtype("<i8")),
    TypeCode(FLOAT, "float", "java.lang.Float", np.dtype("<f4")),
    TypeCode(DOUBLE, "double", "java.lang.Double", np.dtype("<f8")),
    TypeCode(CHAR, "char", "java.lang.Character", np.dtype("<u2")),
    TypeCode(BOOL, "bool", "java.lang.Boolean", np.dtype("?")),
    TypeCode(STRING, "string", "java.lang.String"),
    TypeCode(UUID, "uuid"),
    TypeCode(DATE, "date"),
    TypeCode(DECIMAL, "decimal"),
    TypeCode(TIMESTAMP, "timestamp"),
    TypeCode(TIME, "time"),
    TypeCode(OBJECT, "object"),
)
BY_CODE = {t.code: t for t in TABLE}
FIXED: dict[int, np.dtype] = {t.code: t.dtype for t in TABLE if t.dtype is not None}
"""type code -> NumPy dtype of the fixed-size primitives (little-endian on the wire)."""
TYPE_NAMES = {t.code: t.name for t in TABLE}
JAVA_TYPES = {t.java: t.code for t in TABLE if t.java}
"""``SYS.TABLE_COLUMNS.TYPE`` (a Java class name) -> type code."""
INT_KEYS = (BYTE, SHORT, INT, LONG)
SUPPORTED = {*FIXED, STRING}
"""The codes the partition reader decodes."""
COLUMN_CODES = {"float32": FLOAT, "float64": DOUBLE, "int32": INT, "int64": LONG, "bool": BOOL, "string": STRING}
"""A load's column type -> the code its values are written as."""


def name_of(code: int) -> str | int:
    """Ignite's name of a type code, for messages (the code itself when it has none here)."""
    return TYPE_NAMES.get(code, code)
