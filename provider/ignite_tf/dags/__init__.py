"""Deprecated: the pipeline compiler is :mod:`ignite_tf.pipeline` (``from ignite_tf.pipeline import load_dags``).

This alias keeps DAG files written against ``ignite_tf.dags`` working until ``public_api.REMOVED_IN``;
importing it warns.
"""

from __future__ import annotations

from ignite_tf.pipeline import SpecWarning, load_dags
from ignite_tf.public_api import warn_deprecated

__all__ = ["SpecWarning", "load_dags"]

warn_deprecated("ignite_tf.dags")
