"""The ``ignite-tf`` command line (start / stop / attach / ps come with the cluster launcher)."""

from __future__ import annotations

import argparse
import sys

from ignite_tf import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ignite-tf",
        description="Run TensorFlow clusters next to the data of an Apache Ignite cache.",
    )
    parser.add_argument("-V", "--version", action="version", version=f"ignite-tf {__version__}")
    parser.add_argument("-c", "--config", help="connection file (JSON/YAML) or Airflow connection id")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    parser.parse_args(argv)
    parser.print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
