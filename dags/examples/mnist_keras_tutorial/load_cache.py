"""Load the synthetic digits into an Ignite table for ``ported.py``.

    python load_cache.py --addresses 127.0.0.1:10800 --cache digits --rows 10000
"""

from __future__ import annotations

import argparse

import digits

from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.etl import load


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addresses", required=True, help="host:port[,host:port...] of the thin-client ports")
    parser.add_argument("--cache", default="digits")
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args()
    report = load(IgniteConnectionConfig(addresses=args.addresses), args.cache, digits.frame(args.rows), key="id")
    print(f"{report.rows_in_cache} rows in cache '{args.cache}'")


if __name__ == "__main__":
    main()
