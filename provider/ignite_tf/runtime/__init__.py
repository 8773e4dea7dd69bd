"""The TensorFlow task runtime: ``python -m ignite_tf.runtime`` runs one task of a cluster.

A user's own training script, started by ``ignite-tf start ... python train.py`` with ``TF_CONFIG`` set, asks
this package for its place in the cluster::

    import ignite_tf.runtime

    strategy = ignite_tf.runtime.strategy()   # MultiWorkerMirroredStrategy, ParameterServerStrategy or default
    if ignite_tf.runtime.task_info().serves:  # an async worker or a parameter server
        ignite_tf.runtime.serve()

These names are resolved on first use (PEP 562): importing the package stays as light as before, as the
supervisor and ``ignite_tf.data`` import its submodules, and TensorFlow is imported by ``strategy()`` and
``serve()`` only.
"""

from __future__ import annotations

import importlib

# Public name -> the submodule that defines it.
_PUBLIC = {"strategy": "train", "serve": "train", "task_info": "task", "TaskInfo": "task"}

__all__ = ["TaskInfo", "serve", "strategy", "task_info"]


def __getattr__(name: str):
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_PUBLIC[name]}"), name)
    globals()[name] = value  # resolved once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_PUBLIC})
