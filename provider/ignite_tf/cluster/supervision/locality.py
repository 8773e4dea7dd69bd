"""The cluster's last report of data locality: what its workers measured of their reads over the whole training
(rows from an Ignite node on their own host, or Kubernetes node), beside the share the shard plan planned."""

from __future__ import annotations

from pathlib import Path

from ignite_tf.cluster.spec import ClusterSpec


def measured_locality(store, spec: ClusterSpec) -> str | None:
    """The line the supervisor says among its final ones, from the reads the workers recorded in ``store`` (a
    ``StateStore``) and ``spec``'s shard plan; None when nothing was read through ignite_tf's reader (a script
    of its own). A failure to read them is said, not raised: a report must not change how the cluster ends."""
    from ignite_tf.reader.locality import combine, describe

    try:
        total = combine(*store.reads(spec.cluster_id))
        if total is None:
            return None
        planned = None
        if spec.shard_plan_path and Path(spec.shard_plan_path).is_file():
            from ignite_tf.plan.shards import ShardPlan

            plan = ShardPlan.load(spec.shard_plan_path)
            planned = (plan.placement or {}).get("locality", plan.planned_locality(0))
    except Exception as exc:  # noqa: BLE001 - a report must not change how the cluster ends
        return f"measured locality not read: {str(exc)[:200]}"
    return f"measured locality: {describe(total, planned)}"
