"""BatchInferenceOperator: score an input cache with a published model, shard by shard (``.expand()``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ignite_tf.operators.base import IgniteTFOperator, renamed_arguments


@renamed_arguments(model_name="model")
class BatchInferenceOperator(IgniteTFOperator):
    """Write one prediction per input row to ``output_cache``, keyed like the input.

    :param registry_root: the model registry (templated).
    :param model: model name in the registry (templated; ``model_name=``: deprecated).
    :param version: a named version (default: production).
    :param input_cache: cache to score; ``output_cache`` where predictions go (templated).
    :param shard: which of ``shards`` partition groups this task scores (mapped with ``.expand``).
    :param shards: number of partition groups the input's partitions are split into.
    :param features: feature columns (default: those recorded with the model).
    """

    template_fields: Sequence[str] = ("registry_root", "model", "version", "input_cache", "output_cache",
                                      "shard", "shards")

    def __init__(self, *, registry_root: str, model: str, input_cache: str, output_cache: str,
                 version: str | None = None, shard: int | str = 0, shards: int | str = 1,
                 features: list[str] | None = None, batch_size: int = 4096, **kwargs):
        super().__init__(**kwargs)
        self.registry_root, self.model, self.version = registry_root, model, version
        self.input_cache, self.output_cache = input_cache, output_cache
        self.shard, self.shards, self.features, self.batch_size = shard, shards, features, batch_size

    def execute(self, context) -> dict[str, Any]:
        from ignite_tf.inference import predict_shard
        from ignite_tf.plan.partitions import PartitionMap

        pm = PartitionMap.discover(self.conn, self.input_cache, count_rows=False)
        shard, shards = int(self.shard), int(self.shards)
        tasks = [p for p in range(pm.partitions) if p % shards == shard]
        report = predict_shard(self.conn, registry_root=self.registry_root, model=self.model,
                               version=self.version or None, input_cache=self.input_cache,
                               output_cache=self.output_cache, tasks=tasks, features=self.features,
                               batch_size=self.batch_size, partition_map=pm)
        # Attributes, not dict keys: a renamed field fails here loudly instead of logging None.
        self.log.info("scored %d rows in %.1fs (%.0f rows/s) with %s %s", report.rows_scored, report.seconds,
                      report.rows_per_second, report.model, report.version)
        return report.to_dict()
