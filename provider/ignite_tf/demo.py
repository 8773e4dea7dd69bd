"""``make demo``: the data path on a fresh machine, end to end as far as it is built.

Starts 2 real Ignite nodes on free ports, loads the shipped synthetic tabular data set with the ETL core,
discovers its PartitionMap, plans shards for 2 workers, reads every partition with the partition reader
(printing its throughput), and stops the nodes, even on error.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ignite_tf.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=200_000, help="rows of the demo data set (default 200000)")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)

    from ignite_tf import demo_data
    from ignite_tf.etl import load
    from ignite_tf.local_ignite import LocalIgniteCluster
    from ignite_tf.partitions import PartitionMap
    from ignite_tf.reader import PartitionReader
    from ignite_tf.shardplan import ShardPlan

    stages: dict[str, float] = {}
    state = Path(tempfile.mkdtemp(prefix="ignite-tf-demo-"))
    cluster = LocalIgniteCluster.on_free_ports(state, "demo", die_with_parent=True)
    try:
        t = time.monotonic()
        cluster.up(2)
        stages["ignite up (2 nodes)"] = time.monotonic() - t
        print(f"Ignite: 2 server nodes at {', '.join(cluster.addresses)} (logs in {state / 'logs'})")
        conn = cluster.connection()

        t = time.monotonic()
        frame = demo_data.tabular(args.rows, seed=0)
        report = load(conn, "demo_tabular", frame, key="id")
        stages["ETL load"] = time.monotonic() - t
        print(f"ETL load: {report.rows_written} rows into cache '{report.cache}' "
              f"({report.rows_written / max(report.seconds, 1e-9):,.0f} rows/s), {report.rows_in_cache} in cache")

        t = time.monotonic()
        pm = PartitionMap.discover(conn, "demo_tabular")
        stages["partition discovery"] = time.monotonic() - t
        print(pm.summary())

        t = time.monotonic()
        hosts = [n.consistent_id for n in sorted(pm.nodes.values(), key=lambda n: n.order)]
        plan = ShardPlan.build(pm, args.workers, worker_hosts=(hosts * args.workers)[:args.workers], seed=0)
        stages["shard plan"] = time.monotonic() - t
        print(plan.describe(0))

        t = time.monotonic()
        rows = 0
        with PartitionReader(conn, "demo_tabular", batch_size=1024, page_size=1024) as reader:
            for batch in reader.batches(range(pm.partitions)):
                rows += len(batch[reader.key_column])
        seconds = time.monotonic() - t
        stages["read all partitions"] = seconds
        print(f"reader: {rows} rows x {len(reader.schema)} columns in {seconds:.2f}s = {rows / seconds:,.0f} rows/s "
              f"(NumPy batches of 1024, each partition scanned on its primary node)")
        if rows != report.rows_in_cache:
            print(f"error: read {rows} rows, the cache holds {report.rows_in_cache}", file=sys.stderr)
            return 1
    finally:
        t = time.monotonic()
        cluster.down()
        stages["ignite down"] = time.monotonic() - t
    print("stage times: " + ", ".join(f"{k} {v:.1f}s" for k, v in stages.items()))
    print("all Ignite nodes stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
