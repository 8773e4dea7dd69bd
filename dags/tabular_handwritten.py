"""A team's own DAG built from ignite-tf operators directly (no YAML): load -> partitions -> shard plan ->
validate (one mapped task per shard) -> gate -> train (deferred) -> publish.

Trigger it from the UI with other parameters (epochs, workers, mode...). Uses the ``ignite_default``
connection and the synthetic tabular data set shipped with the package.
"""

from __future__ import annotations

import os
from pathlib import Path

from airflow.sdk import DAG, Param

from ignite_tf.defaults import default_registry_root
from ignite_tf.operators.ignite import IgniteLoadOperator, IgnitePartitionsOperator
from ignite_tf.operators.publish import PublishModelOperator
from ignite_tf.operators.shards import ShardPlanOperator
from ignite_tf.operators.tensorflow import TFClusterOperator
from ignite_tf.operators.validation import ValidateShardOperator, ValidationGateOperator

HERE = Path(__file__).parent
SUITE = str(HERE / "expectations" / "tabular.yaml")
CACHE = "tabular_hw"
REGISTRY = default_registry_root()


def demo_rows():
    from ignite_tf_dev.demo_data import tabular

    return tabular(int(os.environ.get("IGNITE_TF_DEMO_ROWS", "20000")), seed=0)


with DAG(
    dag_id="ignite_tf_tabular_handwritten",
    description="Tabular classifier from Ignite, written with ignite-tf operators",
    schedule=None,
    catchup=False,
    tags=["ignite-tf", "example"],
    params={
        "epochs": Param(3, type="integer", minimum=1, maximum=1000),
        "workers": Param(2, type="integer", minimum=1, maximum=64),
        "mode": Param("sync", enum=["sync", "async"]),
        "batch_size": Param(64, type="integer", minimum=1, maximum=65536),
        "learning_rate": Param(0.01, type="number", exclusiveMinimum=0, maximum=10),
    },
) as dag:
    load = IgniteLoadOperator(task_id="load", cache=CACHE, source_callable=demo_rows, key="id")
    partitions = IgnitePartitionsOperator(task_id="partitions", cache=CACHE)
    plan = ShardPlanOperator(task_id="shard_plan", partition_map=partitions.output, workers="{{ params.workers }}")
    validate = ValidateShardOperator.partial(task_id="validate", plan=plan.output["plan"], suite=SUITE).expand(
        shard=plan.output)
    gate = ValidationGateOperator(task_id="validation_gate", results=validate.output, suite=SUITE, cache=CACHE)
    train = TFClusterOperator(
        task_id="train", cache=CACHE, plan=plan.output["plan"], entry_point="ignite_tf.models:tabular_classifier",
        mode="{{ params.mode }}", epochs="{{ params.epochs }}", batch_size="{{ params.batch_size }}",
        learning_rate="{{ params.learning_rate }}", label_column="label",
    )
    publish = PublishModelOperator(
        task_id="publish", registry_root=REGISTRY, model="tabular_hw", training=train.output,
        validation=gate.output, partition_map=partitions.output, thresholds={"accuracy": (0.5, None)},
        tolerance=0.02, training_params={"entry_point": "ignite_tf.models:tabular_classifier", "label_column": "label"},
    )
    load >> partitions
    gate >> train
