"""Reads from the primary and measured locality with Ignite as pods of docker/k8s/ignite.yaml (the local
Kubernetes, real node; nothing simulated): every Ignite pod is found from one address, reached at its pod
address, matched to its Kubernetes node through its consistent id = pod name, and the rows a reader counts per
serving pod give the measured locality of a worker on each Kubernetes node.

The Ignite pods come from the ``k8s_ignite`` fixture (started if ``make k8s-up`` did not), reached from this
host at their pod addresses.
"""

from __future__ import annotations

import time
import uuid
from collections import Counter

import pytest

from ignite_tf.cluster.k8s import placement
from ignite_tf.cluster.k8s.settings import KubernetesSettings
from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.plan.partitions import PartitionMap
from ignite_tf.reader import servers
from ignite_tf.reader.partition import PartitionReader
from tests.support.polling import wait_for
from tests.support.sql import create_table, sql

pytestmark = pytest.mark.timeout(1800)
IGNITE_SELECTOR = "app=ignite"  # as docker/k8s/ignite.yaml labels its pods
ROWS = 6_000


def test_ignite_pods_are_found_matched_by_consistent_id_and_read_on_their_primaries(k8s_cluster, k8s_ignite):
    conn = IgniteConnectionConfig(addresses=list(k8s_ignite))
    core = k8s_cluster.core
    pods = [p for p in core.list_pod_for_all_namespaces(label_selector=IGNITE_SELECTOR).items
            if p.status.phase == "Running" and p.spec.node_name]
    assert len(pods) >= 2, f"expected the Ignite StatefulSet's pods ({IGNITE_SELECTOR}) running, got {len(pods)}"
    namespace = pods[0].metadata.namespace

    # One seed address (as a Service address would be) leads to every pod, at its pod address.
    seed = IgniteConnectionConfig(addresses=[conn.addresses[0]])
    servers.forget()
    found = servers.discover(seed)
    assert {s.consistent_id for s in found} == {p.metadata.name for p in pods}, "consistent id = pod name"
    assert {s.consistent_id: s.host for s in found} == {p.metadata.name: p.status.pod_ip for p in pods}

    # The launcher's match of Ignite nodes to Kubernetes nodes, through the pods' names.
    settings = KubernetesSettings(ignite_selector=IGNITE_SELECTOR, ignite_namespace=namespace)
    hosts = placement.ignite_node_hosts(core, list(found), settings, namespace)
    assert hosts == {p.metadata.name: p.spec.node_name for p in pods}
    # With no setting at all (the deployed shape's defaults): the pods are found by their addresses.
    assert placement.ignite_node_hosts(core, list(found), KubernetesSettings(), "default") == hosts

    table = f"K8S_LOC_{uuid.uuid4().hex[:6].upper()}"
    client = seed.client()
    try:
        create_table(client, table, range(ROWS))
        pm = PartitionMap.discover(seed, table)
        per_pod = Counter()
        for p, node in enumerate(pm.primary):
            per_pod[pm.nodes[node].consistent_id] += pm.rows[p]
        with PartitionReader(seed, table, batch_size=2048, primaries=pm.primary_addresses()) as reader:
            assert len(reader.read_all(range(pm.partitions))["id"]) == ROWS
            assert reader.node_rows() == {k: v for k, v in per_pod.items() if v}, "each pod served its primaries"
            for k8s_node in sorted(set(hosts.values())):
                measured = reader.locality(kubernetes_node=k8s_node, ignite_nodes=hosts)
                local = sum(n for pod, n in per_pod.items() if hosts[pod] == k8s_node)
                assert measured["local_rows"] == local and measured["unmatched_rows"] == 0
                assert measured["by"] == "kubernetes node" and measured["where"] == k8s_node
    finally:
        sql(client, f"DROP TABLE IF EXISTS {table}")
        client.close()


def test_an_ignite_pod_deleted_during_the_reads_loses_no_row_and_repeats_none(k8s_cluster, k8s_ignite):
    """Real: Ignite pod ignite-1 is deleted (default grace) while a reader scans a table with backups 1 on
    the primaries: the scans on it fail over to the backups, every row is read exactly once; the StatefulSet
    recreates the pod, and the test ends only when both pods are back in one cluster of 2 servers."""
    from ignite_tf_dev.k8s import addons
    from kubernetes.client.exceptions import ApiException

    core = k8s_cluster.core
    ns = addons.IGNITE_NAMESPACE
    conn = IgniteConnectionConfig(addresses=list(k8s_ignite))
    victim = core.read_namespaced_pod("ignite-1", ns)
    survivor = IgniteConnectionConfig(addresses=[k8s_ignite[0]])  # ignite-0 (pod-name order)
    table = f"K8S_FAIL_{uuid.uuid4().hex[:6].upper()}"
    rows = 20_000
    client = conn.client()
    try:
        create_table(client, table, range(rows), backups=1)
        pm = PartitionMap.discover(conn, table)
        seen: list[int] = []
        with PartitionReader(conn, table, batch_size=128, primaries=pm.primary_addresses(),
                             failover_timeout=120) as reader:
            for n, batch in enumerate(reader.batches(range(pm.partitions))):
                seen.extend(int(k) for k in batch["id"])
                if n == 20:  # about an eighth of the rows read: delete the pod, read on once it has left
                    deleted = time.monotonic()
                    core.delete_namespaced_pod("ignite-1", ns)
                    wait_for(lambda: _servers(survivor) == 1, 120, "ignite-1 to leave the Ignite cluster", poll=0.2)
                    print(f"ignite-1 deleted -> left the cluster: {time.monotonic() - deleted:.1f}s")
            served = reader.node_rows()
        print(f"read {len(seen)} rows; served by {served}")
        assert len(seen) == rows and set(seen) == set(range(rows)), "every row exactly once"
        own = sum(r for p, r in enumerate(pm.rows) if pm.nodes[pm.primary[p]].consistent_id == "ignite-0")
        assert served.get("ignite-0", 0) > own, "ignite-0 served none of ignite-1's partitions: no read after the loss"
    finally:
        def back() -> bool:
            try:
                pod = core.read_namespaced_pod("ignite-1", ns)
            except ApiException:
                return False
            return pod.metadata.uid != victim.metadata.uid

        wait_for(back, 300, "ignite-1 recreated", poll=1)
        # Idempotent: waits for 2 Ready pods that see 2 servers each. The new pod may have a new address:
        # the session's list is updated for the tests after this one.
        k8s_ignite[:] = addons.deploy_ignite(k8s_cluster.layout, timeout=300)
        # The first client's connection to the deleted pod is broken (pyignite raises on its next use, seen
        # in CI): the table is dropped through a client of the pods as they are now.
        client.close()
        fresh = IgniteConnectionConfig(addresses=list(k8s_ignite)).client()
        try:
            sql(fresh, f"DROP TABLE IF EXISTS {table}")
        finally:
            fresh.close()


def _servers(conn: IgniteConnectionConfig) -> int:
    """How many server nodes the Ignite node at ``conn`` sees (-1 while it does not answer)."""
    try:
        client = conn.client()
    except Exception:  # noqa: BLE001 - not reachable at this moment
        return -1
    try:
        return int(sql(client, "SELECT COUNT(*) FROM SYS.NODES WHERE IS_CLIENT = FALSE")[0][0])
    except Exception:  # noqa: BLE001
        return -1
    finally:
        client.close()
