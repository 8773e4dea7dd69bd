"""TFClusterSensor: wait for a TensorFlow cluster started elsewhere (``wait_for_completion=False``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator
from airflow.sdk.exceptions import AirflowException

from ignite_tf.defaults import DEFAULT_POLL_INTERVAL


class TFClusterSensor(BaseSensorOperator):
    """Succeeds with the cluster's final metrics; fails with the exit reason and the chief's last lines.

    :param cluster_id: the cluster (templated, e.g. ``{{ ti.xcom_pull('train', key='cluster_id') }}``).
    :param ignite_conn_id: connection whose Ignite holds the cluster state.
    :param deferrable: wait in the triggerer (default).
    :param poll_interval: seconds between polls of the cluster's state.
    """

    template_fields: Sequence[str] = ("cluster_id",)

    def __init__(self, *, cluster_id: str, ignite_conn_id: str = "ignite_default", deferrable: bool = True,
                 poll_interval: float = DEFAULT_POLL_INTERVAL, **kwargs):
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        self.cluster_id, self.ignite_conn_id = cluster_id, ignite_conn_id
        self.deferrable, self.poll_interval = deferrable, poll_interval

    def execute(self, context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        from ignite_tf.triggers.tf_cluster import TFClusterTrigger

        self.defer(trigger=TFClusterTrigger(cluster_id=self.cluster_id, ignite_conn_id=self.ignite_conn_id,
                                            poll_interval=self.poll_interval),
                   method_name="execute_complete", timeout=timedelta(seconds=self.timeout))

    def poke(self, context) -> Any:
        from airflow.sdk.bases.sensor import PokeReturnValue

        from ignite_tf.triggers.tf_cluster import event_for, launcher_for

        launcher = launcher_for(self.ignite_conn_id, None)
        state, alive = launcher.settled(self.cluster_id)
        if not alive:
            return PokeReturnValue(True, self.execute_complete(context, event_for(state, launcher)))
        return False

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        if event.get("status") != "success":
            raise AirflowException(
                f"TensorFlow cluster {event.get('cluster_id')} failed: {event.get('message')}\n"
                f"last lines of the chief's output:\n{event.get('tail', '')}")
        return event["summary"]
