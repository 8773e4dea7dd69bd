"""A validation suite: a :class:`Suite` of :class:`ColumnRules` and :class:`ExpectationSpec` entries.

``load_suite`` reads one from a file and ``coerce_suite`` from a file, a dict or a Suite; ``Suite.specs()``
expands the shorthand column rules into GX expectations. The file format and its checks (with the messages
that name the file, line and key) are :mod:`ignite_tf.validation.parse`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ignite_tf.errors import ConfigError
from ignite_tf.typecodes import COLUMN_TABLE, STRING
from ignite_tf.validation.parse import COLUMN_KWARGS, TYPES, is_float_type, parse_suite, read_suite_file

# A type list becomes expect_column_values_to_be_in_type_list, which compares dtype objects: list both the
# NumPy dtype and the pandas nullable one (a column with NULLs), as GX accepts either name. GX compares
# pandas' string dtype only by name, so a type list holds no string.
TYPE_LIST_NAMES = {t.name: list(t.pandas) for t in COLUMN_TABLE if t.code != STRING}
NOT_NULL = "expect_column_values_to_not_be_null"


@dataclass(frozen=True)
class ExpectationSpec:
    """One GX expectation: its snake_case ``type``, JSON-able ``kwargs``, and where it was written."""

    type: str
    kwargs: dict[str, Any]
    where: str = ""
    nan: bool = False
    """Rejects NaN in a float column (GX's null check counts NaN as null): failures are reported as NaN."""

    @property
    def column(self) -> str | None:
        col = self.kwargs.get("column") or self.kwargs.get("column_A")
        return str(col) if col is not None else None

    @property
    def columns(self) -> list[str]:
        out: list[str] = []
        for k in COLUMN_KWARGS:
            v = self.kwargs.get(k)
            out.extend([v] if isinstance(v, str) else list(v or []))
        return out

    @property
    def whole_table(self) -> bool:
        """Needs every column of the table (``expect_table_columns_to_match_set`` must see the extra ones)."""
        return self.type.startswith("expect_table_") or not self.columns

    @property
    def label(self) -> str:
        return f"{self.type}({self.column})" if self.column else self.type

    @property
    def mostly(self) -> float:
        return float(self.kwargs.get("mostly", 1.0))


@dataclass
class ColumnRules:
    """Shorthand rules of one column; see :mod:`ignite_tf.validation.parse`."""

    type: str | list[str] | None = None
    not_null: bool = False
    between: list | None = None
    in_set: list | None = None
    mostly: float | None = None
    allow_nan: bool = False

    @property
    def is_float(self) -> bool:
        """Typed as a float column (every type of a type list a float type)."""
        return is_float_type(self.type)


@dataclass
class Suite:
    """A parsed validation suite.

    :param name: suite name (the Data Docs page title); default the file's stem.
    :param columns: column -> shorthand rules.
    :param expectations: raw GX expectations, in file order.
    :param row_count: ``(min, max)`` on the number of rows of the whole cache; either may be None.
    :param unique: columns whose values must be unique across the whole cache.
    :param sample_fraction: fraction of each shard's rows validated (1.0: all).
    :param seed: with the shard index, seeds the sample.
    :param source: the file it came from (for messages).
    """

    name: str
    columns: dict[str, ColumnRules] = field(default_factory=dict)
    expectations: list[ExpectationSpec] = field(default_factory=list)
    row_count: tuple[int | None, int | None] | None = None
    unique: list[str] = field(default_factory=list)
    sample_fraction: float = 1.0
    seed: int = 0
    description: str = ""
    source: str = "<dict>"

    def specs(self) -> list[ExpectationSpec]:
        """Every per-shard GX expectation: the shorthand expanded, then ``unique``, then the raw ones."""
        out = []
        for col, r in self.columns.items():
            where = f"columns.{col}"
            mostly = {"mostly": r.mostly} if r.mostly is not None else {}
            if isinstance(r.type, list):
                names = [n for t in r.type for n in TYPE_LIST_NAMES[t]]
                out.append(ExpectationSpec("expect_column_values_to_be_in_type_list",
                                           {"column": col, "type_list": names}, where + ".type"))
            elif r.type is not None:
                out.append(ExpectationSpec("expect_column_values_to_be_of_type",
                                           {"column": col, "type_": TYPES[r.type]}, where + ".type"))
            # A float column takes no NaN unless allow_nan says so; a strict not_null already checks that.
            no_nan = r.is_float and not r.allow_nan
            strict_not_null = r.not_null and (r.mostly is None or r.mostly >= 1)
            if no_nan and not strict_not_null:
                out.append(ExpectationSpec(NOT_NULL, {"column": col}, where + ".type", nan=True))
            if r.not_null:
                out.append(ExpectationSpec(NOT_NULL, {"column": col, **mostly}, where + ".not_null", nan=no_nan))
            if r.between is not None:
                out.append(ExpectationSpec("expect_column_values_to_be_between",
                                           {"column": col, "min_value": r.between[0], "max_value": r.between[1],
                                            **mostly}, where + ".between"))
            if r.in_set is not None:
                out.append(ExpectationSpec("expect_column_values_to_be_in_set",
                                           {"column": col, "value_set": list(r.in_set), **mostly}, where + ".in_set"))
        out += [ExpectationSpec("expect_column_values_to_be_unique", {"column": c}, "unique") for c in self.unique]
        return out + list(self.expectations)

    def to_dict(self) -> dict[str, Any]:
        """The suite in its file form (round-trips through ``coerce_suite``)."""
        data: dict[str, Any] = {"name": self.name, "sample_fraction": self.sample_fraction, "seed": self.seed}
        if self.description:
            data["description"] = self.description
        if self.row_count:
            data["row_count"] = {k: v for k, v in zip(("min", "max"), self.row_count, strict=True) if v is not None}
        if self.unique:
            data["unique"] = list(self.unique)
        data["columns"] = {c: {k: v for k, v in asdict(r).items() if v is not None and v is not False}
                           for c, r in self.columns.items()}
        data["expectations"] = [{e.type: dict(e.kwargs)} for e in self.expectations]
        return data

    def fingerprint(self) -> str:
        return json.dumps([self.name, [(s.type, s.kwargs) for s in self.specs()]], sort_keys=True, default=str)


def load_suite(path: str | Path) -> Suite:
    """Read and check a suite file (``.yaml``, ``.yml`` or ``.json``).

    :param path: the suite file.
    :raises ConfigError: unreadable or malformed, naming the file, line and key.
    """
    return _suite(read_suite_file(path))


def coerce_suite(suite: Suite | dict | str | Path) -> Suite:
    """A Suite from a Suite, a dict in file form or a suite file path."""
    if isinstance(suite, Suite):
        return suite
    if isinstance(suite, dict):
        return _suite(parse_suite(suite))
    if isinstance(suite, (str, Path)):
        return load_suite(suite)
    raise ConfigError(f"suite must be a Suite, a dict or a suite file path (got {type(suite).__name__})")


def _suite(checked: dict) -> Suite:
    """The Suite of ``parse_suite``'s checked values."""
    return Suite(**{**checked, "columns": {c: ColumnRules(**r) for c, r in checked["columns"].items()},
                    "expectations": [ExpectationSpec(**e) for e in checked["expectations"]]})


__all__ = ["Suite", "ColumnRules", "ExpectationSpec", "load_suite", "coerce_suite", "TYPES", "TYPE_LIST_NAMES"]
