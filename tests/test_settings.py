"""One name and one default per setting: YAML schema, parsed spec, operators, CLIs, core functions, the docs' settings table.

Every default is read from where it takes effect (``inspect.signature``, the JSON schema, the argparse
parsers, a parsed spec), not copied here, so a place that drifts fails this test.
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from pathlib import Path

import pytest
import yaml

from ignite_tf import defaults
from ignite_tf.cluster.policy import DEFAULT_PROGRESS_TIMEOUT_S, DEFAULT_RESTART_POLICY
from ignite_tf.home import ENV_HOME

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "dags" / "expectations" / "tabular.yaml"


def default_of(function, name: str):
    return inspect.signature(function).parameters[name].default


def schema_default(section: str, key: str):
    from ignite_tf.pipeline.schema import schema

    return schema()["properties"][section]["properties"][key]["default"]


def minimal_spec(folder: Path, **training) -> Path:
    """A spec that gives no optional setting, so parsing it shows the spec's own defaults."""
    (folder / "suite.yaml").write_text(SUITE.read_text())
    doc = {"dag_id": "settings_test", "cache": "settings_test", "suite": "suite.yaml",
           "source": {"generator": "ignite_tf_dev.demo_data:tabular", "rows": 10},
           "training": {"entry_point": "ignite_tf.models:tabular_classifier", **training},
           "publish": {"model": "m"}}
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def cli_start_defaults():
    from ignite_tf.cli import build_parser

    return build_parser().parse_args(["start", "cache", "job", "python", "train.py"])


def runtime_defaults():
    from ignite_tf.runtime.train import build_parser

    return build_parser().parse_args(["--epochs", "1"])


# -- defaults -----------------------------------------------------------------------------------------------

def test_max_restarts_startup_deadline_restart_policy_and_watchdog_agree_everywhere(tmp_path):
    from ignite_tf.cluster.api import start_cluster
    from ignite_tf.cluster.spec import ClusterSpec, build_spec
    from ignite_tf.operators.tensorflow import TFClusterOperator
    from ignite_tf.pipeline.spec import TrainingConfig, parse_spec

    parsed = parse_spec(minimal_spec(tmp_path)).training
    cli = cli_start_defaults()
    spec_fields = {f.name: f.default for f in dataclasses.fields(ClusterSpec)}
    yaml_fields = {f.name: f.default for f in dataclasses.fields(TrainingConfig)}
    for name, value, cli_value in [
        ("max_restarts", defaults.DEFAULT_MAX_RESTARTS, cli.max_restarts),
        ("startup_deadline_s", defaults.DEFAULT_STARTUP_DEADLINE_S, cli.startup_deadline),
        ("progress_timeout_s", DEFAULT_PROGRESS_TIMEOUT_S, cli.progress_timeout),
    ]:
        found = {"schema": schema_default("training", name), "parsed spec": getattr(parsed, name),
                 "TrainingConfig": yaml_fields[name], "CLI": cli_value,
                 "start_cluster": default_of(start_cluster, name), "build_spec": default_of(build_spec, name),
                 "ClusterSpec": spec_fields[name]}
        if name != "progress_timeout_s":  # the operator's None means "the core's default"
            found["TFClusterOperator"] = default_of(TFClusterOperator.__init__, name)
        assert {k: v for k, v in found.items() if v != value} == {}, name
    assert (defaults.DEFAULT_MAX_RESTARTS, defaults.DEFAULT_STARTUP_DEADLINE_S, DEFAULT_PROGRESS_TIMEOUT_S) == (2, 180, 600)
    policy = DEFAULT_RESTART_POLICY.value
    assert schema_default("training", "restart_policy") == policy == cli.restart_policy
    assert parsed.restart_policy.value == policy and spec_fields["restart_policy"].value == policy


def test_training_parameters_agree_between_yaml_operator_runtime_cli_and_runtime_functions(tmp_path):
    from ignite_tf.operators.tensorflow import TFClusterOperator
    from ignite_tf.pipeline.spec import parse_spec
    from ignite_tf.runtime.train import serve, train

    parsed = parse_spec(minimal_spec(tmp_path)).training
    runtime = runtime_defaults()
    operator = TFClusterOperator.__init__
    assert (schema_default("training", "label_column") == parsed.label_column == runtime.label_column
            == default_of(operator, "label_column") == default_of(train, "label_column")
            == default_of(serve, "label_column") == defaults.DEFAULT_LABEL_COLUMN)
    assert (schema_default("training", "batch_size") == parsed.batch_size == runtime.batch_size
            == default_of(operator, "batch_size") == default_of(train, "batch_size")
            == default_of(serve, "batch_size") == defaults.DEFAULT_BATCH_SIZE)
    assert (schema_default("training", "epochs") == parsed.epochs == default_of(operator, "epochs")
            == defaults.DEFAULT_EPOCHS)


def build_runtime(extra: list[str]):
    from ignite_tf.runtime.train import build_parser

    return build_parser().parse_args(["--epochs", "1", *extra])


def test_label_is_an_alias_of_label_column_on_the_runtime_cli():
    assert build_runtime(["--label", "y"]).label_column == "y"
    assert build_runtime(["--label-column", "y"]).label_column == "y"


def test_poll_interval_agrees_between_operator_sensor_and_trigger():
    from ignite_tf.operators.tensorflow import TFClusterOperator
    from ignite_tf.sensors.tf_cluster import TFClusterSensor
    from ignite_tf.triggers.tf_cluster import TFClusterTrigger

    found = {cls.__name__: default_of(cls.__init__, "poll_interval")
             for cls in (TFClusterOperator, TFClusterSensor, TFClusterTrigger)}
    assert found == dict.fromkeys(found, defaults.DEFAULT_POLL_INTERVAL) and defaults.DEFAULT_POLL_INTERVAL == 5.0


def test_registry_root_default_is_the_variable_else_the_home_folder(tmp_path, monkeypatch):
    from ignite_tf.pipeline.spec import parse_spec

    monkeypatch.delenv(defaults.ENV_REGISTRY_ROOT, raising=False)
    monkeypatch.setenv("IGNITE_TF_HOME", str(tmp_path / "home"))
    assert parse_spec(minimal_spec(tmp_path)).publish.registry_root == str(tmp_path / "home" / "registry")
    monkeypatch.setenv(defaults.ENV_REGISTRY_ROOT, str(tmp_path / "elsewhere"))
    assert parse_spec(minimal_spec(tmp_path)).publish.registry_root == str(tmp_path / "elsewhere")
    from ignite_tf.pipeline.schema import schema

    entry = schema()["properties"]["publish"]["properties"]["registry_root"]
    assert "default" not in entry
    assert all(f"${name}" in entry["description"] for name in (defaults.ENV_REGISTRY_ROOT, ENV_HOME))


def test_docs_settings_table_shows_the_defaults():
    text = (ROOT / "docs" / "reference" / "settings.md").read_text()
    table = text[text.index("| setting | YAML | operator argument | CLI flag | default |"):].split("\n\n")[0]
    rows = {}
    for line in table.splitlines()[2:]:
        name, *cells = [c.strip() for c in line.strip().strip("|").split("|")]
        rows[name.strip("`")] = cells
    expected = {"max_restarts": defaults.DEFAULT_MAX_RESTARTS, "startup_deadline_s": defaults.DEFAULT_STARTUP_DEADLINE_S,
                "progress_timeout_s": DEFAULT_PROGRESS_TIMEOUT_S, "poll_interval": defaults.DEFAULT_POLL_INTERVAL,
                "epochs": defaults.DEFAULT_EPOCHS, "batch_size": defaults.DEFAULT_BATCH_SIZE,
                "label_column": defaults.DEFAULT_LABEL_COLUMN, "restart_policy": DEFAULT_RESTART_POLICY.value}
    for name, value in expected.items():
        shown = f"{value:g}" if isinstance(value, float) else str(value)
        assert rows[name][-1] == f"`{shown}`", (name, rows[name])
        assert rows[name][0] in ("", f"`training.{name}`"), (name, rows[name])
    assert rows["model"][0] == "`publish.model`" and rows["registry_root"][0] == "`publish.registry_root`"


# -- old names ----------------------------------------------------------------------------------------------

def publish_operator(**kwargs):
    from ignite_tf.operators.publish import PublishModelOperator

    return PublishModelOperator(task_id="publish", registry_root="/tmp/registry", training={}, **kwargs)


def inference_operator(**kwargs):
    from ignite_tf.operators.inference import BatchInferenceOperator

    return BatchInferenceOperator(task_id="score", registry_root="/tmp/registry", input_cache="a",
                                  output_cache="b", **kwargs)


@pytest.mark.parametrize("make", [publish_operator, inference_operator], ids=lambda f: f.__name__)
def test_old_operator_argument_still_works_and_warns(make):
    with pytest.warns(DeprecationWarning, match=r"model_name= is deprecated, use model="):
        op = make(model_name="m")
    assert op.model == "m" and "model" in op.template_fields and not hasattr(op, "model_name")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert make(model="m").model == "m"  # the new name warns about nothing
    with pytest.raises(TypeError, match="give model= only"):
        make(model="m", model_name="m")


def test_old_operator_argument_keeps_the_operators_wiring_and_mapping():
    """The rename wrapper leaves Airflow's own __init__ handling intact: XCom arguments still wire upstreams,
    the new name is required, and ``partial()`` accepts the old name too."""
    from airflow.sdk import DAG

    from ignite_tf.operators.inference import BatchInferenceOperator
    from ignite_tf.operators.shards import ShardPlanOperator

    with DAG("settings_wiring", schedule=None):
        plan = ShardPlanOperator(task_id="plan", partition_map={}, workers=1)
        with pytest.warns(DeprecationWarning):
            publish = publish_operator(model_name="m", partition_map=plan.output)
        BatchInferenceOperator.partial(task_id="score", registry_root="/r", model_name="m", input_cache="a",
                                       output_cache="b").expand(shard=[0, 1])
    assert publish.upstream_task_ids == {"plan"}
    with pytest.raises(TypeError, match="'model'"):
        publish_operator()


@pytest.mark.parametrize("old, read_as", [
    ({"training": {"label": "y"}}, lambda c: c.training.label_column == "y"),
    ({"training": {"script": "train.py", "args": ["--epochs", "3"]}},
     lambda c: c.training.command == ("train.py", "--epochs", "3") and c.training.entry_point is None),
    ({"training": {"script": "train.py"}}, lambda c: c.training.command == ("train.py",)),
    ({"publish": {"model": "m", "registry": "/tmp/registry"}}, lambda c: c.publish.registry_root == "/tmp/registry"),
], ids=["label", "script+args", "script", "registry"])
def test_old_yaml_key_is_read_with_a_warning_naming_the_new_one(tmp_path, old, read_as):
    """Specs written for the previous release still parse (for one release), each old key under its new name."""
    from ignite_tf.pipeline import SpecDeprecationWarning
    from ignite_tf.pipeline.schema import RENAMED_KEYS
    from ignite_tf.pipeline.spec import parse_spec

    (tmp_path / "train.py").write_text("print('hi')\n")
    path = minimal_spec(tmp_path)
    doc = yaml.safe_load(path.read_text())
    for section, keys in old.items():
        doc[section] = keys if "script" in keys else {**doc[section], **keys}
    path.write_text(yaml.safe_dump(doc))
    with pytest.warns(SpecDeprecationWarning) as warned:
        config = parse_spec(path)
    assert read_as(config)
    messages = sorted(str(w.message) for w in warned if w.category is SpecDeprecationWarning)
    expected = sorted(f"{path}: {section}.{key} is deprecated: use {section}.{RENAMED_KEYS[section][key]}"
                      for section, keys in old.items() for key in keys if key in RENAMED_KEYS[section])
    assert messages == expected


def test_old_yaml_key_beside_its_new_name_fails_naming_the_new_one(tmp_path):
    from ignite_tf.pipeline.spec import SpecError, parse_spec

    path = minimal_spec(tmp_path, label="y", label_column="z")
    with pytest.raises(SpecError) as raised:
        parse_spec(path)
    assert raised.value.field == "training.label"
    assert "training.label: 'label' is the old name of 'label_column': give only 'label_column'" in str(raised.value)


def test_yaml_command_runs_a_script_with_airflows_python(tmp_path):
    from ignite_tf.pipeline.factory import render
    from ignite_tf.pipeline.spec import parse_spec

    (tmp_path / "train.py").write_text("print('hi')\n")
    for command, argv in [(["train.py", "--epochs", "3"], ["PY", "train.py", "--epochs", "3"]),
                          (["python", "train.py"], ["PY", "train.py"]), (["./run.sh", "x"], ["./run.sh", "x"])]:
        path = minimal_spec(tmp_path)
        doc = yaml.safe_load(path.read_text())
        doc["training"] = {"command": command}
        path.write_text(yaml.safe_dump(doc))
        training = parse_spec(path).training
        assert training.argv("PY") == argv
        train = next(t for t in render(parse_spec(path))[0].tasks if t.task_id == "train")
        assert train.kwargs["command"][1:] == argv[1:] and train.kwargs["job_dir"] == str(tmp_path)


def test_one_class_per_name():
    """The cluster's task is a ClusterTask, the factory's a TaskSpec; the YAML's launcher choice is a
    LauncherKind, the interface that launches is a Launcher."""
    import ignite_tf.cluster.launcher as launcher
    import ignite_tf.cluster.spec as cluster_spec
    import ignite_tf.pipeline.factory as factory
    import ignite_tf.pipeline.spec as dag_spec

    assert hasattr(cluster_spec, "ClusterTask") and not hasattr(cluster_spec, "TaskSpec")
    assert hasattr(factory, "TaskSpec") and not hasattr(dag_spec, "Launcher")
    assert inspect.isabstract(launcher.Launcher) and dag_spec.LauncherKind.LOCAL.value == "local"
