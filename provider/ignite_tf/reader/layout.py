"""Which columns a cache has: names, Ignite field ids and type codes, from the cache's SQL table or, for a
plain cache, from its first row and the binary type registry; and which of them the reader can decode.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from pyignite.utils import entity_id

from ignite_tf.errors import ConfigError
from ignite_tf.reader.binary import I32, Field
from ignite_tf.typecodes import FIXED, INT_KEYS, JAVA_TYPES, OBJECT, SUPPORTED, WRAPPED, name_of


def first_row_types(buf: bytearray, pos: int) -> tuple[int, int, int | None]:
    """Key type code, value type code and value binary type id (None: primitive) of the row at ``pos``."""
    key_type = buf[pos]
    if key_type not in FIXED:
        raise ConfigError(f"keys of type {name_of(key_type)} are not supported by the "
                          f"partition reader: keys must be integers")
    pos += 1 + FIXED[key_type].itemsize
    if buf[pos] == WRAPPED:
        n = I32.unpack_from(buf, pos + 1)[0]
        pos += 5 + I32.unpack_from(buf, pos + 5 + n)[0]
    if buf[pos] != OBJECT:
        return key_type, buf[pos], None
    return key_type, OBJECT, I32.unpack_from(buf, pos + 4)[0]


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
    bad = [f"{f.name} ({type_names.get(f.name) or name_of(f.type_code)})"
           for f in wanted if f.type_code not in SUPPORTED]
    if bad:
        raise ConfigError(f"the partition reader cannot decode column(s) {bad} of cache {cache!r} "
                          f"(it reads numbers, booleans and strings): leave them out of columns=")
    return wanted, skipped


def feature_columns(schema: dict[str, np.dtype], cache: str, *, key: str | None, label: str | None = None,
                    features: list[str] | None = None, include_key: bool = False, numeric: bool = False) -> list[str]:
    """The columns a model reads as features: the one rule for training, the runtime and batch inference.

    :param schema: the cache's columns (lower case) -> NumPy dtype, in table order (``PartitionReader.schema``).
    :param features: the columns asked for (any case; checked against ``schema``). None or empty: every column
        but ``label`` and, unless ``include_key``, the ``key`` column; with ``numeric`` only the numeric ones.
    """
    if features:
        names = [str(f).lower() for f in features]
    else:
        names = [c for c, dtype in schema.items() if c != label and (include_key or c != key)
                 and (not numeric or np.dtype(dtype).kind in "fiub")]
    missing = [f for f in names if f not in schema]
    if missing or not names:
        raise ConfigError(f"feature(s) {missing or '(none)'} not in cache '{cache}' (columns: {', '.join(schema)}); "
                          f"pass features= naming columns of the cache")
    return names
