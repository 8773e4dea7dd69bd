"""TensorBoard for one run or several: ``ignite-tf tensorboard CLUSTER_ID|RUN_DIR... [--port]``.

A target is a cluster id (its run folder comes from the cluster state), a run folder (with a ``tensorboard/``
inside, as the launcher writes it; a registry version folder has one too), a folder of run folders (a run
root: every run in it) or a run's object-store URL. A run that lives in an object store
(``ignite_tf.runstore``) has its events copied to this machine's local copy of the run (the ignite-tf
home's ``staging/<cluster id>``) once, at start. TensorBoard shows each run under its folder's name (the
cluster id).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ignite_tf.errors import ConfigError
from ignite_tf.runstore import LAYOUT, RunFolder, RunStore, is_remote
from ignite_tf.runstore.layout import staging_dir

DEFAULT_PORT = 6006
ENV_TENSORBOARD_URL = "IGNITE_TF_TENSORBOARD_URL"
"""Where users reach ``ignite-tf tensorboard`` (the page's and the extra links' target); default
``http://localhost:6006``."""


def tensorboard_url(cluster_id: str | None = None) -> str:
    """The link to TensorBoard, filtered to one run (its runs are named after the cluster id) when given."""
    base = os.environ.get(ENV_TENSORBOARD_URL, f"http://localhost:{DEFAULT_PORT}").rstrip("/")
    return f"{base}/?runFilter={cluster_id}#timeseries" if cluster_id else f"{base}/"


def _is_run(path: Path) -> bool:
    return RunFolder(path).tensorboard.is_dir()


def logdirs(targets: list[str], store=None) -> dict[str, Path]:
    """``{run name: tensorboard folder}`` for the targets; a name used twice gets the parent's name too."""
    found: dict[str, Path] = {}

    def add(run: Path) -> None:
        name = run.name if run.name not in found else f"{run.parent.name}/{run.name}"
        found[name] = RunFolder(run).tensorboard

    for target in targets:
        if is_remote(target):
            name = target.rstrip("/").rsplit("/", 1)[-1]
            found[name] = from_store(RunStore(target), name)
            continue
        path = Path(target).expanduser()
        if path.is_dir():
            if _is_run(path):
                add(path.resolve())
                continue
            runs = sorted(p for p in path.iterdir() if p.is_dir() and _is_run(p))
            if not runs:
                raise ConfigError(f"{target}: no TensorBoard files (neither {target}/tensorboard nor a run folder "
                                  f"with one inside)")
            for run in runs:
                add(run.resolve())
            continue
        if store is None:
            raise ConfigError(f"{target} is neither a folder nor a cluster id with a state store to look it up in")
        state = store.require(target)
        if is_remote(state.run_dir):
            found[state.cluster_id] = from_store(RunStore(state.run_dir), state.cluster_id)
            continue
        run = Path(state.run_dir)
        if not _is_run(run):
            raise ConfigError(f"cluster {target}: its run folder {run} has no tensorboard/ folder (yet) on this "
                              f"machine; run this where the cluster ran, or pass a copy of the run folder")
        found[state.cluster_id] = RunFolder(run).tensorboard
    return found


def from_store(run: RunStore, cluster_id: str) -> Path:
    """The run's TensorBoard events copied from its object store to this machine; the local folder."""
    local = RunFolder(staging_dir(cluster_id)).tensorboard
    if not run.get_dir(LAYOUT.tensorboard, local):
        raise ConfigError(f"{run.url} has no tensorboard/ events (yet): the chief copies them after each epoch")
    return local


def command(dirs: dict[str, Path], *, port: int = DEFAULT_PORT, host: str = "127.0.0.1") -> list[str]:
    spec = ",".join(f"{name}:{path}" for name, path in dirs.items())
    return [sys.executable, "-m", "tensorboard.main", "--logdir_spec", spec, "--port", str(port), "--host", host,
            "--reload_interval", "5"]


def serve(dirs: dict[str, Path], *, port: int = DEFAULT_PORT, host: str = "127.0.0.1") -> None:
    """Become TensorBoard (exec): one process, so Ctrl-C or a SIGTERM to it leaves nothing behind."""
    print(f"TensorBoard on http://{host}:{port}/ for {', '.join(dirs)} (Ctrl-C stops it)", flush=True)
    argv = command(dirs, port=port, host=host)
    os.execv(argv[0], argv)
