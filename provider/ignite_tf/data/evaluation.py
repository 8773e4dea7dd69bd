"""The held-out evaluation rows of the shard plan for a script, and the script's report of its metrics on them."""

from __future__ import annotations

from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.data.deprecated import label_renamed
from ignite_tf.data.plan import connection, load_plan
from ignite_tf.errors import ConfigError


@label_renamed
def evaluation_dataset(batch_size: int = 1024, *, label_column: str | None = None, features: list[str] | None = None,
                       plan=None, cache: str | None = None, conn: IgniteConnectionConfig | None = None):
    """The plan's held-out evaluation rows (``shard_plan.evaluation``; the same for every worker) as one pass of
    ``(features [b, n_features] float32, label)`` batches: ``model.evaluate(ds, return_dict=True)``."""
    from ignite_tf.evaluation.heldout import held_out_dataset

    plan = load_plan(plan, cache=cache, conn=conn)
    if not plan.evaluation.enabled:
        raise ConfigError("the shard plan holds no rows out for evaluation: set shard_plan.evaluation (ignite-tf "
                          "start --evaluation 0.1)")
    return held_out_dataset(plan, batch_size, label_column=label_column, features=features, conn=connection(conn))


def report_evaluation(metrics: dict, *, rows: int | None = None, plan=None) -> dict | None:
    """Report a script's held-out metrics (one call, on the chief; other tasks: nothing): the cluster state, the
    page and the publish gate take them as the runtime's own evaluation."""
    from ignite_tf.evaluation.heldout import script_metrics

    return script_metrics(load_plan(plan), metrics, rows=rows)

