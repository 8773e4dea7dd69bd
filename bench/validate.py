"""Validation benchmark: what the validation gate adds to reading a cache with the partition reader.

    .venv/bin/python bench/validate.py [--rows N] [--repeat R] [--json] [--smoke] [--ignite HOST:PORT,...]

Starts its own 2-node local Ignite cluster on free ports (stopped at the end, also on error; ``--ignite``: use
a running one), loads N rows (16 float32 features + 1 int32 label, ``ignite_tf.etl.load``), plans 2 shards
(one per node) and times,
best of ``--repeat`` runs, shard after shard in this process:

  read_rows_s      ``PartitionReader.read_all`` of every shard (all columns),
  validate_rows_s  ``validate_shard`` of every shard (the same read, the DataFrame, Great Expectations
                   with a 10-check suite) and ``merge``,

and ``validation_overhead = (validate_rows_s - read_rows_s) / read_rows_s`` (target: at most 0.5).
Importing Great Expectations and building its context happen once per process, before the timings,
and are reported apart, as is the cache-wide ``unique`` check (one GROUP BY on the servers).
``--smoke``: 2,000 rows, 1 run (see ``bench/harness.py``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import tempfile
import time
from pathlib import Path

from harness import add_common_arguments, ignite, report

CACHE = "validate_bench"
SHARDS = 2
# 10 checks: 9 per shard with GX (3 + 2 + 1 from the shorthand, 3 raw) + the row count on the total.
SUITE = {
    "name": "bench",
    "row_count": {"min": 1000, "max": 100_000_000},
    "columns": {
        "f0": {"type": "float32", "not_null": True, "between": [-10, 10]},
        "label": {"type": "int32", "in_set": [0, 1, 2]},
        "f1": {"not_null": True, "mostly": 0.99},
    },
    "expectations": [
        {"expect_column_mean_to_be_between": {"column": "f2", "min_value": -1, "max_value": 1}},
        {"expect_column_values_to_be_between": {"column": "f3", "min_value": -10, "max_value": 10}},
        {"expect_table_columns_to_match_set": {"column_set": ["id", "label", *[f"f{i}" for i in range(16)]]}},
    ],
}


def time_read(conn, tasks: list) -> tuple[int, float]:
    from ignite_tf.reader.partition import PartitionReader

    started, rows = time.perf_counter(), 0
    for shard_tasks in tasks:
        with PartitionReader(conn, CACHE, batch_size=65536, page_size=4096) as reader:
            rows += len(reader.read_all(shard_tasks)[reader.key_column])
    return rows, time.perf_counter() - started


def time_validate(conn, tasks: list, suite) -> tuple[object, float]:
    from ignite_tf.validation.run import merge, validate_shard

    started = time.perf_counter()
    results = [validate_shard(conn, CACHE, t, suite, shard=i, batch_size=65536, page_size=4096)
               for i, t in enumerate(tasks)]
    summary = merge(results, suite)
    return summary, time.perf_counter() - started


def run(rows: int, repeat: int, quiet: bool, addresses: str | None = None) -> dict:
    import numpy as np
    from ignite_tf_dev.demo_data import tabular

    from ignite_tf.etl import load
    from ignite_tf.plan.partitions import PartitionMap
    from ignite_tf.plan.shards import ShardPlan
    from ignite_tf.validation.results import UNIQUE, unique_over_cache
    from ignite_tf.validation.run import validate_frame
    from ignite_tf.validation.suite import ExpectationSpec, coerce_suite

    def say(msg):
        if not quiet:
            print(msg, file=sys.stderr, flush=True)

    started = time.perf_counter()
    import great_expectations  # noqa: F401 - timed apart: a validation task pays it once

    import_s = time.perf_counter() - started
    suite = coerce_suite(SUITE)
    frame = tabular(rows, seed=7)
    with tempfile.TemporaryDirectory(prefix="validate-bench-") as tmp:
        with ignite(addresses, Path(tmp), say, heap_mb=512, region_mb=768) as nodes:
            conn = nodes.conn
            started = time.perf_counter()
            load(conn, CACHE, frame, key="id", backups=0)
            load_s = time.perf_counter() - started
            say(f"loaded {rows:,} rows in {load_s:.1f}s")
            plan = ShardPlan.build(PartitionMap.discover(conn, CACHE), SHARDS)
            tasks = [plan.shard(w).read_tasks() for w in range(SHARDS)]
            started = time.perf_counter()
            validate_frame(frame.head(100), suite)  # imports GX, builds the context and the suites once
            warmup_s = time.perf_counter() - started
            say(f"GX import {import_s:.1f}s, context + suites {warmup_s:.1f}s (once per process)")
            reads, validations, summary = [], [], None
            for i in range(repeat):
                n, read_s = time_read(conn, tasks)
                if n != rows:
                    raise RuntimeError(f"the reader returned {n} rows, {rows} were loaded")
                summary, validate_s = time_validate(conn, tasks, suite)
                reads.append(read_s)
                validations.append(validate_s)
                say(f"run {i + 1}: read {read_s:.2f}s, read + validate {validate_s:.2f}s")
            if not summary.passed or summary.rows != rows:
                raise RuntimeError(f"the clean table did not validate: {summary.message()}")
            gx_s = sum(r.seconds for r in summary.shards)
            in_read_s = sum(r.read_seconds for r in summary.shards)
            # f0 (not the key, which is unique by construction) makes the servers group every row.
            started = time.perf_counter()
            unique = unique_over_cache(conn, CACHE, ExpectationSpec(UNIQUE, {"column": "f0"}, "unique"), [])
            unique_s = time.perf_counter() - started
    read_s, validate_s = min(reads), min(validations)
    return {"rows": rows, "validate_rows_s": round(validate_s, 3), "read_rows_s": round(read_s, 3),
            "validation_overhead": round((validate_s - read_s) / read_s, 3),
            "_detail": {"load_s": load_s, "warmup_s": warmup_s, "import_s": import_s, "checks": len(summary.checks),
                        "gx_s": gx_s, "in_read_s": in_read_s, "unique_s": unique_s, "unique": unique.detail,
                        "reads": reads, "validations": validations, "rows_per_shard": summary.rows_per_shard,
                        "median_overhead": float(np.median([(v - r) / r for r, v in zip(reads, validations,
                                                                                         strict=True)]))}}


def table(r: dict) -> str:
    d, n = r["_detail"], r["rows"]
    shards = ", ".join(f"{v:,}" for v in d["rows_per_shard"].values())
    return "\n".join([
        f"Validation benchmark: {n:,} rows (16 float32 + 1 int32 label), 2 local Ignite nodes, {SHARDS} shards "
        f"({shards} rows), {d['checks']}-check suite, best of {len(d['reads'])}",
        "",
        "| measurement | seconds | rows/s |",
        "|---|---:|---:|",
        f"| read_rows_s: PartitionReader.read_all, all shards | {r['read_rows_s']:.2f} | "
        f"{n / r['read_rows_s']:,.0f} |",
        f"| validate_rows_s: validate_shard (read + DataFrame + GX) + merge | {r['validate_rows_s']:.2f} | "
        f"{n / r['validate_rows_s']:,.0f} |",
        f"| of which reading + DataFrame (last run) | {d['in_read_s']:.2f} | {n / d['in_read_s']:,.0f} |",
        f"| of which Great Expectations: validate_frame (last run) | {d['gx_s']:.2f} | {n / d['gx_s']:,.0f} |",
        "",
        f"validation_overhead = (validate - read) / read: {r['validation_overhead']:.2f} (best runs; median "
        f"{d['median_overhead']:.2f}; target <= 0.50)",
        f"once per process, not in the timings: import great_expectations {d['import_s']:.1f}s, GX context + "
        f"suites {d['warmup_s']:.1f}s",
        f"not in the suite: a cache-wide unique(f0) check on the servers (GROUP BY ... HAVING) took "
        f"{d['unique_s']:.1f}s ({d['unique']})",
        f"load with ignite_tf.etl.load: {d['load_s']:.1f}s",
    ])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows to load (default 1,000,000)")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs; the best counts (default 3)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.repeat = 2_000, 1
    # SIGTERM runs the finally blocks too (the nodes also die with this process: die_with_parent).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result = run(args.rows, args.repeat, quiet=args.json, addresses=args.ignite)
    report(args, table(result), {k: v for k, v in result.items() if not k.startswith("_")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
