"""The cluster-state store: what a supervisor is running and what its tasks report, readable by ``ps`` /
``attach`` / ``stop``, a retry, a trigger or the UI in any other process.

- ``kv.py``: ``KeyValueStore``, the one primitive (get, put, put-if-absent, replace-if-equals, keys, delete over
  key spaces of JSON values), with two backends: ``files.py`` (a folder per space, for one host) and
  ``ignite.py`` (the system caches ``ignite_tf_sys_*`` on the Ignite cluster, with a backup);
- ``records.py``: the records (``ClusterState``, ``TaskState``, ``Status``, ``TaskStatus``, ``ExitCode``);
- ``store.py``: ``StateStore``, the records over a ``KeyValueStore`` (a cluster's state, stop requests, claims,
  epochs, the evaluation, reads, watch offsets), ``LocalStateStore`` and ``IgniteStateStore``; which store a
  process uses (``open_store``, ``store_to_env``, ``store_from_env``);
- ``reports.py``: ``TaskReports``, what a training task writes (its epochs, its reads, the evaluation), the
  task side's one door to the store.

Importing this package imports neither pyignite nor TensorFlow.
"""

from ignite_tf.state.records import (
    LIVE_TASK_STATES,
    LOST_AFTER_S,
    ClusterState,
    ExitCode,
    Status,
    TaskState,
    TaskStatus,
)
from ignite_tf.state.store import (
    EVALUATION,
    IgniteStateStore,
    LocalStateStore,
    StateStore,
    default_state_dir,
    open_store,
    store_from_env,
    store_to_env,
)

__all__ = ["EVALUATION", "LIVE_TASK_STATES", "LOST_AFTER_S", "ClusterState", "ExitCode", "IgniteStateStore",
           "LocalStateStore", "StateStore", "Status", "TaskState", "TaskStatus", "default_state_dir", "open_store",
           "store_from_env", "store_to_env"]
