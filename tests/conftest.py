"""Shared fixtures: a real 2-node Ignite cluster for the whole session, stopped by pid at the end."""

from __future__ import annotations

import os
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
from ignite_tf.local_ignite import LocalIgniteCluster, pid_alive  # noqa: E402
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


@pytest.fixture(scope="session")
def ignite_conn(ignite_cluster) -> IgniteConnectionConfig:
    """Connection to the session cluster (all nodes alive at session start)."""
    return ignite_cluster.connection()


@pytest.fixture
def ignite_client(ignite_conn):
    client = ignite_conn.client()
    yield client
    client.close()


@pytest.fixture
def cache_name() -> str:
    """A fresh cache/table name per test, so tests do not see each other's rows."""
    return f"t_{uuid.uuid4().hex[:10]}"
