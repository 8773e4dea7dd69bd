"""Packaging: the wheel a user installs holds the provider only and works outside the source tree.

``uv build`` makes the sdist and, from it, the wheel (a wheel built straight from the tree would also pack what
an earlier build left in ``build/lib``). The wheel goes with ``requirements/lock.txt`` into a fresh venv in
``tmp_path`` (uv's cache is warm: hardlinks, seconds), where every check runs with its working directory
outside the source tree and no ``PYTHONPATH``: the console script, Airflow's provider list, an import of every
module, and the Kubernetes launcher without an image (a ConfigError naming ``kubernetes.image``). Nothing is
faked. The venv (about 3 GB of hardlinks) is deleted at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(900)

ROOT = Path(__file__).resolve().parents[1]
UV = Path(sys.executable).parent / "uv"  # the project's uv (pinned in the lock), with the warm cache
DIST_INFO = "airflow_provider_ignite_tf-"

IMPORT_ALL = """
import importlib, importlib.util, json, pkgutil
import ignite_tf
names = [m.name for m in pkgutil.walk_packages(ignite_tf.__path__, "ignite_tf.")]
for name in names:
    if name.rpartition(".")[2] != "__main__":  # `python -m` entry points: importing one runs it
        importlib.import_module(name)
print(json.dumps({"file": ignite_tf.__file__, "modules": names,
                  "found": {m: importlib.util.find_spec(m) is not None for m in ("ignite_tf_dev", "tests")}}))
"""

# Contacting Kubernetes starts with importing its client (the launcher imports it lazily, through Airflow's
# KubernetesHook): refusing those imports shows the image is checked before anything talks to a cluster.
LAUNCH = """
import importlib.abc, sys
from ignite_tf.cluster.api import make_launcher
from ignite_tf.cluster.spec import ClusterSpec
from ignite_tf.errors import ConfigError

class NoKubernetes(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("kubernetes", "kubernetes_asyncio") or name.startswith(
                "airflow.providers.cncf.kubernetes.hooks"):
            raise AssertionError(f"the launcher imported {name} (to talk to Kubernetes) before checking its image")

sys.meta_path.insert(0, NoKubernetes())
launcher = make_launcher(kind="kubernetes")
spec = ClusterSpec(cluster_id="wheel-check", cache="any", mode="sync", tasks=[], run_dir=sys.argv[1],
                   job={"command": ["python", "-c", "pass"]})
try:
    launcher.launch(spec)
except ConfigError as exc:
    print(exc)
else:
    sys.exit("launched without an image")
"""


def _run(args: list, cwd: Path, env: dict | None = None, timeout: float = 300) -> str:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"{args[:3]} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory) -> Path:
    dist = tmp_path_factory.mktemp("dist")
    _run([UV, "build", "-q", "-o", dist, ROOT], cwd=ROOT)
    (found,) = dist.glob("*.whl")
    return found


@pytest.fixture(scope="module")
def venv(built_wheel, tmp_path_factory):
    """A fresh venv with the lock and the wheel; yields (its bin folder, a work folder, its environment)."""
    base = tmp_path_factory.mktemp("installed")
    assert not base.resolve().is_relative_to(ROOT)
    env_dir = base / "venv"
    try:
        _run([UV, "venv", "-q", "--python", sys.executable, env_dir], cwd=base)
        python = env_dir / "bin" / "python"
        _run([UV, "pip", "sync", "-q", "--python", python, ROOT / "requirements" / "lock.txt"], cwd=base)
        _run([UV, "pip", "install", "-q", "--no-deps", "--python", python, built_wheel], cwd=base)
        work = base / "work"
        work.mkdir()
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.startswith(("AIRFLOW", "IGNITE_TF"))}
        env.update(HOME=str(base / "home"), AIRFLOW_HOME=str(base / "airflow"), IGNITE_TF_HOME=str(base / "itf"),
                   AIRFLOW__CORE__LOAD_EXAMPLES="False", PATH=f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}")
        yield env_dir / "bin", work, env
    finally:  # rm unlinks ~50,000 files about twice as fast as shutil.rmtree
        subprocess.run(["rm", "-rf", "--one-file-system", str(base)], check=False)
        shutil.rmtree(base, ignore_errors=True)


def test_the_wheel_holds_the_provider_only(built_wheel):
    names = zipfile.ZipFile(built_wheel).namelist()
    assert {n.split("/")[0] for n in names if not n.startswith(DIST_INFO)} == {"ignite_tf"}
    assert "ignite_tf/__init__.py" in names and "ignite_tf/resources/pipeline.schema.json" in names
    assert not [n for n in names if "demo_data" in n or n.startswith("ignite_tf/dev/")]
    entry_points = zipfile.ZipFile(built_wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "ignite_tf.task_image" not in entry_points  # the default task image comes from the dev tooling only


def test_the_console_script_runs(venv):
    bin_dir, work, env = venv
    assert "usage: ignite-tf" in _run([bin_dir / "ignite-tf", "-h"], cwd=work, env=env)


def test_every_module_imports_from_the_venv(venv):
    bin_dir, work, env = venv
    report = json.loads(_run([bin_dir / "python", "-c", IMPORT_ALL], cwd=work, env=env).splitlines()[-1])
    assert Path(report["file"]).is_relative_to(bin_dir.parent)
    assert len(report["modules"]) > 60 and "ignite_tf.cluster.k8s.launcher" in report["modules"]
    assert report["found"] == {"ignite_tf_dev": False, "tests": False}


def test_airflow_lists_the_provider(venv):
    bin_dir, work, env = venv
    out = _run([bin_dir / "airflow", "providers", "list", "-o", "json"], cwd=work, env=env)
    providers = json.loads(out.strip().splitlines()[-1])
    assert "airflow-provider-ignite-tf" in {p["package_name"] for p in providers}


def test_the_kubernetes_launcher_without_an_image_says_what_to_set(venv):
    bin_dir, work, env = venv
    message = _run([bin_dir / "python", "-c", LAUNCH, work / "run"], cwd=work, env=env)
    assert "kubernetes.image" in message and "make image" in message
    assert not (work / "run" / "k8s.json").exists()
