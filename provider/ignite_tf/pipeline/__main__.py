"""``python -m ignite_tf.pipeline SPEC...``: check pipeline specs without Airflow (exit status 1 if any is invalid)."""

from __future__ import annotations

import sys

from ignite_tf.errors import SpecError
from ignite_tf.pipeline.spec import parse_spec


def main(argv: list[str] | None = None) -> int:
    files = sys.argv[1:] if argv is None else argv
    if not files:
        print("usage: python -m ignite_tf.pipeline SPEC.yaml [SPEC.yaml ...]", file=sys.stderr)
        return 2
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
