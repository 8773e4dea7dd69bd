"""Declarative DAGs: YAML specs -> JSON Schema + semantic checks -> rendered DAGs, parsed by Airflow's DagBag,
and one example run end to end with ``dag.test()`` on real Ignite nodes, TF processes and Airflow's DB."""

from __future__ import annotations

import copy
import importlib.util
import json
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
import yaml

from ignite_tf.pipeline.schema import schema
from ignite_tf.pipeline.spec import SpecError, parse_spec
from tests.support.airflow import xcoms

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
SPECS = sorted((DAGS / "specs").glob("*.yaml"))
SCHEMA_FILE = REPO / "provider" / "ignite_tf" / "resources" / "pipeline.schema.json"
TRAINING = ["load", "partitions", "shard_plan", "validate", "validation_gate", "train", "publish"]
UPSTREAM = {"load": set(), "partitions": {"load"}, "shard_plan": {"partitions"}, "validate": {"shard_plan"},
            "validation_gate": {"validate"}, "train": {"shard_plan", "validation_gate"},
            "publish": {"partitions", "train", "validation_gate"}}


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS))


def test_example_dags_import_without_errors(dagbag):
    assert dagbag.import_errors == {}
    assert not dagbag.captured_warnings, dagbag.captured_warnings
    assert {"ignite_tf_tabular_sync", "ignite_tf_tabular_sync_inference", "ignite_tf_tabular_async",
            "ignite_tf_user_script", "ignite_tf_tabular_weekly"} <= set(dagbag.dags)
    for dag_id in ("ignite_tf_tabular_sync", "ignite_tf_user_script"):
        assert Path(dagbag.dags[dag_id].fileloc).name == "pipelines.py"  # Airflow re-parses this file to run tasks


@pytest.mark.parametrize("dag_id, tasks", [
    ("ignite_tf_tabular_sync", TRAINING), ("ignite_tf_tabular_async", TRAINING),
    ("ignite_tf_tabular_weekly", TRAINING), ("ignite_tf_user_script", TRAINING[:-1]),
])
def test_training_dag_graph(dagbag, dag_id, tasks):
    from airflow.sdk.definitions.mappedoperator import MappedOperator

    from ignite_tf.operators.tensorflow import TFClusterOperator

    dag = dagbag.dags[dag_id]
    assert sorted(dag.task_ids) == sorted(tasks)
    for task_id in tasks:
        assert set(dag.get_task(task_id).upstream_task_ids) == UPSTREAM[task_id], task_id
    validate = dag.get_task("validate")
    assert isinstance(validate, MappedOperator)
    mapped = validate.expand_input.value["shard"]
    assert mapped.operator.task_id == "shard_plan" and mapped.key == "return_value"
    assert validate.partial_kwargs["plan"].key == "plan"
    train = dag.get_task("train")
    assert isinstance(train, TFClusterOperator) and train.deferrable and train.wait_for_completion
    assert train.workers == "{{ params.workers }}"
    assert dag.get_task("load").cache == train.cache == dag.get_task("validation_gate").cache


def test_caches_and_dag_ids_are_distinct():
    configs = [parse_spec(p) for p in SPECS]
    caches = [c.cache for c in configs] + [c.inference.output_cache for c in configs if c.inference]
    assert len(set(caches)) == len(caches)
    assert len({c.dag_id for c in configs}) == len(configs)


def test_publish_emits_the_model_asset_the_inference_dag_is_scheduled_on(dagbag):
    from ignite_tf.operators.publish import model_asset

    publish = dagbag.dags["ignite_tf_tabular_sync"].get_task("publish")
    config = parse_spec(DAGS / "specs" / "tabular_sync.yaml")
    asset = model_asset(config.publish.registry_root, "tabular_sync")
    assert publish.outlets == [asset]
    inference = dagbag.dags["ignite_tf_tabular_sync_inference"]
    assert inference.schedule == [asset]
    assert asset.uri == f"file://{config.publish.registry_root}/tabular_sync"
    score = inference.get_task("score")
    assert score.expand_input.value["shard"] == [0, 1]
    assert score.partial_kwargs["output_cache"] == "tabular_sync_scores"
    assert score.partial_kwargs["shards"] == 2 and score.partial_kwargs["model"] == "tabular_sync"


def test_held_out_split_reaches_the_shard_plan_and_the_production_model_the_chief(dagbag):
    config = parse_spec(DAGS / "specs" / "tabular_sync.yaml")
    assert (config.shard_plan.evaluation, config.shard_plan.evaluation_seed) == (0.1, 0)
    dag = dagbag.dags["ignite_tf_tabular_sync"]
    plan = dag.get_task("shard_plan")
    assert (plan.evaluation, plan.evaluation_seed) == (0.1, 0)
    assert f"IGNITE_TF_PRODUCTION_MODEL={config.publish.registry_root}/tabular_sync" in dag.get_task("train").env
    # Without a split, neither (the chief would have nothing to evaluate the production model on).
    async_dag = dagbag.dags["ignite_tf_tabular_async"]
    assert not async_dag.get_task("shard_plan").evaluation
    assert not any("IGNITE_TF_PRODUCTION_MODEL" in e for e in async_dag.get_task("train").env or [])


def test_weekly_schedule(dagbag):
    timetable = dagbag.dags["ignite_tf_tabular_weekly"].timetable
    assert timetable.expression == "0 0 * * 0"
    assert dagbag.dags["ignite_tf_tabular_sync"].schedule is None
    assert dagbag.dags["ignite_tf_tabular_weekly"].schedule == "@weekly"


def test_params_have_spec_defaults_types_and_bounds(dagbag):
    from airflow.sdk.definitions.param import ParamValidationError

    dag = dagbag.dags["ignite_tf_tabular_sync"]
    assert dict(dag.params) == {"mode": "sync", "model_args": {}, "epochs": 3, "batch_size": 32,
                                "learning_rate": 0.02, "workers": 2, "ps": 1}
    assert dag.params.get_param("workers").schema == {"type": "integer", "minimum": 1, "maximum": 64,
                                                      "title": "Workers"}
    assert dag.params.get_param("mode").schema == {"type": "string", "enum": ["sync", "async"],
                                                   "title": "Mode (sync / async SGD)"}
    assert dag.params.get_param("learning_rate").schema == {"type": "number", "exclusiveMinimum": 0, "maximum": 10,
                                                            "title": "Learning rate"}
    # The trigger form shows a Param's title and description, not its bounds: the description says them.
    assert dag.params.get_param("workers").description.endswith("a whole number, 1 to 64")
    assert dag.params.get_param("learning_rate").description.endswith("a number, above 0, at most 10")
    for name, bad in [("workers", 0), ("workers", "two"), ("workers", 65), ("epochs", 0), ("mode", "eventual"),
                      ("learning_rate", 0), ("batch_size", 1.5), ("ps", 0)]:
        params = copy.deepcopy(dag.params)
        with pytest.raises(ParamValidationError, match=name):
            params[name] = bad
    params = copy.deepcopy(dag.params)
    params.update({"workers": 3, "mode": "async", "epochs": 1})
    assert params.validate()["workers"] == 3
    train = dag.get_task("train")
    assert (train.epochs, train.batch_size, train.mode, train.ps) == (
        "{{ params.epochs }}", "{{ params.batch_size }}", "{{ params.mode }}", "{{ params.ps }}")
    assert "params.learning_rate" in train.learning_rate
    # No learning rate in the spec: the Param is nullable and the model's default applies.
    weekly = dagbag.dags["ignite_tf_tabular_weekly"].params
    assert weekly["learning_rate"] is None and weekly.get_param("learning_rate").schema["type"] == ["number", "null"]
    # A script takes only what its command line uses: here the worker count (mode is fixed by the script).
    script = dagbag.dags["ignite_tf_user_script"]
    assert dict(script.params) == {"workers": 2}
    assert script.get_task("train").command[1:] == ["ported.py"]
    assert Path(script.get_task("train").job_dir) == DAGS / "examples" / "mnist_keras_tutorial"


# -- bad specs ----------------------------------------------------------------------------------------------

def base_spec(folder: Path) -> dict:
    (folder / "suite.yaml").write_text((DAGS / "expectations" / "tabular.yaml").read_text())
    return {"dag_id": "bad_spec_test", "cache": "bad_spec", "suite": "suite.yaml",
            "source": {"generator": "ignite_tf_dev.demo_data:tabular", "rows": 100},
            "training": {"entry_point": "ignite_tf.models:tabular_classifier", "workers": 2},
            "publish": {"model": "m", "registry_root": str(folder / "registry")}}


def _unknown_key(s):
    s["training"]["wokers"] = 2


def _wrong_type(s):
    s["training"]["epochs"] = "many"


def _workers_zero(s):
    s["training"]["workers"] = 0


def _missing_cache(s):
    del s["cache"]


def _invalid_cron(s):
    s["schedule"] = "61 * * * *"


def _unknown_preset(s):
    s["schedule"] = "@fortnightly"


def _missing_suite(s):
    s["suite"] = "nowhere/suite.yaml"


def _missing_source_file(s):
    s["source"] = "data/missing.csv"


def _launcher(s):
    s["training"]["launcher"] = "slurm"


def _bad_mode(s):
    s["training"]["mode"] = "eventual"


def _both_jobs(s):
    s["training"]["command"] = ["train.py"]


def _unset_env(s):
    s["training"]["epochs"] = "${IGNITE_TF_TEST_UNSET_VAR}"


def _inference_without_publish(s):
    del s["publish"]
    s["inference"] = {"output_cache": "scores"}


def _threshold_order(s):
    s["publish"]["thresholds"] = {"accuracy": [0.9, 0.5]}


def _bad_cache_name(s):
    s["cache"] = "my-cache"


def _env_tf_config(s):
    s["training"]["env"] = ["KEEP_ME", "TF_CONFIG={}"]


def _env_bad_name(s):
    s["training"]["env"] = ["1NAME"]


def _model_args_not_a_mapping(s):
    s["training"]["model_args"] = ["hidden", 64]


def _model_args_with_script(s):
    s["training"] = {"command": ["ported.py"], "job_dir": str(DAGS / "examples" / "mnist_keras_tutorial"),
                     "model_args": {"hidden": 64}}


@pytest.mark.parametrize("mutate, field, allowed", [
    (_unknown_key, "training.wokers", "allowed keys: "),
    (_wrong_type, "training.epochs", "expected an integer"),
    (_workers_zero, "training.workers", "minimum 1"),
    (_missing_cache, "cache", "is required"),
    (_invalid_cron, "schedule", "not a valid cron expression"),
    (_unknown_preset, "schedule", "@weekly"),
    (_missing_suite, "suite", "does not exist"),
    (_missing_source_file, "source.path", "does not exist"),
    (_launcher, "training.launcher", "allowed: local, kubernetes"),
    (_bad_mode, "training.mode", "allowed: sync, async"),
    (_both_jobs, "training", "exactly one of entry_point"),
    (_unset_env, "training.epochs", "IGNITE_TF_TEST_UNSET_VAR is not set"),
    (_inference_without_publish, "inference", "needs a publish section"),
    (_threshold_order, "publish.thresholds.accuracy", "above max"),
    (_bad_cache_name, "cache", "SQL identifier"),
    (_env_tf_config, "training.env", "TF_CONFIG is set by the launcher"),
    (_env_bad_name, "training.env", "'1NAME' is not NAME or NAME=VALUE"),
    (_model_args_not_a_mapping, "training.model_args", "expected object"),
    (_model_args_with_script, "training.model_args", "goes with entry_point"),
], ids=lambda v: v.__name__.strip("_") if callable(v) else None)
def test_bad_spec_names_file_field_and_what_is_allowed(tmp_path, mutate, field, allowed):
    spec = base_spec(tmp_path)
    mutate(spec)
    path = tmp_path / f"{mutate.__name__.strip('_')}.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError) as raised:
        parse_spec(path)
    message = str(raised.value)
    assert str(path) in message and raised.value.file == str(path)
    assert raised.value.field == field, message
    assert f"{field}: " in message and allowed in message, message


def test_training_env_reaches_the_train_task(tmp_path):
    from ignite_tf.pipeline.factory import build_dag, render

    spec = base_spec(tmp_path)
    spec["training"]["env"] = ["WANDB_API_KEY", "MY_FLAG=1"]
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(spec))
    config = parse_spec(path)
    assert config.training.env == ("WANDB_API_KEY", "MY_FLAG=1")
    dag = build_dag(render(config)[0])
    assert dag.get_task("train").env == ["WANDB_API_KEY", "MY_FLAG=1"]


def test_all_schema_problems_are_reported_at_once(tmp_path):
    spec = base_spec(tmp_path)
    spec["training"].update(workers=0, epochs=-1, colour="blue")
    path = tmp_path / "many.yaml"
    path.write_text(yaml.safe_dump(spec))
    with pytest.raises(SpecError) as raised:
        parse_spec(path)
    assert {f for f, _ in raised.value.problems} == {"training.workers", "training.epochs", "training.colour"}


def test_malformed_yaml_names_the_line(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("dag_id: x\ntraining: {workers: 2\n")
    with pytest.raises(SpecError, match=r"broken.yaml: \(file\): is not valid YAML at line \d"):
        parse_spec(path)


def test_env_expansion_typed_and_defaulted(tmp_path, monkeypatch):
    spec = base_spec(tmp_path)
    spec["source"]["rows"] = "${IGNITE_TF_TEST_ROWS:-123}"
    spec["training"]["learning_rate"] = "${IGNITE_TF_TEST_LR:-0.5}"
    spec["publish"]["registry_root"] = "${IGNITE_TF_TEST_REG:-~/reg}"
    spec["description"] = "rows from ${IGNITE_TF_TEST_ROWS:-123} here"
    path = tmp_path / "env.yaml"
    path.write_text(yaml.safe_dump(spec))
    config = parse_spec(path)
    assert config.source.rows == 123 and config.training.learning_rate == 0.5
    assert config.publish.registry_root == str(Path("~/reg").expanduser())
    assert config.description == "rows from 123 here"
    monkeypatch.setenv("IGNITE_TF_TEST_ROWS", "7")
    monkeypatch.setenv("IGNITE_TF_TEST_REG", "s3://bucket/models")
    config = parse_spec(path)
    assert config.source.rows == 7 and config.publish.registry_root == "s3://bucket/models"
    monkeypatch.setenv("IGNITE_TF_TEST_ROWS", "seven")
    with pytest.raises(SpecError, match=r"source.rows: expected an integer"):
        parse_spec(path)


def test_generator_file_relative_to_spec_and_called_lazily():
    from ignite_tf.pipeline.factory import GeneratorSource, render

    config = parse_spec(DAGS / "specs" / "user_script.yaml")
    target = DAGS / "examples" / "mnist_keras_tutorial" / "digits.py"
    assert config.source.generator == f"{target}:frame"
    load = render(config)[0].tasks[0]
    source = load.kwargs["source_callable"]
    assert isinstance(source, GeneratorSource)
    frame = GeneratorSource(source.generator, 50)()
    assert len(frame) == 50 and {"id", "p0", "p63", "label"} <= set(frame.columns)


def test_the_old_demo_generator_name_works_until_its_removal_with_a_warning(tmp_path):
    """The demo table moved out of the provider (ignite_tf.demo_data -> ignite_tf_dev.demo_data)."""
    from ignite_tf.pipeline.factory import render

    spec = base_spec(tmp_path)
    spec["source"]["generator"] = "ignite_tf.demo_data:tabular"
    path = tmp_path / "old_generator.yaml"
    path.write_text(yaml.safe_dump(spec))
    from ignite_tf.pipeline import SpecDeprecationWarning

    with pytest.warns(SpecDeprecationWarning, match=r"source.generator ignite_tf.demo_data:tabular is deprecated: "
                                                r"use ignite_tf_dev.demo_data:tabular; .* is removed in 0.3.0"):
        config = parse_spec(path)
    assert config.source.generator == "ignite_tf_dev.demo_data:tabular"
    frame = render(config)[0].tasks[0].kwargs["source_callable"]()
    assert len(frame) == 100 and "label" in frame.columns


def _module(path: Path):
    spec = importlib.util.spec_from_file_location(f"dags_{uuid.uuid4().hex}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_bad_spec_does_not_hide_the_good_ones(tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    from ignite_tf.pipeline import load_dags

    folder = tmp_path / "dags"
    (folder / "specs").mkdir(parents=True)
    shutil.copy(DAGS / "pipelines.py", folder / "pipelines.py")
    good = base_spec(folder)
    good["suite"] = "../suite.yaml"
    (folder / "specs" / "a_good.yaml").write_text(yaml.safe_dump(good))
    bad = {**good, "dag_id": "broken", "training": {**good["training"], "workers": 0}}
    (folder / "specs" / "b_bad.yaml").write_text(yaml.safe_dump(bad))
    twin = {**good, "cache": "other"}  # same dag_id as a_good.yaml
    (folder / "specs" / "c_twin.yaml").write_text(yaml.safe_dump(twin))
    bag = DagBag(dag_folder=str(folder))
    assert bag.import_errors == {}
    assert set(bag.dags) == {"bad_spec_test"}
    warned = "\n".join(w for ws in bag.captured_warnings.values() for w in ws)
    assert "b_bad.yaml: training.workers: 0 is out of range" in warned, warned
    assert "c_twin.yaml: dag_id: 'bad_spec_test' is already defined by" in warned, warned
    with pytest.raises(SpecError, match="b_bad.yaml: training.workers"):
        load_dags(folder / "pipelines.py", "specs/*.yaml", strict=True)
    with pytest.warns(UserWarning, match="no pipeline specs match"):
        assert load_dags(folder / "pipelines.py", "nothing/*.yaml") == {}


def test_check_command(tmp_path):
    bad = base_spec(tmp_path)
    bad["training"]["workers"] = 0
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(bad))
    proc = subprocess.run([sys.executable, "-m", "ignite_tf.pipeline", *map(str, SPECS), str(tmp_path / "bad.yaml")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stdout.count("ok ") == len(SPECS) and "bad.yaml: training.workers" in proc.stderr


# -- the published schema -----------------------------------------------------------------------------------

def test_schema_is_valid_json_schema_shipped_as_package_data_and_validates_the_examples():
    import jsonschema

    shipped = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(shipped)
    assert schema() == shipped  # read through importlib.resources, as an installed package would
    validator = jsonschema.Draft202012Validator(shipped)
    for path in SPECS:
        raw = yaml.safe_load(path.read_text())  # ${ENV} references included, as an editor sees the file
        assert not list(validator.iter_errors(raw)), (path, [e.message for e in validator.iter_errors(raw)])
        assert f"$schema=../../provider/ignite_tf/resources/{SCHEMA_FILE.name}" in path.read_text()
    assert list(validator.iter_errors({"dag_id": "x"}))  # and it rejects


def test_parsing_is_fast_and_imports_no_tensorflow():
    code = textwrap.dedent(f"""
        import sys, time
        started = time.perf_counter()
        from ignite_tf.pipeline.spec import parse_spec
        from ignite_tf.pipeline.factory import render
        for path in {[str(p) for p in SPECS]!r}:
            render(parse_spec(path))
        took = time.perf_counter() - started
        heavy = [m for m in ("tensorflow", "tf_keras", "great_expectations", "airflow", "pyignite")
                 if m in sys.modules]
        assert not heavy, heavy
        print(took)
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    took = float(proc.stdout.split()[-1])
    print(f"parsed and rendered {len(SPECS)} specs (imports included) in {took:.2f}s")
    assert took < 5.0


# -- end to end ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def airflow_env(ignite_conn, tmp_path_factory):
    from tests.support.airflow import ignite_connection_env, migrate_db

    migrate_db()
    root = tmp_path_factory.mktemp("dag-factory")
    # dag.test() runs DAGs from the configured dags folder: a copy of the repo's, parsed with this env.
    shutil.copytree(DAGS, root / "dags", ignore=shutil.ignore_patterns("__pycache__"))
    patch = pytest.MonkeyPatch()
    patch.setenv("AIRFLOW__CORE__DAGS_FOLDER", str(root / "dags"))
    # Airflow reads the dags folder once, when first imported (here possibly by an earlier test).
    from airflow import settings

    patch.setattr(settings, "DAGS_FOLDER", str(root / "dags"))
    for key, value in ignite_connection_env(ignite_conn).items():
        patch.setenv(key, value)
    patch.setenv("IGNITE_TF_RUN_ROOT", str(root / "runs"))
    patch.setenv("IGNITE_TF_REGISTRY", str(root / "registry"))
    patch.setenv("IGNITE_TF_DEMO_ROWS", "3000")
    module = _module(root / "dags" / "pipelines.py")
    yield root, module
    patch.undo()


def test_bad_run_conf_is_rejected_before_any_task(airflow_env):
    from airflow.sdk.definitions.param import ParamValidationError

    _, module = airflow_env
    dag = module.ignite_tf_tabular_sync
    with pytest.raises(ParamValidationError, match="workers"):
        dag.test(run_conf={"workers": 0})
    with pytest.raises(ParamValidationError, match="mode"):
        dag.test(run_conf={"mode": "eventual"})


def test_tabular_sync_end_to_end_then_inference(airflow_env, ignite_client):
    from ignite_tf.registry.publish import ModelRegistry
    from tests.support.clusters import assert_nothing_left

    root, module = airflow_env
    dag = module.ignite_tf_tabular_sync
    started = time.monotonic()
    run = dag.test(run_conf={"epochs": 2, "workers": 2})
    took = time.monotonic() - started
    states = {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
    assert run.state == "success", states
    assert states[("validate", 0)] == states[("validate", 1)] == "success"
    values = xcoms(dag.dag_id, run.run_id)
    assert values[("load", -1, "return_value")]["rows_in_cache"] == 3000
    train = values[("train", -1, "return_value")]
    assert train["status"] == "succeeded" and train["epochs"] == 2, train  # the run's conf, not the spec's 3
    publish = values[("publish", -1, "return_value")]
    registry = ModelRegistry(root / "registry")
    assert publish["status"] == "production" and registry.production("tabular_sync") == publish["version"]
    meta = registry.metadata("tabular_sync", publish["version"])
    assert meta["context"]["dag_id"] == "ignite_tf_tabular_sync" and meta["data"]["rows"] == 3000
    assert meta["params"]["epochs"] == "2" and meta["params"]["spec"] == "tabular_sync.yaml"
    # Trained on what was validated: the gate's fingerprints went to the workers and into the registry; the
    # model is the training task's (its try and cluster), not the publish task's.
    assert meta["data"]["fingerprints"]["rows"] == 3000 and meta["data"]["fingerprints"]["columns"]
    assert meta["context"]["task_id"] == "train" and meta["context"]["try_number"] == 1
    assert (meta["context"]["cluster_id"] == train["cluster_id"]
            and meta["context"]["published_by"]["task_id"] == "publish")
    print("published metadata.json:", json.dumps({k: meta[k] for k in ("context", "data")})[:3000])
    assert_nothing_left(train["cluster_id"], train["run_dir"])
    print(f"tabular_sync end to end (3000 rows, 2 workers, 2 epochs): {took:.1f}s, metrics {train['metrics']}")

    inference = module.ignite_tf_tabular_sync_inference
    run = inference.test()
    assert run.state == "success"
    scored = xcoms(inference.dag_id, run.run_id)
    assert sum(v["rows_scored"] for k, v in scored.items() if k[0] == "score" and k[2] == "return_value") == 3000
    with ignite_client.sql("SELECT COUNT(*) FROM tabular_sync_scores") as cursor:
        assert next(iter(cursor))[0] == 3000


def test_tabular_async_end_to_end(airflow_env):
    from ignite_tf.registry.publish import ModelRegistry
    from tests.support.clusters import assert_nothing_left

    root, module = airflow_env
    dag = module.ignite_tf_tabular_async
    started = time.monotonic()
    run = dag.test(run_conf={"epochs": 2})
    took = time.monotonic() - started
    assert run.state == "success", {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
    values = xcoms(dag.dag_id, run.run_id)
    train = values[("train", -1, "return_value")]
    assert train["status"] == "succeeded" and train["epochs"] == 2, train
    spec = json.loads((Path(train["run_dir"]) / "cluster.json").read_text())
    roles = sorted(t["role"] for t in spec["tasks"])
    assert roles == ["chief", "ps", "worker", "worker"]
    # One outcome: the data is fixed (the spec's seed 1, IGNITE_TF_DEMO_ROWS=3000) and this is the model's
    # first version, so the gate judges only the spec's threshold, training accuracy >= 0.5; the demo label
    # (3 classes, the largest 37% of the rows) is learnt to about 0.9 in 2 epochs, far above that line.
    publish = values[("publish", -1, "return_value")]
    registry = ModelRegistry(root / "registry")
    assert registry.versions("tabular_async") == [publish["version"]]
    assert publish["status"] == "production" and publish["reasons"] == [], (publish, train["metrics"])
    assert registry.production("tabular_async") == publish["version"]
    gate = registry.metadata("tabular_async", publish["version"])["gate"]
    assert gate["compared_to"] is None and gate["config"]["thresholds"] == {"accuracy": [0.5, None]}, gate
    assert_nothing_left(train["cluster_id"], train["run_dir"])
    print(f"tabular_async end to end (3000 rows, chief + 2 workers + 1 ps, 2 epochs): {took:.1f}s, "
          f"metrics {train['metrics']}")


def test_user_script_end_to_end(airflow_env):
    """The tutorial script runs unchanged on 2 workers: the launcher gives each its TF_CONFIG and shard."""
    from tests.support.clusters import assert_nothing_left

    _, module = airflow_env
    dag = module.ignite_tf_user_script
    started = time.monotonic()
    run = dag.test()
    took = time.monotonic() - started
    assert run.state == "success", {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
    values = xcoms(dag.dag_id, run.run_id)
    assert values[("load", -1, "return_value")]["rows_in_cache"] == 3000
    assert values[("validation_gate", -1, "return_value")]["passed"] is True
    train = values[("train", -1, "return_value")]
    assert train["status"] == "succeeded", train
    chief = (Path(train["run_dir"]) / "logs" / "worker-0.log").read_text()
    assert "Epoch 3/3" in chief, chief[-2000:]
    assert_nothing_left(train["cluster_id"], train["run_dir"])
    print(f"user script end to end (3000 digits, 2 workers): {took:.1f}s")


FIVE_CLASSES = '''
import numpy as np

from ignite_tf_dev import demo_data


def frame(rows, seed=0):
    """The demo features with a label of five classes (argmax of five fixed linear scores)."""
    table = demo_data.tabular(rows, seed=seed)
    weights = np.random.default_rng(5).normal(size=(demo_data.N_FEATURES, 5))
    table["label"] = (table[demo_data.feature_columns()].to_numpy() @ weights).argmax(axis=1).astype(np.int32)
    return table
'''


def test_model_args_from_yaml_reach_the_entry_point_and_classes_come_from_the_label(airflow_env, tmp_path):
    """``training.model_args`` goes YAML -> Param -> operator -> runtime -> model function (hidden=7 shows in
    the saved model); the built-in classifier's output layer has the label's 5 classes, found in the data."""
    import tf_keras

    root, _ = airflow_env
    folder = root / "dags" / "model_args"
    folder.mkdir()
    (folder / "five.py").write_text(FIVE_CLASSES)
    (folder / "suite.yaml").write_text(yaml.safe_dump({
        "name": "five", "row_count": {"min": 100}, "columns": {"label": {"type": "int32", "in_set": list(range(5))}}}))
    (folder / "spec.yaml").write_text(yaml.safe_dump({
        "dag_id": "ignite_tf_model_args", "cache": "model_args_five", "key": "id", "suite": "suite.yaml",
        "source": {"generator": "five.py:frame", "rows": 2000},
        "training": {"entry_point": "ignite_tf.models:tabular_classifier", "workers": 2, "epochs": 1,
                     "batch_size": 32, "model_args": {"hidden": 7}}}))
    (root / "dags" / "model_args_dag.py").write_text(
        "# airflow dag\nfrom ignite_tf.pipeline import load_dags\n\n"
        "load_dags(__file__, 'model_args/*.yaml', globals())\n")
    dag = _module(root / "dags" / "model_args_dag.py").ignite_tf_model_args
    assert dag.params["model_args"] == {"hidden": 7}
    run = dag.test()
    assert run.state == "success", {(ti.task_id, ti.map_index): ti.state for ti in run.get_task_instances()}
    train = xcoms(dag.dag_id, run.run_id)[("train", -1, "return_value")]
    model = tf_keras.models.load_model(str(Path(train["run_dir"]) / "checkpoints" / "model"), compile=False)
    units = [layer.units for layer in model.layers if isinstance(layer, tf_keras.layers.Dense)]
    assert units == [7, 7, 5], units
    assert "--model-arg" in (Path(train["run_dir"]) / "cluster.json").read_text()
