"""TFClusterSensor: wait for a TensorFlow cluster started elsewhere (``wait_for_completion=False``)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator

from ignite_tf.connection import DEFAULT_CONN_ID
from ignite_tf.defaults import DEFAULT_POLL_INTERVAL
from ignite_tf.operators.base import WaitsForCluster


class TFClusterSensor(WaitsForCluster, BaseSensorOperator):
    """Succeeds with the cluster's final metrics; fails with the exit reason and the chief's last lines.

    It only watches: clearing the sensor, marking it failed or successful, or its own timeout never stops the
    cluster; the task that launched it (or ``ignite-tf stop``) does.

    :param cluster_id: the cluster (templated, e.g. ``{{ ti.xcom_pull('train', key='cluster_id') }}``).
    :param ignite_conn_id: connection whose Ignite holds the cluster state.
    :param deferrable: wait in the triggerer (default).
    :param poll_interval: seconds between state polls (also the ``poke_interval`` when not deferred).
    :param run_store_conn_id: the ``aws`` connection of an object-store run root: the chief's last lines of a
        failed cluster are read there with its credentials (None: the environment's, as for the operators).
    """

    template_fields: Sequence[str] = ("cluster_id",)

    def __init__(self, *, cluster_id: str, ignite_conn_id: str = DEFAULT_CONN_ID, deferrable: bool = True,
                 poll_interval: float = DEFAULT_POLL_INTERVAL, run_store_conn_id: str | None = None, **kwargs):
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        self.cluster_id, self.ignite_conn_id = cluster_id, ignite_conn_id
        self.deferrable, self.poll_interval = deferrable, poll_interval
        self.run_store_conn_id = run_store_conn_id

    def execute(self, context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        from ignite_tf.triggers.cluster_events import watcher_of
        from ignite_tf.triggers.tf_cluster import TFClusterTrigger

        self.defer(trigger=TFClusterTrigger(cluster_id=self.cluster_id, ignite_conn_id=self.ignite_conn_id,
                                            poll_interval=self.poll_interval,
                                            run_store_conn_id=self.run_store_conn_id,
                                            watcher=watcher_of(context, self.task_id), owns_cluster=False),
                   method_name="execute_complete", timeout=timedelta(seconds=self.timeout))

    def poke(self, context) -> Any:
        from airflow.sdk.bases.sensor import PokeReturnValue

        from ignite_tf.triggers.cluster_events import event_for, launcher_for

        launcher = launcher_for(self.ignite_conn_id, None, self.run_store_conn_id)
        state, alive = launcher.settled(self.cluster_id)
        if not alive:
            return PokeReturnValue(True, self.execute_complete(context, event_for(state, launcher)))
        return False
