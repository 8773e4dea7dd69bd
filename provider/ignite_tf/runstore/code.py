"""Code shipping: the user's own modules reach every task through the run store, for both launchers.

The launcher packs into the run's ``code.zip``

- the module of an ``entry_point`` (``team_model:build``) as this process finds it (``importlib``, so its
  ``sys.path``: the current folder, ``PYTHONPATH``): its top-level package folder, or its single file; never a
  module that lives in the installed environment (``site-packages``, the interpreter's own library): the
  task image or the workers' environment has those;
- each path of ``py_modules`` (a folder or a ``.py`` file, as Ray's ``runtime_env`` names it): a package folder
  goes in under its name, a folder of modules as its contents;

and each task unpacks it into its ``code/`` folder, first on its ``PYTHONPATH`` (a local task: the
supervisor; a pod: its first process, ``ignite_tf.cluster.k8s.entry``). What was shipped is in the task's
``IGNITE_TF_CODE``, so an import error names it and says how to ship the rest. Code baked into an own image
needs none of this: it is importable there already, and nothing from the installed environment is shipped.
"""

from __future__ import annotations

import importlib.util
import io
import os
import site
import sysconfig
import zipfile
from collections.abc import Iterable
from pathlib import Path

from ignite_tf.contract import ENV_CODE
from ignite_tf.errors import ConfigError
from ignite_tf.runstore.store import LAYOUT, RunStore

SKIP = ("__pycache__", ".git", ".ipynb_checkpoints")


def installed_dirs() -> list[Path]:
    """Where the installed environment's modules live (never shipped)."""
    paths = {sysconfig.get_paths()[k] for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    paths.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    paths.add(site.getusersitepackages() if hasattr(site, "getusersitepackages") else "")
    return [Path(p).resolve() for p in paths if p]


def _installed(path: Path) -> bool:
    path = path.resolve()
    return any(path.is_relative_to(d) for d in installed_dirs())


def entry_point_source(entry_point: str) -> Path | None:
    """The file or package folder to ship for ``entry_point``; None when it is installed (or not found here:
    then the task must find it, and says so)."""
    top = str(entry_point).partition(":")[0].split(".")[0]
    # ignite_tf itself (its built-in models) is what every task runs already; an editable install of it lives
    # outside site-packages, and a shipped copy first on the tasks' path would mix two versions of it.
    if not top or top == __name__.partition(".")[0]:
        return None
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        locations = [Path(p) for p in spec.submodule_search_locations]
        folder = locations[0] if locations else None
        return None if folder is None or _installed(folder) else folder
    if not spec.origin or spec.origin in ("built-in", "frozen"):
        return None
    origin = Path(spec.origin)
    return None if _installed(origin) or origin.suffix != ".py" else origin


def pack(entry_point: str | None, py_modules: Iterable[str | os.PathLike] = (),
         job_dir: str | os.PathLike | None = None) -> tuple[bytes, list[str]] | None:
    """(zip bytes, names shipped) for the entry point's module, ``py_modules`` and the contents of ``job_dir``
    (a command's job folder, for tasks that cannot see this machine's disk); None when nothing is shipped."""
    sources: list[tuple[Path, bool]] = []  # (path, put its contents at the top)
    if job_dir:
        sources.append((Path(job_dir).resolve(), True))
    if entry_point:
        found = entry_point_source(entry_point)
        if found is not None:
            sources.append((found, False))
    for item in py_modules or ():
        path = Path(item).expanduser().resolve()
        if not path.exists():
            raise ConfigError(f"py_modules: {item} does not exist (give folders or .py files to ship to the tasks)")
        # A folder that is a package ships as that package; any other folder ships its contents.
        sources.append((path, path.is_dir() and not (path / "__init__.py").exists()))
    if not sources:
        return None
    buf, names = io.BytesIO(), []
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, contents in sources:
            if path.is_file():
                zf.write(path, path.name)
                names.append(path.name)
                continue
            base = path if contents else path.parent
            for f in sorted(path.rglob("*")):
                if f.is_file() and not any(part in SKIP for part in f.relative_to(base).parts):
                    zf.write(f, f.relative_to(base).as_posix())
            names.append(f"{path.name}/" if not contents else f"{path.name}/*")
    return buf.getvalue(), names


def ship(store: RunStore, entry_point: str | None, py_modules: Iterable[str | os.PathLike] = (),
         job_dir: str | os.PathLike | None = None, local_copy: str | os.PathLike | None = None) -> list[str]:
    """Pack and write ``code.zip`` to the run's store (and to ``local_copy``: the run's staging folder, where a
    supervisor on this host reads it without a store client); the names shipped (empty: nothing)."""
    packed = pack(entry_point, py_modules, job_dir)
    if packed is None:
        return []
    data, names = packed
    store.write_bytes(LAYOUT.code_zip, data)
    if local_copy is not None:
        Path(local_copy).parent.mkdir(parents=True, exist_ok=True)
        Path(local_copy).write_bytes(data)
    return names


def unpack(store: RunStore, run_dir: str | Path) -> str | None:
    """Unpack the run's ``code.zip`` into ``<run_dir>/code``; that folder (for ``PYTHONPATH``), or None."""
    data = store.read_bytes(LAYOUT.code_zip)
    return None if data is None else extract(data, run_dir, store.url)


def extract(data: bytes, run_dir: str | Path, origin: str) -> str:
    """Unpack ``code.zip``'s bytes (read from ``origin``) into ``<run_dir>/code``; that folder."""
    target = (Path(run_dir) / LAYOUT.code).resolve()
    target.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for member in zf.namelist():
            if not (target / member).resolve().is_relative_to(target):
                raise ConfigError(f"code.zip in {origin}: member {member!r} escapes the code folder")
        zf.extractall(target)
    return str(target)


def on_path(folder: str | None, environ=None) -> None:
    """Put ``folder`` first on ``PYTHONPATH`` in ``environ`` (default this process's)."""
    env = os.environ if environ is None else environ
    if not folder:
        return
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != folder]
    env["PYTHONPATH"] = os.pathsep.join([folder, *paths])


def import_hint(module: str, environ=None) -> str:
    """What to do about a module a task cannot import: what was shipped, and how to ship the rest."""
    env = os.environ if environ is None else environ
    shipped = env.get(ENV_CODE, "")
    where = f"shipped to the tasks: {shipped}" if shipped else "nothing of your code was shipped to the tasks"
    return (f"{where}; the launcher ships the entry point's own module when it finds it outside site-packages "
            f"where the launcher runs (its folder in the current folder or on PYTHONPATH), and the folders or "
            f".py files listed in py_modules (YAML training.py_modules, `ignite-tf start --py-module PATH`, "
            f"TFClusterOperator(py_modules=[...])); or install {module!r} in the task image "
            f"(see docs/guides/code.md)")


__all__ = ["entry_point_source", "import_hint", "on_path", "pack", "ship", "unpack"]
