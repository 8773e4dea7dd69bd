"""What the benches share: the common options, the Ignite cluster a bench measures against, how it reports.

Every bench takes

  --json                 one JSON object instead of the table;
  --smoke                tiny data, one repetition, one epoch: the bench runs end to end through the product
                         and prints its table, then its JSON object on the last line (``tests/test_benches.py``
                         runs every bench so and checks the table's header and the JSON's keys, never the
                         numbers, so a bench cannot rot unnoticed);
  --ignite HOST:PORT,... measure against this running Ignite cluster instead of starting 2 local nodes on free
                         ports (the tests pass their session cluster). Its nodes' CPU is then not measured.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

# Set before anything imports TensorFlow or Airflow: Keras 2 (tf_keras), CPU only, quiet.
BENCH_ENV = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": "-1"}


def set_bench_env() -> None:
    for key, value in BENCH_ENV.items():
        os.environ.setdefault(key, value)


def add_common_arguments(parser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--smoke", action="store_true",
                        help="tiny data, one repetition, one epoch; prints the table, then the JSON object "
                             "(checks that the bench runs, not what it measures)")
    parser.add_argument("--ignite", metavar="HOST:PORT[,...]",
                        help="a running Ignite cluster to measure against (default: start 2 local nodes on free "
                             "ports, stopped at the end)")


@dataclass
class Ignite:
    """The cluster a bench runs against: its connection and, when the bench started it, its nodes' pids."""

    conn: object  # IgniteConnectionConfig
    node_pids: list[int] = field(default_factory=list)
    started: bool = False


@contextmanager
def ignite(addresses: str | None, state_dir: Path, say=lambda _msg: None, **node_settings) -> Iterator[Ignite]:
    """The cluster at ``addresses``, or 2 local nodes on free ports under ``state_dir`` (``node_settings``:
    ``heap_mb``, ``region_mb``), stopped at the end, also on error (and with this process: die_with_parent)."""
    from ignite_tf.connection import IgniteConnectionConfig

    if addresses:
        yield Ignite(IgniteConnectionConfig(addresses=addresses))
        return
    from ignite_tf_dev.ignite.cluster import LocalIgniteCluster

    cluster = LocalIgniteCluster.on_free_ports(state_dir, "bench", die_with_parent=True, **node_settings)
    try:
        say(f"starting 2 Ignite nodes (thin-client port {cluster.client_port}) ...")
        cluster.up(2)
        yield Ignite(cluster.connection(), [n.pid for n in cluster.nodes], started=True)
    finally:
        cluster.down()


def report(args, table: str, data: dict) -> None:
    """The table, the JSON object (``--json``), or both (``--smoke``: the JSON on the last line)."""
    if args.smoke or not args.json:
        print(table)
    if args.smoke or args.json:
        print(json.dumps(data), flush=True)


def say_to_stderr(quiet: bool):
    def say(msg: str) -> None:
        if not quiet:
            print(msg, file=sys.stderr, flush=True)

    return say
