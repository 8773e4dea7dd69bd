"""Airflow for tests: a migrated SQLite metadata DB, an ``ignite`` connection, task contexts, a run's XComs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SECRET = "s3cr3t-Ign1te-pa55"  # the connection's password: must never show up in logs, XCom or argv


def migrate_db() -> None:
    """``airflow db migrate`` into the session's AIRFLOW_HOME (set by conftest)."""
    home = Path(os.environ["AIRFLOW_HOME"])
    if (home / ".migrated").exists():
        return
    airflow = Path(sys.executable).with_name("airflow")
    proc = subprocess.run([str(airflow), "db", "migrate"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (home / ".migrated").write_text("ok")


def ignite_connection_env(conn) -> dict[str, str]:
    """``AIRFLOW_CONN_IGNITE_DEFAULT`` for the session cluster, with a login and password.

    The session's Ignite runs without authentication and ignores the credentials, but they travel
    through every path a real password would.
    """
    value = {"conn_type": "ignite", "host": conn.addresses_str, "login": "ignite", "password": SECRET}
    return {"AIRFLOW_CONN_IGNITE_DEFAULT": json.dumps(value)}


def xcoms(dag_id: str, run_id: str) -> dict[tuple[str, int, str], object]:
    """Every XCom of a DAG run in the metadata DB: ``{(task_id, map_index, key): value}``."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel).filter(XComModel.dag_id == dag_id, XComModel.run_id == run_id).all()
        return {(r.task_id, r.map_index, r.key): XComModel.deserialize_value(r) for r in rows}


class TaskContext(dict):
    """A task's context for calling ``execute`` directly (deferral and kill tests).

    ``ti`` stands in for Airflow's runtime TaskInstance: it has what the operators read (try number, map
    index) and keeps pushed XComs in a dict. Whole DAG runs in these tests go through ``dag.test()``.
    """

    def __init__(self, dag, run_id: str, try_number: int = 1):
        super().__init__(dag=dag, run_id=run_id, ti=_TI(try_number))


class _TI:
    def __init__(self, try_number: int):
        self.try_number = try_number
        self.map_index = -1
        self.xcoms: dict[str, object] = {}

    def xcom_push(self, key: str, value) -> None:
        self.xcoms[key] = value
