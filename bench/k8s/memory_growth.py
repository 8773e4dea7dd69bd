"""What grows in a training pod's memory: each container's cgroup ``memory.stat`` sampled while it trains long.

    .venv/bin/python bench/k8s/memory_growth.py [--json] [--smoke] [--ignite HOST:PORT,...] [--kubeconfig FILE]
                                               [--namespace NAME] [--rows N] [--epochs N] [--limit QUANTITY]
                                               [--every S] [--launcher kubernetes|local]
                                               [--checkpoint-every-steps N]

The deployed shape of ``bench/k8s/deployed.py --parts resume`` without the deletion: a 2-worker sync cluster
of ``ignite_tf.models:tabular_classifier`` over ``--rows`` (100,000) rows, batch 256, ``--epochs`` (20), its
pods on the real node with the limit ``--limit`` (default 1Gi: above every peak, so no page cache is reclaimed
and the growth shows whole; ``estimate``: the launcher's own estimate). Every ``--every`` (1) s it reads, for
each container, its cgroup's ``memory.usage_in_bytes`` and ``memory.stat`` (v1: rss, cache, mapped_file,
shmem, active/inactive file and anon, dirty, writeback, pgmajfault), ``memory.kmem.usage_in_bytes``, and its
main process's ``VmRSS``, threads and open files (``/proc/PID`` on the node); each 10 s the bytes of the
task's staging folder (``/proc/PID/root`` + ``POD_RUN_DIR``). ``--launcher local``: the same training as
local processes, each sampled by ``/proc/PID`` only (resident set: anonymous and file). Printed: per task,
the first sample after the first epoch beside the last one before the end, and the growth of each figure;
``--json`` has every sample.
``--smoke``: 2,000 rows, 2 epochs of a 1-worker cluster, a sample every 0.2 s (see ``bench/harness.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1]  # bench/: the shared harness and the local benches' modules
sys.path.insert(1, str(BENCH_DIR))  # after bench/k8s/, this script's folder (sys.path[0])
from common import (  # noqa: E402
    add_k8s_arguments,
    container_cgroup,
    core_v1,
    kubernetes,
    pod_settings,
    run_root,
)
from harness import add_common_arguments, ignite, report, say_to_stderr, set_bench_env  # noqa: E402

set_bench_env()
CACHE = "k8s_memory_growth"
BATCH = 256
STAT_KEYS = ("rss", "cache", "mapped_file", "shmem", "active_anon", "inactive_anon", "active_file",
             "inactive_file", "dirty", "writeback")
COUNT_KEYS = ("pgmajfault",)
MIB = 2**20


def read_stat(folder: Path) -> dict[str, float]:
    """One sample of a v1 memory cgroup (MiB; counters as counts)."""
    out: dict[str, float] = {}
    stat = dict(line.split() for line in (folder / "memory.stat").read_text().splitlines())
    for key in STAT_KEYS:
        if key in stat:
            out[key] = int(stat[key]) / MIB
    for key in COUNT_KEYS:
        if key in stat:
            out[key] = int(stat[key])
    for name, key in (("memory.usage_in_bytes", "usage"), ("memory.kmem.usage_in_bytes", "kmem"),
                      ("memory.max_usage_in_bytes", "peak")):
        try:
            out[key] = int((folder / name).read_text()) / MIB
        except (OSError, ValueError):
            pass
    return out


def read_process(pid: int) -> dict[str, float]:
    out: dict[str, float] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "RssAnon:", "RssFile:", "RssShmem:")):
                out[line.split(":")[0]] = int(line.split()[1]) / 1024
            elif line.startswith("Threads:"):
                out["threads"] = int(line.split()[1])
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        pass
    return out


def folder_bytes(root: Path) -> dict[str, float]:
    """MiB under each top folder of ``root`` (the task's staging folder, seen through ``/proc/PID/root``)."""
    out: dict[str, float] = {}
    for dirpath, _dirs, files in os.walk(root):
        top = Path(dirpath).relative_to(root).parts[:3]
        key = "/".join(top) or "."
        for name in files:
            try:
                out[key] = out.get(key, 0.0) + os.lstat(os.path.join(dirpath, name)).st_size / MIB
            except OSError:
                continue
    return {k: round(v, 2) for k, v in sorted(out.items())}


class ProcessWatch(threading.Thread):
    """Samples the task processes of a local cluster (``--launcher local``): ``/proc/PID`` of each task.

    ``launcher`` reads the cluster's state in this thread: one of its own (a state store's Ignite client is not
    shared between threads)."""

    def __init__(self, launcher, cluster_id: str, every_s: float):
        super().__init__(name="process-watch", daemon=True)
        self.launcher, self.cluster_id, self.every_s = launcher, cluster_id, every_s
        self.samples: dict[str, list[dict]] = {}
        self.folders: dict[str, list[tuple[float, dict]]] = {}
        self._done = threading.Event()

    def __enter__(self) -> ProcessWatch:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self.join()

    def run(self) -> None:
        t0 = time.time()
        while not self._done.wait(self.every_s):
            try:
                state = self.launcher.status(self.cluster_id)
            except Exception:  # noqa: BLE001 - the state being written: next round
                continue
            for task in state.tasks:
                if task.pid and task.live:
                    sample = read_process(task.pid)
                    if sample:
                        sample.update(t=round(time.time() - t0, 1), epochs=len(state.epochs))
                        self.samples.setdefault(task.name, []).append(sample)


class StatWatch:
    """Samples every container of a cluster's pods in a thread (see the module's docstring)."""

    def __init__(self, core, namespace: str, cluster_id: str, every_s: float, launcher):
        self.core, self.namespace, self.cluster_id, self.every_s, self.launcher = (
            core, namespace, cluster_id, every_s, launcher)
        self.samples: dict[str, list[dict]] = {}
        self.folders: dict[str, list[tuple[float, dict]]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stat-watch", daemon=True)

    def __enter__(self) -> StatWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        from ignite_tf.cluster.k8s.objects import LABEL_CLUSTER, LABEL_TASK, POD_RUN_DIR

        cgroups: dict[str, Path] = {}
        t0, last_du = time.time(), 0.0
        while not self._stop.wait(self.every_s):
            try:
                pods = self.core.list_namespaced_pod(self.namespace,
                                                     label_selector=f"{LABEL_CLUSTER}={self.cluster_id}").items
                epochs = len(self.launcher.status(self.cluster_id).epochs)
            except Exception:  # noqa: BLE001 - the API server busy: next round
                continue
            now = time.time()
            du = now - last_du > 10
            for pod in pods:
                task = (pod.metadata.labels or {}).get(LABEL_TASK, pod.metadata.name)
                if pod.metadata.name not in cgroups:
                    for status in pod.status.container_statuses or []:
                        if status.container_id:
                            found = container_cgroup(status.container_id)
                            if found is not None:
                                cgroups[pod.metadata.name] = found
                folder = cgroups.get(pod.metadata.name)
                if folder is None:
                    continue
                try:
                    sample = read_stat(folder)
                    pids = [int(p) for p in (folder / "cgroup.procs").read_text().split()]
                except (OSError, ValueError):
                    continue
                sample.update(t=round(now - t0, 1), epochs=epochs, pod=pod.metadata.name)
                if pids:
                    sample.update(read_process(min(pids)))
                    if du:
                        self.folders.setdefault(task, []).append(
                            (round(now - t0, 1), folder_bytes(Path(f"/proc/{min(pids)}/root{POD_RUN_DIR}"))))
                self.samples.setdefault(task, []).append(sample)
            if du:
                last_du = now


def growth(samples: list[dict]) -> tuple[dict, dict] | None:
    """(first sample once an epoch is recorded, else the first, and the last sample) of one task."""
    trained = [s for s in samples if s.get("epochs")]
    return ((trained or samples)[0], samples[-1]) if samples else None


def table(result: dict) -> str:
    keys = ["usage", "peak", "rss", "cache", "mapped_file", "shmem", "active_file", "inactive_file", "dirty",
            "writeback", "kmem", "VmRSS", "RssAnon", "RssFile", "threads", "fds", "pgmajfault"]
    w = result["workers"]
    lines = [f"Memory of each container while it trains ({result['rows']:,} rows, {result['epochs']} epochs, batch "
             f"{BATCH}, {w} sync worker{'s' * (w != 1)}, limit {result['limit']}; MiB unless said)", ""]
    for task, (first, last) in result["growth"].items():
        lines += [f"{task}: t={first['t']} s (epoch {first['epochs']}) -> t={last['t']} s (epoch {last['epochs']})", "",
                  "| figure | first | last | growth |", "|---|---:|---:|---:|"]
        for key in keys:
            if key in first and key in last:
                lines.append(f"| {key} | {first[key]:.1f} | {last[key]:.1f} | {last[key] - first[key]:+.1f} |")
        key = "rss" if "rss" in last else "RssAnon"
        # A sample read as the process ended may lack a figure: it is left out here as in the growth rows.
        by_epoch = {s["epochs"]: s[key] for s in result["samples"][task] if key in s}
        lines += ["", f"{key} by epochs recorded: " + ", ".join(f"{e}: {v:.0f}" for e, v in sorted(by_epoch.items())),
                  ""]
        folders = result["folders"].get(task) or []
        if folders:
            lines.append(f"staging folder (MiB) at t={folders[-1][0]}: {folders[-1][1]}")
            lines.append("")
    return "\n".join(lines)


def wait_final(launcher, cluster_id: str, timeout_s: float = 900.0):
    """The cluster's final state; a failed read of the state (the state store busy on a loaded machine) is
    read again, not the end of the bench (``wait_cluster`` stops the cluster at its first error)."""
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            try:
                state = launcher.status(cluster_id)
            except Exception:  # noqa: BLE001 - read again
                time.sleep(2.0)
                continue
            if state.status.final:
                return state
            time.sleep(1.0)
        raise RuntimeError(f"cluster {cluster_id} not ended after {timeout_s:.0f}s")
    finally:
        try:
            if not launcher.status(cluster_id).status.final:
                launcher.stop(cluster_id)
        except Exception:  # noqa: BLE001 - stopped below by the namespace's deletion, if need be
            pass


def run(args, say, workers: int = 2) -> dict:
    from ignite_tf_dev.demo_data import tabular

    from ignite_tf.cluster.api import make_launcher, start_cluster
    from ignite_tf.connection import sql
    from ignite_tf.etl import load

    with tempfile.TemporaryDirectory(prefix="k8s-memory-growth-") as name:
        tmp = Path(name)
        with ignite(args.ignite, tmp / "ignite", say) as nodes, kubernetes(args.kubeconfig, say) if \
                args.launcher == "kubernetes" else contextlib.nullcontext():
            conn = nodes.conn
            load(conn, CACHE, tabular(args.rows), key="id")
            try:
                extra = {} if args.limit == "estimate" else {
                    "resources": {"requests": {"memory": "368Mi"}, "limits": {"memory": args.limit}}}
                settings = pod_settings(args.namespace, args.host_network, **extra) if args.launcher == \
                    "kubernetes" else None
                launcher = make_launcher(conn, kind=args.launcher, kubernetes=settings)
                cid = f"mem-growth-{os.getpid()}"
                job = {"entry_point": "ignite_tf.models:tabular_classifier",
                       "args": ["--epochs", str(args.epochs), "--batch-size", str(BATCH), "--label-column", "label",
                                *(["--checkpoint-every-steps", str(args.checkpoint_every_steps)]
                                  if args.checkpoint_every_steps else [])]}
                start_cluster(CACHE, job, conn=conn, mode="sync", workers=workers, max_restarts=0, cluster_id=cid,
                              run_root=run_root(tmp, args.launcher), launcher=launcher, startup_deadline_s=600)
                with (StatWatch(core_v1(), args.namespace, cid, args.every, launcher) if settings else
                      ProcessWatch(make_launcher(conn, kind=args.launcher), cid, args.every)) as watch:
                    state = wait_final(launcher, cid)
                say(f"ended {state.status.value}: {state.reason or ''}")
            finally:
                client = conn.client()
                try:
                    sql(client, f"DROP TABLE IF EXISTS {CACHE.upper()}")
                    if CACHE in client.get_cache_names():
                        client.get_cache(CACHE).destroy()
                finally:
                    client.close()
    grown = {task: g for task, s in sorted(watch.samples.items()) if (g := growth(s))}
    return {"rows": args.rows, "epochs": args.epochs, "workers": workers, "limit": args.limit,
            "launcher": args.launcher, "status": state.status.value,
            "epoch_s": [e.get("epoch_s") for e in state.epochs], "growth": grown, "folders": watch.folders,
            "samples": watch.samples, "load": os.getloadavg()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    add_k8s_arguments(parser)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--limit", default="1Gi", help="the pods' memory limit, or 'estimate' (default 1Gi)")
    parser.add_argument("--launcher", choices=("kubernetes", "local"), default="kubernetes",
                        help="pods on the real node (default), or local processes (their /proc figures only)")
    parser.add_argument("--checkpoint-every-steps", type=int,
                        help="back up every N steps instead of every epoch (how the growth follows the backups)")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between samples (default 1)")
    args = parser.parse_args(argv)
    workers = 2
    if args.smoke:  # sampled from the tasks' start (a few seconds) to the end: 2 epochs give a first and a last
        args.rows, args.epochs, args.every, workers = 2_000, 2, 0.2, 1
    result = run(args, say_to_stderr(args.json and not args.smoke), workers)
    report(args, table(result), result)
    if not result["growth"]:
        print(f"no sample of any task: the training ({result['status']}) ended before the first one; give it more "
              f"--epochs or a shorter --every", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
