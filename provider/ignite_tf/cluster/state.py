"""Deprecated: the cluster-state store and its records are :mod:`ignite_tf.state`
(``from ignite_tf.state import Status``).

This alias keeps imports of ``ignite_tf.cluster.state`` working until ``public_api.REMOVED_IN``; importing it
warns.
"""

from ignite_tf.public_api import warn_deprecated
from ignite_tf.state import (
    EVALUATION,
    LIVE_TASK_STATES,
    LOST_AFTER_S,
    ClusterState,
    ExitCode,
    IgniteStateStore,
    LocalStateStore,
    StateStore,
    Status,
    TaskState,
    TaskStatus,
    default_state_dir,
    open_store,
    store_from_env,
    store_to_env,
)

__all__ = ["EVALUATION", "LIVE_TASK_STATES", "LOST_AFTER_S", "ClusterState", "ExitCode", "IgniteStateStore",
           "LocalStateStore", "StateStore", "Status", "TaskState", "TaskStatus", "default_state_dir", "open_store",
           "store_from_env", "store_to_env"]

warn_deprecated("ignite_tf.cluster.state")
