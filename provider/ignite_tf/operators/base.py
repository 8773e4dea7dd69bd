"""What every ignite-tf operator shares: the Ignite connection id and JSON-able results."""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator


class IgniteTFOperator(BaseOperator):
    """Base of ignite-tf operators.

    :param ignite_conn_id: Airflow connection of type ``ignite`` (addresses, credentials, SSL).
    """

    def __init__(self, *, ignite_conn_id: str = "ignite_default", **kwargs):
        super().__init__(**kwargs)
        self.ignite_conn_id = ignite_conn_id

    @cached_property
    def conn(self):
        """The connection's IgniteConnectionConfig (its password is never logged)."""
        from ignite_tf.hooks.ignite import IgniteHook

        return IgniteHook(self.ignite_conn_id).get_config()


class WaitsForCluster:
    """``execute_complete`` of the tasks that wait for a TensorFlow cluster (``TFClusterOperator``,
    ``TFClusterSensor``): the cluster's summary, or AirflowException naming why it failed."""

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        from ignite_tf.hooks.tf_cluster import result_of

        summary = result_of(event)
        self.log.info("TensorFlow cluster %s succeeded: %s", event["cluster_id"], summary.get("metrics"))
        return summary


def as_dict(value: Any) -> dict:
    """An upstream XCom value that may arrive as a dict or as a JSON string (templated)."""
    import json

    if isinstance(value, str):
        return json.loads(value)
    return dict(value)


def run_dir_for(context, root: str | None = None) -> str:
    """The DAG run's directory for results (validation, logs): ``<run root>/<dag_id>/<run_id>``."""
    import re
    from pathlib import Path

    from ignite_tf.cluster.run_folder import default_run_root

    dag_id = context["dag"].dag_id
    run_id = re.sub(r"[^A-Za-z0-9_.-]+", "_", context["run_id"])
    path = Path(root) if root else default_run_root()
    path = path / dag_id / run_id
    path.mkdir(parents=True, exist_ok=True)
    return str(path)
