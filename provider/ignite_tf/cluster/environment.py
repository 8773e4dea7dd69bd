"""The environment of a supervisor and its tasks: an allowlist, never the caller's whole environment.

An Airflow worker's environment holds every ``AIRFLOW_CONN_*`` and ``AIRFLOW__*`` secret of the deployment;
user code in a TensorFlow task must see none of them. A task gets

- what Python, TensorFlow and CUDA need to run (``RUNTIME_NAMES``, ``RUNTIME_PREFIXES``);
- this project's own ``IGNITE_TF_*`` settings, among them the Ignite connection the task reads its data with;
- the variables a user names with ``env`` (CLI ``--env NAME[=VALUE]``, operator ``env=``, YAML
  ``training.env``): ``NAME`` passes the caller's value through the environment only, ``NAME=VALUE`` sets a
  value that is recorded in the run folder's ``cluster.json`` (so not for secrets);
- ``PATH`` with the folder of the interpreter running ignite-tf first, so a job's ``python`` is the one that
  has TensorFlow and ignite-tf installed, activated or not.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Mapping

from ignite_tf.errors import ConfigError

RUNTIME_NAMES = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TMP", "TEMP", "VIRTUAL_ENV",
    "LD_LIBRARY_PATH", "LD_PRELOAD", "SSL_CERT_FILE", "SSL_CERT_DIR", "XLA_FLAGS", "KERAS_HOME",
    "OPENBLAS_NUM_THREADS",
})
"""Variables passed to every task (and the supervisor) when the caller has them."""

RUNTIME_PREFIXES = ("LC_", "PYTHON", "TF_", "CUDA_", "NVIDIA_", "NCCL_", "GRPC_", "OMP_", "MKL_", "KMP_",
                    "IGNITE_TF_")
"""Families of variables passed likewise: locale, Python, TensorFlow, CUDA/NCCL, thread pools, ignite-tf."""

NEVER_PREFIXES = ("TF_VAR_", "TF_TOKEN_")
"""Terraform shares the ``TF_`` prefix and keeps secrets there: these never pass unless named."""

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def needed_by_runtime(name: str) -> bool:
    if name.startswith(NEVER_PREFIXES):
        return False
    return name in RUNTIME_NAMES or name.startswith(RUNTIME_PREFIXES)


def parse_env(items: Iterable[str] | Mapping[str, str] | None, *, source: str = "env") -> tuple[dict[str, str],
                                                                                             tuple[str, ...]]:
    """``["NAME", "NAME=VALUE", ...]`` (or a mapping NAME -> VALUE) -> (values to set, names to pass through)."""
    if not items:
        return {}, ()
    if isinstance(items, Mapping):
        items = [f"{k}={v}" for k, v in items.items()]
    if isinstance(items, str):
        raise ConfigError(f"{source}: expected a list of NAME or NAME=VALUE, got the string {items!r}")
    values: dict[str, str] = {}
    names: list[str] = []
    for item in items:
        name, eq, value = str(item).partition("=")
        if not _NAME.match(name):
            raise ConfigError(f"{source}: {item!r} is not NAME or NAME=VALUE (a name is letters, digits and _, "
                              f"not starting with a digit)")
        if name == "TF_CONFIG":
            raise ConfigError(f"{source}: TF_CONFIG is set by the launcher for each task; it cannot be given")
        if eq:
            values[name] = value
        elif name not in names:
            names.append(name)
    return values, tuple(names)


def pass_through(names: Iterable[str], environ: Mapping[str, str] | None = None, *,
                 source: str = "env") -> dict[str, str]:
    """The caller's values of the variables a user named; a name the caller lacks is an error."""
    env = os.environ if environ is None else environ
    missing = [n for n in names if n not in env]
    if missing:
        raise ConfigError(f"{source}: {', '.join(missing)} not set in this environment: set it, or give "
                          f"NAME=VALUE")
    return {n: env[n] for n in names}


def with_interpreter_first(path: str | None, executable: str | None = None) -> str:
    """``path`` with the folder of ``executable`` (default: this interpreter, not resolved, so a virtual
    environment's ``bin`` stays itself) moved to the front."""
    folder = os.path.dirname(os.path.abspath(executable or sys.executable))
    rest = [p for p in (path or os.defpath).split(os.pathsep) if p and p != folder]
    return os.pathsep.join([folder, *rest])


def minimal_env(environ: Mapping[str, str] | None = None, names: Iterable[str] = ()) -> dict[str, str]:
    """What a supervisor or task inherits from ``environ``: the runtime's variables and the ``names`` given."""
    env = os.environ if environ is None else environ
    wanted = set(names)
    out = {k: v for k, v in env.items() if k in wanted or needed_by_runtime(k)}
    out["PATH"] = with_interpreter_first(out.get("PATH"))
    return out
