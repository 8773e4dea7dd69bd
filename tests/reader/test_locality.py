"""Reads from the primary, locality measured, against the session's real 2-node Ignite cluster.

- every server's address is found from one seed address (SYS.NODES + the nodes' clientListenerPort);
- a reader given that one address scans every partition on its primary node: the rows it counts per serving
  node equal the rows the partition map puts on each primary;
- what a worker read is measured (rows per serving node; the share from an Ignite node on its own host, or, in
  a pod, its own Kubernetes node) and shows in the cluster state, the shard plan and the UI page.

Nothing is simulated here but the Kubernetes node names of the second test of ``measure`` (the nodes run on
this host; the map of Ignite pods to Kubernetes nodes is given, as the launcher records it). The live match of
Ignite pods to Kubernetes nodes is tests/cluster/k8s/test_locality.py (marked k8s).
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from ignite_tf import data
from ignite_tf.cluster.api import make_launcher, start_cluster
from ignite_tf.cluster.k8s import objects, placement
from ignite_tf.cluster.k8s.settings import KubernetesSettings, Placement
from ignite_tf.cluster.spec import build_spec
from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.contract import ENV_CLUSTER_ID
from ignite_tf.plan.partitions import PartitionMap
from ignite_tf.plan.shards import ShardPlan, next_to_nodes
from ignite_tf.reader import partition as reader_module
from ignite_tf.reader import servers
from ignite_tf.reader.locality import ENV_NODE_NAME, combine, is_this_host, measure
from ignite_tf.reader.partition import PartitionReader
from ignite_tf.state import ClusterState, IgniteStateStore, LocalStateStore, Status, store_to_env
from ignite_tf.ui import page, views
from tests.support.clusters import assert_nothing_left
from tests.support.sql import create_table, sql

ROWS = 30_000


@pytest.fixture(scope="module")
def table(ignite_conn):
    client = ignite_conn.client()
    try:
        create_table(client, "LOCALITY_T", range(ROWS))
    finally:
        client.close()
    return "LOCALITY_T"


@pytest.fixture
def seed(ignite_conn) -> IgniteConnectionConfig:
    """The session cluster reached through one address only (as a Kubernetes Service would be)."""
    servers.forget()
    return IgniteConnectionConfig(addresses=[ignite_conn.addresses[-1]])


def _primary_rows(pm: PartitionMap) -> dict[str, int]:
    per = Counter()
    for p, node in enumerate(pm.primary):
        per[pm.nodes[node].consistent_id] += pm.rows[p]
    return {k: v for k, v in per.items() if v}


def test_every_server_is_found_from_one_seed_address(ignite_conn, ignite_client, seed):
    found = servers.discover(seed)
    listed = sql(ignite_client, "SELECT NODE_ID, CONSISTENT_ID FROM SYS.NODES WHERE IS_CLIENT = FALSE")
    assert {(s.node_id, s.consistent_id) for s in found} == {(str(n), c) for n, c in listed}
    assert {s.address for s in found} == set(ignite_conn.addresses), "both nodes' thin-client addresses"
    widened = servers.all_servers(seed)
    assert set(widened.addresses) == set(ignite_conn.addresses) and seed.addresses == (ignite_conn.addresses[-1],)
    client, by_id = servers.connect(seed)
    try:
        assert {str(c.uuid) for c in client._nodes if c.alive} == set(by_id) == {s.node_id for s in found}
    finally:
        client.close()
    # A seed that is not a server is skipped; the seeds work as before when nothing better is known.
    bad_first = IgniteConnectionConfig(addresses=["127.0.0.1:1", ignite_conn.addresses[0]])
    assert set(servers.all_servers(bad_first).addresses) == set(ignite_conn.addresses)


def test_every_partition_is_read_from_its_primary_through_one_seed(seed, table):
    pm = PartitionMap.discover(seed, table)
    assert {n.address for n in pm.nodes.values()} == {f"{h}:{p}" for h, p in servers.all_servers(seed).addresses}
    expected = _primary_rows(pm)
    assert len(expected) == 2 and sum(expected.values()) == ROWS
    for routes in ({"primaries": pm.primary_addresses()}, {}):  # the plan's routes, or the cluster's affinity
        with PartitionReader(seed, table, batch_size=4096, **routes) as reader:
            got = reader.read_all(range(pm.partitions))
            assert len(got["id"]) == ROWS and len(set(got["id"].tolist())) == ROWS
            assert reader.node_rows() == expected, "each node served exactly the rows of its primaries"
            assert reader.stats["failovers"] == 0


def test_a_connection_to_every_server_reads_no_slower_than_one_seed(seed, table, monkeypatch):
    """Reading the whole table through the seed alone (every scan forwarded by that node, as before) and with a
    connection to each server (what a partition-aware client given every server's address holds: one socket
    per node), interleaved 5 times. Every server measured about 1.4 times faster (best of each); the machine is
    shared and both nodes run on it, so the bound is loose: no more than 1.5 times slower than the seed alone."""
    pm = PartitionMap.discover(seed, table)
    every_server = reader_module._servers.connect

    def seed_only(conn, refresh=False):
        return conn.client(), {}

    def once(connect) -> float:
        monkeypatch.setattr(reader_module._servers, "connect", connect)
        start = time.perf_counter()
        with PartitionReader(seed, table, batch_size=8192, primaries=pm.primary_addresses()) as reader:
            assert len(reader.read_all(range(pm.partitions))["id"]) == ROWS
        return time.perf_counter() - start

    times = {"one seed connection": [], "a connection to every server": []}
    for _ in range(5):
        times["one seed connection"].append(once(seed_only))
        times["a connection to every server"].append(once(every_server))
    shown = "; ".join(f"{k} median {sorted(v)[2]:.3f} s, best {min(v):.3f} s" for k, v in times.items())
    assert min(times["a connection to every server"]) < 1.5 * min(times["one seed connection"]), shown


def test_measured_locality_by_host_and_by_kubernetes_node(seed, table):
    pm = PartitionMap.discover(seed, table)
    with PartitionReader(seed, table, batch_size=4096) as reader:
        reader.read_all(range(pm.partitions))
        here = reader.locality()
        pods = reader.locality(kubernetes_node="kn-a", ignite_nodes={"node-0": "kn-a"})
    rows = _primary_rows(pm)
    # Local nodes: every row came from an Ignite node on this host.
    assert here["by"] == "host" and here["rows"] == ROWS and here["local_rows"] == ROWS and here["locality"] == 1.0
    assert here["by_node"] == rows
    # In a pod on kn-a, with node-0's pod on kn-a and node-1 not matched: only node-0's rows are local.
    assert pods["by"] == "kubernetes node" and pods["where"] == "kn-a"
    assert pods["local_rows"] == rows["node-0"] and pods["unmatched_rows"] == rows["node-1"]
    assert pods["locality"] == round(rows["node-0"] / ROWS, 4)
    assert is_this_host("127.0.0.1") and is_this_host("localhost") and not is_this_host("192.0.2.250")
    remote = measure({"node-0": 10}, {"node-0": "192.0.2.250"})
    assert remote["local_rows"] == 0 and remote["locality"] == 0.0
    unknown = measure({"node-0": 10}, {"node-0": "10.1.0.5"}, kubernetes_node="kn-a", ignite_nodes=None)
    assert unknown["locality"] is None and unknown["unmatched_rows"] == 10, "no map of Ignite pods: unknown, not 0"
    assert combine(unknown)["locality"] is None and combine(unknown, remote)["locality"] == 0.0


@pytest.mark.parametrize("store_kind", ["local", "ignite"])
def test_a_workers_reads_reach_the_state_the_plan_and_the_page(seed, table, tmp_path, monkeypatch, store_kind):
    pm = PartitionMap.discover(seed, table)
    plan = ShardPlan.build(pm, 2, worker_hosts=next_to_nodes(pm, 2))
    store = LocalStateStore(tmp_path / "state") if store_kind == "local" else IgniteStateStore(seed)
    cluster_id = f"tf-loc-{store_kind}-{int(time.time() * 1000) % 10**8}"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    plan.save(run_dir / "shard_plan.json")
    store.put(ClusterState(cluster_id, table, "sync", str(run_dir)))
    monkeypatch.setenv(ENV_CLUSTER_ID, cluster_id)
    monkeypatch.delenv(ENV_NODE_NAME, raising=False)
    for key, value in store_to_env(store).items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("IGNITE_TF_ADDRESSES", seed.addresses_str)
    try:
        read = {w: 0 for w in range(2)}
        for epoch in range(2):
            for worker in range(2):
                for block in data.blocks(epoch, worker=worker, plan=plan, conn=seed, batch_size=256):
                    read[worker] += len(block["id"])
        state = store.require(cluster_id)
        assert [r["worker"] for r in state.reads] == [0, 1]
        assert [r["rows"] for r in state.reads] == [read[0], read[1]] and sum(read.values()) == 2 * ROWS
        assert all(r["passes"] == 2 and r["local_rows"] == r["rows"] and r["by"] == "host" for r in state.reads)
        total = state.measured_locality
        assert total["rows"] == 2 * ROWS and total["locality"] == 1.0
        assert total["by_node"] == {k: 2 * v for k, v in _primary_rows(pm).items()}
        assert state.summary()["locality"]["locality"] == 1.0
        # The shard plan: planned share per worker with the measured one beside it.
        text = plan.describe(0, measured=state.reads)
        assert "measured" in text and "measured 1.00 of 60000 rows read" in text
        # The page: the measured block beside the plan's share.
        view = views.cluster_view(state, alive=True)
        assert view["locality"]["measured"] == 1.0 and view["locality"]["planned"] == view["plan"]["locality"]
        assert [w["measured"] for w in view["locality"]["workers"]] == [1.0, 1.0]
        html = page.cluster_section(view, "http://tb")
        assert "measured locality <b>100%</b> of 60,000 rows read (same host)" in html
        assert 'class="locality"' in html and "node-0" in html
        store.delete(cluster_id)
        assert store.reads(cluster_id) == []
    finally:
        store.close()


def test_placement_records_ignite_nodes_and_shows_measured_beside_planned(seed, table):
    pm = PartitionMap.discover(seed, table)
    plan = ShardPlan.build(pm, 2, worker_hosts=next_to_nodes(pm, 2))
    hosts = {"node-0": "kn-a", "node-1": "kn-b"}
    result = placement.achieved(plan, placement.wanted_nodes(plan, hosts), ["kn-a", "kn-a"], Placement.REQUIRED)
    assert result["ignite_nodes"] == {h: hosts[h] for h in plan.worker_hosts}
    reads = [{"worker": 0, "rows": 10, "local_rows": 10, "locality": 1.0},
             {"worker": 1, "rows": 10, "local_rows": 0, "locality": 0.0}]
    shown = placement.measured(result, reads)
    assert shown["measured_locality"] == 0.5 and [w["measured"] for w in shown["workers"]] == [1.0, 0.0]
    text = placement.describe(shown)
    assert "% of rows read locally as planned" in text and "50.0% measured" in text
    assert combine(None) is None


def test_worker_pods_know_their_kubernetes_node():
    spec = build_spec(cluster_id="tf-x1", cache="c", mode="sync", workers=1, run_dir="/runs/tf-x1",
                      job={"entry_point": "ignite_tf.models:tabular_classifier"})
    spec = objects.with_pod_addresses(spec, "ns1", KubernetesSettings())
    pod = objects.pod_manifest(spec, spec.tasks[0], 0, namespace="ns1", settings=KubernetesSettings(), image="i:1",
                               owner={"metadata": {"name": "o", "uid": "u"}}, argv=["python", "x.py"], cwd="/w",
                               env={"A": "1"}, node=None, memory="1Gi")
    env = pod["spec"]["containers"][0]["env"]
    assert {"name": ENV_NODE_NAME, "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in env
    assert {"name": "A", "value": "1"} in env


# A user job without TensorFlow: listens on its TF_CONFIG port (the supervisor's readiness check), reads its
# shard of two epochs through ignite_tf.data and exits.
READ_JOB = """
import json, os, socket
from ignite_tf import data

cfg = json.loads(os.environ["TF_CONFIG"])
role, index = cfg["task"]["type"], cfg["task"]["index"]
host, port = cfg["cluster"][role][index].rsplit(":", 1)
server = socket.socket()
server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
server.bind((host, int(port)))
server.listen()
rows = sum(len(b["id"]) for epoch in range(2) for b in data.batches(epoch, batch_size=500))
print(f"{role}-{index} read {rows} rows", flush=True)
"""


def test_launched_workers_measure_their_reads_into_the_cluster_state(seed, table, tmp_path, run_root):
    """Two real worker processes started by the local launcher with one seed address: each reads its shard of
    two epochs, from the primaries, and its measured reads reach the cluster state."""
    (tmp_path / "job").mkdir()
    (tmp_path / "job" / "readjob.py").write_text(READ_JOB)
    launcher = make_launcher(seed)
    state = start_cluster(table, {"command": [sys.executable, "readjob.py"], "job_dir": str(tmp_path / "job")},
                          conn=seed, launcher=launcher, workers=2, mode="sync")
    final = launcher.wait(state.cluster_id, timeout=180)
    out = launcher.output(state.cluster_id)[0]
    assert final.status is Status.SUCCEEDED, out[-2000:]
    plan = ShardPlan.load(Path(final.run_dir) / "shard_plan.json")
    planned = [plan.shard(w, 0).rows + plan.shard(w, 1).rows for w in range(2)]
    assert [(r["worker"], r["rows"], r["passes"]) for r in final.reads] == [(0, planned[0], 2), (1, planned[1], 2)]
    assert f"worker-0 read {planned[0]} rows" in out, out[-2000:]  # the chief's output (sync: worker-0)
    total = final.measured_locality
    assert total["rows"] == 2 * ROWS and total["locality"] == 1.0 and total["by"] == "host"
    assert total["by_node"] == {k: 2 * v for k, v in _primary_rows(plan.partition_map).items()}
    assert final.summary()["locality"]["local_rows"] == 2 * ROWS
    assert_nothing_left(state.cluster_id, final.run_dir)
