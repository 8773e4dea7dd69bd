"""Pipeline specs: YAML files checked against ``resources/pipeline.schema.json``, parsed into dataclasses.

Parsing is plain Python (PyYAML, jsonschema, croniter): no Airflow, TensorFlow or Great Expectations, so a
DAG processor pays milliseconds per spec. Every error is a :class:`SpecError` naming the file, the field
path (``training.workers``) and what is allowed.

Strings may hold ``${NAME}`` or ``${NAME:-default}`` (expanded when the spec is parsed); a field that is a
single reference takes the type of its value, so ``rows: ${IGNITE_TF_DEMO_ROWS:-20000}`` is a number.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import os
import re
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from ignite_tf.cluster.environment import parse_env
from ignite_tf.cluster.policy import DEFAULT_PROGRESS_TIMEOUT_S, DEFAULT_RESTART_POLICY, RestartPolicy
from ignite_tf.cluster.spec import Mode
from ignite_tf.documents import read_yaml
from ignite_tf.errors import ConfigError, SpecError
from ignite_tf.plan.shards import Reshuffle

SCHEMA_RESOURCE = "pipeline.schema.json"
DEFAULT_REGISTRY = "${IGNITE_TF_REGISTRY:-~/.cache/ignite-tf/registry}"
PRESETS = ("@once", "@continuous", "@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")
# Training settings a run may override (Airflow Params); their bounds live in the schema's $defs.
PARAM_FIELDS = ("epochs", "batch_size", "learning_rate", "workers", "ps")
_ENV = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def _fail(field_path: str, message: str):
    raise SpecError(None, [(field_path, message)])


class Launcher(StrEnum):
    LOCAL = "local"
    KUBERNETES = "kubernetes"


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
class ShardPlanConfig:
    """How the cache's partitions are shared among workers."""

    reshuffle: Reshuffle = Reshuffle.EPOCH
    seed: int = 0


@dataclass(frozen=True)
class TrainingConfig:
    """The TensorFlow cluster and what it runs (defaults of the DAG's Params)."""

    mode: Mode = Mode.SYNC
    workers: int = 2
    ps: int = 1
    launcher: Launcher = Launcher.LOCAL
    entry_point: str | None = None
    """``package.module:function`` returning a compiled tf_keras model, trained by ``ignite_tf.runtime.train``."""
    script: str | None = None
    """A user's script, relative to ``job_dir``, run unchanged with TF_CONFIG set."""
    args: tuple[str, ...] = ()
    job_dir: Path | None = None
    model_args: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the entry point's model function (``--model-arg``), e.g. ``{"hidden": 64}``."""
    epochs: int = 5
    batch_size: int = 64
    learning_rate: float | None = None
    label: str = "label"
    max_restarts: int = 2
    startup_deadline_s: float = 180.0
    restart_policy: RestartPolicy = DEFAULT_RESTART_POLICY
    """Which failures are restarted: on-failure, exit-code (signals, statuses >= 128, the watchdog), never."""
    progress_timeout_s: float = DEFAULT_PROGRESS_TIMEOUT_S
    """Seconds a task may go without progress after its first report (0: watchdog off)."""
    env: tuple[str, ...] = ()
    """Variables for every task: ``NAME`` (the Airflow worker's value) or ``NAME=VALUE``."""
    kubernetes: dict[str, Any] | None = None
    """Settings of ``launcher: kubernetes`` (``ignite_tf.cluster.k8s.settings.KubernetesSettings``)."""

    def __post_init__(self):
        try:
            parse_env(self.env)
        except ConfigError as exc:
            _fail("env", str(exc))
        if self.kubernetes is not None:
            if self.launcher is not Launcher.KUBERNETES:
                _fail("kubernetes", "goes with launcher: kubernetes")
            from ignite_tf.cluster.k8s.settings import KubernetesSettings

            try:
                KubernetesSettings.parse(self.kubernetes)
            except (ConfigError, TypeError) as exc:
                _fail("kubernetes", str(exc))
        if (self.entry_point is None) == (self.script is None):
            _fail("", "give exactly one of entry_point ('module:function') or script (+ args, job_dir)")
        if self.workers < 1:
            _fail("workers", f"{self.workers} is not allowed: a cluster needs at least 1 worker")
        if self.mode is Mode.ASYNC and self.ps < 1:
            _fail("ps", "async mode needs at least 1 parameter server")
        if self.epochs < 1 or self.batch_size < 1:
            _fail("epochs" if self.epochs < 1 else "batch_size", "must be >= 1")
        if self.learning_rate is not None and self.learning_rate <= 0:
            _fail("learning_rate", "must be > 0 (or null for the model's default)")
        if self.script is not None:
            if self.job_dir is None or not self.job_dir.exists():
                _fail("job_dir", f"{self.job_dir} does not exist (paths are relative to the spec file)")
            if self.job_dir.is_dir() and not (self.job_dir / self.script).is_file():
                _fail("script", f"{self.script!r} is not a file in job_dir {self.job_dir}")
        elif self.args or self.job_dir is not None:
            _fail("args" if self.args else "job_dir", "goes with script; an entry_point takes the training settings")
        if self.script is not None and self.model_args:
            _fail("model_args", "goes with entry_point; a script takes its settings from args")

    @property
    def uses(self) -> tuple[str, ...]:
        """Training settings a run can change: all for an entry point; for a script those its args template."""
        if self.entry_point:
            return PARAM_FIELDS
        text = " ".join(self.args)
        fixed = ("workers", "ps") if self.mode is Mode.ASYNC else ("workers",)
        return tuple(n for n in PARAM_FIELDS if n in fixed or f"params.{n}" in text)


@dataclass(frozen=True)
class PublishConfig:
    """Publishing to the model registry behind a blessing gate."""

    model: str
    registry: str
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
    schedule: str | None = None
    """Cron expression, preset or None."""
    schedule_asset: str | None = None
    """URI or name of the Asset whose updates start a run (instead of ``schedule``)."""
    ignite_conn_id: str = "ignite_default"
    key: str | None = None
    shard_plan: ShardPlanConfig = field(default_factory=ShardPlanConfig)
    publish: PublishConfig | None = None
    inference: InferenceConfig | None = None

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
                              f"null or {{asset: ...}}")
        return
    from croniter import croniter

    if not croniter.is_valid(value):
        _fail("schedule", f"{value!r} is not a valid cron expression (minute hour day-of-month month "
                          f"day-of-week, e.g. '0 3 * * 1'); or use a preset: {', '.join(PRESETS)}")


@cache
def schema() -> dict[str, Any]:
    """The published JSON Schema of pipeline specs."""
    return json.loads(resources.files("ignite_tf").joinpath("resources", SCHEMA_RESOURCE).read_text())


def param_bounds(name: str) -> dict[str, Any]:
    """JSON-schema bounds (``minimum``...) of a training setting, shared by the spec schema and the Params."""
    return {k: v for k, v in schema()["$defs"][name].items() if k not in ("type", "pattern")}


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
        doc = _expand(raw, "")
        problems = schema_problems(doc)
        if problems:
            raise SpecError(path, problems)
        return _build(doc, path)
    except SpecError as exc:
        raise exc.within(path) from None


def schema_problems(doc: Any) -> list[tuple[str, str]]:
    """Every JSON-Schema violation of ``doc`` as ``(field path, message)``, in document order."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    out = [_describe(e) for e in sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])]
    return list(dict.fromkeys(out))


def _describe(error) -> tuple[str, str]:
    path = ".".join(str(p) for p in error.absolute_path)
    kind, value, rule, sub = error.validator, error.instance, error.validator_value, error.schema
    allowed = sub.get("description", "")
    if kind == "additionalProperties" and isinstance(value, dict):
        known = sorted(sub.get("properties", {}))
        extra = sorted(set(value) - set(known))
        if known:
            close = difflib.get_close_matches(extra[0], known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return (_join(path, extra[0]), f"unknown key {extra[0]!r}{hint}; allowed keys: {', '.join(known)}")
        return (_join(path, extra[0]) if extra else path, error.message)
    if kind == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        what = sub.get("properties", {}).get(missing, {}).get("description", "")
        return (_join(path, missing), f"is required{f' ({what})' if what else ''}")
    if kind in ("type", "pattern") and ("integer" in _types(sub) or "number" in _types(sub)):
        want = "an integer" if "integer" in _types(sub) else "a number"
        return (path, f"expected {want} (or a ${{ENV}} reference), got {value!r}")
    if kind == "type":
        return (path, f"expected {' or '.join(_types(sub))}, got {type(value).__name__} {value!r}")
    if kind == "enum":
        return (path, f"{value!r} is not allowed; allowed: {', '.join(map(str, rule))}")
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        bounds = {k: sub[k] for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum") if k in sub}
        text = ", ".join(f"{k.replace('exclusiveM', 'exclusive m')} {v}" for k, v in bounds.items())
        return (path, f"{value!r} is out of range ({text})")
    if kind == "pattern":
        return (path, f"{value!r} is not allowed: {allowed or 'must match ' + rule}")
    if kind == "anyOf" and error.context:
        return _describe(max(error.context, key=lambda e: len(e.absolute_path)))
    return (path, f"{error.message}{f' ({allowed})' if allowed else ''}")


def _types(sub: dict) -> list[str]:
    kind = sub.get("type", [])
    return [kind] if isinstance(kind, str) else list(kind)


def _join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _expand(value: Any, where: str) -> Any:
    """``${NAME}`` / ``${NAME:-default}`` in every string; a whole-string reference takes its value's type."""
    if isinstance(value, dict):
        return {k: _expand(v, _join(where, str(k))) for k, v in value.items()}
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
        if generator:
            target, _, function = generator.rpartition(":")
            if target.endswith(".py"):
                generator = f"{_resolve(base, target)}:{function}"
        return SourceConfig(path=_resolve(base, value["path"]) if value.get("path") else None,
                            generator=generator, rows=value.get("rows"), seed=value.get("seed", 0),
                            schema=value.get("schema"))

    def training(t):
        job_dir = _resolve(base, t["job_dir"]) if t.get("job_dir") else (base if t.get("script") else None)
        lr = t.get("learning_rate")
        return TrainingConfig(
            mode=Mode(t.get("mode", "sync")), workers=t.get("workers", 2), ps=t.get("ps", 1),
            launcher=Launcher(t.get("launcher", "local")), entry_point=t.get("entry_point"), script=t.get("script"),
            args=tuple(t.get("args", ())), job_dir=job_dir, model_args=dict(t.get("model_args") or {}),
            epochs=t.get("epochs", 5),
            batch_size=t.get("batch_size", 64), learning_rate=None if lr is None else float(lr),
            label=t.get("label", "label"), max_restarts=t.get("max_restarts", 2),
            startup_deadline_s=float(t.get("startup_deadline_s", 180.0)),
            restart_policy=RestartPolicy.parse(t.get("restart_policy")),
            progress_timeout_s=float(t.get("progress_timeout_s", DEFAULT_PROGRESS_TIMEOUT_S)),
            env=tuple(t.get("env", ())),
            kubernetes=dict(t["kubernetes"]) if t.get("kubernetes") is not None else None)

    def publish(p):
        registry = p.get("registry") or _expand(DEFAULT_REGISTRY, "publish.registry")
        if "://" not in registry:
            registry = str(_resolve(base, registry))
        thresholds = {m: (b[0], b[1]) for m, b in (p.get("thresholds") or {}).items()}
        return PublishConfig(model=p["model"], registry=registry, thresholds=thresholds,
                             tolerance=float(p.get("tolerance", 0.0)))

    def inference(i):
        return InferenceConfig(input_cache=i.get("input_cache", doc["cache"]), output_cache=i["output_cache"],
                               shards=i.get("shards", 2))

    schedule = doc.get("schedule")
    shard_plan = doc.get("shard_plan") or {}
    return PipelineConfig(
        file=path, dag_id=doc["dag_id"], cache=doc["cache"], source=section("source", source),
        suite=_resolve(base, doc["suite"]), training=section("training", training),
        description=doc.get("description", ""), owner=doc.get("owner", "ignite-tf"), tags=tuple(doc.get("tags", ())),
        schedule=schedule if isinstance(schedule, str) else None,
        schedule_asset=schedule["asset"] if isinstance(schedule, dict) else None,
        ignite_conn_id=doc.get("ignite_conn_id", "ignite_default"), key=doc.get("key"),
        shard_plan=ShardPlanConfig(Reshuffle(shard_plan.get("reshuffle", "epoch")), shard_plan.get("seed", 0)),
        publish=section("publish", publish) if "publish" in doc else None,
        inference=section("inference", inference) if "inference" in doc else None,
    )


def _resolve(base: Path, value: str) -> Path:
    return (base / Path(value).expanduser()).resolve()


def _module_exists(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
