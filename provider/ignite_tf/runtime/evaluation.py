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

from ignite_tf.contract import ENV_CLUSTER_ID, ENV_PRODUCTION_MODEL
from ignite_tf.reader.blocks import filled
from ignite_tf.reader.tasks import ReadTask

__all__ = ["EVALUATION_FILE", "after_training", "evaluate_held_out", "held_out_dataset", "script_metrics", "production_model", "read_held_out", "report"]

EVALUATION_FILE = "ignite_tf_evaluation.json"  # written inside the saved model directory, beside MODEL_INFO


def read_held_out(plan, conn=None) -> dict[str, np.ndarray]:
    """Every held-out row of the plan's cache, all columns (NULLs filled), in one dict of arrays."""
    from ignite_tf.connection import IgniteConnectionConfig
    from ignite_tf.errors import ConfigError
    from ignite_tf.reader.partition import PartitionReader

    conn = conn or IgniteConnectionConfig.from_env()
    if conn is None:
        raise ConfigError("no Ignite connection for the held-out rows: pass conn=... or set IGNITE_TF_ADDRESSES")
    pm = plan.partition_map
    with PartitionReader(conn, pm.cache, batch_size=65536, primaries=pm.primary_addresses(),
                         backups=pm.backup_addresses(), key_filter=plan.evaluation.evaluation_rows) as reader:
        rows = reader.read_all([ReadTask(p) for p in range(pm.partitions)])
    return {k: filled(v) for k, v in rows.items()}


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

    A model saved before its metrics were ever used (the chief saves a fresh copy of the trained model,
    ``ending.save_once``) keeps "accuracy" unresolved, and the reloaded metric then compares labels with
    class probabilities (0.30 instead of 0.87 on the same rows); named again, it resolves as in training.
    """
    import tensorflow as tf

    given = tf.nest.flatten(model.compiled_metrics._user_metrics) if model.compiled_metrics else []
    if not given:
        return model
    names = [getattr(m, "name", m) for m in given]
    model.compile(loss=model.loss, metrics=[n if n in _BY_SHAPE else m for n, m in zip(names, given, strict=True)])
    return model


def report(evaluation: dict[str, Any], model_dir: str | None = None, log=print) -> None:
    """The evaluation in the chief's output, in ``<model_dir>/ignite_tf_evaluation.json`` and in the cluster
    state. Never raises: the model is trained and saved by now."""
    log(describe(evaluation))
    if model_dir:
        (Path(model_dir) / EVALUATION_FILE).write_text(json.dumps(evaluation))
    from ignite_tf.cluster.state import store_from_env

    cluster_id, store = os.environ.get(ENV_CLUSTER_ID), store_from_env()
    if cluster_id and store is not None:
        try:
            store.set_evaluation(cluster_id, evaluation)
        except Exception as exc:  # noqa: BLE001
            log(f"warning: could not record the held-out evaluation in {store.describe()}: {exc}")
        finally:
            store.close()


def describe(evaluation: dict[str, Any]) -> str:
    """One line: ``held-out evaluation on N rows: accuracy=... loss=... | production v0003: accuracy=...``."""
    def numbers(metrics):
        return " ".join(f"{k}={v:.4f}" for k, v in sorted((metrics or {}).items())) or "-"

    line = f"held-out evaluation on {evaluation['rows']} rows: {numbers(evaluation['metrics'])}"
    production = evaluation.get("production") or {}
    if production.get("error"):
        line += f" | production {production.get('version') or 'model'} not evaluated: {production['error']}"
    elif production.get("version"):
        line += f" | production {production['version']}: {numbers(evaluation['production_metrics'])}"
    return line + (f" ({evaluation['seconds']:.1f}s)" if "seconds" in evaluation else "")


# -- a user's own script (``ignite_tf.data.evaluation_dataset`` / ``report_evaluation``) ----------------------
_ROWS: dict[str, int] = {}  # held-out rows of the last dataset made per cache, for the report that follows


def held_out_dataset(plan, batch_size: int, *, label_column: str, features: list[str] | None, conn):
    """``(features [b, n] float32, label)`` batches of every held-out row (one pass, the last batch shorter)."""
    import tensorflow as tf

    from ignite_tf.reader.columns import cache_columns

    names, label, _, _ = cache_columns(plan, conn, label_column, features)
    rows = read_held_out(plan, conn)
    count = len(rows[plan.partition_map.key_column])
    _ROWS[plan.partition_map.cache] = count
    x = np.stack([rows[n].astype(np.float32) for n in names], axis=1) if count else np.zeros((0, len(names)),
                                                                                            np.float32)
    return tf.data.Dataset.from_tensor_slices((x, rows[label])).batch(batch_size)


def script_metrics(plan, metrics: dict[str, Any], *, rows: int | None = None, log=print) -> dict[str, Any] | None:
    """A script's held-out metrics (``model.evaluate(..., return_dict=True)``) as the runtime's evaluation,
    reported by the chief alone (``report``); None on the other tasks."""
    from ignite_tf.runtime.task import task_info

    if not task_info().is_chief:
        return None
    evaluation = {"rows": _ROWS.get(plan.partition_map.cache, 0) if rows is None else int(rows),
                  "metrics": {str(k): round(float(v), 6) for k, v in metrics.items()},
                  "production_metrics": None, "production": {"version": None},
                  "split": plan.evaluation.to_dict(), "by": "script"}
    report(evaluation, log=log)
    return evaluation
