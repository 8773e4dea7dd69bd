"""Deprecated: the run folder's layout is part of the run store, :mod:`ignite_tf.runstore.layout`.

This alias keeps imports of ``ignite_tf.cluster.run_folder`` working until ``public_api.REMOVED_IN``; importing
it warns.
"""

from ignite_tf.public_api import warn_deprecated
from ignite_tf.runstore.layout import ENV_RUN_ROOT, RunFolder, default_run_root, staging_dir

__all__ = ["ENV_RUN_ROOT", "RunFolder", "default_run_root", "staging_dir"]

warn_deprecated("ignite_tf.cluster.run_folder")
