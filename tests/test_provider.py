"""Provider registration: light import, provider info against Airflow's schemas, and what Airflow discovers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import jsonschema
import pytest

import ignite_tf

# Airflow reads AIRFLOW_HOME when first imported (inside the tests below); keep it, and the airflow.cfg
# it writes, out of ~/airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="ignite-tf-airflow-"))

AIRFLOW_BIN = Path(sys.executable).with_name("airflow")
PACKAGE = "airflow-provider-ignite-tf"
HOOK_CLASS = "ignite_tf.hooks.ignite.IgniteHook"


def airflow_schema(name: str) -> dict:
    """A JSON schema shipped inside the installed airflow package."""
    import airflow

    return json.loads((Path(airflow.__file__).parent / name).read_text())


def test_import_is_light():
    code = (
        "import sys\n"
        "heavy = ('tensorflow', 'great_expectations', 'openlineage')\n"
        "import ignite_tf\n"
        "assert not [m for m in heavy if m in sys.modules], ('ignite_tf', [m for m in heavy if m in sys.modules])\n"
        "import ignite_tf.hooks.ignite\n"
        "assert not [m for m in heavy if m in sys.modules], ('hook', [m for m in heavy if m in sys.modules])\n"
        "import ignite_tf.ui.plugin, ignite_tf.operators.tensorflow, ignite_tf.operators.publish\n"
        "import ignite_tf.operators.ignite, ignite_tf.operators.validation, ignite_tf.pipeline.factory\n"
        "assert not [m for m in heavy if m in sys.modules], ('plugin', [m for m in heavy if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "AIRFLOW_HOME": tempfile.mkdtemp(prefix="ignite-tf-airflow-")})
    assert done.returncode == 0, done.stderr[-3000:]


def test_package_import_does_not_import_airflow_or_pyignite():
    code = ("import json, sys, ignite_tf; ignite_tf.get_provider_info(); "
            "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    top = set(json.loads(done.stdout))
    assert not top & {"airflow", "pyignite", "numpy", "pandas", "tensorflow", "great_expectations"}


def test_provider_info_validates_against_airflow_schemas():
    info = ignite_tf.get_provider_info()
    jsonschema.Draft7Validator(airflow_schema("provider_info.schema.json")).validate(info)
    # provider_info.schema.json leaves connection-type entries open; provider.yaml's schema spells out
    # conn-fields and ui-field-behaviour, which Airflow >= 3.2 renders the form from.
    conn_schema = airflow_schema("provider.yaml.schema.json")["properties"]["connection-types"]
    jsonschema.Draft7Validator(conn_schema).validate(info["connection-types"])
    assert info["package-name"] == PACKAGE
    assert info["versions"] == [ignite_tf.__version__]
    integrations = {i["integration-name"] for i in info["integrations"]}
    assert {h["integration-name"] for h in info["hooks"]} <= integrations


def test_provider_info_agrees_with_the_hook():
    from importlib import import_module

    from ignite_tf.hooks.ignite import IgniteHook

    info = ignite_tf.get_provider_info()
    for entry in info["hooks"]:
        for module in entry["python-modules"]:
            import_module(module)
    (conn,) = info["connection-types"]
    assert conn["hook-class-name"] == f"{IgniteHook.__module__}.{IgniteHook.__qualname__}" == HOOK_CLASS
    assert conn["connection-type"] == IgniteHook.conn_type == "ignite"
    assert conn["hook-name"] == IgniteHook.hook_name
    jsonschema.validate(IgniteHook.get_ui_field_behaviour(),
                        airflow_schema("customized_form_field_behaviours.schema.json"))


def test_providers_manager_registers_hook_form_and_behaviour():
    """In-process: what the API server's connection form is built from (no DB needed)."""
    from airflow.providers_manager import ProvidersManager
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    manager = ProvidersManager()
    assert PACKAGE in manager.providers
    # Filled from conn-fields: Airflow 3.3 has no wtforms, so the hook-method path would give no widgets.
    widgets = {k: v for k, v in manager.connection_form_widgets.items() if v.hook_class_name == HOOK_CLASS}
    behaviour = manager.field_behaviours["ignite"]
    assert set(widgets) == {f"extra__ignite__{name}" for name in ignite_tf.get_provider_info()
                            ["connection-types"][0]["conn-fields"]}
    assert widgets["extra__ignite__ssl_keyfile_password"].is_sensitive
    assert not widgets["extra__ignite__ssl_certfile"].is_sensitive
    assert behaviour["hidden_fields"] == ["schema"]
    assert behaviour["relabeling"]["host"] == "Addresses (host:port, comma-separated)"

    hook = ProvidersManagerTaskRuntime().hooks["ignite"]
    assert hook is not None and hook.hook_class_name == HOOK_CLASS
    assert hook.connection_id_attribute_name == "ignite_conn_id"
    assert hook.connection_testable


# -- the airflow command line, as an operator of the platform sees it -----------------------------------
@pytest.fixture(scope="module")
def airflow_cli(tmp_path_factory):
    """Run ``airflow providers list`` and ``airflow providers hooks`` side by side (each takes seconds)."""
    home = tmp_path_factory.mktemp("airflow_home")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AIRFLOW_HOME=str(home), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    commands = {"list": ["providers", "list", "-o", "json"], "hooks": ["providers", "hooks", "-o", "json"]}
    procs = {name: subprocess.Popen([str(AIRFLOW_BIN), *args], env=env, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
             for name, args in commands.items()}
    results = {}
    try:
        for name, proc in procs.items():
            out, err = proc.communicate(timeout=180)
            assert proc.returncode == 0, f"airflow {' '.join(commands[name])} failed:\n{err[-3000:]}"
            results[name] = (json.loads(out), err)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def test_airflow_providers_list_shows_the_package(airflow_cli):
    providers, _ = airflow_cli["list"]
    ours = [p for p in providers if p["package_name"] == PACKAGE]
    assert ours, f"{PACKAGE} missing from `airflow providers list`: {[p['package_name'] for p in providers]}"
    assert ours[0]["version"] == ignite_tf.__version__


def test_airflow_providers_hooks_shows_the_ignite_connection_type(airflow_cli):
    hooks, stderr = airflow_cli["hooks"]
    ours = [h for h in hooks if h["connection_type"] == "ignite"]
    assert ours == [{"connection_type": "ignite", "class": HOOK_CLASS, "conn_id_attribute_name": "ignite_conn_id",
                     "package_name": PACKAGE, "hook_name": "Apache Ignite"}], ours
    assert "ignite_tf" not in stderr, f"Airflow complained about the provider:\n{stderr[-3000:]}"
