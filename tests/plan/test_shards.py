"""ShardPlan rules on synthetic PartitionMaps (no cluster needed: the plan is pure arithmetic)."""

from __future__ import annotations

import numpy as np
import pytest

from ignite_tf.errors import ConfigError
from ignite_tf.plan.partitions import NodeInfo, PartitionMap
from ignite_tf.plan.shards import HASH_SPACE, ShardPlan, next_to_nodes
from ignite_tf.reader.tasks import ReadTask


def make_map(rows: list[int], hosts=("h0", "h1"), seed: int | None = 1) -> PartitionMap:
    """Primaries drawn at random, or alternating over the nodes when ``seed`` is None."""
    rng = np.random.default_rng(seed)
    nodes = {f"n{i}": NodeInfo(f"n{i}", f"node-{i}", h, 10800 + i, i) for i, h in enumerate(hosts)}
    primary = [f"n{i % len(hosts) if seed is None else int(rng.integers(len(hosts)))}" for i in range(len(rows))]
    backups = [[n for n in nodes if n != p][:1] for p in primary]
    return PartitionMap("c", 1, len(rows), 1, nodes, primary, backups, list(rows))


@pytest.mark.parametrize("workers", [1, 2, 3, 7, 16])
@pytest.mark.parametrize("dist", ["uniform", "skewed", "with_empty"])
def test_whole_partitions_cover_once_and_balance(workers, dist):
    rng = np.random.default_rng(7)
    rows = {
        "uniform": rng.integers(90, 110, 1024),
        "skewed": rng.pareto(1.5, 256).astype(int) * 50 + 1,
        "with_empty": np.where(rng.random(128) < 0.3, 0, rng.integers(1, 500, 128)),
    }[dist].tolist()
    pm = make_map(rows)
    plan = ShardPlan.build(pm, workers, worker_hosts=[f"h{w % 2}" for w in range(workers)])
    for epoch in range(3):
        shards = plan.shards(epoch)
        seen = [s.partition for sh in shards for s in sh.slices]
        assert sorted(seen) == list(range(len(rows))), "every partition (empty ones too) exactly once"
        assert all(s.whole for sh in shards for s in sh.slices)
        loads = [sh.rows for sh in shards]
        assert sum(loads) == sum(rows)
        assert max(loads) - sum(rows) / workers <= max(rows), "largest worker within avg + largest partition"


def test_reshuffle_is_reproducible_and_changes_per_epoch():
    pm = make_map(list(range(1, 257)))
    a = ShardPlan.build(pm, 4, reshuffle="epoch", seed=42)
    b = ShardPlan.from_json(a.to_json())  # a "restarted run" rebuilt from the saved plan
    c = ShardPlan.build(pm, 4, reshuffle="epoch", seed=42)
    for epoch in range(4):
        assert [s.slices for s in a.shards(epoch)] == [s.slices for s in b.shards(epoch)]
        assert [s.slices for s in a.shards(epoch)] == [s.slices for s in c.shards(epoch)]
    assert [s.slices for s in a.shards(0)] != [s.slices for s in a.shards(1)]
    assert {x.partition for x in a.shard(0, 0).slices} != {x.partition for x in a.shard(0, 1).slices}
    other_seed = ShardPlan.build(pm, 4, reshuffle="epoch", seed=43)
    assert [s.slices for s in other_seed.shards(0)] != [s.slices for s in a.shards(0)]
    fixed = ShardPlan.build(pm, 4, reshuffle="none")
    assert [s.slices for s in fixed.shards(0)] == [s.slices for s in fixed.shards(5)]


def test_locality_first():
    pm = make_map([100] * 64, hosts=("h0", "h1"), seed=None)
    plan = ShardPlan.build(pm, 2, worker_hosts=["h0", "h1"])
    for sh in plan.shards(0):
        assert sh.locality == 1.0
    unknown = ShardPlan.build(pm, 2)
    assert all(sh.locality == 0.0 for sh in unknown.shards(0))
    text = plan.describe(0)
    assert "local" in text and "h0" in text and "h1" in text


def test_record_level_cuts_are_even_and_cover_hash_space():
    pm = make_map([300, 0, 500, 201])
    hashes = np.random.default_rng(3).integers(0, 2**63, 1001, dtype=np.uint64) * 2
    cuts, start = {}, 0
    for p, n in enumerate(pm.rows):
        cuts[p] = {"rows": n, "hashes": sorted(int(h) for h in hashes[start:start + n])}
        start += n
    plan = ShardPlan(pm, 10, [None] * 10, cuts=cuts)
    for epoch in range(3):
        shards = plan.shards(epoch)
        loads = [sh.rows for sh in shards]
        assert sum(loads) == 1001 and min(loads) > 0
        assert max(loads) - min(loads) <= 1
        # Per partition, the slices tile [0, 2**64) without gaps or overlaps.
        for p in range(4):
            spans = sorted((s.hash_lo, s.hash_hi) for sh in shards for s in sh.slices if s.partition == p)
            assert spans[0][0] == 0 and spans[-1][1] == HASH_SPACE
            assert all(spans[i][1] == spans[i + 1][0] for i in range(len(spans) - 1))


def test_bad_inputs():
    pm = make_map([5, 0, 0])
    with pytest.raises(ConfigError, match="5 rows for 8 workers"):
        ShardPlan.build(pm, 8)
    with pytest.raises(ConfigError, match="workers must be a positive integer"):
        ShardPlan.build(pm, 0)
    with pytest.raises(ConfigError, match="reshuffle must be one of"):
        ShardPlan.build(pm, 1, reshuffle="daily")
    with pytest.raises(ConfigError, match="is empty"):
        ShardPlan.build(make_map([0, 0]), 1)
    with pytest.raises(ConfigError, match="needs a connection"):
        ShardPlan.build(make_map([5, 5]), 3)
    with pytest.raises(ConfigError, match="2 entries for 3 workers"):
        ShardPlan.build(make_map([5, 5, 5]), 3, worker_hosts=["a", "b"])


def test_slices_are_read_tasks_and_workers_go_next_to_nodes_in_turn():
    pm = make_map([100] * 8, hosts=("h0", "h1", "h2"))
    assert next_to_nodes(pm, 5) == ["node-0", "node-1", "node-2", "node-0", "node-1"]
    plan = ShardPlan.build(pm, 3, worker_hosts=next_to_nodes(pm, 3), reshuffle="none")
    shard = plan.shard(0)
    assert all(isinstance(s, ReadTask) and s.rows == 100 for s in shard.slices)
    assert shard.read_tasks() == shard.slices and shard.rows == 100 * len(shard.slices)
    # Planned rows travel with a task but do not change which rows it reads.
    task = shard.slices[0]
    assert ReadTask.from_dict(task.to_dict()) == task == ReadTask(task.partition)
    assert ReadTask.from_dict(task.to_dict()).rows == 100 and "rows" not in ReadTask(3).to_dict()
