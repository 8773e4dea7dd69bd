"""The validation suite file format and its parser: the YAML/JSON file next to a DAG -> checked values.

A friendly shorthand for the common rules, plus any Great Expectations expectation by its name::

    name: tabular
    sample_fraction: 1.0          # < 1 validates a random sample of each shard (reported as sampled)
    row_count: {min: 1000, max: 10000000}     # on the whole cache (sum over shards)
    unique: [id]                  # unique across the whole cache
    columns:
      f0: {type: float32, not_null: true, between: [-10, 10], mostly: 0.99}
      f1: {type: float64, allow_nan: true}    # NaN accepted (a float column rejects NaN by default)
      label: {type: int32, in_set: [0, 1, 2]}
    expectations:                 # any GX expectation by its snake_case name with its kwargs
      - expect_column_mean_to_be_between: {column: f0, min_value: -1, max_value: 1}

A column typed ``float32``/``float64`` (or a list of only those) fails on NaN unless it says ``allow_nan: true``:
``between`` and ``in_set`` skip NaN, so without this check a NaN would reach training unnoticed. SQL NULL in
a float column is read as NaN, so it fails the same way (``not_null`` also rejects NaN). The failure says
NaN and gives the count and the keys of the first rows.

Errors name the file, the line and the key, and say what is allowed. Column names are case-insensitive
(Ignite folds unquoted SQL names to upper case; ignite-tf reads them in lower case), so they are lowered.
Great Expectations is imported only to check raw ``expectations:`` entries, never at module import.
This module holds the file format (its words and their checks) and gives checked plain values; the suite they
make (:class:`~ignite_tf.validation.suite.Suite`, with ``load_suite`` and ``coerce_suite``) is
:mod:`ignite_tf.validation.suite`, which imports this module and not the other way round.
"""

from __future__ import annotations

import difflib
from pathlib import Path

import yaml

from ignite_tf.errors import ConfigError
from ignite_tf.typecodes import COLUMN_TABLE, DOUBLE, FLOAT

# Column type -> the dtype name GX's pandas type check compares with (`str`: pandas' string dtype).
TYPES = {t.name: t.pandas[0] for t in COLUMN_TABLE}
# Column types whose values may be NaN (the reader gives SQL NULL in such a column as NaN too).
FLOAT_TYPES = tuple(t.name for t in COLUMN_TABLE if t.code in (FLOAT, DOUBLE))
COLUMN_KWARGS = ("column", "column_A", "column_B", "column_list", "column_set")
TOP_KEYS = ("name", "description", "sample_fraction", "seed", "row_count", "unique", "columns", "expectations")
RULES = ("type", "not_null", "between", "in_set", "mostly", "allow_nan")
# Kwargs ignite-tf sets itself (result format, batch) or that would hide errors.
RESERVED_KWARGS = ("id", "batch_id", "result_format", "catch_exceptions", "rendered_content", "windows")


def read_suite_file(path: str | Path) -> dict:
    """Read and check a suite file (``.yaml``, ``.yml`` or ``.json``): its checked values (see ``parse_suite``).

    :param path: the suite file.
    :raises ConfigError: unreadable or malformed, naming the file, line and key.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(f"validation suite {path}: cannot be read ({exc.strerror}); give the path of a "
                          f".yaml or .json suite file") from None
    loader = _LineLoader(text)  # JSON is YAML, so both keep their line numbers
    loader.name = str(path)
    try:
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark else ""
        raise ConfigError(f"{path}{line}: not valid YAML/JSON ({getattr(exc, 'problem', None) or exc})") from None
    finally:
        loader.dispose()
    if data is None:
        data = _Map()
    return parse_suite(data, str(path), default_name=path.stem)


def parse_suite(data, source: str = "<dict>", default_name: str = "suite") -> dict:
    """Check a suite in file form: ``Suite`` keyword arguments, with ``columns`` as ``{column: {rule: value}}``
    (``ColumnRules`` keyword arguments) and ``expectations`` as ``[{type, kwargs, where}]`` (``ExpectationSpec``'s).

    :param data: the suite's mapping, as read from a file or written in Python.
    :param source: where it came from, for messages.
    :param default_name: the suite's name when it gives none.
    :raises ConfigError: naming the source, line and key.
    """
    return SuiteParser(source, default_name=default_name).suite(data)


def is_float_type(type_: str | list[str] | None) -> bool:
    """A column type (or type list) whose every type is a float type."""
    types = type_ if isinstance(type_, list) else [type_] if type_ else []
    return bool(types) and all(t in FLOAT_TYPES for t in types)


# -- YAML with line numbers -------------------------------------------------------------------------------
class _Map(dict):
    """A mapping that remembers its own line and the line of each key (1-based)."""

    line: int | None = None
    lines: dict


class _Seq(list):
    line: int | None = None
    lines: list


class _LineLoader(yaml.SafeLoader):
    def construct_mapping(self, node, deep=False):
        out = _Map()
        out.line, out.lines = node.start_mark.line + 1, {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in out:
                raise ConfigError(f"{self.name}:{key_node.start_mark.line + 1}: key {key!r} appears twice "
                                  f"(first on line {out.lines[key]}); keep one")
            out[key] = self.construct_object(value_node, deep=True)
            out.lines[key] = key_node.start_mark.line + 1
        return out

    def construct_sequence(self, node, deep=False):
        out = _Seq(self.construct_object(child, deep=True) for child in node.value)
        out.line, out.lines = node.start_mark.line + 1, [c.start_mark.line + 1 for c in node.value]
        return out


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _LineLoader.construct_mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _LineLoader.construct_sequence)


def _line(container, key=None) -> int | None:
    lines = getattr(container, "lines", None)
    if key is not None and lines is not None:
        try:
            return lines[key]
        except (KeyError, IndexError, TypeError):
            pass
    return getattr(container, "line", None)


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _plain(value):
    """Loader containers -> plain dicts/lists (GX and JSON want the builtin types)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class SuiteParser:
    def __init__(self, source: str, default_name: str = "suite"):
        self.source, self.default_name = source, default_name

    def fail(self, container, key, where: str, what: str):
        line = _line(container, key)
        raise ConfigError(f"{self.source}{f':{line}' if line else ''}: {where}: {what}")

    def suite(self, data) -> dict:
        if not isinstance(data, dict):
            self.fail(data, None, "top level", f"must be a mapping of {', '.join(TOP_KEYS)} "
                                               f"(got {type(data).__name__})")
        for key in data:
            if key not in TOP_KEYS:
                self.fail(data, key, str(key), f"unknown top-level key{_close(key, TOP_KEYS)}; allowed: "
                                               f"{', '.join(TOP_KEYS)}")
        name = data.get("name", self.default_name)
        if not isinstance(name, str) or not name.strip():
            self.fail(data, "name", "name", f"must be a non-empty string (got {name!r})")
        suite = {"name": name.strip(), "source": self.source, "description": str(data.get("description") or ""),
                 "columns": {}}
        if "sample_fraction" in data:
            v = data["sample_fraction"]
            if not _is_number(v) or not 0 < v <= 1:
                self.fail(data, "sample_fraction", "sample_fraction", f"must be a number in (0, 1] (got {v!r})")
            suite["sample_fraction"] = float(v)
        if "seed" in data:
            if not isinstance(data["seed"], int) or isinstance(data["seed"], bool):
                self.fail(data, "seed", "seed", f"must be an integer (got {data['seed']!r})")
            suite["seed"] = data["seed"]
        if data.get("row_count") is not None:
            suite["row_count"] = self.row_count(data, data["row_count"])
        if data.get("unique") is not None:
            suite["unique"] = self.unique(data, data["unique"])
        columns = data.get("columns") or {}
        if not isinstance(columns, dict):
            self.fail(data, "columns", "columns", "must be a mapping of column name -> rules")
        for col, rules in columns.items():
            if not isinstance(col, str) or not col:
                self.fail(columns, col, f"columns.{col}", "column names must be non-empty strings")
            if col.lower() in suite["columns"]:
                self.fail(columns, col, f"columns.{col}", "column listed twice (names are case-insensitive)")
            suite["columns"][col.lower()] = self.column_rules(columns, col, rules)
        raw = data.get("expectations") or []
        if not isinstance(raw, list):
            self.fail(data, "expectations", "expectations", "must be a list of {expectation_name: {kwargs}}")
        suite["expectations"] = [self.expectation(raw, i, item) for i, item in enumerate(raw)]
        return suite

    def row_count(self, data, rc) -> tuple[int | None, int | None]:
        where = "row_count"
        if not isinstance(rc, dict) or not rc:
            self.fail(data, "row_count", where, f"must be a mapping with min and/or max (got {rc!r})")
        for k, v in rc.items():
            if k not in ("min", "max"):
                self.fail(rc, k, f"{where}.{k}", "unknown key; allowed: min, max")
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                self.fail(rc, k, f"{where}.{k}", f"must be a non-negative integer (got {v!r})")
        lo, hi = rc.get("min"), rc.get("max")
        if lo is not None and hi is not None and lo > hi:
            self.fail(data, "row_count", where, f"min {lo} is greater than max {hi}")
        return lo, hi

    def unique(self, data, value) -> list[str]:
        cols = [value] if isinstance(value, str) else value
        if not isinstance(cols, list) or not all(isinstance(c, str) and c for c in cols):
            self.fail(data, "unique", "unique", f"must be a column name or a list of them (got {value!r})")
        return list(dict.fromkeys(c.lower() for c in cols))

    def column_rules(self, columns, col: str, rules) -> dict:
        where = f"columns.{col}"
        if rules is None:
            return {}
        if not isinstance(rules, dict):
            self.fail(columns, col, where, f"must be a mapping of rules ({', '.join(RULES)}), got {rules!r}")
        out: dict = {}
        for key, v in rules.items():
            at = f"{where}.{key}"
            if key not in RULES:
                self.fail(rules, key, at, f"unknown column rule{_close(key, RULES)}; allowed: {', '.join(RULES)}")
            if key == "type":
                names = v if isinstance(v, list) else [v]
                bad = [t for t in names if t not in TYPES]
                if not names or bad:
                    self.fail(rules, key, at, f"unknown type {bad[0] if bad else v!r}; allowed: {', '.join(TYPES)} "
                                              f"(or a list of them)")
                if isinstance(v, list) and "string" in v:
                    self.fail(rules, key, at, "a type list cannot hold 'string' (GX compares pandas' string "
                                              "dtype only by name): use type: string alone")
                out["type"] = list(v) if isinstance(v, list) else v
            elif key in ("not_null", "allow_nan"):
                if not isinstance(v, bool):
                    self.fail(rules, key, at, f"must be true or false (got {v!r})")
                out[key] = v
            elif key == "between":
                ok = isinstance(v, list) and len(v) == 2 and all(x is None or _is_number(x) for x in v)
                if not ok or v[0] is None and v[1] is None:
                    self.fail(rules, key, at, f"must be [min, max] of numbers, one of them may be null (got {v!r})")
                if v[0] is not None and v[1] is not None and v[0] > v[1]:
                    self.fail(rules, key, at, f"min {v[0]} is greater than max {v[1]}")
                out["between"] = list(v)
            elif key == "in_set":
                if not isinstance(v, list) or not v or any(isinstance(x, (dict, list)) for x in v):
                    self.fail(rules, key, at, f"must be a non-empty list of values (got {v!r})")
                out["in_set"] = _plain(v)
            elif key == "mostly":
                self.check_mostly(rules, key, at, v)
                out["mostly"] = float(v)
        if "mostly" in out and not (out.get("not_null") or "between" in out or "in_set" in out):
            self.fail(rules, "mostly", f"{where}.mostly", "applies to not_null, between and in_set, and this "
                                                          "column has none of them")
        if out.get("allow_nan") and not is_float_type(out.get("type")):
            self.fail(rules, "allow_nan", f"{where}.allow_nan", f"applies to a column typed float32 or float64, "
                                                                f"and this column's type is {out.get('type')!r}")
        return out

    def check_mostly(self, container, key, at: str, v) -> None:
        if not _is_number(v) or not 0 < v <= 1:
            self.fail(container, key, at, f"mostly must be a number in (0, 1] (the fraction of rows that must "
                                          f"pass; got {v!r})")

    def expectation(self, raw, i: int, item) -> dict:
        where = f"expectations[{i}]"
        if not isinstance(item, dict) or len(item) != 1:
            self.fail(raw, i, where, f"must be one mapping {{expectation_name: {{kwargs}}}} (got {_plain(item)!r})")
        (name, kwargs), = item.items()
        where = f"{where}.{name}"
        if kwargs is None:
            kwargs = _Map()
        if not isinstance(kwargs, dict):
            self.fail(item, name, where, f"kwargs must be a mapping (got {kwargs!r})")
        impl = self.gx_expectation(item, name, where)
        kwargs = {str(k): v for k, v in kwargs.items()}
        for k, v in kwargs.items():
            if k in RESERVED_KWARGS:
                self.fail(_kwargs_src(item, name), k, f"{where}.{k}", "is set by ignite-tf; leave it out")
            if k == "mostly":
                self.check_mostly(_kwargs_src(item, name), k, f"{where}.{k}", v)
        for k in COLUMN_KWARGS:
            v = kwargs.get(k)
            if isinstance(v, str):
                kwargs[k] = v.lower()
            elif isinstance(v, list) and all(isinstance(c, str) for c in v):
                kwargs[k] = [c.lower() for c in v]
        plain = _plain(kwargs)
        self.check_kwargs(impl, item, name, where, plain)
        return {"type": name, "kwargs": plain, "where": where}

    def gx_expectation(self, item, name, where: str):
        from great_expectations.exceptions import ExpectationNotFoundError
        from great_expectations.expectations.registry import (
            get_expectation_impl,
            list_registered_expectation_implementations,
        )

        try:
            return get_expectation_impl(str(name))
        except ExpectationNotFoundError:
            known = sorted(list_registered_expectation_implementations())
            close = difflib.get_close_matches(str(name), known, n=3)
            hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(known[:8])}, ..."
            self.fail(item, name, where, f"unknown Great Expectations expectation; {hint} (all {len(known)} "
                                         f"names: great_expectations.expectations.registry)")

    def check_kwargs(self, impl, item, name, where: str, kwargs: dict) -> None:
        """Let the expectation's own pydantic model check names and types of the kwargs."""
        from great_expectations.compatibility.pydantic import error_wrappers

        errors: list[dict] = []
        try:
            impl(**kwargs)
        except error_wrappers.ValidationError as exc:
            errors = exc.errors()
        except (TypeError, ValueError) as exc:
            errors = [{"loc": ("__root__",), "msg": str(exc)}]
        if not errors:
            return
        src = _kwargs_src(item, name)
        err = errors[0]
        field_name = str(err["loc"][0]) if err.get("loc") else "__root__"
        if err.get("type") == "value_error.extra":
            allowed = [f for f in impl.__fields__ if f not in RESERVED_KWARGS and f != "rendered_content"]
            self.fail(src, field_name, f"{where}.{field_name}",
                      f"not a kwarg of {name}{_close(field_name, allowed)}; allowed: {', '.join(allowed)}")
        if field_name == "__root__":
            self.fail(item, name, where, err["msg"])
        if field_name not in kwargs:
            self.fail(item, name, where, f"required kwarg {field_name} is missing")
        # pydantic lists one message per member of a Union type; the first is the one for plain values.
        self.fail(src, field_name, f"{where}.{field_name}", f"{kwargs[field_name]!r}: {err['msg']}")


def _kwargs_src(item, name):
    return item[name] if isinstance(item.get(name), dict) else item


def _close(word, choices) -> str:
    close = difflib.get_close_matches(str(word), list(choices), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


__all__ = ["COLUMN_KWARGS", "FLOAT_TYPES", "TYPES", "SuiteParser", "is_float_type", "parse_suite", "read_suite_file"]
