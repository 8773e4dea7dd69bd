"""Deprecated: the pipeline compiler is :mod:`ignite_tf.pipeline` (``from ignite_tf.pipeline import load_dags``).

This alias keeps DAG files written against ``ignite_tf.dags`` working for one more release; importing it warns.
"""

from __future__ import annotations

import warnings

from ignite_tf.pipeline import SpecWarning, load_dags

__all__ = ["SpecWarning", "load_dags"]

warnings.warn("ignite_tf.dags is deprecated: import load_dags from ignite_tf.pipeline", DeprecationWarning,
              stacklevel=2)
