"""Shared fixtures: a real 2-node Ignite cluster for the whole session, stopped by pid at the end, and a
secured one (authentication, persistence, TLS) for the modules that ask for it."""

from __future__ import annotations

import os
import secrets
import tempfile
import uuid

# Airflow writes airflow.cfg into AIRFLOW_HOME on first import: keep tests away from ~/airflow. The dags
# folder must be fixed before anything imports airflow.settings (it is read once); tests that run DAGs with
# dag.test() copy their DAG files into it.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="ignite-tf-airflow-"))
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", os.path.join(os.environ["AIRFLOW_HOME"], "dags"))
os.makedirs(os.environ["AIRFLOW__CORE__DAGS_FOLDER"], exist_ok=True)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402

from ignite_tf.connection import IgniteConnectionConfig  # noqa: E402
from ignite_tf.dev.ignite.cluster import CONNECTION_FILE, LocalIgniteCluster, pid_alive  # noqa: E402
from tests.k8sutil import k8s_cluster, k8s_namespace  # noqa: E402, F401 - the local Kubernetes fixtures


@pytest.fixture(scope="session")
def ignite_cluster(tmp_path_factory):
    cluster = LocalIgniteCluster.on_free_ports(tmp_path_factory.mktemp("ignite"), "tests", die_with_parent=True)
    cluster.up(2)
    yield cluster
    pids = [n.pid for n in cluster.nodes]
    cluster.down()
    left = [p for p in pids if pid_alive(p)]
    assert not left, f"Ignite nodes still running after the session: {left}"


@pytest.fixture(scope="module")
def secure_ignite_cluster(tmp_path_factory):
    """2 nodes with authentication (hence native persistence) and TLS on the thin-client port.

    A module's own cluster, apart from the fast plain ``ignite_cluster``: user ``ignite`` gets a random
    password (``cluster.password``), the certificate is made for this cluster (``cluster.tls_files``).
    Teardown checks that no node and no persistence, certificate or connection file is left.
    """
    state = tmp_path_factory.mktemp("ignite-secure")
    cluster = LocalIgniteCluster.on_free_ports(state, "tests", auth=True, tls=True, die_with_parent=True,
                                               password=f"ItF-{secrets.token_hex(12)}")
    cluster.up(2, timeout=600)
    assert list((state / "work").glob("node-*/db")), "authentication needs persistence in the work folders"
    yield cluster
    pids = [n.pid for n in cluster.nodes]
    cluster.down()
    assert not [p for p in pids if pid_alive(p)], f"secured Ignite nodes still running: {pids}"
    left = [name for name in ("work", "tls", CONNECTION_FILE) if (state / name).exists()]
    assert not left, f"{state}: {left} left after down"


@pytest.fixture(scope="session")
def ignite_conn(ignite_cluster) -> IgniteConnectionConfig:
    """Connection to the session cluster (all nodes alive at session start)."""
    return ignite_cluster.connection()


@pytest.fixture(scope="session")
def airflow_services(ignite_conn, tmp_path_factory):
    """Real Airflow services (API server with this project's plugins/, scheduler, DAG processor, triggerer) on a
    copy of dags/, shared by the modules that need them (REST, extra links, the browser tests); stopped at the
    end of the session, which checks that no process and no port is left. Yields ``(services, root)``."""
    from tests.airflowsvc import start_project_services

    svc, root = start_project_services(tmp_path_factory.mktemp("airflow-services"), ignite_conn)
    try:
        yield svc, root
    finally:
        svc.stop()
        pids, ports = svc.leftovers()
        assert not pids and not ports, f"Airflow left processes {pids} / listening ports {ports}"


@pytest.fixture
def ignite_client(ignite_conn):
    client = ignite_conn.client()
    yield client
    client.close()


@pytest.fixture
def cache_name() -> str:
    """A fresh cache/table name per test, so tests do not see each other's rows."""
    return f"t_{uuid.uuid4().hex[:10]}"
