"""The TensorFlow clusters an Airflow task starts or waits for: their launcher from an Ignite connection id,
and how a cluster's end becomes a trigger event and then the task's result.

The TFClusterOperator, the TFClusterSensor and the TFClusterTrigger share these, so the three agree on what
an ended cluster looks like.
"""

from __future__ import annotations

from typing import Any


def launcher_for(ignite_conn_id: str | None, state_dir: str | None = None, run_store_conn_id: str | None = None):
    """The launcher of the clusters whose state the connection's Ignite holds (``state_dir``: a local store);
    it reads an object-store run (the chief's log) with ``run_store_conn_id``'s credentials."""
    from ignite_tf.cluster.api import make_launcher
    from ignite_tf.state import LocalStateStore

    conn = None
    if ignite_conn_id:
        from ignite_tf.hooks.ignite import IgniteHook

        conn = IgniteHook(ignite_conn_id).get_config()
    store = LocalStateStore(state_dir) if state_dir else None
    return make_launcher(conn, store=store, run_store_conn_id=run_store_conn_id)


def watcher_of(context, task_id: str) -> str:
    """The watcher a task's trigger records its offset in the chief's output under: the task try, whose log is
    one set of files (a retry's log gets the chief's output from its start again)."""
    ti = context["ti"]
    return "/".join(str(part) for part in (context["dag"].dag_id, context["run_id"], task_id,
                                           getattr(ti, "map_index", -1), ti.try_number))


def event_for(state, launcher) -> dict[str, Any]:
    """The trigger's event for a cluster that has ended (or lost its supervisor)."""
    from ignite_tf.state import Status

    ok = state.status is Status.SUCCEEDED
    reason = state.reason or ("supervisor lost" if not state.status.final else state.status.value)
    return {
        "status": "success" if ok else "error",
        "cluster_id": state.cluster_id,
        "message": reason,
        "summary": state.summary(),
        "tail": "" if ok else launcher.tail(state.cluster_id, 30),
    }


def result_of(event: dict[str, Any]) -> dict[str, Any]:
    """The cluster's summary from its event; AirflowException with the reason and the chief's last lines, an
    ``AirflowFailException`` (no retry) when the data cannot be trained on: a retry would read the same rows."""
    from airflow.sdk.exceptions import AirflowException, AirflowFailException

    from ignite_tf.state import ExitCode

    if event.get("status") != "success":
        data = (event.get("summary") or {}).get("exit_code") == ExitCode.DATA_INVALID
        raise (AirflowFailException if data else AirflowException)(
            f"TensorFlow cluster {event.get('cluster_id')} failed: {event.get('message')}\n"
            f"last lines of the chief's output:\n{event.get('tail', '')}")
    return event["summary"]
