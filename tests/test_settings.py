"""One name and one default per setting: YAML schema, parsed spec, operators, CLIs, core functions, the docs'
settings table.

Every default is read from where it takes effect (``inspect.signature``, the JSON schema, the argparse
parsers, a parsed spec), not copied here, so a place that drifts fails this test.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import warnings
from pathlib import Path

import pytest
import yaml

from ignite_tf import defaults
from ignite_tf.cluster.supervision import Supervision
from ignite_tf.home import ENV_HOME
from ignite_tf.public_api import deprecation

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

class Captured(Exception):
    """Raised by ``CapturingLauncher`` with the spec ``start_cluster`` would launch."""


class CapturingLauncher:
    """Stands in for a launcher to catch the spec ``start_cluster`` builds before anything starts: what is
    checked here is the spec's settings, not a launch (the real launchers have tests of their own)."""

    def find(self, cluster_id):
        return None

    def claim(self, cluster_id, previous):
        return None  # this launch starts the cluster

    def released_on_error(self, cluster_id):
        return contextlib.nullcontext()

    def launching(self, draft):
        raise Captured(draft)


def supervision_from_start_cluster(tmp_path, **settings):
    from ignite_tf.cluster.api import start_cluster

    with pytest.raises(Captured) as caught:
        start_cluster("cache", {"entry_point": "m:f"}, conn=object(), launcher=CapturingLauncher(),
                      run_root=tmp_path / "runs", **settings)
    return caught.value.args[0].supervision


def test_one_supervision_value_reaches_every_edge(tmp_path):
    """The defaults are ``Supervision``'s, and a value given at each edge (YAML, the DAG factory, the CLI,
    the operator with templated strings, the Python API) is the one the spec carries to both backends."""
    from ignite_tf.cli import build_parser, supervision_of
    from ignite_tf.cluster.k8s import objects
    from ignite_tf.cluster.k8s.settings import KubernetesSettings
    from ignite_tf.cluster.spec import ClusterSpec, build_spec
    from ignite_tf.cluster.supervision import Supervision
    from ignite_tf.cluster.supervision.policy import Policy
    from ignite_tf.operators.tensorflow import TFClusterOperator
    from ignite_tf.pipeline.factory import render
    from ignite_tf.pipeline.spec import SUPERVISION_KEYS, parse_spec

    default = Supervision()
    assert (default.max_restarts, default.restart_policy.value, default.startup_deadline_s,
            default.progress_timeout_s, default.grace_period_s) == (2, "exit-code", 180, 600, 10)
    for name in SUPERVISION_KEYS:
        assert schema_default("training", name) == Supervision().to_dict()[name], name

    def operator(**kwargs):
        return TFClusterOperator(task_id="train", cache="c", entry_point="m:f", **kwargs).supervision_settings()

    def spec(**settings):
        return build_spec(cluster_id="c1", cache="c", mode="sync", workers=1, run_dir=str(tmp_path / "c1"),
                          job={"entry_point": "m:f"}, **settings)

    assert parse_spec(minimal_spec(tmp_path)).training.supervision == default
    assert supervision_of(cli_start_defaults()) == default
    assert operator() == default
    assert supervision_from_start_cluster(tmp_path) == default
    assert spec().supervision == default

    given = {"max_restarts": 5, "restart_policy": "never", "startup_deadline_s": 30, "progress_timeout_s": 0}
    wanted = Supervision(**given)
    parsed = parse_spec(minimal_spec(tmp_path, **given))
    assert parsed.training.supervision == wanted
    train = next(t for t in render(parsed)[0].tasks if t.task_id == "train")
    assert operator(**{k: train.kwargs[k] for k in SUPERVISION_KEYS}) == wanted
    cli = build_parser().parse_args(["start", "--max-restarts", "5", "--restart-policy", "never",
                                     "--startup-deadline", "30", "--progress-timeout", "0", "c", "j", "python"])
    assert supervision_of(cli) == wanted
    assert operator(**{k: str(v) for k, v in given.items()}) == wanted  # rendered templates are strings
    assert operator(supervision='{"max_restarts": 5, "restart_policy": "never", "startup_deadline_s": 30, '
                                '"progress_timeout_s": 0}') == wanted
    assert operator(supervision=wanted, max_restarts="7") == Supervision(**{**given, "max_restarts": 7})
    assert supervision_from_start_cluster(tmp_path, **given) == wanted
    assert supervision_from_start_cluster(tmp_path, supervision=wanted) == wanted
    assert spec(**given).supervision == spec(supervision=wanted).supervision == wanted

    # The supervisor process reads the spec back from JSON (one written before the settings were one value
    # too); the policy and the pod backend take it from there.
    written = spec(supervision=Supervision(grace_period_s=25, max_restarts=5))
    again = ClusterSpec.from_dict(json.loads(json.dumps(written.to_dict())))
    assert again.supervision == written.supervision
    flat = {k: v for k, v in written.to_dict().items() if k != "supervision"}
    assert ClusterSpec.from_dict({**flat, "max_restarts": 5, "grace_period_s": 25}).supervision == written.supervision
    assert Policy(again).settings == written.supervision
    pod = objects.pod_manifest(again, again.chief, 0, namespace="ns", settings=KubernetesSettings.parse(None),
                               image="img", owner={"metadata": {"name": "c1", "uid": "u"}}, argv=["true"],
                               cwd="/", env={}, node=None, memory="1Gi")
    assert pod["spec"]["terminationGracePeriodSeconds"] == 25


@pytest.mark.parametrize("field, value", [("max_restarts", -1), ("restart_policy", "sometimes"),
                                          ("startup_deadline_s", 0), ("progress_timeout_s", -1),
                                          ("grace_period_s", "soon")])
def test_a_bad_supervision_setting_names_its_field(field, value):
    from ignite_tf.cluster.supervision.settings import Supervision, SupervisionError

    with pytest.raises(SupervisionError, match=f"^{field} ") as raised:
        Supervision(**{field: value})
    assert raised.value.field == field


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
    supervision = Supervision()
    expected = {"max_restarts": supervision.max_restarts, "startup_deadline_s": supervision.startup_deadline_s,
                "progress_timeout_s": supervision.progress_timeout_s, "poll_interval": defaults.DEFAULT_POLL_INTERVAL,
                "epochs": defaults.DEFAULT_EPOCHS, "batch_size": defaults.DEFAULT_BATCH_SIZE,
                "label_column": defaults.DEFAULT_LABEL_COLUMN, "restart_policy": supervision.restart_policy.value}
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
    with pytest.warns(DeprecationWarning, match=r"\(model_name=\) is deprecated: use model=; .* is removed in "):
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
    expected = sorted(f"{path}: {deprecation(f'{section}.{key}')}"
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
