"""Deprecated: read tasks are :mod:`ignite_tf.reader.tasks` (``from ignite_tf.reader.tasks import ReadTask``).

This alias keeps imports of ``ignite_tf.plan.tasks`` working until ``public_api.REMOVED_IN``; importing it
warns.
"""

from __future__ import annotations

from ignite_tf.public_api import warn_deprecated
from ignite_tf.reader.tasks import HASH_SPACE, ReadTask, key_hash

__all__ = ["HASH_SPACE", "ReadTask", "key_hash"]

warn_deprecated("ignite_tf.plan.tasks")
