"""The end of a sync training: from the last epoch to the cluster's final state, without Airflow.

    .venv/bin/python bench/end.py [--json] [--smoke] [--ignite HOST:PORT,...] [--rows N] [--epochs E] [--repeat R]

Starts its own 2-node local Ignite cluster, loads N rows of the tabular demo data, then runs the training of
``bench/e2e.py``'s direct run (``start_cluster()``, ``ignite_tf.models:tabular_classifier``, sync SGD with 2
workers, batch 32 per worker) R times and splits each cluster's lifetime (see ``e2e.phases``):

  startup_s          start_cluster() -> the first epoch's start
  epochs_s           the epochs
  after_last_epoch_s the last epoch's report -> the cluster's final state, split by the chief's timeline
                     into fit_end_s (``fit`` returning), save_s (the SavedModel) and exit_s (the tasks ending,
                     the supervisor seeing it).

Medians and every run are reported; ``--baseline DIR`` runs the same training with the tasks importing
the ``ignite_tf`` under DIR too (e.g. ``git archive <commit> provider``), pairs alternating their order.
Quicker than ``bench/e2e.py`` for working on the end of training; e2e reports the same split for both of its
runs. ``--smoke``: 1,000 rows, 1 epoch, 1 run (see ``bench/harness.py``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

from e2e import BATCH, LEARNING_RATE, WAIT_TIMEOUT_S, WORKERS, end_split, phases, say
from harness import add_common_arguments, ignite, report, set_bench_env

set_bench_env()

CACHE = "end_bench"


def one_run(conn, epochs: int, root: Path, index: int, quiet: bool, provider: str | None = None,
            run_root: str | None = None, pass_env: list[str] | None = None, workers: int = WORKERS) -> dict:
    """One training of ``workers`` sync workers; ``run_root``: where its run lives (default a folder under
    ``root``), ``pass_env``: names of variables passed to the tasks (e.g. an object store's credentials)."""
    from ignite_tf.cluster.api import make_launcher, start_cluster
    from ignite_tf.state import LocalStateStore, Status

    launcher = make_launcher(conn, store=LocalStateStore(root / "state"))
    # --label (the runtime's alias of --label-column) is the flag older runtimes (--baseline) know too.
    job = {"entry_point": "ignite_tf.models:tabular_classifier",
           "args": ["--epochs", str(epochs), "--batch-size", str(BATCH), "--label", "label",
                    "--learning-rate", str(LEARNING_RATE)]}
    cluster_id = f"end-bench-{os.getpid()}-{index}"
    state = None
    try:
        env = [f"PYTHONPATH={provider}"] if provider else []  # the tasks run that copy of ignite_tf
        state = start_cluster(CACHE, job, conn=conn, mode="sync", workers=workers, max_restarts=0,
                              cluster_id=cluster_id, run_root=run_root or root / "runs", launcher=launcher,
                              env=[*env, *(pass_env or [])] or None)
        state = launcher.wait(cluster_id, timeout=WAIT_TIMEOUT_S, poll_s=0.5)
    finally:
        if state is not None and not launcher.status(cluster_id).status.final:
            launcher.stop(cluster_id)
    if state.status is not Status.SUCCEEDED:
        raise RuntimeError(f"cluster {cluster_id} ended {state.status.value}: {state.reason}; chief log:\n"
                           f"{launcher.tail(cluster_id, 30)}")
    result = {**phases(state), **end_split(state, launcher.output(cluster_id)[0])}
    say(f"  run {index + 1}{' (baseline)' if provider else ''}: "
        + ", ".join(f"{k} {v:.2f}" for k, v in result.items()), quiet)
    return result


def run(rows: int, epochs: int, repeat: int, quiet: bool, baseline: str | None = None,
        addresses: str | None = None) -> dict:
    from ignite_tf_dev.demo_data import tabular

    from ignite_tf.etl import load

    result: dict = {"_load_before": os.getloadavg()[0], "_rows": rows, "_epochs": epochs}
    tmp = Path(tempfile.mkdtemp(prefix="end-bench-"))
    try:
        with ignite(addresses, tmp / "ignite", lambda msg: say(msg, quiet), region_mb=768) as nodes:
            conn = nodes.conn
            load(conn, CACHE, tabular(rows), key="id")
            runs, base = [], []
            for i in range(repeat):  # with a baseline, pairs alternating which goes first
                pair = [(runs, None), (base, baseline)] if baseline else [(runs, None)]
                for into, provider in pair if i % 2 == 0 else pair[::-1]:
                    into.append(one_run(conn, epochs, tmp, len(runs) + len(base), quiet, provider))
            result["_runs"], result["_baseline"] = runs, base
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    result["_load_after"] = os.getloadavg()[0]
    for name in ("_runs", "_baseline"):
        if result[name]:
            keys = result[name][0].keys()
            result[name + "_median"] = {k: statistics.median(r[k] for r in result[name] if k in r) for k in keys}
    result.update(result["_runs_median"])
    return result


def table(r: dict) -> str:
    keys = [k for k in ("startup_s", "epochs_s", "after_last_epoch_s", "fit_end_s", "save_s", "exit_s")
            if k in r or k in r.get("_baseline_median", {})]
    lines = [f"End of training: {os.cpu_count()} cores (1-min load average {r['_load_before']:.1f} before, "
             f"{r['_load_after']:.1f} after); {r['_rows']:,} rows, {r['_epochs']} epochs, batch {BATCH}/worker, "
             f"sync SGD with {WORKERS} workers, {len(r['_runs'])} runs", "",
             "| phase | median s | runs |" + (" baseline median s | baseline runs |" if r["_baseline"] else ""),
             "|---|---:|---|" + ("---:|---|" if r["_baseline"] else "")]

    def cells(runs, median, k):
        return (f" {median[k]:.2f} | " if k in median else " - | ") + ", ".join(f"{x[k]:.2f}" for x in runs if k in x) \
            + " |"

    for k in keys:
        lines.append(f"| {k} |" + cells(r["_runs"], r, k)
                     + (cells(r["_baseline"], r["_baseline_median"], k) if r["_baseline"] else ""))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=25)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", metavar="DIR",
                        help="also run the tasks with the ignite_tf under DIR (e.g. an older commit's provider/), "
                             "alternating with this one's, for before/after in one run")
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.epochs, args.repeat = 1_000, 1, 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.perf_counter()
    result = run(args.rows, args.epochs, args.repeat, quiet=args.json, baseline=args.baseline, addresses=args.ignite)
    result["_wall_s"] = time.perf_counter() - started
    report(args, table(result), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
