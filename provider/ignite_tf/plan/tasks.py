"""Deprecated: read tasks are :mod:`ignite_tf.reader.tasks` (``from ignite_tf.reader.tasks import ReadTask``).

This alias keeps imports of ``ignite_tf.plan.tasks`` working for one more release; importing it warns.
"""

from __future__ import annotations

import warnings

from ignite_tf.reader.tasks import HASH_SPACE, ReadTask, key_hash

__all__ = ["HASH_SPACE", "ReadTask", "key_hash"]

warnings.warn("ignite_tf.plan.tasks is deprecated: import ReadTask, HASH_SPACE and key_hash from "
              "ignite_tf.reader.tasks", DeprecationWarning, stacklevel=2)
