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

from ignite_tf.exports import lazy_exports

# Public name -> the submodule that defines it.
_PUBLIC = {"strategy": "train", "serve": "train", "task_info": "task", "TaskInfo": "task"}

__all__ = ["TaskInfo", "serve", "strategy", "task_info"]

__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
