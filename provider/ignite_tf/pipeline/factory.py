"""From a PipelineConfig to Airflow DAGs: ``render`` (pure: config -> DagSpecs of TaskSpecs), then ``build_dag``
(the one place that makes operators and wires them).

The training DAG::

    load -> partitions -> shard_plan -> validate[shard 0..n-1] -> validation_gate -> train -> publish

and, when the spec has ``inference``, ``<dag_id>_inference``, scheduled on the published model's Asset::

    score[shard 0..n-1]
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ignite_tf.cluster.launcher import LauncherKind
from ignite_tf.contract import ENV_PRODUCTION_MODEL, Mode
from ignite_tf.lineage import table_uri
from ignite_tf.pipeline.schema import param_bounds
from ignite_tf.pipeline.spec import SUPERVISION_KEYS, PipelineConfig

OPERATORS = "ignite_tf.operators"


@dataclass(frozen=True)
class Ref:
    """The XCom of another task (``key`` None: its return value)."""

    task_id: str
    key: str | None = None


@dataclass(frozen=True)
class ModelAsset:
    """The Asset a published model updates (``ignite_tf.operators.publish.model_asset``)."""

    registry_root: str
    model: str


@dataclass(frozen=True)
class NamedAsset:
    """An Asset given by URI (``scheme://...``) or by name."""

    value: str


@dataclass(frozen=True)
class TaskSpec:
    """One task: operator class path, its arguments (``Ref`` for upstream XComs), mapped arguments."""

    task_id: str
    operator: str
    kwargs: dict[str, Any]
    expand: dict[str, Any] | None = None
    after: tuple[str, ...] = ()
    """Tasks that must finish first although no argument refers to them."""

    @property
    def upstream(self) -> set[str]:
        refs = _refs(self.kwargs) | _refs(self.expand or {})
        return {r.task_id for r in refs} | set(self.after)


@dataclass(frozen=True)
class ParamSpec:
    """An Airflow ``Param``: default, JSON-schema keywords (type, bounds, enum) and a description."""

    default: Any
    schema: dict[str, Any]
    description: str = ""


@dataclass(frozen=True)
class DagSpec:
    dag_id: str
    description: str
    schedule: str | ModelAsset | NamedAsset | None
    tags: tuple[str, ...]
    owner: str
    tasks: tuple[TaskSpec, ...]
    params: dict[str, ParamSpec] = field(default_factory=dict)
    doc_md: str = ""
    default_args: dict[str, Any] = field(default_factory=dict)
    """Airflow's task settings for every task (the spec's top-level ``retries``...), besides the owner."""


@dataclass(frozen=True)
class GeneratorSource:
    """``source_callable`` of the load task: ``function(rows, seed=seed)`` of a module or a ``.py`` file.

    A dataclass rather than a closure so the DAG stays cheap to parse: nothing is imported until the load runs.
    """

    generator: str
    rows: int
    seed: int = 0

    def __call__(self):
        target, _, name = self.generator.rpartition(":")
        if target.endswith(".py"):
            module_name = f"ignite_tf_generator_{Path(target).stem}"
            spec = importlib.util.spec_from_file_location(module_name, target)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
        return getattr(module, name)(self.rows, seed=self.seed)


_PARAM_HELP = {
    "epochs": "passes over the data",
    "batch_size": "rows per step per worker",
    "learning_rate": "optimizer step size",
    "workers": "TensorFlow workers (one shard of the cache each)",
    "ps": "parameter servers (async mode only)",
}
_PARAM_TITLES = {"epochs": "Epochs", "batch_size": "Batch size", "learning_rate": "Learning rate",
                 "workers": "Workers", "ps": "Parameter servers", "mode": "Mode (sync / async SGD)",
                 "model_args": "Model arguments"}
_PARAM_TYPES = {"epochs": "integer", "batch_size": "integer", "workers": "integer", "ps": "integer",
                "learning_rate": "number"}


def bounds_text(bounds: dict[str, Any]) -> str:
    """``1 to 64``, ``above 0, at most 10``: the bounds in words, for the trigger form (it does not show them)."""
    low = (f"at least {bounds['minimum']}" if "minimum" in bounds else
           f"above {bounds['exclusiveMinimum']}" if "exclusiveMinimum" in bounds else "")
    high = f"at most {bounds['maximum']}" if "maximum" in bounds else ""
    if "minimum" in bounds and high:
        return f"{bounds['minimum']} to {bounds['maximum']}"
    return ", ".join(t for t in (low, high) if t)


def params_for(config: PipelineConfig) -> dict[str, ParamSpec]:
    """The run-time training settings: defaults from the spec, types and bounds from the spec schema; a title
    and a description (with the bounds in words) for each field of the trigger form."""
    training = config.training
    out: dict[str, ParamSpec] = {}
    if training.entry_point:
        out["mode"] = ParamSpec(training.mode.value, {"type": "string", "enum": [m.value for m in Mode],
                                                      "title": _PARAM_TITLES["mode"]},
                                "sync: all workers average gradients every step; async: parameter servers apply "
                                "each worker's gradients as they come")
        out["model_args"] = ParamSpec(dict(training.model_args), {"type": "object",
                                                                  "title": _PARAM_TITLES["model_args"]},
                                      "keyword arguments of the model function (JSON), e.g. {\"hidden\": 64}")
    for name in training.uses:
        default = getattr(training, name)
        kind: Any = _PARAM_TYPES[name]
        if default is None:
            kind = [kind, "null"]
        bounds = param_bounds(name)
        help_text = f"{_PARAM_HELP[name]}: {_kind_text(kind)} {bounds_text(bounds)}"
        if default is None:
            help_text += "; empty for the default"
        out[name] = ParamSpec(default, {"type": kind, "title": _PARAM_TITLES[name], **bounds}, help_text)
    return out


def _kind_text(kind: Any) -> str:
    first = kind[0] if isinstance(kind, list) else kind
    return "a whole number," if first == "integer" else "a number,"


def _param(name: str, params: dict[str, ParamSpec], fallback: Any) -> Any:
    if name not in params:
        return fallback
    if name == "learning_rate":
        # "None" must not reach the operator: an empty string means "the model's default".
        return "{{ params.learning_rate if params.learning_rate is not none else '' }}"
    if name == "model_args":
        return "{{ params.model_args | tojson }}"  # JSON, not Python's repr of a dict
    return "{{ params." + name + " }}"


def render(config: PipelineConfig) -> list[DagSpec]:
    """The DAGs of one spec: training, and inference when the spec has it. Pure: builds no operator."""
    training, params = config.training, params_for(config)
    conn = {"ignite_conn_id": config.ignite_conn_id}
    # Where the run lives, for every task that writes or reads it (the training, validation results, publish).
    run = {k: v for k, v in (("run_root", config.run_root), ("run_store_conn_id", config.run_store_conn_id)) if v}
    source = config.source
    load_source: dict[str, Any] = (
        {"source": str(source.path), "schema": source.schema} if source.path is not None
        else {"source_callable": GeneratorSource(source.generator, source.rows, source.seed)})
    suite = str(config.suite)
    # The spec's TrainingJob gives the operator its job; the settings a run may change are its Params.
    spec_job = training.job
    mode = _param("mode", params, spec_job.mode.value)
    workers = _param("workers", params, spec_job.workers)
    if spec_job.entry_point:
        job: dict[str, Any] = {"entry_point": spec_job.entry_point,
                               "epochs": _param("epochs", params, spec_job.epochs),
                               "batch_size": _param("batch_size", params, spec_job.batch_size),
                               "learning_rate": _param("learning_rate", params, spec_job.learning_rate),
                               "model_args": _param("model_args", params, dict(spec_job.model_args)),
                               "label_column": spec_job.label_column}
        recorded = {"entry_point": spec_job.entry_point, "label_column": spec_job.label_column,
                    **{k: job[k] for k in ("epochs", "batch_size", "learning_rate", "model_args")}}
    else:
        # Its command runs with the interpreter of whoever parses the DAG: the worker that runs the task parses
        # it again.
        job = {"command": list(spec_job.command), "job_dir": spec_job.job_dir}
        recorded = {"command": list(training.command)}
    env = list(training.env)
    if config.publish is not None and config.shard_plan.evaluation:
        # Champion/challenger: the chief evaluates the production version on the same held-out rows.
        env.append(f"{ENV_PRODUCTION_MODEL}={config.publish.registry_root.rstrip('/')}/{config.publish.model}")

    def policy(stage: str) -> dict[str, Any]:  # a stage's own task settings; the DAG's default_args hold the rest
        return config.task_policy[stage].default_args() if stage in config.task_policy else {}

    # A DAG scheduled on its own table's Asset: its load must not update that Asset, or each run starts the next.
    own_table = config.schedule_asset == table_uri(config.cache, config.ignite_conn_id)
    tasks = [
        TaskSpec("load", f"{OPERATORS}.ignite.IgniteLoadOperator",
                 {**conn, "cache": config.cache, "key": config.key, **load_source,
                  **({"outlets": []} if own_table else {})}),
        TaskSpec("partitions", f"{OPERATORS}.ignite.IgnitePartitionsOperator", {**conn, "cache": config.cache},
                 after=("load",)),
        TaskSpec("shard_plan", f"{OPERATORS}.shards.ShardPlanOperator",
                 {**conn, "partition_map": Ref("partitions"), "workers": workers,
                  "reshuffle": config.shard_plan.reshuffle.value, "seed": config.shard_plan.seed,
                  **({"evaluation": config.shard_plan.evaluation, "evaluation_seed": config.shard_plan.evaluation_seed}
                     if config.shard_plan.evaluation else {})}),
        TaskSpec("validate", f"{OPERATORS}.validation.ValidateShardOperator",
                 {**conn, "plan": Ref("shard_plan", "plan"), "suite": suite}, expand={"shard": Ref("shard_plan")}),
        TaskSpec("validation_gate", f"{OPERATORS}.validation.ValidationGateOperator",
                 {**conn, **run, "results": Ref("validate"), "suite": suite, "cache": config.cache}),
        TaskSpec("train", f"{OPERATORS}.tensorflow.TFClusterOperator",
                 {**conn, **run, "cache": config.cache, "plan": Ref("shard_plan", "plan"), "mode": mode,
                  "workers": workers,
                  "ps": _param("ps", params, spec_job.ps), "deferrable": training.deferrable,
                  "validation": Ref("validation_gate"), "on_data_change": training.on_data_change,
                  **{k: v for k, v in training.supervision.to_dict().items() if k in SUPERVISION_KEYS},
                  **({"env": env} if env else {}), **job,
                  **({"py_modules": list(spec_job.py_modules)} if spec_job.py_modules else {}),
                  **({"launcher": training.launcher.value} if training.launcher is not LauncherKind.LOCAL else {}),
                  **({"kubernetes": training.kubernetes} if training.kubernetes else {}), **policy("training")},
                 after=("validation_gate",)),
    ]
    if config.publish is not None:
        pub = config.publish
        tasks.append(TaskSpec(
            "publish", f"{OPERATORS}.publish.PublishModelOperator",
            {**conn, **({"run_store_conn_id": config.run_store_conn_id} if config.run_store_conn_id else {}),
             "registry_root": pub.registry_root, "model": pub.model, "training": Ref("train"),
             "validation": Ref("validation_gate"), "partition_map": Ref("partitions"),
             "thresholds": {k: list(v) for k, v in pub.thresholds.items()}, "tolerance": pub.tolerance,
             "training_params": {"spec": config.file.name, "mode": mode, "workers": workers, **recorded},
             **policy("publish")}))
    schedule: str | NamedAsset | None = (NamedAsset(config.schedule_asset) if config.schedule_asset
                                         else config.schedule)
    default_args = policy("")
    dags = [DagSpec(config.dag_id, config.description or f"ignite-tf pipeline from {config.file.name}", schedule,
                    config.tags, config.owner, tuple(tasks), params, _doc(config), default_args)]
    if config.inference is not None and config.publish is not None:
        inf, pub = config.inference, config.publish
        score = TaskSpec("score", f"{OPERATORS}.inference.BatchInferenceOperator",
                         {**conn, "registry_root": pub.registry_root, "model": pub.model,
                          "input_cache": inf.input_cache, "output_cache": inf.output_cache, "shards": inf.shards,
                          **policy("inference")},
                         expand={"shard": list(range(inf.shards))})
        dags.append(DagSpec(f"{config.dag_id}_inference",
                            f"Score {inf.input_cache} into {inf.output_cache} with each new production "
                            f"'{pub.model}' model", ModelAsset(pub.registry_root, pub.model),
                            tuple(dict.fromkeys((*config.tags, "inference"))), config.owner, (score,),
                            doc_md=_doc(config), default_args=default_args))
    return dags


def _doc(config: PipelineConfig) -> str:
    return f"Generated by ignite-tf from the pipeline spec `{config.file.name}`. Edit the spec, not this DAG."


def _refs(value: Any) -> set[Ref]:
    if isinstance(value, Ref):
        return {value}
    if isinstance(value, dict):
        return set().union(*(_refs(v) for v in value.values())) if value else set()
    if isinstance(value, list | tuple):
        return set().union(*(_refs(v) for v in value)) if value else set()
    return set()


def build_dag(spec: DagSpec, fileloc: str | None = None):
    """Make the DAG and its operators from a DagSpec, wiring every task to its upstreams.

    :param spec: from :func:`render`.
    :param fileloc: the DAG file that calls the factory (Airflow re-parses it to run a task).
    """
    from airflow.sdk import DAG, Asset, Param

    from ignite_tf.operators.publish import model_asset

    schedule: Any = spec.schedule
    if isinstance(schedule, ModelAsset):
        schedule = [model_asset(schedule.registry_root, schedule.model)]
    elif isinstance(schedule, NamedAsset):
        value = schedule.value
        schedule = [Asset(uri=value) if "://" in value else Asset.ref(name=value)]
    dag = DAG(
        dag_id=spec.dag_id, description=spec.description, schedule=schedule, tags=list(spec.tags),
        default_args={"owner": spec.owner, **spec.default_args}, catchup=False, doc_md=spec.doc_md,
        params={name: Param(p.default, description=p.description, **p.schema) for name, p in spec.params.items()},
        # Registered by load_dags only once fully built: a spec that fails half-way leaves no broken DAG behind.
        auto_register=False,
    )
    if fileloc:
        dag.fileloc = fileloc
    made: dict[str, Any] = {}
    with dag:
        for task in spec.tasks:
            module, _, name = task.operator.rpartition(".")
            cls = getattr(importlib.import_module(module), name)
            kwargs = _resolve(task.kwargs, made)
            if task.expand is not None:
                op = cls.partial(task_id=task.task_id, **kwargs).expand(**_resolve(task.expand, made))
            else:
                op = cls(task_id=task.task_id, **kwargs)
            for upstream in task.after:
                made[upstream] >> op
            made[task.task_id] = op
    return dag


def _resolve(value: Any, made: dict[str, Any]) -> Any:
    if isinstance(value, Ref):
        output = made[value.task_id].output
        return output[value.key] if value.key else output
    if isinstance(value, dict):
        return {k: _resolve(v, made) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, made) for v in value]
    return value
