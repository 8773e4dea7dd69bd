"""BatchInferenceOperator: score an input cache with a published model, shard by shard (``.expand()``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ignite_tf.operators.base import IgniteTFOperator, as_dict, renamed_arguments


@renamed_arguments(model_name="model")
class BatchInferenceOperator(IgniteTFOperator):
    """Write one prediction per input row to ``output_cache``, keyed like the input.

    Task ``shard`` of ``shards`` scores shard ``shard`` of a ShardPlan over the input cache: ``plan`` when
    given (e.g. ``shard_plan_task.output["plan"]``), else one planned here the same way by every mapped task
    (the row counts of the input, no reshuffle, no host preference), so the shards cover every row once
    as long as the input does not change while they score.

    :param registry_root: the model registry (templated).
    :param model: model name in the registry (templated; ``model_name=``: deprecated).
    :param input_cache: cache to score (templated).
    :param output_cache: cache the predictions go to, created on first write (templated).
    :param version: a named version (templated); default the production version.
    :param shard: which shard of the plan this task scores (templated; mapped with ``.expand``).
    :param shards: number of shards when no ``plan`` is given (templated).
    :param plan: ShardPlan dict over ``input_cache`` (templated); its workers are the shards.
    :param features: feature columns (default: those recorded with the model).
    :param batch_size: rows per read batch and per model call.
    """

    template_fields: Sequence[str] = ("registry_root", "model", "version", "input_cache", "output_cache",
                                      "shard", "shards", "plan")

    def __init__(self, *, registry_root: str, model: str, input_cache: str, output_cache: str,
                 version: str | None = None, shard: int | str = 0, shards: int | str = 1, plan: Any = None,
                 features: list[str] | None = None, batch_size: int = 4096, **kwargs):
        super().__init__(**kwargs)
        self.registry_root, self.model, self.version = registry_root, model, version
        self.input_cache, self.output_cache = input_cache, output_cache
        self.shard, self.shards, self.plan, self.features, self.batch_size = shard, shards, plan, features, batch_size

    def shard_plan(self):
        """The plan whose shard ``shard`` this task scores (see the class docstring)."""
        from ignite_tf.errors import ConfigError
        from ignite_tf.plan.partitions import PartitionMap
        from ignite_tf.plan.shards import Reshuffle, ShardPlan

        if self.plan:
            plan = ShardPlan.from_dict(as_dict(self.plan))
            if plan.partition_map.cache.lower() != self.input_cache.lower():
                raise ConfigError(f"{self.task_id}: the shard plan is over cache '{plan.partition_map.cache}', "
                                  f"not the input cache '{self.input_cache}'")
            return plan
        pm = PartitionMap.discover(self.conn, self.input_cache)
        return ShardPlan.build(pm, int(self.shards), reshuffle=Reshuffle.NONE, conn=self.conn)

    def execute(self, context) -> dict[str, Any]:
        from ignite_tf.inference import predict_shard

        plan = self.shard_plan()
        report = predict_shard(self.conn, registry_root=self.registry_root, model=self.model,
                               version=self.version or None, input_cache=self.input_cache,
                               output_cache=self.output_cache, tasks=plan.shard(int(self.shard)).read_tasks(),
                               features=self.features, batch_size=self.batch_size, partition_map=plan.partition_map)
        # Attributes, not dict keys: a renamed field fails here loudly instead of logging None.
        self.log.info("scored %d rows in %.1fs (%.0f rows/s) with %s %s", report.rows_scored, report.seconds,
                      report.rows_per_second, report.model, report.version)
        return report.to_dict()
