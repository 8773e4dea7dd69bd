"""The memory estimate beside what tasks really use: two model sizes, in real pods and as local processes.

    .venv/bin/python bench/k8s/memory.py [--json] [--smoke] [--ignite HOST:PORT,...] [--kubeconfig FILE]
                                         [--namespace NAME] [--host-network] [--local-only | --pods-only]
                                         [--rows N]
                                         [--epochs N] [--write-baseline [--rounds N]]

Loads a ``--rows`` (20,000) row cache of 16 float features and an integer label into Ignite (its own 2 local
nodes, or ``--ignite``: e.g. the Ignite pods of ``make k8s-up``'s ``IGNITE_TF_ADDRESSES``), and trains a
2-worker sync cluster of ``bench/memory_model.py:model`` (``tabular_classifier`` with Adam) for ``--epochs``
(3) epochs at two sizes: ``small`` (hidden=32, 1,666 parameters) and ``large`` (hidden=2,048, about 4.2
million). For each it prints the estimate (``ignite_tf.cluster.k8s.memory.estimate`` over the real table and
the model; the Kubernetes launcher sets it as each pod's request and limit) beside each task's peak:

  kubernetes  each container's peak on the real node: its cgroup (found under /sys/fs/cgroup by the container
              id of the pod's status), ``memory.peak`` (cgroup v2) or ``memory.max_usage_in_bytes`` (v1),
              polled every 0.1 s while the pod runs, and the peak the task read from inside at the end of
              ``fit``, whichever is larger;
  local       the chief process's peak resident set (``VmHWM``) at the end of ``fit``.

Goal: estimate within +-25% of the peak and never below it (``estimate / peak`` in [1.0, 1.25]), for the
pods (a local task has no limit, and its resident set counts TensorFlow's shared libraries, which a pod's
cgroup is charged for only when it is the first on its node to read them). ``--write-baseline``: the pods
only, with a 3Gi limit that none reaches (so no page cache is reclaimed), and their peaks recorded as the
estimate's baseline and bytes per parameter in ``ignite_tf/resources/tf_baseline.json`` (the ``process_*``
keys of ``bench/tf_baseline_memory.py`` kept): the chief's (``param_bytes``) and the other workers'
(``peer_param_bytes``: the chief alone saves the model), the largest peaks of ``--rounds`` runs (peaks of the
same pods vary by 5-10% between runs; the estimate must not fall below any).
``--local-only``: the local launcher only (no Kubernetes); ``--pods-only``: the Kubernetes launcher only.
``--smoke``: 2,000 rows, 1 epoch, large =
hidden 512, the local clusters of 1 worker (see ``bench/harness.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1]  # bench/: the shared harness and the local benches' modules
sys.path.insert(1, str(BENCH_DIR))  # after bench/k8s/, this script's folder (sys.path[0])
from common import (  # noqa: E402
    PeakWatch,
    add_k8s_arguments,
    core_v1,
    job_dir_with,
    kubernetes,
    marked_lines,
    pod_settings,
    run_root,
    wait_cluster,
)
from harness import add_common_arguments, ignite, report, say_to_stderr, set_bench_env  # noqa: E402
from tf_baseline_memory import baseline_file  # noqa: E402

set_bench_env()
CACHE = "k8s_memory_bench"
SIZES = {"small": 32, "large": 2048}
GOAL = (1.0, 1.25)
CHIEF = "worker-0"  # of a sync cluster
MEASURE_LIMIT = "3Gi"


def job(hidden: int, epochs: int, job_dir: Path) -> dict:
    command = ["python", "-m", "ignite_tf.runtime", "--entry-point", "memory_model:model", "--epochs", str(epochs),
               "--batch-size", "64", "--label-column", "label", "--model-arg", f"hidden={hidden}"]
    return {"command": command, "job_dir": str(job_dir)}


def one(conn, kind: str, size: str, hidden: int, epochs: int, tmp: Path, settings: dict | None, plan,
        round_: int = 0, workers: int = 2) -> list[dict]:
    from memory_model import MARK

    from ignite_tf.cluster.api import make_launcher, start_cluster
    from ignite_tf.cluster.k8s.memory import estimate
    from ignite_tf.state import Status

    the_job = job(hidden, epochs, job_dir_with(tmp, f"job-{kind}-{size}-{round_}", "memory_model.py"))
    est = estimate(the_job, plan, conn=conn)
    cluster_id = f"mem-bench-{kind[:5]}-{size}-{os.getpid()}" + (f"-{round_}" if round_ else "")
    launcher = make_launcher(conn, kind=kind, kubernetes=settings)
    start_cluster(CACHE, the_job, conn=conn, mode="sync", workers=workers, max_restarts=0, cluster_id=cluster_id,
                  run_root=run_root(tmp, kind), launcher=launcher, plan=plan, startup_deadline_s=600)
    watch = PeakWatch(core_v1(), settings["namespace"], cluster_id) if kind == "kubernetes" else None
    state = wait_cluster(launcher, cluster_id, every=watch.poll if watch else None)
    text = launcher.output(cluster_id)[0]
    inside = {m["task"]: m for m in marked_lines(text, MARK)}
    if state.status is not Status.SUCCEEDED and "OOMKilled" not in (state.reason or ""):
        raise RuntimeError(f"{kind} {size}: ended {state.status.value}: {state.reason}\n"
                           f"{launcher.tail(cluster_id, 30)}")
    rows = []
    tasks = sorted(set(watch.peaks) | set(inside)) if watch else sorted(inside)
    for task in tasks:
        seen = inside.get(task, {})
        node = watch.peaks.get(task) if watch else None
        candidates = {"cgroup on the node": node, "cgroup inside": seen.get("cgroup_peak_mib")} if watch else \
            {"peak RSS": seen.get("rss_peak_mib")}
        how, peak = max(((k, v) for k, v in candidates.items() if v), key=lambda kv: kv[1], default=("-", None))
        # The Kubernetes launcher sizes a sync cluster's other workers apart (``MemoryEstimate.for_peer``).
        mine = est.for_peer() if kind == "kubernetes" and task != CHIEF else est
        ratio = mine.total_mib / peak if peak else None
        rows.append({"launcher": kind, "model": size, "hidden": hidden, "params": est.params, "round": round_,
                     "workers": workers,
                     "estimate_mib": mine.total_mib, "pod_limit": (watch.estimates.get(task) if watch else None),
                     "task": task, "peak_mib": round(peak, 1) if peak else None, "measured_by": how,
                     "ratio": round(ratio, 3) if ratio else None,
                     # A local task has no limit, and its resident set counts TensorFlow's shared libraries,
                     # which a pod's cgroup is charged for only when it is the first to read them.
                     "goal_met": bool(ratio and GOAL[0] <= ratio <= GOAL[1]) if kind == "kubernetes" else None,
                     "oom_killed": "OOMKilled" in (state.reason or ""), "estimate": mine.to_dict()})
    if not rows:
        raise RuntimeError(f"{kind} {size}: no task reported its peak:\n{launcher.tail(cluster_id, 30)}")
    return rows


def baseline_record(pods: list[dict], sizes: dict[str, int], rounds: int = 1) -> dict:
    """The TensorFlow baseline and bytes per parameter from pods' cgroup peaks (``--write-baseline``): the
    small model's largest peak, and the growth to the large model's largest per parameter (Adam)."""
    import platform
    import time
    from importlib.metadata import version

    small = [r for r in pods if r["model"] == "small" and r["peak_mib"]]
    large = [r for r in pods if r["model"] == "large" and r["peak_mib"]]
    if not small or not large:
        raise RuntimeError(f"--write-baseline: no peak of each size: {pods}")
    peak = max(r["peak_mib"] for r in small)
    top = max(large, key=lambda r: r["peak_mib"])
    peers = [r for r in large if r["task"] != CHIEF]  # the chief alone saves the model
    top_peer = max(peers, key=lambda r: r["peak_mib"], default=top)

    def per_param(row: dict) -> float:  # never under weights + gradients + Adam's slots
        return round(max((row["peak_mib"] - peak) * 2**20 / (row["params"] - small[0]["params"]), 16.0), 1)

    return {
        "peak_mib": round(peak, 1),
        "param_bytes": per_param(top),
        "peer_param_bytes": min(per_param(top_peer), per_param(top)),
        "param_bytes_optimizer": "adam",
        "measured": time.strftime("%Y-%m-%d", time.gmtime()),
        "tensorflow": version("tensorflow"),
        "how": (f"bench/k8s/memory.py --write-baseline: 2-worker sync clusters of tabular_classifier with Adam "
                f"(batch 64, BackupAndRestore, the chief saving the SavedModel) in pods on a node where earlier "
                f"pods had read the image's TensorFlow libraries, limit {MEASURE_LIMIT} (not reached), {rounds} "
                f"run(s) of each; each container's cgroup peak (page cache it is charged for included): peak_mib "
                f"the largest with "
                f"{small[0]['params']:,} parameters (hidden={sizes['small']}), param_bytes the growth per parameter "
                f"to the largest with {top['params']:,} (hidden={sizes['large']}), peer_param_bytes the same to "
                f"the largest but the chief's (which alone saves the model). A first pod on a fresh node is "
                f"also charged for those libraries' file pages (process_peak_mib - peak_mib, about): clean page "
                f"cache, which the kernel reclaims at the limit instead of killing the task"),
        "samples_mib": [r["peak_mib"] for r in small],
        "large_mib": top["peak_mib"],
        "large_peer_mib": top_peer["peak_mib"],
        "large_params": top["params"],
        "tf_keras": version("tf_keras"),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }


def run(args, say) -> list[dict]:
    from ignite_tf_dev.demo_data import tabular

    from ignite_tf.etl import load
    from ignite_tf.plan.partitions import PartitionMap
    from ignite_tf.plan.shards import ShardPlan

    sizes = dict(SIZES, large=512) if args.smoke else SIZES
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="k8s-memory-bench-") as name:
        tmp = Path(name)
        with ignite(args.ignite, tmp / "ignite", say) as nodes:
            conn = nodes.conn
            load(conn, CACHE, tabular(args.rows), key="id")
            partitions = PartitionMap.discover(conn, CACHE)
            plan = ShardPlan.build(partitions, 2)
            # --smoke: the local clusters of 1 worker (a local task has no limit; its rows are the same code)
            local_workers = 1 if args.smoke else 2
            local_plan = plan if local_workers == 2 else ShardPlan.build(partitions, local_workers)
            for size, hidden in {} if args.write_baseline or args.pods_only else sizes.items():
                say(f"local {size} (hidden={hidden}) ...")
                results += one(conn, "local", size, hidden, args.epochs, tmp, None, local_plan,
                               workers=local_workers)
            if args.local_only:
                return results
            with kubernetes(args.kubeconfig, say):
                # Measuring the baseline: a limit far above the peaks, so none of the charge is reclaimed.
                extra = {"resources": {"requests": {"memory": "512Mi"}, "limits": {"memory": MEASURE_LIMIT}}} \
                    if args.write_baseline else {}
                settings = pod_settings(args.namespace, args.host_network, **extra)
                for n in range(args.rounds):
                    for size, hidden in sizes.items():
                        say(f"kubernetes {size} (hidden={hidden}), round {n + 1} of {args.rounds} ...")
                        results += one(conn, "kubernetes", size, hidden, args.epochs, tmp, settings, plan, n)
    return results


def table(results: list[dict]) -> str:
    base = results[0]["estimate"]["baseline_mib"] if results else 0
    workers = "/".join(str(w) for w in sorted({r["workers"] for r in results})) or "2"
    lines = [f"Memory estimate beside each task's measured peak ({workers} sync workers; TensorFlow baseline "
             f"{base} MiB)",
             "", "| launcher | model | parameters | task | estimate (MiB) | peak (MiB) | measured by | estimate / peak "
             "| goal 1.0-1.25 | pod's limit |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] else "-"
        met = {True: "yes", False: "NO", None: "n/a (no limit)"}[r["goal_met"]]
        lines.append(f"| {r['launcher']} | {r['model']} | {r['params']:,} | {r['task']} | {r['estimate_mib']} | "
                     f"{r['peak_mib']} | {r['measured_by']} | {ratio} | {met} | {r['pod_limit'] or '-'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    add_k8s_arguments(parser)
    only = parser.add_mutually_exclusive_group()
    only.add_argument("--local-only", action="store_true", help="the local launcher only, no Kubernetes")
    only.add_argument("--pods-only", action="store_true", help="the Kubernetes launcher only, no local processes")
    parser.add_argument("--write-baseline", action="store_true",
                        help="pods only, limit far above their peaks: record the baseline and bytes per parameter "
                             "the estimate uses in ignite_tf/resources/tf_baseline.json")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the pods this many times (the baseline takes the largest peaks of all)")
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=3)
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.epochs, args.rounds = 2_000, 1, 1
    results = run(args, say_to_stderr(args.json and not args.smoke))
    out = {"runs": results, "goal": list(GOAL)}
    if args.write_baseline:
        out["baseline"] = rec = baseline_record(results, dict(SIZES, large=512) if args.smoke else SIZES, args.rounds)
        path = baseline_file()
        # The process measurement of bench/tf_baseline_memory.py stays beside it (what a first pod pays at most).
        kept = {k: v for k, v in json.loads(path.read_text()).items() if k.startswith("process_")}
        path.write_text(json.dumps({**rec, **kept}, indent=2) + "\n")
    report(args, table(results), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
