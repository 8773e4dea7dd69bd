"""End-to-end benchmark: example (a) as an Airflow DAG run beside the same training started directly.

    .venv/bin/python bench/e2e.py [--json] [--smoke] [--ignite HOST:PORT,...] [--rows N] [--epochs E] [--repeat R]

Starts its own 2-node local Ignite cluster on free ports (``--ignite``: uses a running one) and a throw-away
Airflow home (SQLite metadata DB,
model registry and run directories in one temporary folder, removed at the end, like the nodes, also on
error or Ctrl-C), then times, side by side in the same process:

  dag_s           the DAG ``ignite_tf_tabular_sync`` (from ``dags/specs/tabular_sync.yaml``) run with
                  ``dag.test()``, from the call to its return: load N generated rows -> partitions -> shard
                  plan -> validate per shard -> gate -> train (TFClusterOperator, sync SGD, 2 workers,
                  deferred to the in-process triggerer) -> publish. Parsing the DAG folder and migrating the
                  metadata DB happen once, before, and are reported apart;
  direct_s        the same training started with the runtime alone: ``start_cluster()`` on the same cache
                  (the rows the DAG run loaded) with the job and settings of the DAG's own train task (a
                  ``TFClusterOperator`` built from that task's arguments, its templates rendered with the
                  run's params as Airflow renders them: ``direct_operator``), from the call to the cluster's
                  final state (the time its supervisor recorded it);
  overhead_ratio  dag_s / direct_s (target: at most 1.25 for a training of about two minutes);
  stages          seconds per DAG task (task start to end; the mapped validate tasks summed);
  after_last_epoch_s  median over all runs (DAG and direct) of the time from the chief's last epoch report to
                  the cluster's final state, split by the chief's ``timing:`` lines into fit_end_s (``fit``
                  returning), save_s (the SavedModel) and exit_s (the tasks ending; target: at most 2 s).

The table adds ``train / direct``: the DAG's train stage over direct_s, what orchestration (operator,
deferral, trigger polls) adds to the training itself. Both runs get the same epochs, batch size, learning
rate and workers, passed to the DAG run as its conf. With ``--repeat R`` the pairs alternate their order
(DAG first, then direct first, ...) and the medians are reported. ``--smoke``: 1,000 rows, 1 epoch, 1 pair,
1 sync worker (see ``bench/harness.py``).
"""

from __future__ import annotations

import argparse
import inspect
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness import add_common_arguments, ignite, report, set_bench_env

set_bench_env()

REPO = Path(__file__).resolve().parents[1]
DAG_ID = "ignite_tf_tabular_sync"
WORKERS = 2
BATCH = 32
LEARNING_RATE = 0.02
WAIT_TIMEOUT_S = 1800.0
PHASES = ("startup_s", "epochs_s", "after_last_epoch_s", "fit_end_s", "save_s", "exit_s")


def say(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


def dag_run(dag, conf: dict, quiet: bool, conn=None) -> dict:
    """One ``dag.test()`` run; raises unless every task succeeded."""
    from ignite_tf_dev.demo import stage_times, task_results

    say(f"DAG run of {dag.dag_id} (conf {conf}) ...", quiet)
    started = time.perf_counter()
    run = dag.test(run_conf=conf)
    seconds = time.perf_counter() - started
    if run.state != "success":
        failed = [f"{ti.task_id}[{ti.map_index}] {ti.state}" for ti in run.get_task_instances()
                  if ti.state != "success"]
        raise RuntimeError(f"DAG run {run.run_id} ended {run.state}; tasks not successful: {failed} "
                           f"(the tasks' logs are above, on stderr)")
    train = task_results(dag, run).get("train") or {}
    if train.get("epochs") != conf["epochs"]:
        raise RuntimeError(f"the DAG's training ran {train.get('epochs')} epochs, not {conf['epochs']}: {train}")
    stages = stage_times(run)
    say(f"  DAG run: {seconds:.1f}s; stages " + ", ".join(f"{k} {v:.1f}s" for k, v in stages.items()), quiet)
    from ignite_tf.cluster.api import make_launcher

    state = make_launcher(conn).find(train["cluster_id"]) if conn is not None and train.get("cluster_id") else None
    log = make_launcher(conn).output(train["cluster_id"])[0] if state else ""
    return {"seconds": seconds, "stages": stages, "cluster_s": train.get("seconds"),
            "metrics": train.get("metrics", {}), "phases": {**phases(state), **end_split(state, log)} if state else {}}


def direct_operator(dag, train_task, conf: dict):
    """The DAG's train task as a real ``TFClusterOperator`` outside the DAG: built from that task's arguments,
    their templates rendered with the run's params (the DAG's defaults and ``conf``) by the DAG's template
    environment, as Airflow renders them for a run. The shard plan is left out: ``start_cluster`` plans."""
    from ignite_tf.operators.tensorflow import TFClusterOperator

    env = dag.get_template_env()
    params = {name: dag.params[name] for name in dag.params.keys()} | conf

    def rendered(value):
        return env.from_string(value).render(params=params) if isinstance(value, str) and "{{" in value else value

    # job= is kept as ``given_job`` (``job`` is the deprecated method); the other arguments under their own names.
    names = [n for n in inspect.signature(TFClusterOperator.__init__).parameters
             if n not in ("self", "kwargs", "plan", "job") and hasattr(train_task, n)]
    given = {n: rendered(getattr(train_task, n)) for n in names}
    if train_task.given_job is not None:
        given["job"] = train_task.given_job
    return TFClusterOperator(task_id=f"{train_task.task_id}_direct", **given)


def direct_run(conn, dag, train_task, conf: dict, run_root: Path, index: int, quiet: bool) -> dict:
    """The DAG's training started with ``start_cluster()`` alone, with the arguments the operator passes it;
    waits for the cluster's final state."""
    from ignite_tf.cluster.api import make_launcher, start_cluster
    from ignite_tf.state import Status

    op = direct_operator(dag, train_task, conf)
    job = op.training_job()  # mode, workers and ps included
    launcher = make_launcher(conn)  # the state store the operator uses: the cluster's Ignite
    cluster_id = f"e2e-bench-direct-{os.getpid()}-{index}"
    say(f"direct start_cluster({op.cache!r}, {job}) ...", quiet)
    state = None
    started_wall, started = time.time(), time.perf_counter()
    try:
        state = start_cluster(op.cache, job, conn=conn, supervision=op.supervision_settings(), env=op.env,
                              cluster_id=cluster_id, run_root=run_root, launcher=launcher)
        # The CLI's poll; no faster, as each poll costs CPU (here and in Ignite) that training would miss.
        state = launcher.wait(cluster_id, timeout=WAIT_TIMEOUT_S, poll_s=0.5)
        # The supervisor stamps the moment the cluster ended: the end without the poll's granularity.
        seconds = state.finished_at - started_wall if state.finished_at else time.perf_counter() - started
    finally:
        if state is not None and not launcher.status(cluster_id).status.final:
            launcher.stop(cluster_id)
    if state.status is not Status.SUCCEEDED:
        raise RuntimeError(f"direct cluster {cluster_id} ended {state.status.value}: {state.reason}; chief log:\n"
                           f"{launcher.tail(cluster_id, 30)}")
    if len(state.epochs) != conf["epochs"]:
        raise RuntimeError(f"direct cluster {cluster_id} ran {len(state.epochs)} epochs, not {conf['epochs']}")
    say(f"  direct: {seconds:.1f}s (cluster lifetime {state.age_s:.1f}s, {state.restarts} restart(s))", quiet)
    return {"seconds": seconds, "cluster_s": state.age_s, "metrics": state.epochs[-1],
            "phases": {**phases(state), **end_split(state, launcher.output(cluster_id)[0])}}


def phases(state) -> dict[str, float]:
    """A finished cluster's lifetime in three parts: start-up (to the first epoch's start), the epochs, and
    after_last_epoch_s (last epoch reported -> final state: fit returning, saving the model, the tasks ending)."""
    epochs = state.epochs
    if not epochs or not state.finished_at:
        return {}
    epochs_s = sum(float(e.get("epoch_s", 0.0)) for e in epochs)
    end_s = state.finished_at - float(epochs[-1].get("time", state.finished_at))
    return {"startup_s": state.age_s - epochs_s - end_s, "epochs_s": epochs_s, "after_last_epoch_s": end_s}


def end_split(state, chief_log: str) -> dict[str, float]:
    """after_last_epoch_s in three, from the chief's ``timing: <name> at <time>`` lines (ignite_tf.timeline):
    fit_end_s (last epoch reported -> ``fit`` returned), save_s (-> model saved), exit_s (-> final state)."""
    from ignite_tf.timeline import marks as read_marks

    marks = read_marks(chief_log)
    if not state.epochs or not state.finished_at or not {"fit_end", "saved"} <= marks.keys():
        return {}
    last = float(state.epochs[-1].get("time", state.finished_at))
    return {"fit_end_s": marks["fit_end"] - last, "save_s": marks["saved"] - marks["fit_end"],
            "exit_s": state.finished_at - marks["saved"]}


def stop_leftovers(conn) -> list[str]:
    """Stop this bench's clusters still alive in the Ignite state store (an interrupted DAG or direct run);
    others' (a cluster given with ``--ignite`` may have some) are left alone."""
    from ignite_tf.cluster.api import make_launcher

    launcher = make_launcher(conn)
    stopped = []
    for state in launcher.store.list():
        ours = state.cluster_id.startswith(f"e2e-bench-direct-{os.getpid()}-") or state.labels.get("dag_id") == DAG_ID
        if ours and launcher.is_alive(state):
            launcher.stop(state.cluster_id)
            stopped.append(state.cluster_id)
    return stopped


def run(rows: int, epochs: int, repeat: int, quiet: bool, addresses: str | None = None,
        workers: int = WORKERS) -> dict:
    result: dict = {"_load_before": os.getloadavg()[0], "_rows": rows, "_epochs": epochs, "_repeat": repeat}
    tmp = Path(tempfile.mkdtemp(prefix="e2e-bench-"))
    say(f"scratch folder {tmp}", quiet)
    try:
        with ignite(addresses, tmp / "ignite", lambda msg: say(msg, quiet), region_mb=768) as nodes:
            conn = nodes.conn
            try:
                result.update(_runs(conn, tmp, rows, epochs, repeat, quiet, workers))
            finally:
                left = stop_leftovers(conn)
                if left:
                    say(f"stopped clusters left running: {left}", quiet)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    dags, directs = result["_dags"], result["_directs"]
    result["dag_s"] = statistics.median(d["seconds"] for d in dags)
    result["direct_s"] = statistics.median(d["seconds"] for d in directs)
    result["overhead_ratio"] = result["dag_s"] / result["direct_s"]
    result["stages"] = {name: statistics.median(d["stages"].get(name, 0.0) for d in dags) for name in dags[0]["stages"]}
    ends = [p["phases"]["after_last_epoch_s"] for p in dags + directs if "after_last_epoch_s" in p["phases"]]
    result["after_last_epoch_s"] = statistics.median(ends) if ends else None
    result["_load_after"] = os.getloadavg()[0]
    return result


def _runs(conn, tmp: Path, rows: int, epochs: int, repeat: int, quiet: bool, workers: int = WORKERS) -> dict:
    """Airflow's home, the DAG, then ``repeat`` pairs of a DAG run and a direct run."""
    from ignite_tf_dev.demo import airflow_env, load_dag, migrate

    result: dict = {}
    home = tmp / "airflow"
    home.mkdir()
    # Read when the spec is parsed: the generated rows and a registry of our own (not .airflow/'s).
    os.environ["IGNITE_TF_DEMO_ROWS"] = str(rows)
    os.environ["IGNITE_TF_REGISTRY"] = str(home / "registry")
    airflow_env(conn, home, REPO / "dags")
    t = time.perf_counter()
    migrate(home)
    result["_migrate_s"] = time.perf_counter() - t
    t = time.perf_counter()
    dag = load_dag(DAG_ID, REPO / "dags")
    result["_parse_s"] = time.perf_counter() - t
    say(f"Airflow metadata DB migrated in {result['_migrate_s']:.1f}s, DAG folder parsed in "
        f"{result['_parse_s']:.1f}s", quiet)
    train_task = dag.get_task("train")
    conf = {"mode": "sync", "workers": workers, "epochs": epochs, "batch_size": BATCH,
            "learning_rate": LEARNING_RATE}
    unknown = set(conf) - set(dag.params.keys())
    if unknown:
        raise RuntimeError(f"DAG {DAG_ID} has no params {sorted(unknown)} (it has {sorted(dag.params.keys())})")
    result["_conf"] = conf
    dags, directs = [], []
    for i in range(repeat):
        # The first DAG run loads the rows the direct runs train on; later pairs alternate their order.
        if i % 2 == 0:
            dags.append(dag_run(dag, conf, quiet, conn))
            directs.append(direct_run(conn, dag, train_task, conf, tmp / "direct-runs", i, quiet))
        else:
            directs.append(direct_run(conn, dag, train_task, conf, tmp / "direct-runs", i, quiet))
            dags.append(dag_run(dag, conf, quiet, conn))
    result["_dags"], result["_directs"] = dags, directs
    return result


def table(r: dict) -> str:
    conf = r["_conf"]
    dag_cluster = statistics.median(d["cluster_s"] for d in r["_dags"] if d["cluster_s"] is not None)
    direct_cluster = statistics.median(d["cluster_s"] for d in r["_directs"])
    train = r["stages"].get("train", 0.0)
    runs = "median of " + str(r["_repeat"]) + " pairs" if r["_repeat"] > 1 else "1 pair"
    lines = [
        f"End-to-end benchmark: {os.cpu_count()} cores (1-min load average {r['_load_before']:.1f} before, "
        f"{r['_load_after']:.1f} after), 2 local Ignite nodes, DAG {DAG_ID} vs start_cluster() on the same "
        f"cache; {r['_rows']:,} rows, {conf['epochs']} epochs, batch {conf['batch_size']}/worker, learning rate "
        f"{conf['learning_rate']}, {conf['mode']} SGD with {conf['workers']} "
        f"worker{'s' if conf['workers'] != 1 else ''} ({runs})",
        "",
        "| DAG stage | seconds | share of dag_s |",
        "|---|---:|---:|",
    ]
    for name, seconds in r["stages"].items():
        lines.append(f"| {name} | {seconds:.1f} | {seconds / r['dag_s']:.0%} |")
    other = r["dag_s"] - sum(r["stages"].values())
    lines += [
        f"| (outside tasks: dag.test set-up, scheduling between tasks) | {other:.1f} | {other / r['dag_s']:.0%} |",
        "",
        "| run | wall s | / direct_s | TF cluster lifetime s |",
        "|---|---:|---:|---:|",
        f"| direct: start_cluster() -> final state (direct_s) | {r['direct_s']:.1f} | 1.00 | {direct_cluster:.1f} |",
        f"| DAG train stage (operator, deferral, trigger polls) | {train:.1f} | {train / r['direct_s']:.2f} | "
        f"{dag_cluster:.1f} |",
        f"| whole DAG run (dag_s) | {r['dag_s']:.1f} | {r['overhead_ratio']:.2f} | |",
        "",
        f"overhead_ratio = dag_s / direct_s = {r['overhead_ratio']:.2f} (target <= 1.25); "
        f"train stage / direct_s = {train / r['direct_s']:.2f}",
        f"Once per process, not in dag_s: metadata DB migration {r['_migrate_s']:.1f}s, parsing the DAG folder "
        f"{r['_parse_s']:.1f}s.",
    ]
    if r["_repeat"] > 1:
        pairs = [f"DAG {d['seconds']:.1f} (train {d['stages'].get('train', 0.0):.1f}, cluster {d['cluster_s']:.1f}) "
                 f"vs direct {x['seconds']:.1f} (cluster {x['cluster_s']:.1f})"
                 for d, x in zip(r["_dags"], r["_directs"], strict=True)]
        lines.append("Each pair, seconds: " + "; ".join(pairs) + ".")
    lines += ["", "| cluster lifetime (median s) | " + " | ".join(PHASES) + " |",
              "|---|" + "---:|" * len(PHASES)]
    for label, runs_ in (("DAG", r["_dags"]), ("direct", r["_directs"])):
        parts = [p["phases"] for p in runs_ if p.get("phases")]
        cells = [statistics.median(p[k] for p in parts if k in p) if any(k in p for p in parts) else None
                 for k in PHASES]
        lines.append(f"| {label} | " + " | ".join("-" if c is None else f"{c:.1f}" for c in cells) + " |")
    ends = [p["phases"]["after_last_epoch_s"] for p in r["_dags"] + r["_directs"]
            if "after_last_epoch_s" in p.get("phases", {})]
    if ends:
        lines += ["", f"after_last_epoch_s = {r['after_last_epoch_s']:.1f} median of all runs "
                     f"({', '.join(f'{e:.1f}' for e in ends)}; target <= 2): last epoch reported -> fit returned "
                     f"(fit_end_s) -> model saved (save_s) -> the cluster's final state (exit_s)."]
    dm, xm = r["_dags"][-1]["metrics"], r["_directs"][-1]["metrics"]
    lines.append(f"Last epoch: DAG accuracy {dm.get('accuracy', float('nan')):.3f}, direct accuracy "
                 f"{xm.get('accuracy', float('nan')):.3f}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser)
    parser.add_argument("--rows", type=int, default=20_000, help="rows the DAG's load task generates (default 20,000)")
    parser.add_argument("--epochs", type=int, default=25,
                        help="epochs of both trainings (default 25: about two minutes of training here)")
    parser.add_argument("--repeat", type=int, default=1, help="DAG/direct pairs; medians are reported (default 1)")
    args = parser.parse_args(argv)
    workers = WORKERS
    if args.smoke:  # every part once: the DAG run and the direct run, each a 1-worker sync cluster
        args.rows, args.epochs, args.repeat, workers = 1_000, 1, 1, 1
    if args.rows < 1000 or args.epochs < 1 or args.repeat < 1:
        parser.error("--rows must be at least 1000 (the suite's row count), --epochs and --repeat at least 1")
    # SIGTERM runs the finally blocks too (the nodes also die with this process: die_with_parent).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    # Airflow logs to stdout: send everything written there during the runs to stderr, keeping stdout for
    # the table or the JSON object alone.
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        result = run(args.rows, args.epochs, args.repeat, quiet=args.json, addresses=args.ignite, workers=workers)
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    data = {k: result[k] for k in ("dag_s", "direct_s", "overhead_ratio", "stages", "after_last_epoch_s")} | {
        "phases": {"dag": [d["phases"] for d in result["_dags"]], "direct": [d["phases"] for d in result["_directs"]]}}
    report(args, table(result), data)
    return 0

if __name__ == "__main__":
    sys.exit(main())
