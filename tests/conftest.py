"""Shared fixtures: a real 2-node Ignite cluster for the whole session, stopped by pid at the end, a secured
one (authentication, persistence, TLS) for the modules that ask for it, and clusters of a test's own."""

from __future__ import annotations

import atexit
import os
import secrets
import shutil
import tempfile
import uuid
from pathlib import Path

# Airflow writes airflow.cfg into AIRFLOW_HOME on first import: keep tests away from ~/airflow. The dags
# folder must be fixed before anything imports airflow.settings (it is read once); tests that run DAGs with
# dag.test() copy their DAG files into it.
if "AIRFLOW_HOME" not in os.environ:
    os.environ["AIRFLOW_HOME"] = tempfile.mkdtemp(prefix="ignite-tf-airflow-")
    atexit.register(shutil.rmtree, os.environ["AIRFLOW_HOME"], ignore_errors=True)  # made here, removed here
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", os.path.join(os.environ["AIRFLOW_HOME"], "dags"))
os.makedirs(os.environ["AIRFLOW__CORE__DAGS_FOLDER"], exist_ok=True)
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pytest  # noqa: E402
from ignite_tf_dev.ignite.cluster import CONNECTION_FILE, LocalIgniteCluster, pid_alive  # noqa: E402

from ignite_tf.connection import IgniteConnectionConfig  # noqa: E402
from ignite_tf.errors import IgniteTFError  # noqa: E402
from tests.support.k8s import k8s_cluster, k8s_ignite, k8s_namespace  # noqa: E402, F401 - the local Kubernetes fixtures
from tests.support.objstore import object_store, s3_bucket  # noqa: E402, F401 - the S3 server fixtures

pytest_plugins = ["tests.support.tiers"]  # tiers from what a test uses, the time budget, the SLOW registry

_SESSION_CLUSTER: list[LocalIgniteCluster] = []  # the session cluster, once a test has asked for it


def _session_caches() -> set[str]:
    if not _SESSION_CLUSTER:
        return set()
    client = _SESSION_CLUSTER[0].connection().client()
    try:
        return set(client.get_cache_names())
    finally:
        client.close()


@pytest.fixture(scope="module", autouse=True)
def drop_module_caches(request):
    """Destroy the caches a test module created in the session cluster when the module ends.

    Each cache holds its partitions' pages in every node's data region (1024 partitions, with a backup), so a
    session that kept all of them ran the 512 MB regions out of memory and halted the nodes. Modules that use
    the session-wide Airflow services keep theirs: later modules look at those runs."""
    before = _session_caches()
    yield
    items = [item for item in request.session.items if item.module is request.module]
    if not _SESSION_CLUSTER or any("airflow_services" in item.fixturenames for item in items):
        return
    created = _session_caches() - before
    if created:
        client = _SESSION_CLUSTER[0].connection().client()
        try:
            for name in sorted(created):
                client.get_cache(name).destroy()
        finally:
            client.close()
    left = _session_caches() & created
    assert not left, f"caches {sorted(left)} of {request.module.__name__} could not be destroyed"


@pytest.fixture(scope="session")
def ignite_cluster(tmp_path_factory):
    cluster = LocalIgniteCluster.on_free_ports(tmp_path_factory.mktemp("ignite"), "tests", die_with_parent=True)
    cluster.up(2)
    _SESSION_CLUSTER.append(cluster)
    yield cluster
    _SESSION_CLUSTER.clear()
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


class OwnIgnite:
    """The Ignite clusters of one test's own (``own_ignite``), for tests that kill, add or stop nodes."""

    def __init__(self, tmp_path_factory):
        self._tmp = tmp_path_factory
        self.clusters: list[LocalIgniteCluster | Path] = []  # a Path: a cluster adopted by its state folder

    def __call__(self, nodes: int = 2, **kwargs) -> LocalIgniteCluster:
        """``nodes`` nodes up on a free block of the ``private`` ports, killed if this process dies.

        A block found free can be taken before the JVMs bind it (parallel sessions on one machine): every
        such failure says "in use", and then another block is tried, twice at most."""
        for attempt in range(3):
            cluster = LocalIgniteCluster.on_free_ports(self._tmp.mktemp("own-ignite"), "private",
                                                       die_with_parent=True, **kwargs)
            self.clusters.append(cluster)
            try:
                cluster.up(nodes)
                return cluster
            except IgniteTFError as exc:
                if attempt == 2 or "in use" not in str(exc):
                    raise

    def adopt(self, state_dir) -> Path:
        """Stop at teardown too whatever cluster ``state_dir`` records by then (one ``make ignite-up`` starts)."""
        self.clusters.append(Path(state_dir))
        return Path(state_dir)

    def down(self) -> list[int]:
        """Stop every cluster; returns the pids their nodes had."""
        pids = []
        for entry in reversed(self.clusters):
            cluster = entry if isinstance(entry, LocalIgniteCluster) else LocalIgniteCluster.from_state(entry)
            pids += [n.pid for n in cluster.nodes]
            cluster.down()
        return pids


@pytest.fixture
def own_ignite(tmp_path_factory):
    """A factory of clusters of this test's own, apart from the shared ``ignite_cluster``:
    ``own_ignite(nodes=2, **LocalIgniteCluster kwargs)``; ``own_ignite.adopt(state_dir)`` for one started
    another way. Teardown stops them all and checks that no node is left."""
    own = OwnIgnite(tmp_path_factory)
    yield own
    left = [p for p in own.down() if pid_alive(p)]
    assert not left, f"Ignite nodes of the test's own clusters still running: {left}"


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
def run_root(tmp_path, monkeypatch) -> Path:
    """``tmp_path/runs`` as the root of the run folders of the clusters this test starts (``IGNITE_TF_RUN_ROOT``)."""
    root = tmp_path / "runs"
    monkeypatch.setenv("IGNITE_TF_RUN_ROOT", str(root))
    return root


@pytest.fixture
def cache_name() -> str:
    """A fresh cache/table name per test, so tests do not see each other's rows."""
    return f"t_{uuid.uuid4().hex[:10]}"
