"""ShardPlanOperator: plan each worker's share of the cache."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ignite_tf.operators.base import IgniteTFOperator, as_dict


class ShardPlanOperator(IgniteTFOperator):
    """Build a ShardPlan over a PartitionMap (from an upstream ``IgnitePartitionsOperator`` or discovered here).

    Pushes the plan (JSON) as XCom ``plan`` and returns the shard indices ``[0, 1, ..., workers - 1]``, so that
    per-shard tasks map over the return value (Airflow maps only over return values)::

        plan = ShardPlanOperator(task_id="shard_plan", ...)
        ValidateShardOperator.partial(task_id="validate", plan=plan.output["plan"], ...).expand(shard=plan.output)
        TFClusterOperator(task_id="train", plan=plan.output["plan"], ...)

    :param cache: cache name (used when ``partition_map`` is not given).
    :param workers: number of workers (templated: a DAG ``Param``).
    :param partition_map: PartitionMap dict (e.g. ``partitions_task.output``).
    :param worker_hosts: host / node consistent id per worker; default one worker next to each node in turn.
    :param reshuffle: ``epoch`` or ``none`` (:class:`~ignite_tf.plan.shards.Reshuffle`; default ``epoch``).
    :param seed: reshuffle seed.
    :param evaluation: share of the rows held out for evaluation by a hash of their key (e.g. 0.1; default none):
        never trained on; the chief evaluates the model on them (:mod:`ignite_tf.plan.split`).
    :param evaluation_seed: salt of that hash; keep it fixed so every run holds out the same rows.
    """

    template_fields: Sequence[str] = ("cache", "workers", "partition_map", "reshuffle", "seed", "evaluation",
                                      "evaluation_seed")

    def __init__(self, *, cache: str | None = None, workers: int | str = 2, partition_map: Any = None,
                 worker_hosts: list[str] | None = None, reshuffle: str | None = None, seed: int | str = 0,
                 evaluation: float | str | None = None, evaluation_seed: int | str = 0, **kwargs):
        super().__init__(**kwargs)
        self.cache, self.workers, self.partition_map = cache, workers, partition_map
        self.worker_hosts, self.reshuffle, self.seed = worker_hosts, reshuffle, seed
        self.evaluation, self.evaluation_seed = evaluation, evaluation_seed

    def execute(self, context) -> list[int]:
        from ignite_tf.plan.partitions import PartitionMap
        from ignite_tf.plan.shards import ShardPlan, next_to_nodes

        if self.partition_map:
            pm = PartitionMap.from_dict(as_dict(self.partition_map))
        else:
            pm = PartitionMap.discover(self.conn, self.cache)
        workers = int(self.workers)
        hosts = self.worker_hosts if self.worker_hosts is not None else next_to_nodes(pm, workers)
        plan = ShardPlan.build(pm, workers, worker_hosts=hosts, reshuffle=self.reshuffle, seed=int(self.seed),
                               conn=self.conn, evaluation=float(self.evaluation or 0),
                               evaluation_seed=int(self.evaluation_seed or 0))
        self.log.info("%s", plan.describe(0))
        context["ti"].xcom_push(key="plan", value=plan.to_dict())
        return list(range(workers))
