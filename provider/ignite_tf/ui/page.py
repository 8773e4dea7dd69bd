"""The ignite-tf page: HTML from the views of ``views.py`` (no template engine, no scripts, no external files)."""

from __future__ import annotations

from html import escape
from typing import Any
from urllib.parse import quote

from ignite_tf.ui.views import NOT_CURVES

STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:16px 20px;color:#1a202c;background:#fff}
h1{font-size:20px;margin:0 0 4px} h2{font-size:17px;margin:0} h3{font-size:14px;margin:14px 0 6px}
.sub{color:#4a5568;font-size:13px;margin-bottom:14px}
table{border-collapse:collapse;font-size:13px} th,td{padding:4px 10px;border-bottom:1px solid #e2e8f0;text-align:left}
th{background:#f7fafc;font-weight:600} td.num{text-align:right}
.state{display:inline-block;padding:1px 8px;border-radius:10px;font-size:12px;font-weight:600;color:#fff;
background:#718096}
.s-succeeded,.s-production,.s-passed,.s-exited{background:#2f855a} .s-running,.s-starting{background:#2b6cb0}
.s-restarting{background:#b7791f} .s-failed,.s-lost,.s-killed,.s-gone{background:#c53030}
.s-stopped,.s-candidate{background:#718096}
.cluster{border:1px solid #cbd5e0;border-radius:8px;padding:12px 16px;margin:18px 0}
.meta{font-size:13px;color:#2d3748;margin:6px 0} .meta span{margin-right:16px}
.charts{display:flex;flex-wrap:wrap;gap:12px}
svg.chart{border:1px solid #e2e8f0;border-radius:6px;background:#fff}
svg .chart-title{font-size:12px;font-weight:600;fill:#2d3748} svg .tick{font-size:10px;fill:#4a5568}
svg .legend{font-size:11px;font-weight:600} svg .grid{stroke:#edf2f7} svg .plot{fill:#fcfcfd;stroke:#cbd5e0}
.cols{display:flex;flex-wrap:wrap;gap:28px} .reason{color:#c53030;font-size:13px} .note{color:#4a5568;font-size:13px}
code{background:#f1f5f9;padding:1px 4px;border-radius:3px;font-size:12px} a{color:#2b6cb0}
"""


def _state(text: Any) -> str:
    value = str(text)
    return f'<span class="state s-{escape(value)}">{escape(value)}</span>'


def _table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def airflow_task_url(labels: dict[str, str]) -> str | None:
    """The Airflow UI's page of the task that started the cluster (relative to the API server)."""
    if not labels.get("dag_id") or not labels.get("run_id"):
        return None
    url = f"/dags/{quote(labels['dag_id'], safe='')}/runs/{quote(labels['run_id'], safe='')}"
    if labels.get("task_id"):
        url += f"/tasks/{quote(labels['task_id'], safe='')}"
        if labels.get("map_index") not in (None, "", "-1"):
            url += f"/mapped/{quote(labels['map_index'], safe='')}"
    return url


def _who(view: dict[str, Any]) -> str:
    labels = view["labels"]
    if not labels.get("dag_id"):
        return "<em>command line</em>"
    text = " / ".join(escape(labels.get(k, "")) for k in ("dag_id", "run_id", "task_id"))
    url = airflow_task_url(labels)
    return f'<a href="{escape(url)}" target="_top">{text}</a>' if url else text


def _epochs(view: dict[str, Any]) -> str:
    total = view["epochs_total"]
    return f"{view['epochs_done']}/{total}" if total else str(view["epochs_done"])


def _tasks_text(view: dict[str, Any]) -> str:
    return "<br>".join(f"{escape(t['name'])} {escape(t['state'])}"
                       + (f" (restarts {t['restarts']})" if t["restarts"] else "") for t in view["tasks"])


def overview(views: list[dict[str, Any]]) -> str:
    rows = [[f'<a href="#cluster-{escape(v["id"])}">{escape(v["id"])}</a>', _who(v), escape(v["launcher"]),
             escape(v["mode"]), _state(v["status"]), _tasks_text(v), f'<span class="num">{_epochs(v)}</span>',
             escape(v["age"])] for v in views]
    return _table(["cluster", "DAG / run / task", "launcher", "mode", "state", "tasks", "epochs", "age"], rows,
                  "overview")


def _plan(plan: dict[str, Any] | None) -> str:
    if not plan:
        return "<p>no shard plan recorded</p>"
    if "error" in plan:
        return f'<p class="reason">{escape(plan["error"])}</p>'
    if "xcom" in plan:
        return f"<p><code>{escape(plan['xcom'])}</code></p>"
    rows = [[str(w["worker"]), escape(str(w["host"])), f'{w["rows"]:,}', str(w["slices"]), f'{w["locality"]:.0%}']
            for w in plan["workers"]]
    return (f'<p class="meta">cache <b>{escape(plan["cache"])}</b>, {plan["partitions"]} partitions, '
            f'{plan["rows"]:,} rows, reshuffle {escape(plan["reshuffle"])} (seed {plan["seed"]}), '
            f'planned locality {plan["locality"]:.0%}</p>'
            + _table(["worker", "next to node", "rows", "slices", "planned local"], rows, "plan"))


def _locality(locality: dict[str, Any] | None) -> str:
    """Measured locality (rows served by an Ignite node on the worker's own host or Kubernetes node) beside the
    plan's share."""
    if not locality:
        return ""

    def pct(value) -> str:
        return "-" if value is None else f"{value:.0%}"

    rows = [[str(w["worker"]), escape(str(w["where"])), f'{w["rows"]:,}', str(w["passes"]), pct(w["planned"]),
             pct(w["measured"])] for w in locality["workers"]]
    nodes = ", ".join(f"{escape(k)} {v:,}" for k, v in locality["by_node"].items())
    unmatched = (f', {locality["unmatched_rows"]:,} from Ignite nodes not matched to a Kubernetes node'
                 if locality["unmatched_rows"] else "")
    return (f'<p class="meta locality">measured locality <b>{pct(locality["measured"])}</b> of '
            f'{locality["rows"]:,} rows read (same {escape(locality["by"])}), planned {pct(locality["planned"])}'
            f'{unmatched}; rows per Ignite node: {nodes}</p>'
            + _table(["worker", "runs on", "rows read", "passes", "planned", "measured"], rows, "locality"))


def _validation(validation: dict[str, Any] | None) -> str:
    if not validation:
        return "<p>no validation result for this run</p>"
    shards = ", ".join(f"shard {k}: {v:,}" for k, v in validation["rows_per_shard"].items())
    failed = "".join(f"<li>{escape(str(f))}</li>" for f in validation["failed"])
    return (f'<p class="meta">{_state("passed" if validation["passed"] else "failed")} '
            f'{validation["checks"]} checks of suite <code>{escape(str(validation["suite"]))}</code> on '
            f'{validation["rows_checked"]:,} of {validation["rows"]:,} rows ({escape(shards)})</p>'
            + (f"<ul>{failed}</ul>" if failed else ""))


def _publish(publish: dict[str, Any] | None) -> str:
    if not publish:
        return "<p>not published (yet)</p>"
    reasons = "; ".join(publish.get("reasons") or []) or ("gate passed" if publish["status"] == "production" else "")
    metrics = ", ".join(f"{escape(k)}={v:.4g}" for k, v in publish["metrics"].items()
                        if isinstance(v, int | float) and k not in NOT_CURVES)
    return (f'<p class="meta" id="model-{escape(str(publish["model"]))}-{escape(str(publish["version"]))}">'
            f'model <b>{escape(str(publish["model"]))}</b> version <b>{escape(str(publish["version"]))}</b> '
            f'{_state(publish["status"])} <span>{escape(reasons)}</span></p>'
            f'<p class="meta">previous production: {escape(str(publish.get("previous_production") or "none"))}'
            + (f"; metrics: {metrics}" if metrics else "") + "</p>"
            f'<p class="meta">registry folder: <code>{escape(str(publish.get("path") or ""))}</code></p>')


def _evaluation(evaluation: dict[str, Any] | None, publish: dict[str, Any] | None) -> str:
    """The held-out metrics of this model and of production on the same rows, and what the gate made of them."""
    if not evaluation:
        return "<p>no held-out split (<code>shard_plan.evaluation</code>): the gate judged training metrics</p>"
    mine, theirs = evaluation.get("metrics") or {}, evaluation.get("production_metrics") or {}
    production = evaluation.get("production") or {}
    version = production.get("version")
    rows = [[escape(k), f'<span class="num">{v:.4f}</span>',
             f'<span class="num">{theirs[k]:.4f}</span>' if k in theirs else "-"] for k, v in sorted(mine.items())]
    table = _table(["metric", "this model", f"production {version or '-'}"], rows, "evaluation")
    split = evaluation.get("split") or {}
    note = (f'<p class="reason">production {escape(str(version or "model"))} not evaluated: '
            f'{escape(str(production["error"]))}</p>' if production.get("error") else "")
    gate = ""
    if publish:
        notes = "; ".join([*(publish.get("reasons") or []), *((publish.get("gate") or {}).get("notes") or [])])
        gate = (f'<p class="meta">gate on {escape(str((publish.get("gate") or {}).get("on") or "-"))} metrics: '
                f'{_state(publish["status"])} {escape(notes)}</p>')
    return (f'<p class="meta">{evaluation["rows"]:,} held-out rows ({split.get("fraction", 0):.0%} by key hash, '
            f'seed {split.get("seed", 0)}), evaluated by the {escape(str(evaluation.get("by", "chief")))} in '
            f'{evaluation.get("seconds", 0):.1f}s</p>{table}{note}{gate}')


def cluster_section(view: dict[str, Any], tensorboard: str) -> str:
    last = ", ".join(f"{escape(k)}={v:.4g}" for k, v in view["last_epoch"].items()
                     if isinstance(v, float) and k not in ("epoch_s",))
    charts = "".join(view["charts"]) or "<p>no epoch reported yet</p>"
    tasks = _table(["task", "host", "state", "restarts", "exit"],
                   [[escape(t["name"]), escape(t["host"]), _state(t["state"]), str(t["restarts"]), escape(t["exit"])]
                    for t in view["tasks"]], "tasks")
    kind = "note" if view["status"] == "succeeded" else "reason"
    reason = f'<p class="{kind}">{escape(view["reason"])}</p>' if view["reason"] else ""
    return f"""
<section class="cluster" id="cluster-{escape(view['id'])}" data-cluster="{escape(view['id'])}">
<h2>{escape(view['id'])} {_state(view['status'])}</h2>
<p class="meta"><span>{_who(view)}</span><span>cache <b>{escape(view['cache'])}</b></span>
<span>{escape(view['mode'])} mode, {escape(view['launcher'])} launcher</span><span>restarts {view['restarts']}</span>
<span>started {escape(view['started'])} ({escape(view['age'])})</span>
<span class="epochs">epochs {_epochs(view)}</span></p>
{reason}
<p class="meta">last epoch: {last or '-'} &middot; \
<a href="{escape(tensorboard)}" target="_blank" rel="noopener">TensorBoard</a>
(<code>ignite-tf tensorboard {escape(view['id'])}</code>) &middot; run folder <code>{escape(view['run_dir'])}</code></p>
<h3>Training curves</h3><div class="charts">{charts}</div>
<div class="cols"><div><h3>Tasks</h3>{tasks}</div><div><h3>Shard plan</h3>{_plan(view['plan'])}
{_locality(view.get('locality'))}</div></div>
<div class="cols"><div><h3>Validation</h3>{_validation(view['validation'])}</div>
<div><h3>Published model</h3>{_publish(view['publish'])}</div></div>
<h3>Held-out evaluation</h3>{_evaluation(view.get('evaluation'), view['publish'])}
</section>"""


def render(views: list[dict[str, Any]], *, source: str, tensorboard_for, error: str = "") -> str:
    """The whole page. ``tensorboard_for(cluster_id)``: the TensorBoard link of a cluster."""
    running = any(v["status"] in ("starting", "running", "restarting") for v in views)
    refresh = '<meta http-equiv="refresh" content="15">' if running else ""
    body = "".join(cluster_section(v, tensorboard_for(v["id"])) for v in views)
    empty = "" if views else "<p>No TensorFlow cluster recorded yet: trigger a training DAG and come back.</p>"
    err = f'<p class="reason">{escape(error)}</p>' if error else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>ignite-tf: TensorFlow clusters</title>{refresh}
<style>{STYLE}</style></head><body>
<h1>TensorFlow clusters</h1>
<div class="sub">{len(views)} cluster(s) in {escape(source)}, newest first\
{' &middot; refreshes every 15 s' if running else ''}.
All runs in TensorBoard: <code>ignite-tf tensorboard RUN_ROOT</code></div>
{err}{empty}{overview(views) if views else ''}
{body}
</body></html>"""
