"""Validation gate: Great Expectations on each shard of a cache, merged, then a gate that stops the DAG.

    suite = load_suite("dags/expectations/tabular.yaml")
    results = [validate_shard(conn, "digits", plan.shard(w).read_tasks(), suite, shard=w) for w in ...]
    summary = merge(results, suite, conn=conn, cache="digits")
    write_results(summary, run_dir)      # validation.json + GX Data Docs
    gate(summary)                        # raises ValidationFailed naming what failed, and where

A shard's rows (read with the partition reader, optionally sampled) are validated in one ephemeral GX
context (pandas datasource, whole-dataframe batch) built once per process; each suite becomes GX
validation definitions once and is reused for every shard. Merging, the gate and the reports live in
:mod:`ignite_tf.validation.results`, suites in :mod:`ignite_tf.validation.suite` (their file format in
:mod:`ignite_tf.validation.parse`); both are re-exported.

Speed: expectations about the schema (column types, the column set) look only at names and dtypes, so GX
gets them in a batch of zero rows with the shard's columns; the others get a batch of the columns they name.
GX checks ``between`` value by value in Python unless the column is int64/float64, so in the second batch
those columns are widened (exact for every float32/int32 value). GX is imported inside functions only.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd

from ignite_tf.errors import ConfigError
from ignite_tf.jsonable import jsonable
from ignite_tf.validation.fingerprints import Fingerprints
from ignite_tf.validation.report import write_results
from ignite_tf.validation.results import (
    RECOMBINED,
    SAMPLE_ROWS,
    CheckSummary,
    ExpectationResult,
    ShardResult,
    ValidationFailed,
    ValidationSummary,
    gate,
    merge,
)
from ignite_tf.validation.suite import ExpectationSpec, Suite, coerce_suite, load_suite

TYPE_CHECKS = ("expect_column_values_to_be_of_type", "expect_column_values_to_be_in_type_list")
# Expectations decided by the frame's column names and dtypes alone.
SCHEMA_CHECKS = (*TYPE_CHECKS, "expect_column_to_exist", "expect_table_columns_to_match_set",
                 "expect_table_columns_to_match_ordered_list", "expect_table_column_count_to_equal",
                 "expect_table_column_count_to_be_between")


# -- per shard ---------------------------------------------------------------------------------------------
def to_frame(columns: dict[str, np.ndarray]) -> pd.DataFrame:
    """Reader columns -> DataFrame: masked ints/bools become pandas nullable arrays, strings pandas' ``str``.

    :param columns: ``{name: array}`` as ``PartitionReader.read_all`` returns them.
    """
    out = {}
    for name, values in columns.items():
        mask = np.ma.getmaskarray(values) if isinstance(values, np.ma.MaskedArray) else None
        data = values.data if mask is not None else values
        if data.dtype.kind == "O":
            out[name] = pd.array(np.where(mask, None, data) if mask is not None else data, dtype="str")
        elif mask is not None and data.dtype.kind in "iu":
            out[name] = pd.arrays.IntegerArray(data, mask)
        elif mask is not None and data.dtype.kind == "b":
            out[name] = pd.arrays.BooleanArray(data, mask)
        else:
            out[name] = data
    return pd.DataFrame(out, copy=False)


def validate_frame(df: pd.DataFrame, suite: Suite | dict | str | Path, shard: int = 0,
                   key_column: str = "id", *, keep_gx_result: bool = True) -> ShardResult:
    """Validate one shard's rows (no Ignite involved).

    :param df: the shard's rows, lower-case column names, the key column among them.
    :param suite: a Suite, its dict form or a suite file path.
    :param shard: the shard (worker) index, for reports and the sample's seed.
    :param key_column: the column whose value identifies a bad row.
    :param keep_gx_result: keep GX's own result JSON (for Data Docs).
    """
    suite = coerce_suite(suite)
    if key_column not in df.columns:
        raise ConfigError(f"key column {key_column!r} is not among the shard's columns {list(df.columns)}")
    started = time.perf_counter()
    rows = len(df)
    if suite.sample_fraction < 1.0:
        keep = np.random.default_rng([suite.seed, shard]).random(rows) < suite.sample_fraction
        df = df[keep]
    specs = suite.specs()
    runner = _runner(suite, key_column)
    results, gx_results = [], []
    for part, frame in (("schema", _schema_frame(df, specs)), ("values", _value_frame(df, specs, key_column))):
        if frame is None or runner[part] is None:
            continue
        gx_result = runner[part].run(batch_parameters={"dataframe": frame}, result_format=runner["result_format"])
        for r in gx_result.results:
            index = int(r.expectation_config.meta["ignite_tf_index"])
            results.append(_from_gx(r, specs[index], index, key_column, frame, len(df)))
        gx_results.append(gx_result)
    results.sort(key=lambda r: r.index)
    return ShardResult(shard, rows, len(df), suite.sample_fraction < 1.0, results, key_column,
                       round(time.perf_counter() - started, 4),
                       gx_result=_combined(gx_results, suite, shard) if keep_gx_result else None)


def validate_shard(conn, cache: str, tasks, suite: Suite | dict | str | Path, shard: int = 0, *,
                   batch_size: int = 65536, page_size: int = 4096, **reader_kwargs) -> ShardResult:
    """Read one shard with the partition reader and validate it.

    :param conn: an IgniteConnectionConfig.
    :param cache: the cache (table) name.
    :param tasks: the shard's ``ReadTask``s, e.g. ``plan.shard(i).read_tasks()``.
    :param suite: a Suite, its dict form or a suite file path.
    :param shard: the shard index.
    :param reader_kwargs: passed to ``PartitionReader`` (``primaries``, ``backups``...).
    """
    from ignite_tf.reader.partition import PartitionReader

    suite = coerce_suite(suite)
    started = time.perf_counter()
    specs = suite.specs()
    wanted = None if any(s.whole_table for s in specs) else sorted({c for s in specs for c in s.columns})
    # Fingerprinted while read: the training checks that it reads these same rows (validation.fingerprints).
    kwargs = dict(batch_size=batch_size, page_size=page_size, fingerprint=True, **reader_kwargs)
    try:
        reader = PartitionReader(conn, cache, columns=wanted, **kwargs)
    except ConfigError:  # a column the suite names is missing: read them all, GX reports which one
        reader = PartitionReader(conn, cache, **kwargs)
    with reader:
        frame = to_frame(reader.read_all(tasks))
        key = reader.key_column
        fingerprints = Fingerprints.of_reader(reader)
    read_seconds = time.perf_counter() - started
    result = validate_frame(frame, suite, shard, key_column=key)
    result.read_seconds = round(read_seconds, 4)
    result.fingerprints = fingerprints.to_dict()
    return result


_STATE: dict = {}  # the GX context, and per (suite, key column) its validation definitions


def _runner(suite: Suite, key_column: str) -> dict:
    """The process's GX context and this suite's validation definitions, built once and reused by every shard."""
    state = _STATE.get("gx")
    if state is None:
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        _skip_decimal_scan_of_numeric_arrays()
        context = gx.get_context(mode="ephemeral")
        context.variables.progress_bars = ProgressBarsConfig(globally=False)
        asset = context.data_sources.add_pandas("ignite_tf").add_dataframe_asset("shard")
        state = _STATE["gx"] = {"gx": gx, "context": context,
                                "batch_definition": asset.add_batch_definition_whole_dataframe("rows")}
    cache_key = (suite.fingerprint(), key_column)
    if cache_key not in _STATE:
        from great_expectations.expectations.registry import get_expectation_impl

        gx, context, specs = state["gx"], state["context"], suite.specs()

        def definition(part: str, indexes: list[int]):
            if not indexes:
                return None
            name = f"{suite.name}.{len(_STATE)}.{part}"
            expectations = [get_expectation_impl(specs[i].type)(**specs[i].kwargs, meta={"ignite_tf_index": i})
                            for i in indexes]
            gx_suite = context.suites.add(gx.ExpectationSuite(name=name, expectations=expectations))
            return context.validation_definitions.add(
                gx.ValidationDefinition(name=name, data=state["batch_definition"], suite=gx_suite))

        _STATE[cache_key] = {
            "schema": definition("schema", [i for i, s in enumerate(specs) if s.type in SCHEMA_CHECKS]),
            "values": definition("values", [i for i, s in enumerate(specs) if s.type not in SCHEMA_CHECKS]),
            # SUMMARY with the key as index column gives counts plus up to 5 bad rows with their keys.
            "result_format": {"result_format": "SUMMARY", "partial_unexpected_count": SAMPLE_ROWS,
                              "unexpected_index_column_names": [key_column], "return_unexpected_index_query": False},
        }
    return _STATE[cache_key]


def _skip_decimal_scan_of_numeric_arrays() -> None:
    """GX's mean/sum/stdev look for ``decimal.Decimal`` objects one element at a time, even in float arrays
    (about 0.7 s per million rows); a NumPy array of a numeric dtype cannot hold one, so answer at once."""
    import great_expectations.util as gx_util

    original = gx_util.does_ndarray_contain_decimal_dtype
    if getattr(original, "ignite_tf", False):
        return

    def contains_decimal(data) -> bool:
        if isinstance(data, np.ndarray) and data.dtype.kind in "biuf":
            return False
        return original(data)

    contains_decimal.ignite_tf = True
    gx_util.does_ndarray_contain_decimal_dtype = contains_decimal


def _schema_frame(df: pd.DataFrame, specs: list[ExpectationSpec]) -> pd.DataFrame | None:
    if not any(s.type in SCHEMA_CHECKS for s in specs):
        return None
    typed = {c for s in specs if s.type in TYPE_CHECKS for c in s.columns}
    # GX checks a column of Python objects value by value, so such a column needs its rows.
    if any(df[c].dtype == object for c in typed if c in df.columns):
        return df
    return df.iloc[:0]


def _value_frame(df: pd.DataFrame, specs: list[ExpectationSpec], key: str) -> pd.DataFrame | None:
    specs = [s for s in specs if s.type not in SCHEMA_CHECKS]
    if not specs:
        return None
    if not any(s.whole_table for s in specs):
        cols = {c for s in specs for c in s.columns}
        df = df[[key, *[c for c in df.columns if c in cols and c != key]]]
    widen = {s.column for s in specs if s.type == "expect_column_values_to_be_between"} & set(df.columns)
    for c in widen:
        dtype = df[c].dtype
        if isinstance(dtype, np.dtype) and dtype.kind == "f" and dtype.itemsize < 8:
            df = df.assign(**{c: df[c].to_numpy(np.float64)})
        elif isinstance(dtype, np.dtype) and dtype.kind in "iu" and dtype.itemsize < 8:
            df = df.assign(**{c: df[c].to_numpy(np.int64)})
        elif isinstance(dtype, pd.api.extensions.ExtensionDtype) and dtype.kind in "iu" and dtype.itemsize < 8:
            df = df.assign(**{c: df[c].to_numpy(np.float64, na_value=np.nan)})  # exact below 2**53
    return df


def _error(info) -> str | None:
    """The first exception message in GX's exception_info (flat, or keyed by metric)."""
    if not isinstance(info, dict):
        return None
    if info.get("raised_exception"):
        return str(info.get("exception_message") or "raised an exception")
    for v in info.values():
        msg = _error(v)
        if msg:
            return msg
    return None


def _shown(value):
    """A bad row's value as JSON; NaN stays visible as "NaN" (``jsonable`` makes it null, like a missing value)."""
    if isinstance(value, float | np.floating) and np.isnan(value):
        return "NaN"
    return jsonable(value)


def _from_gx(r, spec: ExpectationSpec, index: int, key: str, frame: pd.DataFrame, rows: int) -> ExpectationResult:
    res = r.result or {}
    col = spec.column
    bad = [{"key": jsonable(item.get(key)), "value": _shown(item.get(col, item.get(key)))}
           for item in (res.get("partial_unexpected_index_list") or [])[:SAMPLE_ROWS] if isinstance(item, dict)]
    if not bad:
        bad = [{"key": None, "value": _shown(v)} for v in (res.get("partial_unexpected_list") or [])[:SAMPLE_ROWS]]
    nonnull = None
    if RECOMBINED.get(spec.type) == "mean" and col in frame.columns:
        nonnull = int(frame[col].notna().sum())
    unexpected = res.get("unexpected_count")
    return ExpectationResult(
        index, spec.type, col, bool(r.success), jsonable(spec.kwargs), int(res.get("element_count", rows)),
        None if unexpected is None else int(unexpected), jsonable(res.get("unexpected_percent")),
        int(res.get("missing_count") or 0), nonnull, jsonable(res.get("observed_value")), bad,
        _error(r.exception_info))


def _combined(gx_results: list, suite: Suite, shard: int) -> dict | None:
    """One GX suite result per shard (schema + values) as JSON, tracebacks dropped, for Data Docs."""
    if not gx_results:
        return None
    parts = [g.to_json_dict() for g in gx_results]
    results = sorted((r for p in parts for r in p["results"]),
                     key=lambda r: r["expectation_config"]["meta"].get("ignite_tf_index", 0))
    for r in results:
        msg = _error(r.get("exception_info"))
        r["exception_info"] = {"raised_exception": msg is not None, "exception_message": msg,
                               "exception_traceback": None}
    ok = sum(1 for r in results if r["success"])
    meta = dict(parts[-1].get("meta") or {}, ignite_tf_shard=shard)
    return jsonable({"success": ok == len(results), "results": results, "suite_name": suite.name,
                      "suite_parameters": {}, "meta": meta,
                      "statistics": {"evaluated_expectations": len(results), "successful_expectations": ok,
                                     "unsuccessful_expectations": len(results) - ok,
                                     "success_percent": 100.0 * ok / len(results) if results else 100.0}})


__all__ = ["ValidationFailed", "ExpectationResult", "ShardResult", "CheckSummary", "ValidationSummary", "Suite",
           "load_suite", "validate_frame", "validate_shard", "to_frame", "merge", "gate", "write_results"]
