"""Which rows are this worker's: the shard plan (given, named by the launcher, or one worker over a whole cache),
this process's worker index and its shard of an epoch; and the Ignite connection the data API reads with."""

from __future__ import annotations

import os
from pathlib import Path

from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.contract import ENV_CACHE, ENV_SHARD_PLAN
from ignite_tf.errors import ConfigError
from ignite_tf.plan.shards import Reshuffle, ShardPlan, WorkerShard


def load_plan(plan: ShardPlan | str | Path | None = None, *, cache: str | None = None,
              conn: IgniteConnectionConfig | None = None) -> ShardPlan:
    """The plan passed in, the one named by ``IGNITE_TF_SHARD_PLAN``, or a one-worker plan over ``cache``."""
    if isinstance(plan, ShardPlan):
        return plan
    path = plan or os.environ.get(ENV_SHARD_PLAN)
    if path:
        return ShardPlan.load(path)
    cache = cache or os.environ.get(ENV_CACHE)
    if not cache:
        raise ConfigError(f"no shard plan: set {ENV_SHARD_PLAN} (the launcher does), pass plan=..., or pass "
                          f"cache=... to read a whole cache as a single worker")
    from ignite_tf.plan.partitions import PartitionMap

    return ShardPlan.build(PartitionMap.discover(connection(conn), cache), 1, reshuffle=Reshuffle.NONE)


def worker_index(input_context=None) -> int:
    """This process's worker index: InputContext, then TF_CONFIG's worker task, else 0."""
    if input_context is not None:
        return int(input_context.input_pipeline_id)
    from ignite_tf.contract import read_tf_config

    task = read_tf_config().get("task") or {}
    if task.get("type") == "worker":
        return int(task.get("index", 0))
    return 0


def shard(epoch: int = 0, *, worker: int | None = None, plan=None, cache: str | None = None,
          conn: IgniteConnectionConfig | None = None, input_context=None) -> WorkerShard:
    """This worker's WorkerShard for ``epoch``."""
    plan = load_plan(plan, cache=cache, conn=conn)
    index = worker if worker is not None else worker_index(input_context)
    if input_context is not None and input_context.num_input_pipelines != plan.workers:
        raise ConfigError(f"the strategy runs {input_context.num_input_pipelines} input pipelines but the shard "
                          f"plan has {plan.workers} workers: plan as many shards as workers")
    return plan.shard(index, epoch)


def steps_per_epoch(batch_size: int, epoch: int = 0, *, plan=None) -> int:
    """Batches every worker can take in ``epoch``: the smallest shard decides (sync SGD needs equal steps)."""
    plan = load_plan(plan)
    return max(1, min(plan.rows_per_worker(epoch)) // batch_size)


def connection(conn: IgniteConnectionConfig | None) -> IgniteConnectionConfig:
    """``conn``, else the one the environment names (the launcher sets it)."""
    conn = conn or IgniteConnectionConfig.from_env()
    if conn is None:
        raise ConfigError("no Ignite connection: pass conn=... or set IGNITE_TF_ADDRESSES (the launcher does)")
    return conn

