"""The FastAPI app Airflow's API server mounts at ``/ignite-tf`` (registered by ``ignite_tf.ui.plugin``).

Every route needs an Airflow login: the UI's session cookie or an ``Authorization: Bearer`` token, checked by
Airflow's own ``get_user``, and a user sees the clusters of the DAGs they may read. The clusters come from the
state store of the ``ignite_default`` connection (``IGNITE_TF_UI_CONN_ID`` names another; without a connection, the
local state folder); the shard plan, validation and publish results of the same DAG run from Airflow's metadata DB
(XCom). No secret reaches the page: the connection is only used to read the state.
"""

from __future__ import annotations

import logging
import os
from typing import Annotated, Any

from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends, FastAPI, Query
from fastapi.responses import HTMLResponse, JSONResponse

from ignite_tf.connection import DEFAULT_CONN_ID
from ignite_tf.ui import page
from ignite_tf.ui.tensorboard import tensorboard_url
from ignite_tf.ui.views import RESULT_OPERATORS, cluster_view

log = logging.getLogger(__name__)
ENV_CONN_ID = "IGNITE_TF_UI_CONN_ID"
URL_PREFIX = "/ignite-tf"

app = FastAPI(title="ignite-tf", docs_url=None, redoc_url=None, openapi_url=None)
User = Annotated[Any, Depends(get_user)]


def _connection():
    """The Ignite connection the page reads cluster state through, or None (then the local state folder)."""
    from airflow.models.connection import Connection

    from ignite_tf.hooks.ignite import IgniteHook

    conn_id = os.environ.get(ENV_CONN_ID, DEFAULT_CONN_ID)
    try:
        return IgniteHook.config_from_connection(Connection.get_connection_from_secrets(conn_id))
    except Exception as exc:  # noqa: BLE001 - no connection: show the local state folder
        log.info("ignite-tf page: connection %s not usable (%s); using the local state folder", conn_id, exc)
        return None


def run_results(dag_id: str, run_id: str) -> dict[str, Any]:
    """``{"plan"|"validation"|"publish": return value}`` of the DAG run's ignite-tf stage tasks (XCom)."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    out: dict[str, Any] = {}
    with create_session() as session:
        tis = session.execute(select(TaskInstance.task_id, TaskInstance.operator).where(
            TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id,
            TaskInstance.operator.in_(list(RESULT_OPERATORS)))).all()
        kinds = {task_id: RESULT_OPERATORS[op] for task_id, op in tis}
        if not kinds:
            return out
        rows = session.scalars(select(XComModel).where(
            XComModel.dag_id == dag_id, XComModel.run_id == run_id, XComModel.key == "return_value",
            XComModel.task_id.in_(list(kinds)))).all()
        for row in rows:
            out[kinds[row.task_id]] = XComModel.deserialize_value(row)
    return out


def readable_dags(user) -> set[str] | None:
    """The DAG ids this user may read (Airflow's auth manager); None when it cannot say."""
    try:
        from airflow.api_fastapi.app import get_auth_manager

        return set(get_auth_manager().get_authorized_dag_ids(user=user, method="GET"))
    except Exception as exc:  # noqa: BLE001
        log.warning("ignite-tf page: readable DAGs unknown: %s", exc)
        return None


def gather(cluster: str | None = None, limit: int = 20,
           dags: set[str] | None = None) -> tuple[list[dict[str, Any]], str, str]:
    """(views newest first, where the state came from, an error to show). ``dags``: the DAGs whose clusters
    the user may see (clusters started outside Airflow are shown to every logged-in user)."""
    from ignite_tf.cluster.api import make_launcher

    conn = _connection()
    launcher = make_launcher(conn)
    store = launcher.store
    try:
        states = [store.require(cluster)] if cluster else store.list()[::-1]
        if dags is not None:
            states = [s for s in states if not s.labels.get("dag_id") or s.labels["dag_id"] in dags]
        states = states[:limit]
        views = []
        for state in states:
            labels = state.labels
            results: dict[str, Any] = {}
            if labels.get("dag_id") and labels.get("run_id"):
                try:
                    results = run_results(labels["dag_id"], labels["run_id"])
                except Exception as exc:  # noqa: BLE001 - the cluster is still worth showing
                    log.warning("ignite-tf page: XComs of %s/%s unreadable: %s", labels["dag_id"], labels["run_id"],
                                exc)
            views.append(cluster_view(state, alive=launcher.is_alive(state), results=results))
        return views, store.describe(), ""
    except Exception as exc:  # noqa: BLE001 - show the error on the page, not a bare 500
        log.exception("ignite-tf page: cluster state unreadable")
        return [], store.describe(), f"cluster state unreadable from {store.describe()}: {exc}"
    finally:
        store.close()


@app.get("/", response_class=HTMLResponse)
def clusters_page(user: User, cluster: Annotated[str | None, Query()] = None,
                  limit: Annotated[int, Query(ge=1, le=200)] = 20) -> HTMLResponse:
    views, source, error = gather(cluster, limit, readable_dags(user))
    return HTMLResponse(page.render(views, source=source, tensorboard_for=tensorboard_url, error=error))


@app.get("/api/clusters")
def clusters_json(user: User, cluster: Annotated[str | None, Query()] = None,
                  limit: Annotated[int, Query(ge=1, le=200)] = 20) -> JSONResponse:
    views, source, error = gather(cluster, limit, readable_dags(user))
    for view in views:
        view.pop("charts")
    return JSONResponse({"source": source, "error": error, "clusters": views})
