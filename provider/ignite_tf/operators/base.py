"""What every ignite-tf operator shares: the Ignite connection id and JSON-able results."""

from __future__ import annotations

import functools
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator

from ignite_tf.connection import DEFAULT_CONN_ID
from ignite_tf.public_api import warn_deprecated


class IgniteTFOperator(BaseOperator):
    """Base of ignite-tf operators.

    :param ignite_conn_id: Airflow connection of type ``ignite`` (addresses, credentials, SSL).
    """

    def __init__(self, *, ignite_conn_id: str = DEFAULT_CONN_ID, **kwargs):
        super().__init__(**kwargs)
        self.ignite_conn_id = ignite_conn_id

    @cached_property
    def conn(self):
        """The connection's IgniteConnectionConfig (its password is never logged)."""
        from ignite_tf.hooks.ignite import IgniteHook

        return IgniteHook(self.ignite_conn_id).get_config()


def renamed_arguments(**old_to_new: str):
    """Class decorator: an operator's old argument names keep working until ``public_api.REMOVED_IN``, with a
    DeprecationWarning (each in ``public_api.DEPRECATED``).

    ``@renamed_arguments(model_name="model")`` maps ``model_name=`` to ``model=``. Applied after Airflow's
    metaclass wraps ``__init__``, so the operator's own signature (and its required arguments) is the new one;
    ``partial()`` accepts the old names too.
    """

    def decorate(cls):
        init = cls.__init__

        @functools.wraps(init)
        def __init__(self, *args, **kwargs):
            for old, new in old_to_new.items():
                if old not in kwargs:
                    continue
                if new in kwargs:
                    raise TypeError(f"{cls.__name__}: give {new}= only ({old}= is its deprecated name)")
                warn_deprecated(f"{cls.__module__}.{cls.__name__}({old}=)")
                kwargs[new] = kwargs.pop(old)
            init(self, *args, **kwargs)

        # Airflow wires XCom dependencies once, in the __init__ whose __wrapped__ is the class's own function.
        __init__.__wrapped__ = getattr(init, "__wrapped__", init)
        names = getattr(init, "_BaseOperatorMeta__param_names", None)
        if names is not None:  # what partial()/expand() check keyword arguments against
            __init__._BaseOperatorMeta__param_names = set(names) | set(old_to_new)
        __init__.renamed_arguments = dict(old_to_new)
        cls.__init__ = __init__
        return cls

    return decorate
class WaitsForCluster:
    """``execute_complete`` of the tasks that wait for a TensorFlow cluster (``TFClusterOperator``,
    ``TFClusterSensor``): the cluster's summary, or AirflowException naming why it failed."""

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        from ignite_tf.triggers.cluster_events import result_of

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
    """The DAG run's directory for results (validation, logs): ``<run root>/<dag_id>/<run_id>`` (a URL for an
    object-store run root)."""
    import re
    from pathlib import Path

    from ignite_tf.runstore.layout import default_run_root

    dag_id = context["dag"].dag_id
    run_id = re.sub(r"[^A-Za-z0-9_.-]+", "_", context["run_id"])
    root = root or default_run_root()
    if "://" in str(root):  # an object-store run root (ignite_tf.runstore): nothing to make
        return f"{str(root).rstrip('/')}/{dag_id}/{run_id}"
    path = Path(root)
    path = path / dag_id / run_id
    path.mkdir(parents=True, exist_ok=True)
    return str(path)
