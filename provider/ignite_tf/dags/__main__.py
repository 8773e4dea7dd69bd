"""Deprecated: ``python -m ignite_tf.pipeline SPEC...`` checks pipeline specs."""

import sys

from ignite_tf.pipeline.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
