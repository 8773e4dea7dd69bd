"""What validation found: per-shard results, their merge over the whole cache, the gate, the reports.

``merge`` turns the shards' results into one :class:`ValidationSummary`: counts of column-map expectations
add up exactly (``mostly`` is applied to the cache-wide fraction), means/min/max/sums and the row count are
recombined from the shards' observed values, other aggregates must pass on every shard, and ``unique``
columns are checked over the whole cache on the servers with Ignite SQL (no shard sees another shard's
duplicates). ``write_results`` writes ``validation.json`` and GX's own Data Docs site (its code is in
:mod:`ignite_tf.validation.report`, importable from here).
"""

from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ignite_tf.connection import sql
from ignite_tf.errors import ConfigError, ValidationFailed
from ignite_tf.jsonable import jsonable
from ignite_tf.validation.fingerprints import Fingerprints
from ignite_tf.validation.suite import ExpectationSpec, Suite, coerce_suite

UNIQUE = "expect_column_values_to_be_unique"
ROW_COUNT = "expect_table_row_count_to_be_between"
# Aggregates whose cache-wide value follows from the shards' observed values.
RECOMBINED = {"expect_column_mean_to_be_between": "mean", "expect_column_min_to_be_between": "min",
              "expect_column_max_to_be_between": "max", "expect_column_sum_to_be_between": "sum", ROW_COUNT: "rows"}
SAMPLE_ROWS = 5
# A GROUP BY over a large table can take minutes; the connection's own timeout is for short requests.
SQL_TIMEOUT = 600.0


@dataclass
class ExpectationResult:
    """One expectation on one shard. ``bad_rows``: up to 5 ``{"key": ..., "value": ...}``."""

    index: int
    expectation: str
    column: str | None
    success: bool
    kwargs: dict = field(default_factory=dict)
    element_count: int = 0
    unexpected_count: int | None = None
    unexpected_percent: float | None = None
    missing_count: int = 0
    nonnull: int | None = None
    observed_value: Any = None
    bad_rows: list[dict] = field(default_factory=list)
    error: str | None = None


@dataclass
class ShardResult:
    """What one shard's validation found; JSON-able (``to_dict``/``from_dict``)."""

    shard: int
    rows: int
    rows_checked: int
    sampled: bool
    results: list[ExpectationResult]
    key_column: str = "id"
    seconds: float = 0.0
    read_seconds: float = 0.0
    gx_result: dict | None = None
    fingerprints: dict | None = None  # what was read, per task (``ignite_tf.validation.fingerprints``)

    @property
    def success(self) -> bool:
        return all(r.success for r in self.results)

    def to_dict(self, gx: bool = True) -> dict:
        data = asdict(self)
        if not gx:
            data.pop("gx_result")
        return data

    @classmethod
    def from_dict(cls, data: dict) -> ShardResult:
        data = dict(data)
        data["results"] = [ExpectationResult(**r) for r in data["results"]]
        return cls(**data)


@dataclass
class CheckSummary:
    """One expectation over the whole cache.

    ``scope``: ``shards`` (the shards' counts or observed values recombined), ``every shard`` (must pass on
    each), or ``cache`` (checked on the whole cache: the row count, ``unique`` with Ignite SQL).
    ``bad_rows``: up to 5, each with its ``key``, ``value`` and ``shard`` (or ``value``/``count``/``keys``
    for duplicates).
    """

    expectation: str
    column: str | None
    success: bool
    scope: str = "shards"
    kwargs: dict = field(default_factory=dict)
    element_count: int = 0
    unexpected_count: int | None = None
    unexpected_percent: float | None = None
    observed_value: Any = None
    failing_shards: list[int] = field(default_factory=list)
    bad_rows: list[dict] = field(default_factory=list)
    error: str | None = None
    detail: str = ""

    @property
    def label(self) -> str:
        return f"{self.expectation}({self.column})" if self.column else self.expectation

    def describe(self) -> str:
        shards = self.failing_shards
        where = "across the cache" if self.scope == "cache" else (
            f"on shard{'s' if len(shards) > 1 else ''} {','.join(map(str, shards))}" if shards else "over all shards")
        return f"{self.label} {where}: {self.detail}"


@dataclass
class ValidationSummary:
    """The merged outcome. ``rows``: rows read (the cache); ``rows_checked``/``rows_per_shard``: rows
    validated (fewer when ``sampled``). ``to_dict()`` is XCom-sized; ``shards`` keep GX's results for Data Docs.
    """

    suite: str
    passed: bool
    rows: int
    rows_checked: int
    sampled: bool
    rows_per_shard: dict[int, int]
    checks: list[CheckSummary]
    shards: list[ShardResult] = field(default_factory=list, repr=False)
    suite_dict: dict = field(default_factory=dict, repr=False)
    cache: str | None = None
    fingerprints: dict | None = None  # every shard's, merged (``Fingerprints.to_dict``); None: not read

    @property
    def failures(self) -> list[CheckSummary]:
        return [c for c in self.checks if not c.success]

    def message(self) -> str:
        if self.passed:
            return f"validation passed: {len(self.checks)} checks on {self.rows_checked} rows"
        return "validation failed: " + "; ".join(c.describe() for c in self.failures)

    def to_dict(self) -> dict:
        return {"suite": self.suite, "cache": self.cache, "passed": self.passed, "rows": self.rows,
                "rows_checked": self.rows_checked, "sampled": self.sampled,
                "rows_per_shard": {str(k): v for k, v in self.rows_per_shard.items()},
                "message": self.message(), "checks": [asdict(c) for c in self.checks],
                "fingerprints": self.fingerprints}

    @classmethod
    def from_dict(cls, data: dict) -> ValidationSummary:
        """Back from :meth:`to_dict` (e.g. from XCom), without the per-shard GX results."""
        return cls(data["suite"], bool(data["passed"]), int(data["rows"]), int(data["rows_checked"]),
                   bool(data["sampled"]), {int(k): v for k, v in data["rows_per_shard"].items()},
                   [CheckSummary(**c) for c in data["checks"]], cache=data.get("cache"),
                   fingerprints=data.get("fingerprints"))


def _bounds_ok(value, kwargs: dict) -> bool:
    lo, hi = kwargs.get("min_value"), kwargs.get("max_value")
    if value is None:
        return False
    above = lo is None or (value > lo if kwargs.get("strict_min") else value >= lo)
    return above and (hi is None or (value < hi if kwargs.get("strict_max") else value <= hi))


def _examples(bad_rows: list[dict], key: str, limit: int = 3, nan: bool = False) -> str:
    def value(b: dict) -> str:
        return "NaN" if nan and b.get("value") == "NaN" else repr(b.get("value"))

    shown = [f"{key}={b['key']}: {value(b)}" if b.get("key") is not None else value(b) for b in bad_rows[:limit]]
    return f"; e.g. {', '.join(shown)}" if shown else ""


def _merge_one(spec: ExpectationSpec, per_shard: list[tuple[ShardResult, ExpectationResult]], key: str,
               sampled: bool) -> CheckSummary:
    check = CheckSummary(spec.type, spec.column, True, kwargs=spec.kwargs)
    errors = [(s.shard, e.error) for s, e in per_shard if e.error]
    if errors:
        check.success, check.scope = False, "every shard"
        check.failing_shards = [s for s, _ in errors]
        check.error = errors[0][1]
        check.detail = f"raised: {errors[0][1]}"
        return check
    check.element_count = sum(e.element_count for _, e in per_shard)
    if per_shard and all(e.unexpected_count is not None for _, e in per_shard):
        # Column-map expectation: counts add up; GX measures mostly over non-null values except for null checks.
        null_check = spec.type in ("expect_column_values_to_not_be_null", "expect_column_values_to_be_null")
        domain = sum(e.element_count - (0 if null_check else e.missing_count) for _, e in per_shard)
        bad = sum(e.unexpected_count for _, e in per_shard)
        check.unexpected_count, check.element_count = bad, domain
        check.unexpected_percent = 100.0 * bad / domain if domain else 0.0
        check.success = domain == 0 or (domain - bad) / domain >= spec.mostly - 1e-12
        check.failing_shards = [s.shard for s, e in per_shard if e.unexpected_count]
        check.bad_rows = [dict(b, shard=s.shard) for s, e in per_shard for b in e.bad_rows][:SAMPLE_ROWS]
        tolerance = f" (mostly {spec.mostly:g} allows {100 * (1 - spec.mostly):.2f}%)" if spec.mostly < 1 else ""
        what = "unexpected"
        if spec.nan:
            allow = (f"; allow_nan: true on column {spec.column} accepts them" if spec.where.endswith(".type")
                     else "")
            what = f"NaN in float column {spec.column} (SQL NULL reads as NaN too{allow})"
        check.detail = (f"{bad} of {domain} {'sampled ' if sampled else ''}rows ({check.unexpected_percent:.2f}%) "
                        f"{what}{tolerance}{_examples(check.bad_rows, key, nan=spec.nan)}")
        return check
    how = RECOMBINED.get(spec.type)
    observed = [(s, e) for s, e in per_shard if e.observed_value is not None]
    if how and not (how == "rows" and sampled):
        if how == "rows":
            value = sum(s.rows for s, _ in per_shard)
        elif how == "mean":
            weights = [(e.observed_value, e.nonnull or 0) for _, e in observed if e.nonnull]
            total = sum(w for _, w in weights)
            value = sum(v * w for v, w in weights) / total if total else None
        elif how == "sum":
            value = sum(e.observed_value for _, e in observed) if observed else None
        else:
            values = [e.observed_value for _, e in observed]
            value = (min if how == "min" else max)(values) if values else None
        check.observed_value, check.success = value, _bounds_ok(value, spec.kwargs)
        check.failing_shards = [] if check.success else [s.shard for s, e in per_shard if not e.success]
        check.detail = (f"observed {value!r} over the cache, expected between {spec.kwargs.get('min_value')} "
                        f"and {spec.kwargs.get('max_value')}")
        return check
    check.scope = "every shard"
    check.success = all(e.success for _, e in per_shard)
    check.failing_shards = [s.shard for s, e in per_shard if not e.success]
    check.observed_value = {str(s.shard): e.observed_value for s, e in per_shard}
    failed = [(s, e) for s, e in per_shard if not e.success]
    expected = {k: v for k, v in spec.kwargs.items() if k != "column"}
    check.detail = (f"observed {failed[0][1].observed_value!r} on shard {failed[0][0].shard}, expected "
                    f"{expected}" if failed else "passed on every shard")
    return check


def merge(results: list[ShardResult], suite: Suite | dict | str | Path, conn=None,
          cache: str | None = None) -> ValidationSummary:
    """Combine shard results into one verdict over the cache.

    :param results: one ShardResult per shard (all shards of the plan, so totals cover the cache).
    :param suite: the suite the shards were validated with.
    :param conn: with ``cache``, checks ``unique`` columns over the whole cache with Ignite SQL.
    :param cache: the cache (table) name.
    """
    suite = coerce_suite(suite)
    if not results:
        raise ConfigError(f"merge of suite {suite.name!r}: no shard results given; validate every shard first")
    results = sorted(results, key=lambda r: r.shard)
    specs = suite.specs()
    sampled = any(r.sampled for r in results)
    key = results[0].key_column if results else "key"
    checks = []
    for i, spec in enumerate(specs):
        per_shard = [(r, e) for r in results for e in r.results if e.index == i]
        if spec.type == UNIQUE and spec.where == "unique" and conn is not None and cache:
            checks.append(unique_over_cache(conn, cache, spec, per_shard))
            continue
        checks.append(_merge_one(spec, per_shard, key, sampled))
    total = sum(r.rows for r in results)
    if suite.row_count is not None:
        kwargs = {"min_value": suite.row_count[0], "max_value": suite.row_count[1]}
        ok = _bounds_ok(total, kwargs)
        checks.append(CheckSummary(ROW_COUNT, None, ok, "cache", kwargs, total, observed_value=total,
                                   detail=f"{total} rows in the cache, expected between {kwargs['min_value']} "
                                          f"and {kwargs['max_value']}"))
    return ValidationSummary(suite.name, all(c.success for c in checks), total, sum(r.rows_checked for r in results),
                             sampled, {r.shard: r.rows_checked for r in results}, checks, results, suite.to_dict(),
                             cache, _fingerprints(results))


def _fingerprints(results: list[ShardResult]) -> dict | None:
    if not results or any(r.fingerprints is None for r in results):
        return None  # a shard validated without its reads (validate_frame): nothing to hold the training to
    return Fingerprints.merged([Fingerprints.from_dict(r.fingerprints) for r in results]).to_dict()


def unique_over_cache(conn, cache: str, spec: ExpectationSpec, per_shard) -> CheckSummary:
    """Duplicates over the whole cache, counted by the servers (``GROUP BY ... HAVING COUNT(*) > 1``).

    A failure to run the check fails the check: the gate must not pass data it could not look at.
    """
    col = spec.column
    check = CheckSummary(UNIQUE, col, False, "cache", spec.kwargs,
                         failing_shards=[s.shard for s, e in per_shard if e.unexpected_count])
    client = dataclasses.replace(conn, timeout=max(conn.timeout, SQL_TIMEOUT)).client()
    try:
        tables = sql(client, "SELECT SCHEMA_NAME, TABLE_NAME, KEY_ALIAS FROM SYS.TABLES WHERE CACHE_NAME = ?", [cache])
        if not tables:
            check = _merge_one(spec, per_shard, per_shard[0][0].key_column if per_shard else "key", False)
            check.detail += f" (within each shard only: cache {cache!r} has no SQL table to check it as a whole)"
            return check
        schema, table, key_alias = tables[0]
        names = {r[0].lower(): r[0] for r in sql(client, "SELECT COLUMN_NAME FROM SYS.TABLE_COLUMNS "
                                                 "WHERE SCHEMA_NAME = ? AND TABLE_NAME = ?", [schema, table])}
        if col not in names:
            check.error = check.detail = f"table {table} has no column {col!r} (columns: {', '.join(names)})"
            return check
        if key_alias and names[col] == key_alias:
            check.success, check.detail = True, "the primary key: unique by construction"
            return check
        c, t, k = f'"{names[col]}"', f'"{schema}"."{table}"', f'"{key_alias or "_KEY"}"'
        groups = f"SELECT {c} v, COUNT(*) n FROM {t} WHERE {c} IS NOT NULL GROUP BY {c} HAVING COUNT(*) > 1"
        (dup_values, dup_rows), = sql(client, f"SELECT COUNT(*), SUM(n) FROM ({groups})")
        (nonnull,), = sql(client, f"SELECT COUNT({c}) FROM {t}")
        examples = sql(client, f"{groups} LIMIT {SAMPLE_ROWS}") if dup_values else []
        keys: dict = {}
        if examples:
            query = f"SELECT {c}, {k} FROM {t} WHERE {c} IN ({','.join('?' * len(examples))}) LIMIT 100"
            for value, key in sql(client, query, [v for v, _ in examples]):
                keys.setdefault(value, []).append(jsonable(key))
    except Exception as exc:  # noqa: BLE001 - any failure (timeout, SQL error, lost node) fails the check
        check.error = f"{exc.__class__.__name__}: {exc}"
        check.detail = f"could not be checked on the servers ({check.error}); fix that and validate again"
        return check
    finally:
        client.close()
    dup_rows, nonnull = int(dup_rows or 0), int(nonnull)
    check.element_count, check.unexpected_count = nonnull, dup_rows
    check.unexpected_percent = pct = 100.0 * dup_rows / nonnull if nonnull else 0.0
    check.success = nonnull - dup_rows >= spec.mostly * nonnull - 1e-9
    check.bad_rows = [{"value": jsonable(v), "count": int(n), "keys": sorted(keys.get(v, []))[:SAMPLE_ROWS]}
                      for v, n in examples]
    key_name = (key_alias or "_key").lower()
    shown = ", ".join(f"{col}={b['value']!r} in {key_name} {', '.join(map(str, b['keys']))}"
                      for b in check.bad_rows[:3])
    check.detail = (f"{dup_values} value(s) occur more than once, in {dup_rows} of {nonnull} rows ({pct:.2f}%)"
                    f"{f'; e.g. {shown}' if shown else ''}")
    return check


def gate(summary: ValidationSummary) -> ValidationSummary:
    """Raise :class:`ValidationFailed` (one message naming every failing check and shard) unless it passed."""
    if not summary.passed:
        raise ValidationFailed(summary.message(), summary)
    return summary


__all__ = ["ValidationFailed", "ExpectationResult", "ShardResult", "CheckSummary", "ValidationSummary", "merge",
           "gate"]
