"""The held-out rows and what is reported of their evaluation: shared by the runtime's chief
(:mod:`ignite_tf.runtime.evaluation`, which evaluates the models) and a user's own script
(``ignite_tf.data.evaluation_dataset`` / ``report_evaluation``).

An evaluation is ``{rows, metrics, production_metrics, production: {version, error}, split, ...}``: printed as
one line, written beside the model (``ignite_tf_evaluation.json``), recorded in the cluster state
(``TaskReports.evaluation``), from where the training operator's result, the page and the publish gate take it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ignite_tf.contract import is_chief
from ignite_tf.reader.blocks import filled
from ignite_tf.reader.tasks import ReadTask

__all__ = ["EVALUATION_FILE", "describe", "held_out_dataset", "read_held_out", "report", "script_metrics"]

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


def report(evaluation: dict[str, Any], model_dir: str | None = None, log=print) -> None:
    """The evaluation in the chief's output, in ``<model_dir>/ignite_tf_evaluation.json`` and in the cluster
    state. Never raises: the model is trained and saved by now."""
    log(describe(evaluation))
    if model_dir:
        (Path(model_dir) / EVALUATION_FILE).write_text(json.dumps(evaluation))
    from ignite_tf.state.reports import TaskReports

    reports = TaskReports.from_env()
    if reports is not None:
        with reports:
            try:
                reports.evaluation(evaluation)
            except Exception as exc:  # noqa: BLE001
                log(f"warning: could not record the held-out evaluation in {reports.describe()}: {exc}")


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
    if not is_chief():
        return None
    evaluation = {"rows": _ROWS.get(plan.partition_map.cache, 0) if rows is None else int(rows),
                  "metrics": {str(k): round(float(v), 6) for k, v in metrics.items()},
                  "production_metrics": None, "production": {"version": None},
                  "split": plan.evaluation.to_dict(), "by": "script"}
    report(evaluation, log=log)
    return evaluation
