"""What the ignite-tf page shows, as plain dicts: a cluster's state, its curves, its shard plan and the
results of the pipeline's other stages (validation, publish) when an Airflow run is behind it.

Plain Python: the FastAPI app gathers the inputs (the state store, the DAG run's XComs) and renders these.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ignite_tf.cluster.launcher import LauncherKind
from ignite_tf.runstore import LAYOUT, RunStore
from ignite_tf.state import ClusterState
from ignite_tf.ui.charts import line_chart

# Epoch keys that are bookkeeping, not curves.
NOT_CURVES = ("epoch", "epochs", "steps", "attempt", "time", "epoch_s", "examples_per_s")
# Operators whose result (XCom return_value) the page shows next to the cluster of the same DAG run.
RESULT_OPERATORS = {"ShardPlanOperator": "plan", "ValidationGateOperator": "validation",
                    "PublishModelOperator": "publish"}


def age_text(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h"
    return f"{seconds // 86400}d"


def charts(epochs: list[dict[str, Any]]) -> list[str]:
    """SVG charts: loss (with val_loss), each metric (with its val_ twin), examples/s."""
    keys: list[str] = []
    for row in epochs:
        keys += [k for k, v in row.items() if k not in keys and k not in NOT_CURVES and isinstance(v, int | float)]

    def series(*names: str) -> dict[str, list[tuple[float, float]]]:
        return {n: [(float(r["epoch"]), float(r[n])) for r in epochs if isinstance(r.get(n), int | float)]
                for n in names if n in keys or n == "examples_per_s"}

    out = []
    bases = [k for k in keys if not k.startswith("val_")]
    bases.sort(key=lambda k: (k != "loss", k))
    for base in bases:
        names = [base] + ([f"val_{base}"] if f"val_{base}" in keys else [])
        out.append(line_chart(base, series(*names)))
    out.append(line_chart("examples/s", series("examples_per_s")))
    return [c for c in out if c]


def plan_summary(run_dir: str) -> dict[str, Any] | None:
    """Rows per worker and locality of the cluster's shard plan (epoch 0), from where its run lives (a run
    folder, or an object-store URL: ``ignite_tf.runstore``). A store is read with this process's environment
    (the API server's ``AWS_*`` variables or role): the page does not know the DAG's ``run_store_conn_id``."""
    from ignite_tf.plan.shards import ShardPlan

    store = RunStore(run_dir)
    path = store.path(LAYOUT.shard_plan)
    try:
        data = store.read_json(LAYOUT.shard_plan)
        if data is None:
            return None
        plan = ShardPlan.from_dict(data)
        shards = plan.shards(0)
    except Exception as exc:  # noqa: BLE001 - an unreadable plan (or store) is shown, not a broken page
        return {"error": f"{path}: {exc}"}
    total = sum(s.rows for s in shards)
    return {
        "cache": plan.partition_map.cache, "partitions": plan.partition_map.partitions, "rows": total,
        "reshuffle": plan.reshuffle.value, "seed": plan.seed,
        "locality": round(sum(s.local_rows for s in shards) / total, 3) if total else 1.0,
        "workers": [{"worker": s.worker, "host": s.host or "-", "rows": s.rows, "slices": len(s.slices),
                     "locality": round(s.locality, 3)} for s in shards],
    }


def locality_view(state: ClusterState, plan: dict[str, Any] | None) -> dict[str, Any] | None:
    """Measured locality (what the workers' readers counted, ``state.reads``) beside the plan's share, per
    worker and in all; None before any worker read."""
    total = state.measured_locality
    if total is None:
        return None
    planned = {w["worker"]: w["locality"] for w in (plan or {}).get("workers", [])}
    return {
        "measured": total["locality"], "planned": (plan or {}).get("locality"), "rows": total["rows"],
        "local_rows": total["local_rows"], "unmatched_rows": total["unmatched_rows"], "by": total.get("by", "host"),
        "by_node": total["by_node"],
        "workers": [{"worker": r.get("worker"), "where": r.get("where", "-"), "rows": r.get("rows", 0),
                     "passes": r.get("passes", 0), "measured": r.get("locality"),
                     "planned": planned.get(r.get("worker"))} for r in state.reads],
    }


def cluster_view(state: ClusterState, *, alive: bool, results: dict[str, Any] | None = None,
                 now: float | None = None) -> dict[str, Any]:
    """One cluster as the page shows it. ``results``: ``plan`` / ``validation`` / ``publish`` XComs."""
    results = results or {}
    last = state.last_epoch
    status = state.status.value if (alive or state.status.final) else "lost"
    age = ((state.finished_at or now or time.time()) - state.started_at)
    view = {
        "id": state.cluster_id, "cache": state.cache, "mode": state.mode, "status": status,
        "launcher": (state.launcher or {}).get("kind", LauncherKind.LOCAL.value), "labels": dict(state.labels),
        "restarts": state.restarts, "reason": state.reason, "run_dir": state.run_dir, "age": age_text(age),
        "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(state.started_at)),
        "epochs_done": len(state.epochs), "epochs_total": last.get("epochs"),
        "last_epoch": {k: v for k, v in last.items() if k not in ("time", "attempt")},
        "tasks": [{"name": t.name, "host": t.host, "state": t.state, "restarts": t.restarts, "exit": t.exit_text}
                  for t in state.tasks],
        "charts": charts(state.epochs),
        "plan": plan_summary(state.run_dir) or _plan_from_xcom(results.get("plan")),
        "locality": None,
        "validation": _validation(results.get("validation")),
        "publish": _publish(results.get("publish")),
        "evaluation": state.evaluation,
    }
    view["locality"] = locality_view(state, view["plan"])
    return view


def _plan_from_xcom(value: Any) -> dict[str, Any] | None:
    return None if value is None else {"xcom": _small(value)}


def _validation(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict):
        return None
    checks = value.get("checks") or []
    return {"passed": bool(value.get("passed")), "suite": value.get("suite"), "rows": value.get("rows"),
            "rows_checked": value.get("rows_checked"), "rows_per_shard": value.get("rows_per_shard") or {},
            "message": value.get("message", ""), "checks": len(checks),
            "failed": [c.get("detail") or c.get("expectation") for c in checks if not c.get("success")][:5]}


def _publish(value: Any) -> dict[str, Any] | None:
    if not isinstance(value, dict) or "version" not in value:
        return None
    out = {k: value.get(k) for k in ("model", "version", "status", "reasons", "previous_production", "path")}
    meta = Path(str(value.get("path") or "")) / "metadata.json"
    try:
        recorded = json.loads(meta.read_text())
    except (OSError, ValueError):
        recorded = {}
    out["metrics"] = recorded.get("metrics", {})
    out["gate"] = {k: (recorded.get("gate") or {}).get(k) for k in ("on", "comparisons", "notes")}
    return out


def _small(value: Any, limit: int = 400) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + "..."
