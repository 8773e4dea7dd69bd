"""PartitionMap against real Ignite nodes: layout, row counts, JSON, and topology changes."""

from __future__ import annotations

import pytest

from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.errors import CacheNotFoundError, TopologyChangedError
from ignite_tf.plan.partitions import PartitionMap
from tests.support.polling import wait_for
from tests.support.sql import create_table

# A node still joining or leaving may fail the discovery's SQL for a while: that is "not yet".
JOINING = (Exception,)


def scan_counts(client, cache: str, partitions: int) -> list[int]:
    c = client.get_cache(cache)
    counts = []
    for p in range(partitions):
        with c.scan(page_size=1000, partitions=p) as cursor:
            counts.append(sum(1 for _ in cursor))
    return counts


def test_discover_layout_and_rows(ignite_conn, ignite_client, cache_name):
    keys = [k * 7919 - 3000 for k in range(1500)]  # negative keys too: the SQL partition formula must hold
    create_table(ignite_client, cache_name, keys, template="ignite_tf_small")
    pm = PartitionMap.discover(ignite_conn, cache_name)

    assert pm.partitions == 8 and pm.backup_count == 1
    assert len(pm.nodes) == 2
    assert all(n.port for n in pm.nodes.values())
    for p in range(pm.partitions):
        assert pm.primary[p] in pm.nodes
        assert len(pm.backups[p]) == 1 and pm.backups[p][0] != pm.primary[p]
    # Row counts computed on the server equal what a scan of each partition returns.
    assert pm.rows == scan_counts(ignite_client, cache_name, pm.partitions)
    assert pm.total_rows == len(keys)
    assert pm.key_column == "id"
    text = pm.summary()
    assert f"cache '{cache_name}'" in text and "1500 rows" in text


def test_default_table_has_1024_partitions_spread_over_nodes(ignite_conn, ignite_client, cache_name):
    create_table(ignite_client, cache_name, range(3000))
    pm = PartitionMap.discover(ignite_conn, cache_name)
    assert pm.partitions == 1024
    assert pm.total_rows == 3000
    per_node = {n: len(pm.partitions_of(n)) for n in pm.nodes}
    assert sum(per_node.values()) == 1024 and min(per_node.values()) > 300
    sample = [p for p in range(1024) if pm.rows[p]][:20]
    counts = scan_counts(ignite_client, cache_name, max(sample) + 1)
    assert [counts[p] for p in sample] == [pm.rows[p] for p in sample]


def test_json_round_trip(ignite_conn, ignite_client, cache_name):
    create_table(ignite_client, cache_name, range(100), template="ignite_tf_small")
    pm = PartitionMap.discover(ignite_conn, cache_name)
    back = PartitionMap.from_json(pm.to_json())
    assert back == pm
    assert back.primary_addresses() == pm.primary_addresses()


def test_missing_cache_names_the_existing_ones(ignite_conn, ignite_client, cache_name):
    create_table(ignite_client, cache_name, range(10), template="ignite_tf_small")
    with pytest.raises(CacheNotFoundError, match=r"cache 'no_such_cache' not found .*" + cache_name):
        PartitionMap.discover(ignite_conn, "no_such_cache")


def test_map_follows_nodes_joining_and_leaving(own_ignite):
    cluster = own_ignite(2)
    conn = IgniteConnectionConfig(addresses=tuple(("127.0.0.1", n.client_port) for n in cluster.nodes))
    client = conn.client()
    try:
        create_table(client, "joins", range(2000))
        before = PartitionMap.discover(conn, "joins")
        assert len(before.nodes) == 2
    finally:
        client.close()

    cluster.add_node()
    conn3 = IgniteConnectionConfig(addresses=tuple(("127.0.0.1", n.client_port) for n in cluster.nodes))

    def third_node_owns_partitions():
        pm = PartitionMap.discover(conn3, "joins")
        return pm if len(pm.nodes) == 3 and all(pm.partitions_of(n) for n in pm.nodes) else None

    from ignite_tf.plan.shards import ShardPlan

    plan = ShardPlan.build(before, 2, worker_hosts=["node-0", "node-1"])
    after = wait_for(third_node_owns_partitions, 90, "the third node to own primary partitions", poll=1.0,
                     errors=JOINING)
    assert after.total_rows == 2000
    changes = before.diff(after)
    assert any("joined" in c for c in changes) and not any("left" in c for c in changes)
    assert any("changed primary node" in c for c in changes)
    with pytest.raises(TopologyChangedError, match="joined"):
        before.check_current(conn3)

    # A plan made before the join is re-planned over the new layout, still covering every partition.
    replanned, why = plan.replan_if_changed(conn3)
    assert any("joined" in c for c in why) and replanned is not plan
    assert sorted(s.partition for sh in replanned.shards(0) for s in sh.slices) == list(range(1024))
    assert replanned.partition_map.nodes.keys() == after.nodes.keys()
    same, nothing = replanned.replan_if_changed(conn3)
    assert same is replanned and nothing == []

    cluster.stop_node(2)

    def two_nodes_again():
        pm = PartitionMap.discover(conn3, "joins")
        return pm if len(pm.nodes) == 2 and pm.total_rows == 2000 else None

    final = wait_for(two_nodes_again, 90, "the map to drop the stopped node", poll=1.0, errors=JOINING)
    assert any("left" in c for c in after.diff(final))
    assert sorted(len(final.partitions_of(n)) for n in final.nodes)[0] > 0
