"""Ingest benchmark: rows/s from Ignite into Python, pyignite's scan vs the partition reader vs memory.

    .venv/bin/python bench/ingest.py [--rows N] [--json] [--smoke] [--ignite HOST:PORT,...]

Starts its own 2-node local Ignite cluster on free ports (stopped at the end, also on error; ``--ignite``: use
a running one), loads N rows (16 float32 features + 1 int32 label) with ``ignite_tf.etl.load``, then times:

  (a) pyignite ``cache.scan()`` as shipped (page_size=1), on a prefix of the rows (it is that slow),
  (b) pyignite ``cache.scan(page_size=1024)``, building its row objects,
  (c) ``PartitionReader`` into NumPy batches of 1024, all partitions,
  (c') the same with ``fingerprint=True`` (what validation and a checked training read with), timed
       alternately with (c), best of ``REPEATS`` each, so the two see the same machine load,
  (d) the same rows from an in-memory NumPy array through ``tf.data`` (``from_tensor_slices().batch(1024)``),

and the reader's peak RSS in a fresh subprocess reading N/10 rows and N rows (it must not grow with N).
``--smoke``: 2,000 rows, 200 of them for (a), 1,024 (a page) for (b), (c) and (c') once each (see
``bench/harness.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import add_common_arguments, ignite, report, set_bench_env

set_bench_env()

CACHE = "ingest_bench"
FEATURES = [f"f{i}" for i in range(16)]
BATCH = 1024
REPEATS = 3


def make_frame(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(42)
    data = {"id": np.arange(n, dtype=np.int64)}
    data.update({f: rng.random(n, dtype=np.float32) for f in FEATURES})
    data["label"] = rng.integers(0, 10, n).astype(np.int32)
    return data


def load(conn, data: dict[str, np.ndarray]) -> str:
    """Load the rows with the product's ETL; return how."""
    import pandas as pd

    from ignite_tf.etl import load as etl_load

    etl_load(conn, CACHE, pd.DataFrame(data), key="id")
    return "ignite_tf.etl.load"


def time_pyignite_scan(conn, page_size: int | None, limit: int) -> tuple[int, float]:
    client = conn.client()
    try:
        cache = client.get_cache(CACHE)
        start, n = time.perf_counter(), 0
        with (cache.scan() if page_size is None else cache.scan(page_size=page_size)) as cursor:
            for _key, _value in cursor:
                n += 1
                if n >= limit:
                    break
        return n, time.perf_counter() - start
    finally:
        client.close()


def time_reader(conn, fingerprint: bool = False) -> tuple[int, float, dict]:
    from ignite_tf.reader.partition import PartitionReader

    start, n = time.perf_counter(), 0
    with PartitionReader(conn, CACHE, batch_size=BATCH, page_size=BATCH, fingerprint=fingerprint) as reader:
        for batch in reader.batches(range(reader.partitions)):
            n += len(batch[reader.key_column])
        stats = reader.stats
    return n, time.perf_counter() - start, stats


def time_memory(data: dict[str, np.ndarray]) -> tuple[int, float]:
    import tensorflow as tf

    features = {f: data[f] for f in FEATURES}
    ds = tf.data.Dataset.from_tensor_slices((features, data["label"])).batch(BATCH)
    start, n = time.perf_counter(), 0
    for _features, label in ds:
        n += int(label.shape[0])
    return n, time.perf_counter() - start


def rss_child(addresses: str, partitions: int) -> None:
    """Runs in a fresh process: read the first ``partitions`` partitions, print rows and peak RSS."""
    from ignite_tf.connection import IgniteConnectionConfig
    from ignite_tf.reader.partition import PartitionReader

    n = 0
    with PartitionReader(IgniteConnectionConfig(addresses=addresses), CACHE, batch_size=BATCH,
                         page_size=BATCH) as reader:
        for batch in reader.batches(range(partitions)):
            n += len(batch[reader.key_column])
    print(json.dumps({"rows": n, "maxrss_mb": peak_rss_mb()}))


def peak_rss_mb() -> float:
    """Peak RSS of this process image: VmHWM (ru_maxrss would also count the parent's size at fork)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_rss(conn, partitions: int) -> dict:
    out = subprocess.run([sys.executable, __file__, "--rss-child", conn.addresses_str, str(partitions)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def run(rows: int, default_limit: int, paged_limit: int, quiet: bool, addresses: str | None = None,
        repeats: int = REPEATS) -> dict:
    def say(msg):
        if not quiet:
            print(msg, file=sys.stderr, flush=True)

    data = make_frame(rows)
    with tempfile.TemporaryDirectory(prefix="ingest-bench-") as tmp:
        with ignite(addresses, Path(tmp), say, heap_mb=512, region_mb=768) as nodes:
            conn = nodes.conn
            started = time.perf_counter()
            how = load(conn, data)
            load_s = time.perf_counter() - started
            say(f"loaded {rows:,} rows in {load_s:.1f}s ({how})")
            a_rows, a_s = time_pyignite_scan(conn, None, min(rows, default_limit))
            say(f"(a) {a_rows:,} rows in {a_s:.1f}s")
            b_rows, b_s = time_pyignite_scan(conn, BATCH, min(rows, paged_limit))
            say(f"(b) {b_rows:,} rows in {b_s:.1f}s")
            plain, printed = [], []
            for _ in range(repeats):
                plain.append(time_reader(conn))
                printed.append(time_reader(conn, fingerprint=True))
            c_rows, c_s, stats = min(plain, key=lambda t: t[1])
            fp_rows, fp_s, _ = min(printed, key=lambda t: t[1])
            say(f"(c) {c_rows:,} rows in {c_s:.2f}s; {stats['pages']} pages, {stats['fast_pages']} decoded fast")
            say(f"(c') {fp_rows:,} rows in {fp_s:.2f}s with fingerprints")
            if fp_rows != c_rows:
                raise RuntimeError(f"the fingerprinting reader returned {fp_rows} rows, the plain one {c_rows}")
            load_average = os.getloadavg()
            if c_rows != rows:
                raise RuntimeError(f"the reader returned {c_rows} rows, {rows} were loaded")
            rss_small = measure_rss(conn, 1024 // 10)
            rss_large = measure_rss(conn, 1024)
            say(f"peak RSS {rss_small['maxrss_mb']:.0f} MB ({rss_small['rows']:,} rows), "
                f"{rss_large['maxrss_mb']:.0f} MB ({rss_large['rows']:,} rows)")
            d_rows, d_s = time_memory(data)
            say(f"(d) {d_rows:,} rows in {d_s:.2f}s")
    rates = {k: r / s for k, r, s in (("a", a_rows, a_s), ("b", b_rows, b_s), ("c", c_rows, c_s),
                                        ("d", d_rows, d_s))}
    return {
        "rows": rows, "scan_default_rows_s": rates["a"], "scan_paged_rows_s": rates["b"],
        "reader_rows_s": rates["c"], "memory_rows_s": rates["d"], "reader_vs_paged": rates["c"] / rates["b"],
        "reader_vs_memory": rates["c"] / rates["d"], "rss_small_mb": rss_small["maxrss_mb"],
        "reader_fingerprint_rows_s": fp_rows / fp_s, "fingerprint_cost": 1 - (fp_rows / fp_s) / rates["c"],
        "load_average": list(load_average),
        "rss_large_mb": rss_large["maxrss_mb"],
        "_detail": {"a_rows": a_rows, "b_rows": b_rows, "load": how, "load_s": load_s, "repeats": repeats,
                    "rss_small_rows": rss_small["rows"], "rss_large_rows": rss_large["rows"]},
    }


def table(r: dict) -> str:
    d, n = r["_detail"], r["rows"]

    def rows_note(k):
        return f"{k:,}" + (" (prefix)" if k < n else "")

    lines = [
        f"Ingest benchmark: {n:,} rows of 16 float32 features + 1 int32 label, 2 local Ignite nodes, "
        f"page/batch size {BATCH} (loaded in {d['load_s']:.0f}s with {d['load']})",
        "",
        "| path | rows timed | rows/s |",
        "|---|---:|---:|",
        f"| (a) pyignite cache.scan() as shipped (page_size=1) | {rows_note(d['a_rows'])} | "
        f"{r['scan_default_rows_s']:,.0f} |",
        f"| (b) pyignite cache.scan(page_size=1024), row objects | {rows_note(d['b_rows'])} | "
        f"{r['scan_paged_rows_s']:,.0f} |",
        f"| (c) PartitionReader -> NumPy batches, all partitions (best of {d['repeats']}) | {n:,} | "
        f"{r['reader_rows_s']:,.0f} |",
        f"| (c') the same, fingerprint=True (alternating with c, best of {d['repeats']}) | {n:,} | "
        f"{r['reader_fingerprint_rows_s']:,.0f} |",
        f"| (d) in-memory NumPy -> tf.data from_tensor_slices().batch(1024) | {n:,} | {r['memory_rows_s']:,.0f} |",
        "",
        f"c/b (reader vs paged pyignite scan): {r['reader_vs_paged']:.1f}x (target >= 5)",
        f"c/d (reader vs in-memory tf.data): {r['reader_vs_memory']:.2f}x",
        f"fingerprint cost (1 - c'/c): {100 * r['fingerprint_cost']:.1f}% of reader throughput (target <= 5%); "
        f"load average {', '.join(f'{x:.2f}' for x in r['load_average'])}",
        f"reader peak RSS (fresh process, VmHWM): {r['rss_small_mb']:.0f} MB reading "
        f"{d['rss_small_rows']:,} rows (N/10), {r['rss_large_mb']:.0f} MB reading {d['rss_large_rows']:,} rows (N)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser)
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows to load (default 1,000,000)")
    parser.add_argument("--default-limit", type=int, default=50_000,
                        help="rows timed for (a), pyignite's page_size=1 scan (default 50,000)")
    parser.add_argument("--paged-limit", type=int, default=200_000,
                        help="rows timed for (b), pyignite's paged scan (default 200,000)")
    parser.add_argument("--rss-child", nargs=2, metavar=("ADDRESSES", "PARTITIONS"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_child:
        rss_child(args.rss_child[0], int(args.rss_child[1]))
        return 0
    # SIGTERM runs the finally blocks too (the nodes also die with this process: die_with_parent).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    repeats = REPEATS
    if args.smoke:  # every path once: (a) and (b) on a prefix, (c) and (c') one read each
        args.rows, args.default_limit, args.paged_limit, repeats = 2_000, 200, BATCH, 1
    result = run(args.rows, args.default_limit, args.paged_limit, quiet=args.json, addresses=args.ignite,
                 repeats=repeats)
    report(args, table(result), {k: v for k, v in result.items() if not k.startswith("_")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
