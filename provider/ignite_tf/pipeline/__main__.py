"""``python -m ignite_tf.pipeline SPEC...``: check pipeline specs without Airflow (exit status 1 if any is invalid)."""

from __future__ import annotations

import argparse
import sys

from ignite_tf.errors import SpecError
from ignite_tf.pipeline.spec import parse_spec


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ignite_tf.pipeline", description=__doc__.split(": ", 1)[1])
    parser.add_argument("files", metavar="SPEC", nargs="+", help="a pipeline spec (.yaml)")
    files = parser.parse_args(argv).files
    failed = 0
    for path in files:
        try:
            config = parse_spec(path)
        except SpecError as exc:
            failed += 1
            print(f"INVALID {exc}", file=sys.stderr)
        else:
            extra = f" + {config.dag_id}_inference" if config.inference else ""
            print(f"ok      {path}: {config.dag_id}{extra}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
