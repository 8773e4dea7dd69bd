"""PublishModelOperator: publish the trained model to a registry behind a blessing gate, emit an Asset event."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import Asset

from ignite_tf.operators.base import IgniteTFOperator, as_dict, renamed_arguments
from ignite_tf.operators.links import ClusterPageLink, RegistryVersionLink, TensorBoardLink


def model_asset(registry_root: str, model: str) -> Asset:
    """The Asset a published model updates; downstream DAGs schedule on it (``schedule=[model_asset(...)]``).

    The name carries a short hash of the model's location: Airflow ties an Asset name to one URI, so the
    same model name in two registries must be two Assets.
    """
    import hashlib

    root = str(registry_root).rstrip("/")
    uri = f"{root}/{model}" if "://" in root else f"file://{Path(root).expanduser().absolute()}/{model}"
    digest = hashlib.blake2b(uri.encode(), digest_size=3).hexdigest()
    return Asset(name=f"ignite_tf_model_{model}_{digest}", uri=uri)


@renamed_arguments(model_name="model")
class PublishModelOperator(IgniteTFOperator):
    """Publish the chief's SavedModel, checkpoint and TensorBoard logs as a new version; promote it to
    ``production`` only if the blessing gate passes.

    Every run publishes a candidate; the Asset event (extra: version, status) is emitted on every publish.

    :param registry_root: registry location: a path, an fsspec URL or an ObjectStoragePath (templated).
    :param model: model name in the registry (templated; ``model_name=``: deprecated).
    :param training: the ``TFClusterOperator`` result (run_dir, metrics).
    :param thresholds: metric -> (min, max) that a production model must meet.
    :param tolerance: relative slack against the current production model's metrics.
    :param validation: the ``ValidationGateOperator`` result (recorded in the metadata).
    :param partition_map: the PartitionMap (recorded: cache, rows, layout summary).
    :param training_params: training parameters to record.
    :param run_store_conn_id: the ``aws`` connection of an object-store run (``training``'s ``run_dir`` is then
        its URL); None: this worker's environment.
    """

    template_fields: Sequence[str] = ("registry_root", "model", "training", "validation", "partition_map",
                                      "training_params")
    operator_extra_links = (RegistryVersionLink(), ClusterPageLink(), TensorBoardLink())

    def __init__(self, *, registry_root: str, model: str, training: Any, thresholds: dict | None = None,
                 tolerance: float = 0.0, validation: Any = None, partition_map: Any = None,
                 training_params: dict | None = None, run_store_conn_id: str | None = None, **kwargs):
        kwargs.setdefault("outlets", [model_asset(registry_root, model)])
        super().__init__(**kwargs)
        self.registry_root, self.model, self.training = registry_root, model, training
        self.thresholds, self.tolerance = thresholds or {}, tolerance
        self.validation, self.partition_map = validation, partition_map
        self.training_params = training_params or {}
        self.run_store_conn_id = run_store_conn_id
        self.published: dict[str, Any] | None = None  # the publish result, for the extra links

    def execute(self, context) -> dict[str, Any]:
        from ignite_tf.registry.publish import BlessingGate, ModelRegistry
        from ignite_tf.runstore import LAYOUT, RunStore
        from ignite_tf.runstore.credentials import credentials_env, environment

        training = as_dict(self.training)
        run = RunStore(training["run_dir"])  # a folder, or the run's object-store URL
        metrics = {k: v for k, v in (training.get("metrics") or {}).items() if isinstance(v, int | float)}
        data: dict[str, Any] = {}
        if self.partition_map:
            from ignite_tf.plan.partitions import PartitionMap

            pm = PartitionMap.from_dict(as_dict(self.partition_map))
            data.update({"cache": pm.cache, "rows": pm.total_rows, "partitions": pm.partitions,
                         "partition_map_summary": pm.summary()})
        if self.validation:
            validation = as_dict(self.validation)
            data["validation"] = {k: validation[k] for k in ("passed", "rows", "shards", "failures") if k in validation}
            if validation.get("fingerprints"):  # what was validated, so what the model was trained on
                data["fingerprints"] = validation["fingerprints"]
        ti = context["ti"]
        # The model comes from the training task's try and cluster; this (publish) task only copied it.
        trained_by = training.get("trained_by") or {}
        run_context = {"dag_id": context["dag"].dag_id, "run_id": context["run_id"],
                       "task_id": trained_by.get("task_id"), "try_number": trained_by.get("try_number"),
                       "map_index": trained_by.get("map_index"), "cluster_id": training.get("cluster_id"),
                       "published_by": {"task_id": self.task_id, "try_number": ti.try_number}}
        gate = BlessingGate(thresholds={k: tuple(v) for k, v in self.thresholds.items()}, tolerance=self.tolerance)
        # The registry reads the run through fsspec: an object-store run with this connection's credentials.
        with environment(credentials_env(self.run_store_conn_id) if self.run_store_conn_id else {}):
            parts = {name: run.path(key) if run.exists(key) else None
                     for name, key in (("checkpoint_dir", LAYOUT.backup), ("tensorboard_dir", LAYOUT.tensorboard))}
            result = ModelRegistry(self.registry_root).publish(
                self.model, saved_model_dir=run.path(LAYOUT.model), **parts,
                metrics=metrics, params={**self.training_params, "epochs_run": training.get("epochs")}, data=data,
                context=run_context, gate=gate, ignite_version=_ignite_version(self.conn),
                evaluation=training.get("evaluation"),
            )
        self.log.info("published %s %s as %s%s", self.model, result.version, result.status,
                      f" ({'; '.join(result.reasons)})" if result.reasons else "")
        if training.get("evaluation"):
            self.log.info("the gate judged held-out metrics: %s", describe_gate(training["evaluation"], result))
        self.published = {**result.to_dict(), "cluster_id": training.get("cluster_id")}
        for outlet in self.outlets:
            if isinstance(outlet, Asset):
                context["outlet_events"][outlet].extra = {"version": result.version, "status": result.status}
        return result.to_dict()

    def get_openlineage_facets_on_complete(self, task_instance):
        """The validated table in, the model version out."""
        from ignite_tf.lineage import lineage, model_output, table_input

        cache = as_dict(self.partition_map).get("cache") if self.partition_map else None
        validation = as_dict(self.validation) if self.validation else None
        inputs = [table_input(self.conn, cache, validation)] if cache else []
        return lineage(inputs, [model_output(self.published)] if self.published else [])


def describe_gate(evaluation: dict[str, Any], result) -> str:
    """``accuracy 0.91 vs production v0001 0.88; loss ... -> production`` from an evaluation and a publish."""
    mine, theirs = evaluation.get("metrics") or {}, evaluation.get("production_metrics") or {}
    shown = "; ".join(f"{k} {v:.4f}" + (f" vs {theirs[k]:.4f}" if k in theirs else "") for k, v in sorted(mine.items()))
    production = evaluation.get("production") or {}
    against = (f" (production {production['version']} on the same {evaluation['rows']} rows)" if theirs else
               f" (production not evaluated: {production['error']})" if production.get("error") else "")
    return f"{shown}{against} -> {result.status}"


def _ignite_version(conn) -> str | None:
    try:
        client = conn.client()
    except Exception:  # noqa: BLE001 - the version is informational
        return None
    from ignite_tf.connection import sql

    try:
        return str(sql(client, "SELECT VERSION FROM SYS.NODES LIMIT 1")[0][0]).split("#")[0]
    except Exception:  # noqa: BLE001
        return None
    finally:
        client.close()
