"""Pipeline specs: YAML files checked against the JSON Schema (``schema.py``), parsed into dataclasses.

Parsing is plain Python (PyYAML, jsonschema, croniter): no Airflow, TensorFlow or Great Expectations, so a
DAG processor pays milliseconds per spec. Every error is a :class:`SpecError` naming the file, the field
path (``training.workers``) and what is allowed.

Strings may hold ``${NAME}`` or ``${NAME:-default}`` (expanded when the spec is parsed); a field that is a
single reference takes the type of its value, so ``rows: ${IGNITE_TF_DEMO_ROWS:-20000}`` is a number.
"""

from __future__ import annotations

import importlib.util
import os
import re
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ignite_tf.cluster.environment import parse_env
from ignite_tf.cluster.job import JobError, TrainingJob
from ignite_tf.cluster.launcher import LauncherKind
from ignite_tf.cluster.supervision.settings import Supervision, SupervisionError
from ignite_tf.connection import DEFAULT_CONN_ID
from ignite_tf.contract import Mode
from ignite_tf.defaults import DEFAULT_BATCH_SIZE, DEFAULT_EPOCHS, DEFAULT_LABEL_COLUMN, default_registry_root
from ignite_tf.documents import read_yaml
from ignite_tf.errors import ConfigError, SpecDeprecationWarning, SpecError
from ignite_tf.lineage import table_uri
from ignite_tf.pipeline.schema import field_path, schema_problems, upgrade_renamed_keys
from ignite_tf.pipeline.task_policy import TaskPolicy, task_policies
from ignite_tf.plan.settings import ShardPlanConfig
from ignite_tf.public_api import deprecation, renamed

RENAMED_GENERATORS = renamed("generator")
"""Old ``source.generator`` names -> new ones (accepted until ``public_api.REMOVED_IN``, with a
SpecDeprecationWarning)."""
# A command's first item that runs with the Python that parses the DAG (the worker that runs the task
# parses it again), not whatever ``python`` the task's PATH holds.
PYTHON_NAMES = ("python", "python3")
PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")
# Training settings a run may override (Airflow Params); their bounds live in the schema's $defs.
PARAM_FIELDS = ("epochs", "batch_size", "learning_rate", "workers", "ps")
# The ``training`` keys that make its ``Supervision`` (the grace period is not one: its default).
SUPERVISION_KEYS = ("max_restarts", "startup_deadline_s", "restart_policy", "progress_timeout_s")
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _fail(field_path: str, message: str):
    raise SpecError(None, [(field_path, message)])


@dataclass(frozen=True)
class SourceConfig:
    """The ETL input: a file, or a generator function (e.g. the shipped synthetic data)."""

    path: Path | None = None
    """A ``.csv`` / ``.parquet`` / ``.pq`` file."""
    generator: str | None = None
    """``package.module:function`` or ``/abs/file.py:function`` returning a DataFrame: ``fn(rows, seed=seed)``."""
    rows: int | None = None
    seed: int = 0
    schema: dict[str, str] | None = None
    """Column -> type; only these columns are loaded."""

    def __post_init__(self):
        if (self.path is None) == (self.generator is None):
            _fail("", "give exactly one of path or generator")
        if self.path is not None:
            if self.path.suffix.lower() not in (".csv", ".parquet", ".pq"):
                _fail("path", f"{self.path} is not a .csv, .parquet or .pq file")
            if not self.path.is_file():
                _fail("path", f"file {self.path} does not exist (paths are relative to the spec file)")
            if self.rows is not None:
                _fail("rows", "rows goes with generator; a file is loaded whole")
            return
        if self.rows is None or self.rows < 1:
            _fail("rows", "a generator needs rows >= 1")
        target, _, function = self.generator.rpartition(":")
        if target.endswith(".py"):
            if not Path(target).is_file():
                _fail("generator", f"file {target} does not exist (paths are relative to the spec file)")
        elif not _module_exists(target):
            _fail("generator", f"module {target!r} cannot be found: install it, or give 'relative/file.py:{function}'")


@dataclass(frozen=True)
class TrainingConfig:
    """The TensorFlow cluster and what it runs (defaults of the DAG's Params)."""

    mode: Mode = Mode.SYNC
    workers: int = 2
    ps: int = 1
    launcher: LauncherKind = LauncherKind.LOCAL
    entry_point: str | None = None
    """``package.module:function`` returning a compiled tf_keras model, trained by ``ignite_tf.runtime.train``."""
    command: tuple[str, ...] = ()
    """A user's command, run unchanged in ``job_dir`` with TF_CONFIG set: a program (or a ``.py`` script,
    relative to ``job_dir``), then its arguments. A script, ``python`` or ``python3`` first runs with the
    Python that runs Airflow."""
    job_dir: Path | None = None
    model_args: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the entry point's model function (``--model-arg``), e.g. ``{"hidden": 64}``."""
    epochs: int = DEFAULT_EPOCHS
    batch_size: int = DEFAULT_BATCH_SIZE
    learning_rate: float | None = None
    label_column: str = DEFAULT_LABEL_COLUMN
    supervision: Supervision = field(default_factory=Supervision)
    """The keys ``max_restarts``, ``startup_deadline_s``, ``restart_policy`` (on-failure, exit-code: signals,
    statuses >= 128, the watchdog; never) and ``progress_timeout_s`` (0: watchdog off), as one value."""
    env: tuple[str, ...] = ()
    """Variables for every task: ``NAME`` (the Airflow worker's value) or ``NAME=VALUE``."""
    py_modules: tuple[Path, ...] = ()
    """Folders or ``.py`` files shipped to every task (``ignite_tf.runstore.code``), besides the entry point's
    own module."""
    kubernetes: dict[str, Any] | None = None
    """Settings of ``launcher: kubernetes`` (``ignite_tf.cluster.k8s.settings.KubernetesSettings``)."""
    deferrable: bool = True
    """The training task waits in the triggerer (no worker slot held); false: in its worker."""
    on_data_change: str = "fail"  # rows read differ from those validated: fail, or warn (validation.fingerprints)
    job: TrainingJob = field(init=False, repr=False, compare=False)
    """The section's training as one value, its settings at their spec values (a run's Params may change them)."""

    def __post_init__(self):
        try:
            parse_env(self.env)
        except ConfigError as exc:
            _fail("env", str(exc))
        if self.kubernetes is not None:
            if self.launcher is not LauncherKind.KUBERNETES:
                _fail("kubernetes", "goes with launcher: kubernetes")
            from ignite_tf.cluster.k8s.settings import KubernetesSettings

            try:
                KubernetesSettings.parse(self.kubernetes)
            except (ConfigError, TypeError) as exc:
                _fail("kubernetes", str(exc))
        if self.command and self.model_args:
            _fail("model_args", "goes with entry_point; a command takes its settings as arguments")
        try:
            object.__setattr__(self, "job", self._training_job())
        except JobError as exc:
            _fail("" if exc.field == "entry_point" else exc.field, str(exc))
        if self.command:
            if self.job_dir is None or not self.job_dir.exists():
                _fail("job_dir", f"{self.job_dir} does not exist (paths are relative to the spec file)")
            script = self.script
            if script is not None and self.job_dir.is_dir() and not (self.job_dir / script).is_file():
                _fail("command", f"{script!r} is not a file in job_dir {self.job_dir}")

    def _training_job(self) -> TrainingJob:
        code = {"entry_point": self.entry_point, "job_dir": str(self.job_dir) if self.job_dir else None,
                "mode": self.mode, "workers": self.workers, "ps": self.ps,
                "py_modules": tuple(str(m) for m in self.py_modules)}
        if self.command:
            return TrainingJob(command=self.argv(sys.executable), **code)
        return TrainingJob(epochs=self.epochs, batch_size=self.batch_size, learning_rate=self.learning_rate,
                           label_column=self.label_column, model_args=self.model_args, **code)

    @property
    def script(self) -> str | None:
        """The ``.py`` script the command runs: ``train.py`` of ``[train.py, ...]`` or ``[python, train.py, ...]``."""
        items = self.command[1:2] if self.command[:1] and self.command[0] in PYTHON_NAMES else self.command[:1]
        return next((item for item in items if item.endswith(".py")), None)

    def argv(self, python: str) -> list[str]:
        """The command to run, with ``python`` for a leading script, ``python`` or ``python3``."""
        if not self.command:
            return []
        first, *rest = self.command
        if first in PYTHON_NAMES:
            return [python, *rest]
        return [python, first, *rest] if first.endswith(".py") else [first, *rest]

    @property
    def uses(self) -> tuple[str, ...]:
        """Training settings a run can change: all for an entry point; for a command those its arguments template."""
        if self.entry_point:
            return PARAM_FIELDS
        text = " ".join(self.command)
        fixed = ("workers", "ps") if self.mode is Mode.ASYNC else ("workers",)
        return tuple(n for n in PARAM_FIELDS if n in fixed or f"params.{n}" in text)


@dataclass(frozen=True)
class PublishConfig:
    """Publishing to the model registry behind a blessing gate."""

    model: str
    registry_root: str
    thresholds: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    tolerance: float = 0.0

    def __post_init__(self):
        for metric, (lo, hi) in self.thresholds.items():
            if lo is not None and hi is not None and lo > hi:
                _fail(f"thresholds.{metric}", f"min {lo} is above max {hi}")


@dataclass(frozen=True)
class InferenceConfig:
    """Batch inference with the production model, in a DAG scheduled on the model's Asset."""

    input_cache: str
    output_cache: str
    shards: int = 2

    def __post_init__(self):
        if self.input_cache.lower() == self.output_cache.lower():
            _fail("output_cache", "must differ from input_cache (predictions would overwrite the features)")


@dataclass(frozen=True)
class PipelineConfig:
    """One spec file: a training DAG, and optionally its inference DAG."""

    file: Path
    dag_id: str
    cache: str
    source: SourceConfig
    suite: Path
    training: TrainingConfig
    description: str = ""
    owner: str = "ignite-tf"
    tags: tuple[str, ...] = ()
    schedule: str | None = None  # cron expression, preset or None
    schedule_asset: str | None = None
    """URI or name of the Asset whose updates start a run (instead of ``schedule``); ``{table: T}``: T's load."""
    ignite_conn_id: str = DEFAULT_CONN_ID
    run_root: str | None = None  # a folder or an object-store URL; None: IGNITE_TF_RUN_ROOT
    run_store_conn_id: str | None = None  # the aws connection of an object-store run_root
    key: str | None = None
    shard_plan: ShardPlanConfig = field(default_factory=ShardPlanConfig)
    publish: PublishConfig | None = None
    inference: InferenceConfig | None = None
    task_policy: dict[str, TaskPolicy] = field(default_factory=dict)
    """Airflow's task settings (``task_policy.py``): ``""`` for every task, else a stage's section name."""

    def __post_init__(self):
        if self.schedule is not None:
            check_schedule(self.schedule)
        if not self.suite.is_file():
            _fail("suite", f"file {self.suite} does not exist (paths are relative to the spec file)")
        if self.inference is not None and self.publish is None:
            _fail("inference", "needs a publish section: it scores with the published production model")


def check_schedule(value: str) -> None:
    """A cron expression or one of Airflow's presets, else SpecError on ``schedule``."""
    if value.startswith("@"):
        if value not in PRESETS:
            _fail("schedule", f"unknown preset {value!r}; allowed: {', '.join(PRESETS)}, a cron expression, "
                              f"null, {{asset: ...}} or {{table: ...}}")
        return
    from croniter import croniter

    if not croniter.is_valid(value):
        _fail("schedule", f"{value!r} is not a valid cron expression (minute hour day-of-month month "
                          f"day-of-week, e.g. '0 3 * * 1'); or use a preset: {', '.join(PRESETS)}")


def parse_spec(path: str | Path) -> PipelineConfig:
    """Read, expand, validate and parse one spec file.

    :param path: the YAML file.
    :raises SpecError: anything wrong, naming the file and the field.
    """
    path = Path(path).absolute()
    raw = read_yaml(path, lambda problem: SpecError(path, [("(file)", problem)]))
    if not isinstance(raw, dict):
        raise SpecError(path, [("(file)", f"must be a mapping of keys (got {type(raw).__name__})")])
    try:
        doc, renamed = upgrade_renamed_keys(_expand(raw, ""))
        for old, _new in renamed:
            warnings.warn(f"{path}: {deprecation(old)}", SpecDeprecationWarning, stacklevel=2)
        problems = schema_problems(doc)
        if problems:
            raise SpecError(path, problems)
        return _build(doc, path)
    except SpecError as exc:
        raise exc.within(path) from None


def _expand(value: Any, where: str) -> Any:
    """``${NAME}`` / ``${NAME:-default}`` in every string; a whole-string reference takes its value's type."""
    if isinstance(value, dict):
        return {k: _expand(v, field_path(where, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v, f"{where}.{i}") for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value

    def sub(match: re.Match) -> str:
        name, default = match.group(1), match.group(2)
        found = os.environ.get(name)
        if found:
            return found
        if default is None:
            _fail(where, f"environment variable {name} is not set: set it, or give a default as ${{{name}:-value}}")
        return default

    text = _ENV.sub(sub, value)
    if _ENV.fullmatch(value):
        typed = yaml.safe_load(text) if text.strip() else text
        if isinstance(typed, int | float | bool) or typed is None:
            return typed
    return text


def _build(doc: dict[str, Any], path: Path) -> PipelineConfig:
    base = path.parent

    def section(name: str, make):
        try:
            return make(doc.get(name) or {})
        except SpecError as exc:
            raise exc.within(None, name) from None

    def source(value):
        if isinstance(value, str):
            value = {"path": value}
        generator = value.get("generator")
        if generator in RENAMED_GENERATORS:
            warnings.warn(f"{path}: source.generator {deprecation(generator)}", SpecDeprecationWarning,
                          stacklevel=2)
            generator = RENAMED_GENERATORS[generator]
        if generator:
            target, _, function = generator.rpartition(":")
            if target.endswith(".py"):
                generator = f"{_resolve(base, target)}:{function}"
        return SourceConfig(path=_resolve(base, value["path"]) if value.get("path") else None,
                            generator=generator, rows=value.get("rows"), seed=value.get("seed", 0),
                            schema=value.get("schema"))

    def supervision(t):
        try:
            return Supervision.build(**{k: t.get(k) for k in SUPERVISION_KEYS})
        except SupervisionError as exc:
            _fail(exc.field, str(exc))

    def training(t):
        job_dir = _resolve(base, t["job_dir"]) if t.get("job_dir") else (base if t.get("command") else None)
        return TrainingConfig(
            mode=Mode(t.get("mode", Mode.SYNC)), workers=t.get("workers", 2), ps=t.get("ps", 1),
            launcher=LauncherKind.parse(t.get("launcher")), entry_point=t.get("entry_point"),
            command=tuple(t.get("command", ())), job_dir=job_dir, model_args=dict(t.get("model_args") or {}),
            epochs=t.get("epochs", DEFAULT_EPOCHS), batch_size=t.get("batch_size", DEFAULT_BATCH_SIZE),
            learning_rate=None if t.get("learning_rate") is None else float(t["learning_rate"]),
            label_column=t.get("label_column", DEFAULT_LABEL_COLUMN),
            supervision=supervision(t), env=tuple(t.get("env", ())),
            py_modules=tuple(_resolve(base, m) for m in t.get("py_modules", ())),
            kubernetes=dict(t["kubernetes"]) if t.get("kubernetes") is not None else None,
            deferrable=t.get("deferrable", True), on_data_change=t.get("on_data_change", "fail"))

    def publish(p):
        registry_root = p.get("registry_root") or default_registry_root()
        if "://" not in registry_root:
            registry_root = str(_resolve(base, registry_root))
        thresholds = {m: (b[0], b[1]) for m, b in (p.get("thresholds") or {}).items()}
        return PublishConfig(model=p["model"], registry_root=registry_root, thresholds=thresholds,
                             tolerance=float(p.get("tolerance", 0.0)))

    def inference(i):
        return InferenceConfig(input_cache=i.get("input_cache", doc["cache"]), output_cache=i["output_cache"],
                               shards=i.get("shards", 2))

    root, conn_id = doc.get("run_root"), doc.get("ignite_conn_id", DEFAULT_CONN_ID)
    schedule, shard_plan = doc.get("schedule"), doc.get("shard_plan") or {}
    return PipelineConfig(
        file=path, dag_id=doc["dag_id"], cache=doc["cache"], source=section("source", source),
        suite=_resolve(base, doc["suite"]), training=section("training", training),
        description=doc.get("description", ""), owner=doc.get("owner", "ignite-tf"), tags=tuple(doc.get("tags", ())),
        schedule=schedule if isinstance(schedule, str) else None,
        schedule_asset=(schedule.get("asset") or table_uri(schedule["table"], conn_id)) if isinstance(schedule, dict)
        else None,
        ignite_conn_id=conn_id, key=doc.get("key"),
        run_root=root if not root or "://" in root else str(_resolve(base, root)),
        run_store_conn_id=doc.get("run_store_conn_id"),
        shard_plan=ShardPlanConfig.parse(shard_plan),
        publish=section("publish", publish) if "publish" in doc else None,
        inference=section("inference", inference) if "inference" in doc else None, task_policy=task_policies(doc),
    )


def _resolve(base: Path, value: str) -> Path:
    return (base / Path(value).expanduser()).resolve()


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
