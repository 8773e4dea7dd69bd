"""The public API of ignite-tf in one place: every name a user's training script, Airflow DAG, pipeline spec or
shell relies on.

The modules behind these names may move; the names stay. A renamed one keeps working until ``REMOVED_IN``,
warning with its new name and that release (an ``IgniteTFDeprecationWarning``, a DeprecationWarning; a
``SpecDeprecationWarning`` for a YAML key, as a spec's author is no Python developer), and is listed in
``DEPRECATED`` until it is removed: every warning's text comes from there (``deprecation``).
``tests/test_public_api.py`` pins every entry: each Python name imports and is of its kind, each command and flag
exists, the spec schema holds each YAML key, each deprecated name still works and warns.

Data only: importing this module imports nothing.
"""

from __future__ import annotations

from typing import NamedTuple

# Dotted name -> kind: "module", "function", "class", "operator", "sensor", "trigger", "hook", "exception",
# "warning", "plugin" or "value".
PYTHON: dict[str, str] = {
    # The package, and what Airflow reads through its entry points.
    "ignite_tf": "module",
    "ignite_tf.__version__": "value",
    "ignite_tf.get_provider_info": "function",
    "ignite_tf.ui.plugin.IgniteTFPlugin": "plugin",
    # A training script on a worker: its data (no sharding, no Ignite code), its place in the cluster.
    "ignite_tf.data": "module",
    "ignite_tf.data.dataset": "function",
    "ignite_tf.data.epochs": "function",
    "ignite_tf.data.epochs_dataset": "function",
    "ignite_tf.data.batches": "function",
    "ignite_tf.data.blocks": "function",
    "ignite_tf.data.shard": "function",
    "ignite_tf.data.steps_per_epoch": "function",
    "ignite_tf.data.worker_index": "function",
    "ignite_tf.data.load_plan": "function",
    "ignite_tf.data.read_ahead": "function",
    "ignite_tf.data.drop_read_ahead": "function",
    "ignite_tf.data.parameter_server_dataset_fn": "function",
    "ignite_tf.data.evaluation_dataset": "function",
    "ignite_tf.data.report_evaluation": "function",
    "ignite_tf.runtime": "module",
    "ignite_tf.runtime.strategy": "function",
    "ignite_tf.runtime.serve": "function",
    "ignite_tf.runtime.task_info": "function",
    "ignite_tf.runtime.TaskInfo": "class",
    "ignite_tf.runtime.progress.report": "function",
    "ignite_tf.runtime.progress.serving": "function",
    # The built-in model (also named as an entry point string, see MODEL_ENTRY_POINTS).
    "ignite_tf.models.tabular_classifier": "function",
    # Python API without Airflow.
    "ignite_tf.connection.IgniteConnectionConfig": "class",
    "ignite_tf.etl.load": "function",
    "ignite_tf.etl.LoadReport": "class",
    "ignite_tf.cluster.api.start_cluster": "function",
    "ignite_tf.cluster.api.make_launcher": "function",
    "ignite_tf.cluster.job.TrainingJob": "class",
    "ignite_tf.state.Status": "class",
    "ignite_tf.runstore.RunStore": "class",
    "ignite_tf.plan.partitions.PartitionMap": "class",
    "ignite_tf.plan.shards.ShardPlan": "class",
    "ignite_tf.plan.split.EvaluationSplit": "class",
    "ignite_tf.runtime.evaluation.evaluate_held_out": "function",
    "ignite_tf.evaluation.heldout.read_held_out": "function",
    "ignite_tf.contract.ENV_PRODUCTION_MODEL": "value",
    "ignite_tf.reader.partition.PartitionReader": "class",
    "ignite_tf.validation.fingerprints.Fingerprints": "class",
    "ignite_tf.validation.fingerprints.OnDataChange": "class",
    "ignite_tf.reader.servers.discover": "function",
    "ignite_tf.reader.servers.all_servers": "function",
    # Airflow: operators, sensor, trigger (its class path is stored with each deferred task), hook, links.
    "ignite_tf.operators.ignite.IgniteLoadOperator": "operator",
    "ignite_tf.operators.ignite.IgnitePartitionsOperator": "operator",
    "ignite_tf.operators.ignite.table_asset": "function",
    "ignite_tf.operators.shards.ShardPlanOperator": "operator",
    "ignite_tf.operators.validation.ValidateShardOperator": "operator",
    "ignite_tf.operators.validation.ValidationGateOperator": "operator",
    "ignite_tf.operators.validation.ValidationGateFailed": "exception",
    "ignite_tf.operators.tensorflow.TFClusterOperator": "operator",
    "ignite_tf.operators.publish.PublishModelOperator": "operator",
    "ignite_tf.operators.publish.model_asset": "function",
    "ignite_tf.operators.inference.BatchInferenceOperator": "operator",
    "ignite_tf.operators.links.ClusterPageLink": "class",
    "ignite_tf.operators.links.TensorBoardLink": "class",
    "ignite_tf.operators.links.RegistryVersionLink": "class",
    "ignite_tf.sensors.tf_cluster.TFClusterSensor": "sensor",
    "ignite_tf.triggers.tf_cluster.TFClusterTrigger": "trigger",
    "ignite_tf.hooks.ignite.IgniteHook": "hook",
    # Declarative pipelines: the three-line DAG file, and what it warns with.
    "ignite_tf.pipeline.load_dags": "function",
    "ignite_tf.pipeline.SpecWarning": "warning",
    "ignite_tf.pipeline.SpecDeprecationWarning": "warning",
    # Errors a caller catches.
    "ignite_tf.errors.IgniteTFError": "exception",
    "ignite_tf.errors.ConfigError": "exception",
    "ignite_tf.errors.SpecError": "exception",
    "ignite_tf.errors.LoadError": "exception",
    "ignite_tf.errors.IgniteUnavailableError": "exception",
    "ignite_tf.errors.OutageError": "exception",
    "ignite_tf.errors.AuthenticationFailedError": "exception",
    "ignite_tf.errors.CacheNotFoundError": "exception",
    "ignite_tf.errors.ValidationFailed": "exception",
    "ignite_tf.errors.DataChangedError": "exception",
    "ignite_tf.errors.MissingLabelError": "exception",
    "ignite_tf.errors.DivergedError": "exception",
}

# ``module:function`` strings a spec (``training.entry_point``), an operator (``entry_point=``) or
# ``python -m ignite_tf.runtime --entry-point`` names.
MODEL_ENTRY_POINTS: tuple[str, ...] = ("ignite_tf.models:tabular_classifier",)

# Command -> its options and positional arguments (as ``-h`` shows them). Every command also takes -h.
_COMMON = ("-c", "--config", "-V", "--version")
COMMANDS: dict[str, tuple[str, ...]] = {
    "ignite-tf": _COMMON,
    "ignite-tf start": (*_COMMON, "--mode", "--workers", "--ps", "--max-restarts", "--startup-deadline",
                        "--restart-policy", "--progress-timeout", "--id", "--detach", "--env", "--launcher", "--k8s",
                        "--namespace", "--image", "--placement", "--run-root", "--py-module", "--evaluation",
                        "--evaluation-seed", "CACHE_NAME", "JOB_DIR",
                        "COMMAND", "ARGS"),
    "ignite-tf stop": (*_COMMON, "CLUSTER_ID"),
    "ignite-tf attach": (*_COMMON, "--from-start", "CLUSTER_ID"),
    "ignite-tf ps": (*_COMMON, "-a", "--all", "CLUSTER_ID"),
    "ignite-tf tensorboard": (*_COMMON, "--port", "--host", "CLUSTER_ID|RUN_DIR"),
    "ignite-tf load": (*_COMMON, "--key", "--schema", "--column", "CACHE_NAME", "FILE"),
    "python -m ignite_tf.runtime": ("--entry-point", "--epochs", "--batch-size", "--label-column", "--label",
                                    "--features", "--learning-rate", "--steps-per-epoch", "--checkpoint-every-steps",
                                    "--shuffle-buffer", "--model-arg", "--serve"),
    "python -m ignite_tf.pipeline": ("SPEC",),
}

# Keys of a pipeline spec (``resources/pipeline.schema.json``), dotted by section.
YAML_KEYS: tuple[str, ...] = (
    "dag_id", "description", "owner", "tags", "schedule", "schedule.asset", "schedule.table", "ignite_conn_id",
    "run_root", "run_store_conn_id", "cache", "key", "suite",
    # Airflow's task settings, for every task and per stage (``ignite_tf.pipeline.task_policy``).
    "retries", "retry_delay", "retry_exponential_backoff", "max_retry_delay", "execution_timeout",
    "training.retries", "training.retry_delay", "training.retry_exponential_backoff", "training.max_retry_delay",
    "training.execution_timeout", "publish.retries", "publish.retry_delay", "publish.retry_exponential_backoff",
    "publish.max_retry_delay", "publish.execution_timeout", "inference.retries", "inference.retry_delay",
    "inference.retry_exponential_backoff", "inference.max_retry_delay", "inference.execution_timeout",
    "source", "source.path", "source.schema", "source.generator", "source.rows", "source.seed",
    "shard_plan", "shard_plan.reshuffle", "shard_plan.seed", "shard_plan.evaluation", "shard_plan.evaluation_seed",
    "training", "training.mode", "training.workers", "training.ps", "training.launcher", "training.entry_point",
    "training.command", "training.job_dir", "training.epochs", "training.batch_size", "training.model_args",
    "training.learning_rate", "training.label_column", "training.max_restarts", "training.restart_policy",
    "training.progress_timeout_s", "training.env", "training.py_modules", "training.startup_deadline_s",
    "training.deferrable", "training.on_data_change", "training.kubernetes", "training.kubernetes.namespace",
    "training.kubernetes.image", "training.kubernetes.conn_id",
    "training.kubernetes.resources", "training.kubernetes.resources.requests", "training.kubernetes.resources.limits",
    "training.kubernetes.service_account", "training.kubernetes.node_selector", "training.kubernetes.tolerations",
    "training.kubernetes.volumes", "training.kubernetes.labels", "training.kubernetes.placement",
    "training.kubernetes.ignite_selector", "training.kubernetes.ignite_namespace", "training.kubernetes.run_volume",
    "training.kubernetes.host_network", "training.kubernetes.dns", "training.kubernetes.model_params",
    "training.kubernetes.supervisor", "training.kubernetes.max_runtime", "training.kubernetes.standby",
    "publish", "publish.model", "publish.registry_root", "publish.thresholds", "publish.tolerance",
    "inference", "inference.input_cache", "inference.output_cache", "inference.shards",
)


REMOVED_IN = "0.3.0"
"""The release that removes every name in ``DEPRECATED`` (deprecated in 0.2.0 or before; CHANGELOG.md)."""


class Deprecated(NamedTuple):
    """A name of an earlier release that still works, warning with its new name, until ``REMOVED_IN``."""

    old: str
    new: str
    kind: str
    """``module``, ``name`` (a dotted name, the same object as ``new``), ``value`` (a dotted name whose value
    ``new`` gives), ``argument`` (``callable(old=)`` -> ``new=``; or ``callable()``, a method ``new``
    replaces), ``yaml`` (a spec key), ``generator`` (a spec's ``source.generator`` string) or ``command``."""
    why: str = ""


_POLICY_MOVED = (  # ignite_tf.cluster.policy: the restart policy moved into ignite_tf.cluster.supervision
    ("RestartPolicy", "ignite_tf.cluster.supervision.RestartPolicy", "name"),
    ("Failure", "ignite_tf.cluster.supervision.policy.Failure", "name"),
    ("first_cause", "ignite_tf.cluster.supervision.policy.first_cause", "name"),
    ("RETRYABLE_STATUS", "ignite_tf.cluster.supervision.policy.RETRYABLE_STATUS", "name"),
    ("DEFAULT_RESTART_POLICY", "ignite_tf.cluster.supervision.Supervision().restart_policy", "value"),
    ("DEFAULT_PROGRESS_TIMEOUT_S", "ignite_tf.cluster.supervision.Supervision().progress_timeout_s", "value"),
)

DEPRECATED: tuple[Deprecated, ...] = (
    Deprecated("ignite_tf.dags", "ignite_tf.pipeline", "module"),
    Deprecated("ignite_tf.dags.load_dags", "ignite_tf.pipeline.load_dags", "name"),
    Deprecated("python -m ignite_tf.dags", "python -m ignite_tf.pipeline", "command"),
    # The module ignite_tf.etl.load hid the function of that name; it is ignite_tf.etl.loader now.
    Deprecated("ignite_tf.etl.load.load", "ignite_tf.etl.load", "name"),
    Deprecated("ignite_tf.etl.load.LoadReport", "ignite_tf.etl.loader.LoadReport", "name"),
    *(Deprecated(f"ignite_tf.data.{f}(label=)", "label_column=", "argument")
      for f in ("dataset", "epochs_dataset", "read_ahead", "epochs", "evaluation_dataset", "cache_columns")),
    Deprecated("ignite_tf.operators.publish.PublishModelOperator(model_name=)", "model=", "argument"),
    Deprecated("ignite_tf.operators.inference.BatchInferenceOperator(model_name=)", "model=", "argument"),
    Deprecated("training.label", "training.label_column", "yaml"),
    Deprecated("training.script", "training.command", "yaml"),
    Deprecated("training.args", "training.command", "yaml"),
    Deprecated("publish.registry", "publish.registry_root", "yaml"),
    # The demo's synthetic table is development tooling now, not part of the provider's wheel.
    Deprecated("ignite_tf.demo_data:tabular", "ignite_tf_dev.demo_data:tabular", "generator"),
    Deprecated("ignite_tf.plan.tasks", "ignite_tf.reader.tasks", "module"),
    Deprecated("ignite_tf.cluster.run_folder", "ignite_tf.runstore.layout", "module"),
    Deprecated("ignite_tf.cluster.state", "ignite_tf.state", "module"),
    *(Deprecated(f"ignite_tf.cluster.policy.{old}", new, kind) for old, new, kind in _POLICY_MOVED),
    Deprecated("ignite_tf.defaults.DEFAULT_REGISTRY_ROOT", "ignite_tf.defaults.default_registry_root()", "value",
               "it honours IGNITE_TF_HOME"),
    Deprecated("ignite_tf.operators.tensorflow.TFClusterOperator.cluster_id_for(try_number=)", "no try_number=",
               "argument", "it is ignored: every try of a task instance has the same cluster id"),
    Deprecated("ignite_tf.operators.tensorflow.TFClusterOperator.job()", "training_job().to_job()", "argument",
               "training_job() gives the job as one TrainingJob"),
)


def deprecation(old: str) -> str:
    """The warning for the deprecated ``old`` (an entry of ``DEPRECATED``): its new name, why, when it goes."""
    entry = next(d for d in DEPRECATED if d.old == old)
    why = f" ({entry.why})" if entry.why else ""
    return f"{entry.old} is deprecated: use {entry.new}{why}; {entry.old} is removed in {REMOVED_IN}"


def warn_deprecated(old: str, stacklevel: int = 3) -> None:
    """Warn (``IgniteTFDeprecationWarning``) that ``old`` is used; ``stacklevel`` 3: the caller's caller, the
    user's code that used it."""
    import warnings

    from ignite_tf.errors import IgniteTFDeprecationWarning

    warnings.warn(deprecation(old), IgniteTFDeprecationWarning, stacklevel=stacklevel)


def renamed(kind: str) -> dict[str, str]:
    """Old name -> new name of the deprecated entries of one ``kind``."""
    return {d.old: d.new for d in DEPRECATED if d.kind == kind}
