"""The cluster state's names where earlier releases had them (``ignite_tf.cluster.state.Status`` is in the
public API): the store and its records now live in :mod:`ignite_tf.state`, which new code imports."""

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
