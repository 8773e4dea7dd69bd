"""HomeFolder: the one folder of this machine where ignite-tf keeps what outlives a run, named in one place.

``$IGNITE_TF_HOME``, default ``~/.cache/ignite-tf``::

    <home>/
        runs/                   run folders of clusters (unless IGNITE_TF_RUN_ROOT says otherwise)
        staging/                local copies of runs whose root is an object store (their files go there)
        clusters/               the local state store (unless IGNITE_TF_CLUSTER_STATE says otherwise)
        registry/               the model registry when none is given (unless IGNITE_TF_REGISTRY says otherwise)
        pycache/                the tasks' shared bytecode cache (unless IGNITE_TF_PYCACHE says otherwise)
        ignite-<version>/libs/  the Ignite jars of the local Ignite (development tooling)
        local-cluster/          the local Ignite cluster of ``make ignite-up`` (development tooling)
        k8s-<version>/          the local Kubernetes (development tooling)

The development tooling (``ignite_tf_dev``) takes its folders from here too, so that one variable moves all of it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ENV_HOME = "IGNITE_TF_HOME"
DEFAULT_HOME = "~/.cache/ignite-tf"


@dataclass(frozen=True)
class HomeFolder:
    """The layout of the ignite-tf home folder ``path`` (see the module docstring)."""

    path: Path

    def __post_init__(self):
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def of(cls, environ: Mapping[str, str] | None = None) -> HomeFolder:
        """The home folder that ``environ`` (default: this process's environment) names."""
        env = os.environ if environ is None else environ
        return cls(Path(env.get(ENV_HOME) or DEFAULT_HOME).expanduser())

    @property
    def runs(self) -> Path:
        return self.path / "runs"

    @property
    def staging(self) -> Path:
        return self.path / "staging"

    @property
    def clusters(self) -> Path:
        return self.path / "clusters"

    @property
    def registry(self) -> Path:
        return self.path / "registry"

    @property
    def pycache(self) -> Path:
        return self.path / "pycache"

    @property
    def local_ignite(self) -> Path:
        return self.path / "local-cluster"

    def ignite_jars(self, version: str) -> Path:
        return self.path / f"ignite-{version}" / "libs"

    def kubernetes(self, version: str) -> Path:
        return self.path / f"k8s-{version}"
