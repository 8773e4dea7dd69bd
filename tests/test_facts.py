"""Each fact once: the home folder, the default connection id, the shuffle buffer, the port helpers and the
enums' values are defined in one place; everything else takes them from there (checked here, by value and
by looking for copies in the source)."""

from __future__ import annotations

import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ignite_tf.cluster.k8s.settings import DEFAULT_PLACEMENT, KubernetesSettings, Placement
from ignite_tf.cluster.launcher import LauncherKind
from ignite_tf.connection import DEFAULT_CONN_ID
from ignite_tf.defaults import DEFAULT_SHUFFLE_BUFFER
from ignite_tf.errors import ConfigError
from ignite_tf.home import DEFAULT_HOME, ENV_HOME, HomeFolder
from ignite_tf.plan.shards import Reshuffle
from ignite_tf.typecodes import LOADABLE

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [*(ROOT / "provider" / "ignite_tf").rglob("*.py"), *(ROOT / "devtools" / "ignite_tf_dev").rglob("*.py")]


def default_of(function, name: str):
    return inspect.signature(function).parameters[name].default


def schema_entry(*path: str) -> dict:
    from ignite_tf.pipeline.schema import schema

    entry = schema()
    for key in path:
        entry = entry[key]
    return entry


def copies(pattern: str, allowed: set[str]) -> list[str]:
    """``file:line`` of each source line (comments and docstrings aside) matching ``pattern``, outside the
    files whose path ends with one of ``allowed``."""
    found = []
    for path in SOURCES:
        if path.as_posix().endswith(tuple(f"/{a}" for a in allowed)):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#")[0]
            if re.search(pattern, code) and not code.strip().startswith(('"', "'", "``", ":")):
                found.append(f"{path.relative_to(ROOT)}:{n}")
    return found


# -- the home folder -----------------------------------------------------------------------------------------
def test_every_path_under_the_home_folder_follows_ignite_tf_home(tmp_path):
    """In a fresh process (the dev tooling reads the variable at import): every default path under the home."""
    code = """
import json
from ignite_tf.cluster.bytecode import pycache_dir
from ignite_tf.runstore.layout import default_run_root
from ignite_tf.state import default_state_dir
from ignite_tf.defaults import default_registry_root
from ignite_tf_dev.ignite.__main__ import default_state_dir as local_ignite_dir
from ignite_tf_dev.k8s.layout import K8S_HOME
print(json.dumps([str(p) for p in (pycache_dir(), default_run_root(), default_state_dir(), default_registry_root(),
                                   local_ignite_dir(), K8S_HOME)]))
"""
    names = ("IGNITE_TF_PYCACHE", "IGNITE_TF_RUN_ROOT", "IGNITE_TF_CLUSTER_STATE", "IGNITE_TF_REGISTRY",
             "IGNITE_TF_STATE_DIR", "IGNITE_TF_K8S_HOME")
    env = {k: v for k, v in os.environ.items() if k not in names} | {ENV_HOME: str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    paths = [Path(p) for p in json.loads(done.stdout)]
    home = HomeFolder(tmp_path)
    assert paths[:5] == [home.pycache, home.runs, home.clusters, home.registry, home.local_ignite]
    assert paths[5].parent == tmp_path and paths[5].name.startswith("k8s-")


def test_the_home_folder_defaults_to_the_user_cache():
    assert HomeFolder.of({}).path == Path(DEFAULT_HOME).expanduser() == Path.home() / ".cache" / "ignite-tf"
    assert HomeFolder.of({ENV_HOME: "/srv/itf"}).ignite_jars("2.17.0") == Path("/srv/itf/ignite-2.17.0/libs")


def test_the_home_folder_is_derived_in_one_place():
    assert copies(r"[\"']\.cache[\"']|~/\.cache", {"home.py"}) == []
    assert copies(r"IGNITE_TF_HOME", {"home.py"}) == []


# -- the default connection id and the shuffle buffer --------------------------------------------------------
def test_one_default_ignite_connection_id():
    from ignite_tf.hooks.ignite import IgniteHook
    from ignite_tf.operators.base import IgniteTFOperator
    from ignite_tf.pipeline.spec import PipelineConfig
    from ignite_tf.sensors.tf_cluster import TFClusterSensor
    from ignite_tf.triggers.tf_cluster import TFClusterTrigger

    assert IgniteHook.default_conn_name == DEFAULT_CONN_ID == "ignite_default"
    assert {default_of(c.__init__, "ignite_conn_id") for c in (IgniteTFOperator, TFClusterSensor, TFClusterTrigger)} \
        == {DEFAULT_CONN_ID}
    assert PipelineConfig.__dataclass_fields__["ignite_conn_id"].default == DEFAULT_CONN_ID
    assert schema_entry("properties", "ignite_conn_id", "default") == DEFAULT_CONN_ID
    assert copies(r"[\"']ignite_default[\"']", {"connection.py"}) == []


def test_the_default_connection_id_imports_no_airflow():
    done = subprocess.run([sys.executable, "-c", "import sys; from ignite_tf.connection import DEFAULT_CONN_ID; "
                                                 "print('airflow' in sys.modules)"],
                          capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "False", done.stderr[-3000:]


def test_one_shuffle_buffer_default():
    import ignite_tf.data as itd
    from ignite_tf.data import feed
    from ignite_tf.runtime import inputs, train

    found = {f"{f.__module__}.{f.__name__}": default_of(f, "shuffle_buffer")
             for f in (itd.dataset, itd.read_ahead, inputs.sync_dataset, feed.write_feed, train.serve,
                       train.train)}
    assert found == dict.fromkeys(found, DEFAULT_SHUFFLE_BUFFER)
    assert train.build_parser().parse_args(["--epochs", "1"]).shuffle_buffer == DEFAULT_SHUFFLE_BUFFER


# -- ports ---------------------------------------------------------------------------------------------------
def test_port_checks_are_written_once():
    from ignite_tf.ports import free_port, listening, port_free

    port = free_port()
    assert port_free(port) and not listening(port)
    assert copies(r"connect_ex\(|create_connection\(|\.bind\(\(", {"ports.py"}) == []


# -- enums: the members in code, the values at the edges, parsed once ----------------------------------------
def test_the_schema_lists_the_enums_values_and_defaults():
    from ignite_tf.pipeline.spec import ShardPlanConfig, TrainingConfig

    reshuffle = schema_entry("properties", "shard_plan", "properties", "reshuffle")
    assert reshuffle["enum"] == [r.value for r in Reshuffle] and reshuffle["default"] == ShardPlanConfig().reshuffle
    launcher = schema_entry("properties", "training", "properties", "launcher")
    assert launcher["enum"] == [k.value for k in LauncherKind]
    assert launcher["default"] == TrainingConfig.__dataclass_fields__["launcher"].default
    placement = schema_entry("properties", "training", "properties", "kubernetes", "properties", "placement")
    assert placement["enum"] == [p.value for p in Placement] and placement["default"] == DEFAULT_PLACEMENT
    assert KubernetesSettings().placement is DEFAULT_PLACEMENT
    column_type = schema_entry("properties", "source", "properties", "schema", "additionalProperties")
    assert column_type["enum"] == list(LOADABLE)


def test_the_cli_choices_are_the_enums_values():
    from ignite_tf.cli import build_parser

    start = next(a for a in build_parser()._subparsers._group_actions[0].choices["start"]._actions
                 if a.dest == "launcher")
    assert start.choices == [k.value for k in LauncherKind] and start.default == LauncherKind.LOCAL
    args = build_parser().parse_args(["start", "--launcher", "kubernetes", "--placement", "required", "c", ".",
                                      "python", "x.py"])
    assert LauncherKind.parse(args.launcher) is LauncherKind.KUBERNETES
    assert KubernetesSettings.parse({"placement": args.placement}).placement is Placement.REQUIRED


@pytest.mark.parametrize("enum, default", [(LauncherKind, LauncherKind.LOCAL), (Reshuffle, Reshuffle.EPOCH),
                                           (Placement, DEFAULT_PLACEMENT)])
def test_each_enum_parses_its_values_and_names_the_allowed_ones(enum, default):
    assert [enum.parse(m.value) for m in enum] == list(enum) and enum.parse(None) is default
    with pytest.raises(ConfigError) as error:
        enum.parse("sideways")
    assert "'sideways'" in str(error.value) and all(m.value in str(error.value) for m in enum)


def test_launcher_kind_lives_with_the_launchers():
    import ignite_tf.pipeline.spec as pipeline_spec

    assert LauncherKind.__module__ == "ignite_tf.cluster.launcher"
    assert pipeline_spec.LauncherKind is LauncherKind  # the name keeps working where it was


def test_enum_values_are_not_relisted_as_strings():
    """Compared with, defaulted to or offered as a bare string, outside the enum's own module."""
    q = "[\"']"
    relisted = "|".join((
        rf"get\({q}kind{q}\)\s*[=!]=\s*{q}",
        rf"[=!]=\s*{q}(kubernetes|preferred|epoch){q}",
        rf"(launcher|reshuffle|placement)\s*[:=][^=,()]*=\s*{q}(local|kubernetes|required|preferred|epoch|none){q}",
        rf"choices=\[{q}(local|required)"))
    assert copies(relisted, {"k8s/settings.py", "cluster/launcher.py", "plan/shards.py"}) == []


def test_the_docs_state_the_lost_allowances_and_outage_budget_the_code_has():
    from ignite_tf.cluster.k8s.supervisor import REPLACED_S
    from ignite_tf.defaults import DEFAULT_OUTAGE_BUDGET_S
    from ignite_tf.state import LOST_AFTER_S

    readme = (ROOT / "README.md").read_text()
    assert f"older than {LOST_AFTER_S:.0f} s" in readme
    assert f"a supervisor pod {LOST_AFTER_S + REPLACED_S:.0f} s" in readme
    guide = (ROOT / "docs" / "guides" / "kubernetes.md").read_text()
    assert f"`supervision.outage_budget_s` ({DEFAULT_OUTAGE_BUDGET_S:.0f} s)" in guide


def test_every_test_the_readme_names_exists():
    """The fault table (and any other place) names tests as ``tests/<file>.py[::<function>]``: each is there."""
    named = re.findall(r"`(tests/[\w/]+\.py)(?:::(\w+))?`", (ROOT / "README.md").read_text())
    assert len(named) >= 8, named
    missing = [f"{path}::{name}" for path, name in named
               if not (ROOT / path).exists() or (name and f"def {name}(" not in (ROOT / path).read_text())]
    assert not missing, missing
