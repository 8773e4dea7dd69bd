"""The held-out evaluation after training: the new model, and the production model, on the same held-out rows.

When the shard plan holds rows out (``shard_plan.evaluation``, :mod:`ignite_tf.plan.split`), the chief, once the
model is saved, reads the held-out rows of every partition (one reader, the split's key filter) and evaluates
the SAVED model on them; when ``IGNITE_TF_PRODUCTION_MODEL`` names a registry model with a production version,
that version is evaluated on the very same rows in the same process, loaded the same way, so the blessing gate
compares numbers from the same data. A production model that cannot be evaluated (a column it needs is gone
from the table, another input shape, an unreachable registry) is reported in ``production.error``, never fails
the training.

Why the chief and not the workers: the held-out share is small (10% of the rows is typical) and evaluation is
a forward pass only, so reading those rows costs more than evaluating them; spreading it over the workers would
need a collective after ``fit`` (MultiWorkerMirroredStrategy) or closures over the workers' feeds (async), and
the workers of a sync cluster leave once the chief has saved. ``seconds`` and ``read_s`` in the result say
what it cost.

TensorFlow is imported inside functions only.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from ignite_tf.contract import ENV_PRODUCTION_MODEL
from ignite_tf.evaluation.heldout import EVALUATION_FILE, read_held_out, report

__all__ = ["EVALUATION_FILE", "after_training", "evaluate_held_out", "production_model", "read_held_out", "report"]


def production_model(spec: str | None = None) -> tuple[str | None, str | None]:
    """(version, local SavedModel path) of the production version named by ``spec`` (default
    ``IGNITE_TF_PRODUCTION_MODEL``: ``<registry root>/<model>``); (None, None) when there is none."""
    from ignite_tf.registry.store import RegistryStore

    spec = spec if spec is not None else os.environ.get(ENV_PRODUCTION_MODEL)
    if not spec:
        return None, None
    root, _, model = spec.rstrip("/").rpartition("/")
    store = RegistryStore(root)
    version = store.production(model)
    return (version, store.fetch(model, version)) if version else (None, None)


def evaluate_held_out(plan, model_dir: str, *, batch_size: int = 1024, conn=None,
                      production: str | None = None) -> dict[str, Any] | None:
    """``{rows, metrics, production_metrics, production, split, seconds, read_s, by}`` of the saved model in
    ``model_dir`` (and the production model) on the plan's held-out rows; None when the plan holds none out."""
    if not plan.evaluation.enabled:
        return None
    started = time.monotonic()
    rows = read_held_out(plan, conn)
    read_s = time.monotonic() - started
    count = len(rows[plan.partition_map.key_column]) if rows else 0
    metrics = _evaluate(model_dir, rows, count, batch_size)
    found: dict[str, Any] = {"version": None}
    production_metrics = None
    try:
        version, path = production_model(production)
        found["version"] = version
        if path is not None:
            production_metrics = _evaluate(path, rows, count, batch_size)
    except Exception as exc:  # noqa: BLE001 - see the module docstring: reported, never fatal
        found["error"] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return {"rows": count, "metrics": metrics, "production_metrics": production_metrics, "production": found,
            "split": plan.evaluation.to_dict(), "seconds": round(time.monotonic() - started, 3),
            "read_s": round(read_s, 3), "by": "chief"}


def after_training(plan, model_dir: str | None, *, batch_size: int, log=print) -> dict[str, Any] | None:
    """On the chief (``model_dir``: where it saved the model; None elsewhere), with a held-out split: the
    evaluation, reported (``report``); else None."""
    if model_dir is None or not plan.evaluation.enabled:
        return None
    result = evaluate_held_out(plan, model_dir, batch_size=batch_size)
    report(result, model_dir, log=log)
    return result


def _evaluate(model_dir: str, rows: dict[str, np.ndarray], count: int, batch_size: int) -> dict[str, float]:
    """The model's compiled loss and metrics over ``rows``, taking the columns its ``MODEL_INFO`` names."""
    from ignite_tf.errors import ConfigError
    from ignite_tf.runtime.model import MODEL_INFO

    info = json.loads((Path(model_dir) / MODEL_INFO).read_text())
    features, label = list(info.get("features") or []), info.get("label")
    missing = [c for c in [*features, label] if c not in rows]
    if missing:
        raise ConfigError(f"the model in {model_dir} takes column(s) {missing} that the table no longer has "
                          f"(columns: {sorted(rows)})")
    if count == 0:
        return {}
    import tf_keras

    model = _reloaded(tf_keras.models.load_model(model_dir))
    x = np.stack([rows[f].astype(np.float32) for f in features], axis=1)
    out = model.evaluate(x, rows[label], batch_size=batch_size, verbose=0, return_dict=True)
    return {str(k): round(float(v), 6) for k, v in out.items()}


# Metric names tf_keras resolves by the shapes of the labels and outputs at their first use.
_BY_SHAPE = ("accuracy", "acc", "crossentropy", "ce")


def _reloaded(model):
    """``model`` compiled again with its metrics given by name where tf_keras resolves the name by shapes.

    A model saved before its metrics were ever used keeps "accuracy" unresolved, and the reloaded metric then
    compares labels with class probabilities (0.30 instead of 0.87 on the same rows); named again, it resolves
    as in training. ``ending.save_once`` now saves its copy with the resolved metrics, but production versions
    published before that fix are still in registries and are evaluated here as champions: without this they
    would score far below their challengers on the same rows.
    """
    import tensorflow as tf

    given = tf.nest.flatten(model.compiled_metrics._user_metrics) if model.compiled_metrics else []
    if not given:
        return model
    names = [getattr(m, "name", m) for m in given]
    model.compile(loss=model.loss, metrics=[n if n in _BY_SHAPE else m for n, m in zip(names, given, strict=True)])
    return model


