"""Launch -> first training step: the Kubernetes launcher beside the local one, in one table.

    .venv/bin/python bench/k8s_startup.py [--json] [--smoke] [--ignite HOST:PORT,...] [--kubeconfig FILE]
                                          [--namespace NAME] [--host-network] [--rows N] [--repeat N]
                                          [--no-warm-pool]

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
(goal <= 1.3; each round's ratio beside it): one launch each is not enough, the first step moves by a second from
run to run here, and the process's first launch pays its imports and, after a reboot, a cold page cache for the
local supervisor's. The first round also runs the Kubernetes launcher as before its head start (``as_before``:
its client through Airflow's hook, the supervisor's pod making the first task pods), right after the local one.
In the deployed shape each round ends with a third launch, ``kubernetes, warm pool``: the Kubernetes launcher with
``kubernetes.warm_pool``, its first attempt on the warm pods the previous such launch left (``warm_pool_vs_local``,
the same goal; see ``launches``; ``--no-warm-pool`` leaves it out).
The Kubernetes tasks run in the task image on the real node in the deployed shape (pod network,
cluster DNS, ``IGNITE_TF_RUN_ROOT``; give ``--ignite`` the Ignite pods of ``make k8s-up``'s
``IGNITE_TF_ADDRESSES``), or with ``--host-network`` in the one-machine shape (host network, the run folder
as a hostPath: for Ignite nodes on 127.0.0.1), in ``--namespace`` (default ``default``); see
``bench/k8s_harness.py``. The first step is read from the chief's mark file where this host can read the
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
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness import add_common_arguments, ignite, report, set_bench_env
from k8s_harness import add_k8s_arguments, cgroup_cpu, kubernetes, pod_cgroup, pod_settings, run_root

set_bench_env()
BENCH_DIR = Path(__file__).resolve().parent
CACHE = "k8s_startup_bench"
ENV_MARK = "IGNITE_TF_BENCH_FIRST_STEP"
TIMEOUT_S = 900.0
GOAL = 1.3  # issue 24: the Kubernetes launcher's first step at most 1.3x the local one's
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
    "pool_go": "a warm pool's pod handed its task (kubernetes.warm_pool)",
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


BEFORE = "kubernetes, before"
WARM = "kubernetes, warm pool"
POOL_S = 600  # the warm pool's wait (``kubernetes.warm_pool``): longer than a round
POD_MARK = "/tmp/ignite-tf-bench-first-step"  # in a pod: one path for every launch, so its variables match a pool's


@contextmanager
def as_before() -> Iterator[None]:
    """The Kubernetes launcher as it was before 2026-11-26 21:00 UTC: its client through Airflow's
    ``KubernetesHook`` (Airflow imported by the launching process, once per process: run this first) and no
    head start (the supervisor's pod makes the first task pods)."""
    from ignite_tf.cluster.k8s import launcher, supervisor

    start, core_v1 = supervisor.start, launcher.client.core_v1
    supervisor.start = lambda *args, **_kwargs: start(*args[:6])  # no ``head_start``
    launcher.client.core_v1 = lambda conn_id: launcher.kube_hook(conn_id).core_v1_client
    try:
        yield
    finally:
        supervisor.start, launcher.client.core_v1 = start, core_v1


def one(conn, kind: str, tmp: Path, kubernetes: dict | None, run_root: str | None = None,
        before: bool = False) -> dict:
    """One launch; ``before``: the Kubernetes launcher as before (``as_before``)."""
    if before:
        with as_before():
            result = one(conn, kind, tmp, kubernetes, run_root)
        return {**result, "launcher": BEFORE}
    from ignite_tf import timeline
    from ignite_tf.cluster.api import make_launcher, start_cluster
    from ignite_tf.cluster.state import Status
    from ignite_tf.runstore import is_remote

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
    return {"launcher": WARM if (kubernetes or {}).get("warm_pool") else kind,
            "head_start_pods": output.count("made by the launcher (head start)"),
            "pool_pods": int("warm pool: first attempt on the warm pods" in output) * len(state.tasks),
            "launched_s": round(launched, 2), "tasks_up_s": float(up.group(1)) if up else None,
            "first_step_s": round(first, 2), "total_s": round(time.perf_counter() - t0, 2), "moments": moments}


def launches(conn, tmp: Path, kubernetes: dict, run_root: str | None, repeat: int, say=lambda _m: None,
             warm_pool: bool = False) -> list[dict]:
    """``repeat`` rounds, each the local launcher then the Kubernetes one (the first round also the Kubernetes
    launcher as before, right after the local one: the process's first Kubernetes launch pays Airflow's import
    in it). Interleaved, so that a slow moment of the machine falls on both; the first local launch pays this
    process's imports and a cold page cache for the supervisor's, which the medians leave out.

    ``warm_pool`` (the deployed shape): each round ends with a third launch, the Kubernetes launcher with
    ``kubernetes.warm_pool``, whose first attempt runs on the pool the previous such launch left (a first one,
    not counted, leaves the first pool); each waits until that pool's pods say they wait, so that their imports
    are not in the next launches' time. The pools are deleted at the end."""
    runs = []
    pooled, idle = {**kubernetes, "warm_pool": POOL_S}, None
    try:
        if warm_pool:
            say("a first launch with warm_pool, not counted: it leaves the first pool ...")
            one(conn, "kubernetes", tmp, pooled, run_root=run_root)
            idle = pool_waiting(kubernetes["namespace"], say)
        for n in range(repeat):
            kinds = [("local", False, None), *((("kubernetes", True, kubernetes),) if n == 0 else ()),
                     ("kubernetes", False, kubernetes), *((("kubernetes", False, pooled),) if warm_pool else ())]
            for kind, before, settings in kinds:
                say(f"round {n + 1}/{repeat}: {kind} launcher{', before' if before else ''}"
                    f"{', warm pool' if settings is pooled else ''} ...")
                run = one(conn, kind, tmp, None if kind == "local" else settings,
                          run_root=None if kind == "local" else run_root, before=before)
                runs.append({**run, "round": n + 1, **({"pool_idle_cores": idle} if settings is pooled else {})})
                say(f"  {runs[-1]}")
                if settings is pooled:
                    idle = pool_waiting(kubernetes["namespace"], say)
    finally:
        if warm_pool:
            delete_pools(kubernetes["namespace"])
    return runs


def pool_waiting(namespace: str, say=lambda _m: None, timeout: float = 300.0) -> float | None:
    """Until the namespace's open warm pool has every pod's TensorFlow imported (its log says so); returns the CPU
    cores its pods then use while they wait (``idle_cpu``; None where their cgroups are not on this host)."""
    from ignite_tf.cluster.k8s import client, pool
    from ignite_tf.cluster.k8s.settings import DEFAULT_CONN_ID

    core, deadline = client.core_v1(DEFAULT_CONN_ID), time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = [p for p in core.list_namespaced_pod(namespace, label_selector=pool.LABEL).items
                if p.status.phase in ("Pending", "Running")]
        try:
            if pods and all(pool.WAITING in (core.read_namespaced_pod_log(p.metadata.name, namespace) or "")
                            for p in pods):
                say(f"  warm pool waiting: {', '.join(sorted(p.metadata.name for p in pods))}")
                return idle_cpu(pods)
        except Exception:  # noqa: BLE001 - a pod not started yet has no log
            pass
        time.sleep(0.5)
    raise RuntimeError(f"no warm pool waiting in {namespace} after {timeout:.0f}s")


def idle_cpu(pods: list, seconds: float = 5.0) -> float | None:
    """CPU cores the waiting ``pods`` use together (their cgroups on this node, over ``seconds``): a pool's cost
    while nobody takes it (each pod asks the state store for its go every ``pool.POLL_S``)."""
    folders = [pod_cgroup(p.metadata.uid) for p in pods]
    if not all(folders):
        return None
    before, t0 = [cgroup_cpu(f) for f in folders], time.perf_counter()
    time.sleep(seconds)
    after, wall = [cgroup_cpu(f) for f in folders], time.perf_counter() - t0
    if not all(before) or not all(after):
        return None
    return round(sum(a[0] - b[0] for a, b in zip(after, before, strict=True)) / wall, 3)


def delete_pools(namespace: str, timeout: float = 120.0) -> None:
    """Delete every warm pool in the namespace and wait until their pods are gone."""
    from ignite_tf.cluster.k8s import client, objects, pool
    from ignite_tf.cluster.k8s.settings import DEFAULT_CONN_ID

    core = client.core_v1(DEFAULT_CONN_ID)
    for root in core.list_namespaced_config_map(namespace, label_selector=pool.LABEL).items:
        objects.delete_owner(core, namespace, root.metadata.name)
    deadline = time.monotonic() + timeout
    while core.list_namespaced_pod(namespace, label_selector=pool.LABEL).items and time.monotonic() < deadline:
        time.sleep(0.5)


def run(rows: int, addresses: str | None = None, kubeconfig: str | None = None, namespace: str = "default",
        host_network: bool = False, repeat: int = 3, warm_pool: bool = True) -> list[dict]:
    from ignite_tf_dev.demo_data import tabular

    from ignite_tf.etl import load
    from ignite_tf.runstore import is_remote

    with tempfile.TemporaryDirectory(prefix="k8s-startup-bench-") as name:
        tmp = Path(name)
        with ignite(addresses, tmp / "ignite", say) as nodes:
            conn = nodes.conn
            load(conn, CACHE, tabular(rows), key="id")
            say(f"loaded {rows} rows")
            with kubernetes(kubeconfig, say):
                root = None if host_network else run_root(tmp, "kubernetes")
                return launches(conn, tmp, pod_settings(namespace, host_network), root, repeat, say,
                                warm_pool=warm_pool and root is not None and is_remote(root))


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
    idle = [r["pool_idle_cores"] for r in results if r.get("pool_idle_cores") is not None]
    if idle:
        lines += ["", f"CPU of the warm pool's 2 pods while they wait, before each warm-pool launch (cores): "
                      f"{', '.join(f'{x:.3f}' for x in idle)}"]
    lines += ["", moments_table(results)]
    for kind, what in (("kubernetes", "Kubernetes"), (WARM, "Kubernetes on a warm pool")):
        if ratio(results, kind) is not None:
            each = ", ".join(f"{x:.2f}" for x in round_ratios(results, kind))
            lines.append(f"\nfirst step, {what} / local (medians of {len(first_steps(results, 'local'))} launches "
                         f"each): {ratio(results, kind):.2f} (goal <= {GOAL}; each round: {each})")
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
    parser.add_argument("--no-warm-pool", action="store_true",
                        help="no launches on a warm pool (kubernetes.warm_pool; only with an object-store run root)")
    add_k8s_arguments(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.rows, args.repeat = 1_000, 1
    results = run(args.rows, args.ignite, args.kubeconfig, args.namespace, args.host_network, args.repeat,
                  not args.no_warm_pool)
    report(args, table(results), {"runs": results, "kubernetes_vs_local": ratio(results),
                                  "warm_pool_vs_local": ratio(results, WARM), "goal": GOAL})
    return 0


if __name__ == "__main__":
    sys.exit(main())
