"""The validation gate: Great Expectations per shard (mapped), then one gate over all shards."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk.exceptions import AirflowFailException

from ignite_tf.operators.base import IgniteTFOperator, as_dict, run_dir_for


class ValidationGateFailed(AirflowFailException):
    """The data failed its expectations: no training starts, and retrying will not help."""


class ValidateShardOperator(IgniteTFOperator):
    """Validate one shard of a ShardPlan with an expectation suite (use ``.partial(...).expand(shard=...)``).

    :param plan: ShardPlan dict (``shard_plan_task.output``).
    :param shard: worker index whose epoch-0 slice is validated (mapped).
    :param suite: path of the expectation suite (YAML/JSON) next to the DAG (templated).
    :param sample_fraction: override the suite's sample fraction (reported as sampled when < 1).
    """

    template_fields: Sequence[str] = ("plan", "shard", "suite", "sample_fraction")

    def __init__(self, *, plan: Any, shard: int | str, suite: str, sample_fraction: float | None = None, **kwargs):
        super().__init__(**kwargs)
        self.plan, self.shard, self.suite, self.sample_fraction = plan, shard, suite, sample_fraction

    def execute(self, context) -> dict[str, Any]:
        from ignite_tf.plan.shards import ShardPlan
        from ignite_tf.validation.run import validate_shard

        plan = ShardPlan.from_dict(as_dict(self.plan))
        shard = int(self.shard)
        kwargs = {} if self.sample_fraction is None else {"sample_fraction": float(self.sample_fraction)}
        result = validate_shard(self.conn, plan.partition_map.cache, plan.shard(shard, 0).read_tasks(), self.suite,
                                shard=shard, **kwargs)
        self.log.info("shard %d: %d rows checked, %s", shard, result.rows, "passed" if result.success else "FAILED")
        return result.to_dict(gx=False)


class ValidationGateOperator(IgniteTFOperator):
    """Merge the shards' results; fail (before any TensorFlow process starts) when the data failed.

    Writes ``validation.json`` and GX Data Docs into the DAG run's directory; returns the summary.

    :param results: the mapped ``ValidateShardOperator`` outputs.
    :param suite: the same suite file (row-count bounds and cross-shard uniqueness are checked here).
    :param cache: cache name, for the cross-shard uniqueness check with Ignite SQL.
    :param run_root: root of run directories (default ``$IGNITE_TF_RUN_ROOT``): a folder or an object-store URL.
    :param run_store_conn_id: the ``aws`` connection of an object-store ``run_root`` (None: the environment's).
    """

    template_fields: Sequence[str] = ("results", "suite", "cache")

    def __init__(self, *, results: Any, suite: str, cache: str | None = None, run_root: str | None = None,
                 run_store_conn_id: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.results, self.suite, self.cache, self.run_root = results, suite, cache, run_root
        self.run_store_conn_id = run_store_conn_id
        self.summary: dict[str, Any] | None = None  # the merged result, for OpenLineage (passed or not)

    def execute(self, context) -> dict[str, Any]:
        from ignite_tf.errors import ValidationFailed
        from ignite_tf.validation.run import ShardResult, gate, merge, write_results

        # Indexing up to len() reads each mapped result once; iterating Airflow's lazy sequence asks for one
        # past the end and logs a 404 "XCom not found" error in every run.
        results = [ShardResult.from_dict(as_dict(self.results[i])) for i in range(len(self.results))]
        summary = merge(results, self.suite, conn=self.conn if self.cache else None, cache=self.cache)
        self.summary = summary.to_dict()
        from ignite_tf.runstore.credentials import credentials_env, environment

        with environment(credentials_env(self.run_store_conn_id) if self.run_store_conn_id else {}):
            paths = write_results(summary, run_dir_for(context, self.run_root))
        self.log.info("validation results: %s", paths)
        try:
            gate(summary)
        except ValidationFailed as exc:
            context["ti"].xcom_push(key="summary", value=summary.to_dict())
            raise ValidationGateFailed(str(exc)) from None
        out = summary.to_dict()
        out["files"] = {k: str(v) for k, v in paths.items()}
        return out

    def get_openlineage_facets_on_complete(self, task_instance):
        """The table in, with the validation result as its data-quality facets (on failure too)."""
        from ignite_tf.lineage import lineage, table_input

        cache = self.cache or (self.summary or {}).get("cache")
        return lineage([table_input(self.conn, cache, self.summary)] if cache else [])
