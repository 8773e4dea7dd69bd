"""``python -m ignite_tf_dev.ignite``: what the Makefile's
``ignite-up``, ``ignite-down`` and ``ignite-status`` targets run. See :mod:`ignite_tf_dev.ignite.cluster`.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from ignite_tf.errors import IgniteTFError
from ignite_tf.home import HomeFolder
from ignite_tf_dev.ignite.cluster import CONNECTION_FILE, DEFAULT_PORT, LocalIgniteCluster
from ignite_tf_dev.ignite.jvm import ensure_jars, ignite_version


def default_state_dir() -> Path:
    return Path(os.environ.get("IGNITE_TF_STATE_DIR", HomeFolder.of().local_ignite))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ignite_tf_dev.ignite", description="Run Apache Ignite server nodes on localhost.",
        epilog="With --auth the password of user 'ignite' is taken from $IGNITE_TF_PASSWORD (default: ignite).")
    parser.add_argument("--state-dir", type=Path, default=default_state_dir(),
                        help="the cluster's folder: pids, logs, work folders (default $IGNITE_TF_STATE_DIR "
                             "or local-cluster in the ignite-tf home)")
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start N nodes and wait for the topology")
    up.add_argument("-n", "--nodes", type=int, default=2)
    up.add_argument("--port", "--client-port", dest="port", type=int, default=DEFAULT_PORT,
                    help=f"port base: thin client PORT+i, discovery PORT+10.., communication PORT+20.. "
                         f"(default {DEFAULT_PORT})")
    up.add_argument("--heap-mb", type=int, default=512)
    up.add_argument("--auth", action="store_true", help="authentication on (with native persistence)")
    up.add_argument("--tls", action="store_true", help="TLS on the thin-client port")
    sub.add_parser("down", help="stop every node of the cluster, by pid, and remove its work folders")
    sub.add_parser("status", help="print the nodes, their ports, pids and logs")
    sub.add_parser("fetch", help="only fetch the Ignite jars")
    args = parser.parse_args(argv)

    try:
        if args.command == "fetch":
            print(ensure_jars())
        elif args.command == "up":
            password = os.environ.get("IGNITE_TF_PASSWORD") if args.auth else None
            cluster = LocalIgniteCluster(args.state_dir, client_port=args.port, heap_mb=args.heap_mb,
                                         auth=args.auth, tls=args.tls, password=password)
            started = time.monotonic()
            cluster.up(args.nodes)
            print(f"Ignite {ignite_version()}: {args.nodes} server node(s) up in {time.monotonic() - started:.1f}s"
                  + (" (authentication on, user ignite)" if args.auth else "") + (" (TLS)" if args.tls else ""))
            for n in cluster.nodes:
                print(f"  {n.instance}  pid {n.pid}  thin client {n.address}  log {n.log}")
            print(f"connection file: {args.state_dir / CONNECTION_FILE}  (ignite-tf -c ...)")
        else:
            cluster = LocalIgniteCluster.from_state(args.state_dir)
            if args.command == "down":
                pids = cluster.down()
                print(f"stopped {len(pids)} Ignite node(s)" + (f": pids {pids}" if pids else ""))
            else:
                _print_status(cluster)
    except IgniteTFError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


def _print_status(cluster: LocalIgniteCluster) -> None:
    rows = cluster.status()
    if not rows:
        print(f"no local Ignite cluster recorded in {cluster.state_dir}")
    for r in rows:
        state = "up" if r["alive"] else "DOWN"
        print(f"  {r['instance']}  {state:4}  pid {r['pid']}  thin client 127.0.0.1:{r['client_port']}  log {r['log']}")
    if rows:
        print(f"server nodes in topology: {cluster.server_count()}")


if __name__ == "__main__":
    sys.exit(main())
