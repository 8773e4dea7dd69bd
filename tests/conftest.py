"""Shared fixtures: a real 2-node Ignite cluster for the whole session, stopped by pid at the end."""

from __future__ import annotations

import os
import tempfile
import uuid

# Airflow writes airflow.cfg into AIRFLOW_HOME on first import: keep tests away from ~/airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="ignite-tf-airflow-"))
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest

from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.local_ignite import LocalIgniteCluster, pid_alive, port_free


def _free_port_bases() -> tuple[int, int, int]:
    """Client/discovery/communication port bases no other cluster on this machine uses.

    A developer's `make ignite-up` cluster (10800/47500/47100) and parallel test sessions keep apart.
    """
    fixed = os.environ.get("IGNITE_TF_TEST_PORT_OFFSET")
    offsets = [int(fixed)] if fixed else range(100, 2000, 20)
    for off in offsets:
        bases = (10800 + off, 47500 + off, 47100 + off)
        if all(port_free(b + i) for b in bases for i in range(10)):
            return bases
    raise RuntimeError("no free port range for a test Ignite cluster")


@pytest.fixture(scope="session")
def ignite_cluster(tmp_path_factory):
    client_port, disco_port, comm_port = _free_port_bases()
    cluster = LocalIgniteCluster(
        tmp_path_factory.mktemp("ignite"), client_port=client_port, disco_port=disco_port,
        comm_port=comm_port, die_with_parent=True,
    )
    cluster.up(2)
    yield cluster
    pids = [n.pid for n in cluster.nodes]
    cluster.down()
    left = [p for p in pids if pid_alive(p)]
    assert not left, f"Ignite nodes still running after the session: {left}"


@pytest.fixture(scope="session")
def ignite_conn(ignite_cluster) -> IgniteConnectionConfig:
    """Connection to the session cluster (all nodes alive at session start)."""
    return IgniteConnectionConfig(addresses=tuple(("127.0.0.1", n.client_port) for n in ignite_cluster.nodes))


@pytest.fixture
def ignite_client(ignite_conn):
    client = ignite_conn.client()
    yield client
    client.close()


@pytest.fixture
def cache_name() -> str:
    """A fresh cache/table name per test, so tests do not see each other's rows."""
    return f"t_{uuid.uuid4().hex[:10]}"
