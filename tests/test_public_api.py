"""The public API (``ignite_tf.public_api``) stays put: every Python name imports and is of its kind, every
command and flag exists, the spec schema holds every YAML key, and every deprecated name still works and warns
naming its new name. Last, a user's script written against ``ignite_tf.runtime.strategy()`` trains on a real
2-worker cluster started with ``ignite-tf start``."""

from __future__ import annotations

import importlib
import inspect
import os
import re
import subprocess
import sys
import types
import warnings
from pathlib import Path

import pytest
import yaml

from ignite_tf.cluster.supervision import Supervision
from ignite_tf.defaults import DEFAULT_HOME
from ignite_tf.errors import IgniteTFDeprecationWarning
from ignite_tf.public_api import (
    COMMANDS,
    DEPRECATED,
    MODEL_ENTRY_POINTS,
    PYTHON,
    REMOVED_IN,
    YAML_KEYS,
    deprecation,
)
from tests.support.sql import create_table

ROOT = Path(__file__).resolve().parents[1]
JOBS = ROOT / "tests" / "jobs"
SUITE = ROOT / "dags" / "expectations" / "tabular.yaml"


def resolve(dotted: str):
    """``ignite_tf.a.b`` as a user's code reads it: attributes first, a submodule where there is none."""
    parts = dotted.split(".")
    obj = importlib.import_module(parts[0])
    for i, part in enumerate(parts[1:], start=2):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            obj = importlib.import_module(".".join(parts[:i]))
    return obj


def from_import(dotted: str):
    """``from a.b import c`` for ``a.b.c``: the module path, then the name."""
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def is_kind(obj, kind: str) -> bool:
    if kind == "module":
        return isinstance(obj, types.ModuleType)
    if kind == "function":
        return inspect.isfunction(obj)
    if kind == "value":
        return obj is not None
    if not inspect.isclass(obj):
        return False
    if kind == "operator":
        from airflow.sdk import BaseOperator

        return issubclass(obj, BaseOperator)
    if kind == "sensor":
        from airflow.sdk import BaseSensorOperator

        return issubclass(obj, BaseSensorOperator)
    if kind == "trigger":
        from airflow.triggers.base import BaseTrigger

        return issubclass(obj, BaseTrigger)
    if kind == "hook":
        from airflow.sdk import BaseHook

        return issubclass(obj, BaseHook)
    if kind == "plugin":
        from airflow.plugins_manager import AirflowPlugin

        return issubclass(obj, AirflowPlugin)
    bases = {"class": object, "exception": BaseException, "warning": Warning}
    return issubclass(obj, bases[kind])


@pytest.mark.parametrize("name, kind", sorted(PYTHON.items()))
def test_python_name_imports_and_is_its_kind(name, kind):
    assert is_kind(resolve(name), kind), f"{name} is not a {kind}: {resolve(name)!r}"


@pytest.mark.parametrize("entry_point", MODEL_ENTRY_POINTS)
def test_model_entry_point_is_a_function(entry_point):
    module, _, function = entry_point.partition(":")
    assert inspect.isfunction(getattr(importlib.import_module(module), function))


def test_importing_the_public_api_and_the_restored_names_stays_light():
    """Airflow imports providers at every DAG parse; a user's script imports ignite_tf.runtime before TF."""
    code = ("import sys, ignite_tf.public_api, ignite_tf.runtime, ignite_tf.etl, ignite_tf.pipeline; "
            "print(sorted(m for m in ('tensorflow', 'great_expectations', 'numpy', 'pyarrow', 'pyignite', "
            "'airflow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def command_line(command: str) -> list[str]:
    program, *rest = command.split()
    if program == "python":
        return [sys.executable, *rest]
    return [str(Path(sys.executable).parent / program), *rest]


@pytest.mark.parametrize("command, names", sorted(COMMANDS.items()))
def test_command_has_its_options_and_arguments(command, names):
    shown = subprocess.run([*command_line(command), "-h"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    words = set(re.findall(r"(?<![\w|-])([-\w|]+)", shown.stdout))
    missing = [n for n in names if n not in words]
    assert not missing, f"`{command} -h` lacks {missing}:\n{shown.stdout}"


def test_every_ignite_tf_subcommand_is_pinned():
    shown = subprocess.run([*command_line("ignite-tf"), "-h"], capture_output=True, text=True, check=True).stdout
    listed = set(re.findall(r"^ {4}([a-z][\w-]*) {2,}\S", shown, re.MULTILINE))  # argparse's subcommand lines
    assert listed == {c.split()[1] for c in COMMANDS if c.startswith("ignite-tf ")}


def schema_keys() -> set[str]:
    from ignite_tf.pipeline.schema import schema

    keys: set[str] = set()

    def walk(node, prefix: str) -> None:
        if not isinstance(node, dict):
            return
        for key, sub in node.get("properties", {}).items():
            keys.add(prefix + key)
            walk(sub, f"{prefix}{key}.")
        for combined in ("anyOf", "oneOf", "allOf"):
            for sub in node.get(combined, ()):
                walk(sub, prefix)

    walk(schema(), "")
    return keys


def test_schema_holds_every_pinned_yaml_key():
    missing = sorted(set(YAML_KEYS) - schema_keys())
    assert not missing, f"pipeline.schema.json lost the YAML keys {missing}: keep them, deprecated, for a release"


def test_every_deprecated_name_has_a_live_new_name_and_one_removal_release():
    assert len({d.old for d in DEPRECATED}) == len(DEPRECATED)
    for entry in DEPRECATED:
        assert deprecation(entry.old).endswith(f"; {entry.old} is removed in {REMOVED_IN}"), entry
        if entry.kind in ("module", "name"):
            resolve(entry.new)
        elif entry.kind == "yaml":
            assert entry.new in schema_keys() and entry.old not in schema_keys(), entry
        elif entry.kind == "generator":
            module, _, function = entry.new.partition(":")
            assert callable(getattr(importlib.import_module(module), function)), entry


# -- deprecated names: each still works and warns with its new name -------------------------------------------

VALUES = {  # what each deprecated value still is
    "ignite_tf.cluster.policy.DEFAULT_RESTART_POLICY": lambda: Supervision().restart_policy,
    "ignite_tf.cluster.policy.DEFAULT_PROGRESS_TIMEOUT_S": lambda: Supervision().progress_timeout_s,
    "ignite_tf.defaults.DEFAULT_REGISTRY_ROOT": lambda: f"{DEFAULT_HOME}/registry",
}


@pytest.mark.parametrize("entry", [d for d in DEPRECATED if d.kind in ("module", "name", "value")],
                         ids=lambda d: d.old)
def test_deprecated_python_name_works_and_warns(entry):
    module = entry.old if entry.kind == "module" else entry.old.rpartition(".")[0]
    if isinstance(sys.modules.get(module), types.ModuleType) and getattr(sys.modules[module], "__file__", None):
        del sys.modules[module]  # a deprecated module warns when it is imported: import it afresh
    with pytest.warns(IgniteTFDeprecationWarning) as warned:
        old = importlib.import_module(entry.old) if entry.kind == "module" else from_import(entry.old)
    # A name of a deprecated module warns as the module does, when the import is what warns.
    expected = {deprecation(entry.old)} | ({deprecation(module)} if module in {d.old for d in DEPRECATED} else set())
    assert expected & {str(w.message) for w in warned}, [str(w.message) for w in warned]
    if entry.kind == "name":
        assert old is resolve(entry.new)
    if entry.kind == "value":
        assert old == VALUES[entry.old]()


def data_module():
    import ignite_tf.data

    return ignite_tf.data


def _dataset_with_label():
    import ignite_tf.data
    from ignite_tf.contract import ENV_CACHE, ENV_SHARD_PLAN
    from ignite_tf.errors import ConfigError

    # No plan and no cache (in the arguments or the environment): the call fails once it has warned.
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(ENV_SHARD_PLAN, raising=False)
        patch.delenv(ENV_CACHE, raising=False)
        with pytest.raises(ConfigError, match=f"^no shard plan: set {ENV_SHARD_PLAN} "):
            ignite_tf.data.dataset(8, label="y")


def _publish_with_model_name():
    from ignite_tf.operators.publish import PublishModelOperator

    assert PublishModelOperator(task_id="p", registry_root="/r", training={}, model_name="m").model == "m"


def _inference_with_model_name():
    from ignite_tf.operators.inference import BatchInferenceOperator

    op = BatchInferenceOperator(task_id="s", registry_root="/r", input_cache="a", output_cache="b", model_name="m")
    assert op.model == "m"


def _data_with_label(call):
    """``call`` (an ignite_tf.data function with ``label=``) fails for want of a plan or connection once it has
    warned: none is given, in the arguments or the environment."""
    from ignite_tf.contract import ENV_CACHE, ENV_SHARD_PLAN
    from ignite_tf.errors import ConfigError

    with pytest.MonkeyPatch.context() as patch:
        for name in (ENV_SHARD_PLAN, ENV_CACHE, "IGNITE_TF_ADDRESSES"):
            patch.delenv(name, raising=False)
        with pytest.raises(ConfigError, match="^no (shard plan|Ignite connection): "):
            call()


def _cluster_id_with_try_number():
    from types import SimpleNamespace

    from ignite_tf.operators.tensorflow import TFClusterOperator

    op = TFClusterOperator(task_id="train", cache="c", command=["python", "train.py"])
    context = {"ti": SimpleNamespace(try_number=2, map_index=-1), "dag": SimpleNamespace(dag_id="d"), "run_id": "r"}
    assert op.cluster_id_for(context, try_number=2) == op.cluster_id_for(context)


def _operator_job_dict():
    from ignite_tf.operators.tensorflow import TFClusterOperator

    op = TFClusterOperator(task_id="train", cache="c", entry_point="ignite_tf.models:tabular_classifier", epochs=2)
    assert op.job() == op.training_job().to_job() and op.job()["entry_point"] == "ignite_tf.models:tabular_classifier"


CALL_WITH_OLD_ARGUMENT = {
    "ignite_tf.data.dataset(label=)": _dataset_with_label,
    "ignite_tf.data.epochs_dataset(label=)": lambda: _data_with_label(
        lambda: data_module().epochs_dataset(8, range(1), label="y")),
    "ignite_tf.data.read_ahead(label=)": lambda: _data_with_label(lambda: data_module().read_ahead(8, label="y")),
    "ignite_tf.data.epochs(label=)": lambda: _data_with_label(lambda: list(data_module().epochs(1, label="y"))),
    "ignite_tf.data.evaluation_dataset(label=)": lambda: _data_with_label(
        lambda: data_module().evaluation_dataset(8, label="y")),
    "ignite_tf.data.cache_columns(label=)": lambda: _data_with_label(
        lambda: data_module().cache_columns(None, None, features=None, label="y")),
    "ignite_tf.operators.tensorflow.TFClusterOperator.cluster_id_for(try_number=)": _cluster_id_with_try_number,
    "ignite_tf.operators.tensorflow.TFClusterOperator.job()": _operator_job_dict,
    "ignite_tf.operators.publish.PublishModelOperator(model_name=)": _publish_with_model_name,
    "ignite_tf.operators.inference.BatchInferenceOperator(model_name=)": _inference_with_model_name,
}


@pytest.mark.parametrize("entry", [d for d in DEPRECATED if d.kind == "argument"], ids=lambda d: d.old)
def test_deprecated_argument_works_and_warns(entry):
    assert entry.old in CALL_WITH_OLD_ARGUMENT, f"add a call of {entry.old} to CALL_WITH_OLD_ARGUMENT"
    # A first operator may set up Airflow's logging, which hooks warnings.showwarning: not inside pytest.warns.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        CALL_WITH_OLD_ARGUMENT[entry.old]()
    with pytest.warns(IgniteTFDeprecationWarning) as warned:
        CALL_WITH_OLD_ARGUMENT[entry.old]()
    assert deprecation(entry.old) in [str(w.message) for w in warned], [str(w.message) for w in warned]


def spec_with(folder: Path, section: str, keys: dict) -> Path:
    """A valid spec (no generator: a two-row CSV) whose ``section`` also holds ``keys``."""
    (folder / "suite.yaml").write_text(SUITE.read_text())
    (folder / "rows.csv").write_text("id,f0,label\n0,0.5,1\n1,1.5,0\n")
    (folder / "train.py").write_text("print('hi')\n")
    training = {"entry_point": MODEL_ENTRY_POINTS[0]}
    doc = {"dag_id": "public_api", "cache": "public_api", "suite": "suite.yaml", "source": {"path": "rows.csv"},
           "training": training, "publish": {"model": "m"}}
    if "script" in keys:
        del training["entry_point"]
    doc[section].update(keys)
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


OLD_YAML = {"training.label": {"label": "y"}, "training.script": {"script": "train.py"},
            "training.args": {"script": "train.py", "args": ["--epochs", "1"]},
            "publish.registry": {"registry": "/tmp/registry"}}


@pytest.mark.parametrize("entry", [d for d in DEPRECATED if d.kind == "yaml"], ids=lambda d: d.old)
def test_deprecated_yaml_key_works_and_warns(tmp_path, entry):
    from ignite_tf.pipeline import SpecDeprecationWarning
    from ignite_tf.pipeline.spec import parse_spec

    assert entry.old in OLD_YAML, f"add a value for {entry.old} to OLD_YAML"
    section = entry.old.split(".")[0]
    path = spec_with(tmp_path, section, OLD_YAML[entry.old])
    with pytest.warns(SpecDeprecationWarning) as warned:
        config = parse_spec(path)
    assert f"{path}: {deprecation(entry.old)}" in [str(w.message) for w in warned]
    field = entry.new.split(".")[1]
    assert getattr(getattr(config, section), field)


@pytest.mark.parametrize("entry", [d for d in DEPRECATED if d.kind == "command"], ids=lambda d: d.old)
def test_deprecated_command_works_and_warns(entry):
    shown = subprocess.run([*command_line(entry.old.replace(" -m ", " -W always::DeprecationWarning -m ")), "-h"],
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "DeprecationWarning" in shown.stderr and entry.new.split()[-1] in shown.stderr, shown.stderr


# -- a user's script written against ignite_tf.runtime.strategy(), for real ------------------------------------

@pytest.fixture(scope="module")
def strategy_cache(ignite_conn):
    client = ignite_conn.client()
    try:
        create_table(client, "public_api_strategy", range(1000))
    finally:
        client.close()
    return "public_api_strategy"


def test_user_script_with_runtime_strategy_trains_on_two_workers(ignite_conn, strategy_cache, tmp_path):
    """``ignite-tf start --workers 2 CACHE JOB_DIR python strategyjob.py``: the script of the first cluster
    release (``ignite_tf.runtime.strategy()``, ``ignite_tf.data.dataset``) trains a step on each worker."""
    env = {**os.environ, **ignite_conn.to_env(), "IGNITE_TF_RUN_ROOT": str(tmp_path / "runs"),
           "IGNITE_TF_CLUSTER_STATE": str(tmp_path / "state")}
    started = subprocess.run([*command_line("ignite-tf start"), "--workers", "2", "--max-restarts", "0",
                              strategy_cache, str(JOBS), "python", "strategyjob.py"],
                             env=env, capture_output=True, text=True, timeout=540)
    assert started.returncode == 0, started.stdout[-4000:] + started.stderr[-4000:]
    logs = tmp_path / "runs" / started.stdout.split()[0] / "logs"  # the CLI prints the cluster id first
    for worker in (0, 1):
        log = (logs / f"worker-{worker}.log").read_text()
        assert f"worker-{worker} trained 2 steps with MultiWorkerMirroredStrategy strategy (2 replicas)" in log, \
            log[-4000:]
