"""A bytecode cache for the tasks: TensorFlow's Python compiled once per machine, not at every task start.

Importing TensorFlow runs about 1,800 of its Python modules. Where no compiled bytecode sits next to them
(a virtual environment installed by ``uv`` without ``--compile-bytecode``, a read-only site-packages, or
``PYTHONDONTWRITEBYTECODE`` set, as in containers and CI), every task compiles them all again: measured here,
7.5 CPU-s of an 8 CPU-s import, paid by every worker of every cluster at the same moment on the same cores.

The supervisor therefore starts its tasks with ``PYTHONPYCACHEPREFIX`` set to one cache folder (default
``pycache`` in the ignite-tf home, :class:`ignite_tf.home.HomeFolder`) and bytecode writing on: the first task compiles
and writes, later ones read (Python writes each file atomically, so tasks may share the folder). Set
``IGNITE_TF_PYCACHE`` to another folder, or to an empty value to leave the tasks' Python as it is. A
caller's own ``PYTHONPYCACHEPREFIX`` is kept.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ignite_tf.home import HomeFolder

ENV_PYCACHE = "IGNITE_TF_PYCACHE"


def pycache_dir(environ: Mapping[str, str] | None = None) -> str | None:
    """The tasks' bytecode cache folder, or None when ``IGNITE_TF_PYCACHE`` is set empty."""
    env = os.environ if environ is None else environ
    if ENV_PYCACHE in env:
        return env[ENV_PYCACHE] or None
    return str(HomeFolder.of(env).pycache)


def with_bytecode_cache(env: dict[str, str]) -> dict[str, str]:
    """``env`` (a task's environment) with the shared bytecode cache on, unless the caller chose otherwise."""
    folder = pycache_dir(env)
    if folder is None or env.get("PYTHONPYCACHEPREFIX"):
        return env
    out = {k: v for k, v in env.items() if k != "PYTHONDONTWRITEBYTECODE"}
    out["PYTHONPYCACHEPREFIX"] = folder
    return out
