"""Tests under real Airflow services, one set for the package (``airflow_services``)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="package")
def airflow_services(ignite_conn, tmp_path_factory):
    """Real Airflow services (API server with this project's plugins/, scheduler, DAG processor, triggerer) on a
    copy of dags/, shared by this package's modules; stopped after its last test (not at the end of the session:
    four idle Airflow processes would poll through every later test), which checks that no process and no port
    is left. Yields ``(services, root)``."""
    from tests.support.airflow_services import start_project_services

    svc, root = start_project_services(tmp_path_factory.mktemp("airflow-services"), ignite_conn)
    try:
        yield svc, root
    finally:
        svc.stop()
        pids, ports = svc.leftovers()
        assert not pids and not ports, f"Airflow left processes {pids} / listening ports {ports}"
