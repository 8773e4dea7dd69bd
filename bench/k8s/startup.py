"""Launch -> first training step: the Kubernetes launcher beside the local one, in one table.

    .venv/bin/python bench/k8s/startup.py [--json] [--smoke] [--ignite HOST:PORT,...] [--kubeconfig FILE]
                                          [--namespace NAME] [--host-network] [--rows N] [--repeat N]

Starts its own 2-node local Ignite cluster on free ports (``--ignite``: uses a running one) and, unless one is
running, the local Kubernetes (``ignite_tf_dev.k8s``; ``--kubeconfig``: uses the running one of that file and
starts none; what it started is stopped at the end, also on error), loads a 3,000-row cache and runs the same
2-worker sync job (``bench/startup_model.py:model``: the tabular classifier plus a marker written at the end
of the chief's first batch; 1 epoch of 5 steps) through each launcher:

  launched_s     ``start_cluster(...)`` returned (plan, spec, supervisor recorded its state);
  tasks_up_s     the supervisor saw every task listening (local: its port; Kubernetes: the pod Ready);
  first_step_s   the chief's first batch ended;
  total_s        the cluster ended and everything of it was gone (processes; pods, Service, Secret, owner).

All count from the ``start_cluster`` call. ``--repeat`` rounds (default 3), each the local launcher then the
Kubernetes one, interleaved; ``kubernetes_vs_local`` is the median Kubernetes first step over the median local one
(goal <= 1.5, cold pods; each round's ratio beside it): one launch each is not enough, the first step moves by a
second from run to run here, and the process's first launch pays its imports and, after a reboot, a cold page
cache for the local supervisor's.
The Kubernetes tasks run in the task image on the real node in the deployed shape (pod network,
cluster DNS, ``IGNITE_TF_RUN_ROOT``; give ``--ignite`` the Ignite pods of ``make k8s-up``'s
``IGNITE_TF_ADDRESSES``), or with ``--host-network`` in the one-machine shape (host network, the run folder
as a hostPath: for Ignite nodes on 127.0.0.1), in ``--namespace`` (default ``default``); see
``bench/k8s/common.py``. The first step is read from the chief's mark file where this host can read the
run folder, else from its ``BENCH_FIRST_STEP`` output line. ``--smoke``: a 1,000-row cache, one round (see
``bench/harness.py``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1]  # bench/: the shared harness and the local benches' modules
sys.path.insert(1, str(BENCH_DIR))  # after bench/k8s/, this script's folder (sys.path[0])
from common import STARTUP_GOAL, add_k8s_arguments, kubernetes, pod_settings, run_root  # noqa: E402
from harness import add_common_arguments, ignite, report, set_bench_env  # noqa: E402

set_bench_env()
CACHE = "k8s_startup_bench"
ENV_MARK = "IGNITE_TF_BENCH_FIRST_STEP"
TIMEOUT_S = 900.0
GOAL = STARTUP_GOAL
# The start-up's moments (``ignite_tf.timeline``) in the order they happen, with what ends at each.
MOMENTS = {
    "supervisor_started": "the supervisor process runs (Python, imports)",
    "launched": "start_cluster returned (state recorded)",
    "prepared": "backend ready (Kubernetes: owner, Secret, Service, memory estimate, placement)",
    "tasks_started": "every task's process or pod created",
    "chief_scheduled": "the chief pod bound to a node (as the supervisor saw it)",
    "chief_running": "the chief's container running (as the supervisor saw it)",
    "process_started": "the chief's Python started (pod: kernel's start time)",
    "entry_started": "pod entry imported",
    "code_fetched": "shard plan and code fetched from the run store",
    "runtime_started": "the runtime's main() runs",
    "tf_imported": "TensorFlow imported (input read beside it)",
    "strategy_ready": "MultiWorkerMirroredStrategy up, all workers joined",
    "all_up": "the supervisor saw every task up",
    "fit_start": "model built, fit called",
    "first_step": "the chief's first batch ended",
}


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def first_step_at(launcher, cluster_id: str, mark: Path) -> float | None:
    """When the chief's first batch ended: its mark file (a run folder on this host) or its output line."""
    from startup_model import LINE_MARK

    if mark.exists() and mark.read_text().strip():
        return float(mark.read_text())
    found = re.search(rf"^{LINE_MARK} ([0-9.]+)$", launcher.output(cluster_id)[0], re.M)
    return float(found.group(1)) if found else None


POD_MARK = "/tmp/ignite-tf-bench-first-step"  # in a pod: one path for every launch


def one(conn, kind: str, tmp: Path, kubernetes: dict | None, run_root: str | None = None) -> dict:
    """One launch of ``kind`` (``local`` or ``kubernetes``) and its moments."""
    from ignite_tf import timeline
    from ignite_tf.cluster.api import make_launcher, start_cluster
    from ignite_tf.runstore import is_remote
    from ignite_tf.state import Status

    job_dir = Path(tempfile.mkdtemp(prefix=f"job-{kind}-", dir=tmp))
    shutil.copy(BENCH_DIR / "startup_model.py", job_dir)
    cluster_id = f"k8s-bench-{kind[:5]}-{os.getpid()}-{job_dir.name[-4:].lower().replace('_', 'x')}"
    root = run_root or str(tmp / "runs")
    # Only a run folder on this host gets the mark file; pods with an object-store run root print the line alone.
    mark = tmp / "runs" / cluster_id / "first_step"
    mark_env = POD_MARK if kind == "kubernetes" and run_root and is_remote(run_root) else str(mark)
    launcher = make_launcher(conn, kind=kind, kubernetes=kubernetes)
    command = ["python", "-m", "ignite_tf.runtime", "--entry-point", "startup_model:model", "--epochs", "1",
               "--batch-size", "64", "--label", "label", "--steps-per-epoch", "5"]
    t0_wall, t0 = time.time(), time.perf_counter()
    state = start_cluster(CACHE, {"command": command, "job_dir": str(job_dir)}, conn=conn, mode="sync", workers=2,
                          max_restarts=0, cluster_id=cluster_id, run_root=root, launcher=launcher,
                          env=[f"{ENV_MARK}={mark_env}"], startup_deadline_s=TIMEOUT_S)
    launched = time.perf_counter() - t0
    try:
        while (at := first_step_at(launcher, cluster_id, mark)) is None:
            state = launcher.status(cluster_id)
            if state.status.final or time.perf_counter() - t0 > TIMEOUT_S:
                raise RuntimeError(f"{kind}: no first step ({state.status.value}: {state.reason}):\n"
                                   f"{launcher.tail(cluster_id, 30)}")
            time.sleep(0.05)
        first = at - t0_wall
        state = launcher.wait(cluster_id, timeout=TIMEOUT_S)
    finally:
        if not launcher.status(cluster_id).status.final:
            launcher.stop(cluster_id)
    if state.status is not Status.SUCCEEDED:
        raise RuntimeError(f"{kind}: ended {state.status.value}: {state.reason}")
    output = launcher.output(cluster_id)[0]
    up = re.search(r"all \d+ tasks up after ([0-9.]+)s", output)
    moments = {name: round(at - t0_wall, 2) for name, at in timeline.marks(output).items() if name in MOMENTS}
    moments.update(launched=round(launched, 2), first_step=round(first, 2))
    return {"launcher": kind, "head_start_pods": output.count("made by the launcher (head start)"),
            "launched_s": round(launched, 2), "tasks_up_s": float(up.group(1)) if up else None,
            "first_step_s": round(first, 2), "total_s": round(time.perf_counter() - t0, 2), "moments": moments}


def launches(conn, tmp: Path, kubernetes: dict, run_root: str | None, repeat: int,
             say=lambda _m: None) -> list[dict]:
    """``repeat`` rounds, each the local launcher then the Kubernetes one. Interleaved, so that a slow moment of
    the machine falls on both; the first local launch pays this process's imports and a cold page cache for the
    supervisor's, which the medians leave out."""
    runs = []
    for n in range(repeat):
        for kind in ("local", "kubernetes"):
            say(f"round {n + 1}/{repeat}: {kind} launcher ...")
            run = one(conn, kind, tmp, None if kind == "local" else kubernetes,
                      run_root=None if kind == "local" else run_root)
            runs.append({**run, "round": n + 1})
            say(f"  {runs[-1]}")
    return runs


def run(rows: int, addresses: str | None = None, kubeconfig: str | None = None, namespace: str = "default",
        host_network: bool = False, repeat: int = 3) -> list[dict]:
    from ignite_tf_dev.demo_data import tabular

    from ignite_tf.etl import load

    with tempfile.TemporaryDirectory(prefix="k8s-startup-bench-") as name:
        tmp = Path(name)
        with ignite(addresses, tmp / "ignite", say) as nodes:
            conn = nodes.conn
            load(conn, CACHE, tabular(rows), key="id")
            say(f"loaded {rows} rows")
            with kubernetes(kubeconfig, say):
                root = None if host_network else run_root(tmp, "kubernetes")
                return launches(conn, tmp, pod_settings(namespace, host_network), root, repeat, say)


def first_steps(results: list[dict], kind: str) -> list[float]:
    return [r["first_step_s"] for r in results if r["launcher"] == kind]


def ratio(results: list[dict], kind: str = "kubernetes") -> float | None:
    """The median first step of ``kind``'s launches / the local launches' median."""
    mine, local = first_steps(results, kind), first_steps(results, "local")
    return statistics.median(mine) / statistics.median(local) if mine and local else None


def round_ratios(results: list[dict], kind: str = "kubernetes") -> list[float]:
    """Each round's ``kind`` first step / its local one."""
    by = {(r["launcher"], r.get("round", 1)): r["first_step_s"] for r in results}
    return [by[kind, n] / by["local", n] for n in sorted({n for _, n in by})
            if (kind, n) in by and ("local", n) in by]


def table(results: list[dict]) -> str:
    lines = ["Launch -> first training step, the local and the Kubernetes launcher (1 epoch of 5 steps)", "",
             "| round | launcher (2 sync workers) | start_cluster returned (s) | all tasks up (s) | first step (s) | "
             "ended, nothing left (s) |", "|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.get('round', 1)} | {r['launcher']} | {r['launched_s']:.1f} | {r['tasks_up_s']} | "
                     f"{r['first_step_s']:.1f} | {r['total_s']:.1f} |")
    lines += ["", moments_table(results)]
    if ratio(results) is not None:
        each = ", ".join(f"{x:.2f}" for x in round_ratios(results))
        lines.append(f"\nfirst step, Kubernetes / local (medians of {len(first_steps(results, 'local'))} launches "
                     f"each): {ratio(results):.2f} (goal <= {GOAL}; each round: {each})")
    return "\n".join(lines)


def moments_table(results: list[dict]) -> str:
    """Where the start-up goes: each moment's seconds from the ``start_cluster`` call, per launcher (the median
    over its launches)."""
    kinds = list(dict.fromkeys(r["launcher"] for r in results))
    median = {k: {name: statistics.median(vals) for name in MOMENTS if (vals := [
        r["moments"][name] for r in results if r["launcher"] == k and name in r.get("moments", {})])}
        for k in kinds}
    lines = [f"| moment (s from start_cluster, median) | {' | '.join(kinds)} | what ends there |",
             "|---|" + "---|" * len(kinds) + "---|"]
    for name, what in sorted(MOMENTS.items(), key=lambda kv: _order(median, kinds, kv[0])):
        cells = [median[k].get(name) for k in kinds]
        if any(c is not None for c in cells):
            lines.append(f"| {name} | {' | '.join('-' if c is None else f'{c:.2f}' for c in cells)} | {what} |")
    return "\n".join(lines)


def _order(median: dict[str, dict[str, float]], kinds: list[str], name: str) -> float:
    """Moments in the order of the last launcher's medians (Kubernetes' has the most), then the list's."""
    for kind in reversed(kinds):
        if name in median[kind]:
            return median[kind][name]
    return list(MOMENTS).index(name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--rows", type=int, default=3000)
    parser.add_argument("--repeat", type=int, default=3, help="rounds of launches (local, then Kubernetes)")
    add_k8s_arguments(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.repeat = 1_000, 1
    results = run(args.rows, args.ignite, args.kubeconfig, args.namespace, args.host_network, args.repeat)
    report(args, table(results), {"runs": results, "kubernetes_vs_local": ratio(results), "goal": GOAL})
    return 0


if __name__ == "__main__":
    sys.exit(main())
