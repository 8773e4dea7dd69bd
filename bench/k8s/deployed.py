"""Kubernetes as teams deploy it, side by side in one run: start-up, input, a deleted pod, locality.

    .venv/bin/python bench/k8s/deployed.py [--json] [--smoke] [--ignite HOST:PORT,...] [--kubeconfig FILE]
                                           [--namespace NAME] [--host-network] [--rows N] [--epochs N]

Against the Ignite cluster of ``--ignite`` (in the deployed shape: the Ignite pods, ``IGNITE_TF_ADDRESSES`` of
``make k8s-up``; default 2 local nodes, which pods reach with ``--host-network`` only) and the Kubernetes of
``--kubeconfig`` (see ``bench/k8s/common.py``), measures:

  startup    launch -> first training step, the Kubernetes launcher beside the local one, ``--startup-repeat``
             (3) rounds interleaved (``bench/k8s/startup.py``); goal: the medians' Kubernetes / local <= 1.5;
  input      in one pod: steps/s of the tabular classifier fed from Ignite (``ignite_tf.data`` over the pod
             network) vs from the same rows in memory (``bench/k8s/input_task.py``); goal: >= 0.9. As
             ``bench/startup.py``'s local comparison: ``--input-rows`` (512,000: 500 a partition; the Ignite
             path pays a fixed cost per partition scanned), fits of one pass over that table (``--steps``, default
             2,000 of 256 rows, as there) and Ignite nodes warmed by ``--input-warmup`` (10) untimed reads;
             beside it, fits of ``--short-steps`` (300): a fit's first block (a shuffle unit, 10,000 rows) is
             read before its first step, which weighs about 7x more in those (reported, no goal). Beside each
             path: the CPU cores the task's pod and the Ignite pods used and their CFS-throttled periods,
             from their cgroups on the node;
  resume     a 2-worker sync cluster of ``--epochs`` (20) epochs, batch 256, once for each ``--standby`` value
             (default ``off,on``: ``kubernetes.standby``, the restart handed to warm pods, beside the restart
             with new pods): worker-1's pod deleted at an epoch record (each deletion at the same point of its
             epoch) once the attempt has recorded 1 epoch (later ones: 3) and, with standby, its warm pods
             wait (``warm_pods_waiting``; deleted anyway after 60 s), up to ``--deletions`` (3) times;
             reported per deletion and as their median: seconds to the pod's end (``pod_gone_s``), to the
             restarted attempt's first epoch record (``next_epoch_s``; issue 24's goal <= 8 s; the deleted
             attempt may record one more while it stops), of that the restart's own part (``lost_s``: less the
             rest of the interrupted epoch, which is work done once either way), the epoch it resumed at;
             and the median epoch time, the restarts, the epochs recorded (``epochs_run``, which should equal
             the epochs asked for);
  locality   a 2-worker cluster with ``placement: required`` (the launcher's own plan): the share of rows read
             locally as the launcher planned it and as the workers' readers measured it (``ClusterState.
             measured_locality``: rows served by an Ignite pod on the worker's own node); goal: measured >= 95%.

``--smoke``: 2,000 rows, 4 epochs (3 after the first one, which the deleted pod must interrupt), each part once,
one deletion (see ``bench/harness.py``).

However it ends — done, an error, Ctrl-C or SIGTERM (a timeout's) — it leaves what a normal end leaves: every
cluster it started stopped and its Kubernetes objects deleted, the tables it loaded dropped (``clean_up``).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[1]  # bench/: the shared harness and the local benches' modules
sys.path[:0] = [str(BENCH_DIR / "k8s"), str(BENCH_DIR)]  # k8s/ first: its startup.py, not bench/startup.py
import startup as k8s_startup  # noqa: E402 - bench/k8s/startup.py
from common import (  # noqa: E402
    STARTUP_GOAL,
    TIMEOUT_S,
    CgroupCpu,
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

set_bench_env()
INPUT_RESOURCES = {"requests": {"memory": "1Gi"}, "limits": {"memory": "1Gi"}}
RESUME_BATCH = 256  # an epoch of a few seconds: the resume measurement is not the epoch's length
RESUME_MOMENTS = ("restarting", "tasks_started", "chief_scheduled", "chief_running", "process_started",
                  "entry_started", "code_fetched", "standby_go", "runtime_started", "tf_imported", "strategy_ready",
                  "all_up", "fit_start", "train_begin", "epoch_begin", "first_step")
PARTS = ("startup", "input", "resume", "locality")
GOALS = {"kubernetes_vs_local": STARTUP_GOAL, "input_ratio": 0.9, "next_epoch_s": 8.0, "measured_locality": 0.95}
CACHE = "k8s_deployed_bench"
CLEAN_UP_S = 120.0  # for the Kubernetes objects of the clusters stopped or cut short to be gone
IN_REQUEST = ("/pyignite/", "/urllib3/", "/kubernetes/", "/botocore/", "/aiobotocore/", "/s3fs/")
RETRY_S = 0.05
EPOCHS_BETWEEN = 3  # epochs the restarted attempt records before the next deletion (its warm pods are made meanwhile)
WARM_WAIT_S = 60.0  # how long a deletion waits for the cluster's warm pods to wait (standby), then deletes anyway


def startup(conn, tmp: Path, settings: dict, host_network: bool, repeat: int) -> dict:
    from ignite_tf_dev.demo_data import tabular

    from ignite_tf.etl import load

    load(conn, k8s_startup.CACHE, tabular(1_000), key="id")
    (tmp / "startup").mkdir()
    root = None if host_network else run_root(tmp, "kubernetes")
    runs = k8s_startup.launches(conn, tmp / "startup", settings, root, repeat)
    return {"runs": runs, "kubernetes_vs_local": k8s_startup.ratio(runs), "rounds": k8s_startup.round_ratios(runs)}


def input_rates(conn, tmp: Path, settings: dict, rows: int, steps: int | None, repeat: int, warmup: int,
                short_steps: int = 0) -> dict:
    from ignite_tf_dev.demo_data import tabular
    from ignite_tf_dev.k8s.addons import IGNITE_NAMESPACE, IGNITE_SELECTOR
    from input_task import MARK
    from startup_input import BATCH as STEPS_BATCH
    from startup_input import STEPS_CACHE, warm_nodes

    from ignite_tf.cluster.api import make_launcher, start_cluster
    from ignite_tf.cluster.k8s.objects import LABEL_CLUSTER
    from ignite_tf.connection import sql
    from ignite_tf.etl import load

    steps = steps or rows // STEPS_BATCH
    # Exactly these rows (a table left by an earlier run may hold more): the Ignite path pays a fixed cost per
    # partition scanned, so rows per partition decide the ratio (bench/startup.py's local comparison: 500).
    client = conn.client()
    try:
        sql(client, f"DROP TABLE IF EXISTS {STEPS_CACHE.upper()}")
    finally:
        client.close()
    # Each timed fit must have its steps' rows: a dataset that runs out ends the fit early.
    load(conn, STEPS_CACHE, tabular(max(rows, steps * STEPS_BATCH)), key="id")
    # As bench/startup.py does for its local nodes: Ignite pods in service run their scan code JIT-compiled;
    # fresh JVMs spend about 3x the CPU per row at first, beside the training measured.
    spent = warm_nodes(conn, warmup, [])
    job_dir = job_dir_with(tmp, "job-input", "k8s/input_task.py", "startup_input.py")
    cluster_id = f"deployed-input-{os.getpid()}"
    # The task holds the rows of its in-memory path too, which no estimate of a script's memory can know.
    launcher = make_launcher(conn, kind="kubernetes", kubernetes={**settings, "resources": INPUT_RESOURCES})
    with CgroupCpu(core_v1(), {"tf": (settings["namespace"], f"{LABEL_CLUSTER}={cluster_id}"),
                               "ignite": (IGNITE_NAMESPACE, IGNITE_SELECTOR)}) as watch:
        start_cluster(STEPS_CACHE, {"command": ["python", "input_task.py",
                                                ",".join(str(n) for n in (steps, short_steps) if n), str(repeat)],
                                    "job_dir": str(job_dir)}, conn=conn, mode="sync", workers=1, max_restarts=0,
                      cluster_id=cluster_id, run_root=run_root(tmp, "kubernetes"), launcher=launcher,
                      startup_deadline_s=600)
        wait_cluster(launcher, cluster_id, poll_s=0.5)
    found = marked_lines(launcher.output(cluster_id)[0], MARK)
    if not found:
        raise RuntimeError(f"input: the pod reported no rates:\n{launcher.tail(cluster_id, 30)}")
    r = found[-1]
    spans = r.pop("spans")
    cpu = {path: watch.cpu_during([(a, b) for name, a, b in spans if name == path]) for path in ("ignite", "memory")}
    return {**r, "input_ratio": r["steps_s_ignite"] / r["steps_s_memory"], "warmup_passes": warmup,
            "warmup_first_last_s": [spent[0], spent[-1]] if spent else None, "pod_cpu": cpu,
            "load": os.getloadavg()[0]}


def resume(conn, tmp: Path, settings: dict, epochs: int, cache: str, deletions: int = 1) -> dict:
    """One cluster, worker-1's pod deleted up to ``deletions`` times: after the first epoch record, then each time
    the restarted attempt has recorded ``EPOCHS_BETWEEN`` epochs (and, with standby, its next warm pods wait).
    Each deletion's figures are in ``deletions``; the top-level ones are their medians (moments: the first's)."""
    from ignite_tf.cluster.api import make_launcher, start_cluster
    from ignite_tf.cluster.k8s import standby
    from ignite_tf.cluster.k8s.objects import LABEL_CLUSTER, LABEL_TASK

    core = core_v1()
    namespace = settings["namespace"]
    cluster_id = f"deployed-resume-{'s-' if settings.get('standby') else ''}{os.getpid()}"
    launcher = make_launcher(conn, kind="kubernetes", kubernetes=settings)
    job = {"entry_point": "ignite_tf.models:tabular_classifier",
           "args": ["--epochs", str(epochs), "--batch-size", str(RESUME_BATCH), "--label-column", "label"]}
    start_cluster(cache, job, conn=conn, mode="sync", workers=2, max_restarts=deletions + 1, cluster_id=cluster_id,
                  run_root=run_root(tmp, "kubernetes"), launcher=launcher, startup_deadline_s=600)
    selector = f"{LABEL_CLUSTER}={cluster_id},{LABEL_TASK}=worker-1"

    def victim_pod() -> str | None:
        """worker-1's pod of the running attempt (not a warm standby one, not one being deleted)."""
        pods = [p for p in core.list_namespaced_pod(namespace, label_selector=selector).items
                if standby.LABEL not in (p.metadata.labels or {}) and not p.metadata.deletion_timestamp]
        return pods[0].metadata.name if pods else None

    def warm_waiting() -> bool:
        """Whether the cluster's next warm pods (one per task) are made and say they wait."""
        pods = core.list_namespaced_pod(namespace, label_selector=f"{LABEL_CLUSTER}={cluster_id},{standby.LABEL}").items
        try:
            return len(pods) == 2 and all(standby.WAITING in core.read_namespaced_pod_log(p.metadata.name, namespace)
                                          for p in pods)
        except Exception:  # noqa: BLE001 - a pod not started yet has no log
            return False

    # Warm pods need the pod network and cluster DNS: with --host-network a standby cluster restarts cold.
    expect_warm = bool(settings.get("standby")) and not settings.get("host_network")
    done: list[dict] = []  # per deletion: the wall time, the attempt it interrupted, the pod's end
    t0 = time.monotonic()
    try:
        # The first victim is known before the first epoch ends, so the deletion follows its record at once (one
        # state read a poll): the epochs left after it must outlast the deletion, or no restart is measured.
        victim, since, attempt, armed, waited, warm = None, 0.0, None, None, 0.0, False
        while len(done) < deletions:
            state = launcher.status(cluster_id)
            if state.status.final or time.monotonic() - t0 > TIMEOUT_S:
                if not done:
                    raise RuntimeError(f"resume: no epoch recorded:\n{launcher.tail(cluster_id, 30)}")
                break
            ours = [e for e in state.epochs if float(e.get("time", 0)) > since and e.get("attempt", 0) != attempt]
            if armed is None and len(ours) >= (EPOCHS_BETWEEN if done else 1):
                fresh, waited = not waited, waited or time.monotonic()  # fresh: the last record came at this poll
                warm = expect_warm and warm_waiting()
                if warm or not expect_warm or time.monotonic() - waited > WARM_WAIT_S:
                    armed = len(state.epochs) - (1 if fresh else 0)
            # Each deletion follows an epoch record at once: the same point of the epoch each time (the farthest
            # from the next record), with or without standby; with it, once the warm pods wait (what the setting
            # is for: a deletion in the first seconds of an attempt, before they are warm, restarts partly cold).
            ready = armed is not None and len(state.epochs) > armed
            if done and epochs - len(state.epochs) < EPOCHS_BETWEEN:
                break  # too few epochs left to see the next one after a deletion
            if victim is None or ready:
                victim = victim_pod()
            if not (ready and victim):
                time.sleep(0.1)
                continue
            attempt, after_epoch = state.epochs[-1].get("attempt", 0), state.epochs[-1].get("epoch")
            deleted_wall, deleted = time.time(), time.monotonic()
            core.delete_namespaced_pod(victim, namespace)
            gone_s = None
            while gone_s is None or not next_epoch(state.epochs, deleted_wall, attempt):
                if gone_s is None and not [p for p in core.list_namespaced_pod(
                        namespace, label_selector=selector).items if p.metadata.name == victim]:
                    gone_s = time.monotonic() - deleted
                if state.status.final or time.monotonic() - deleted > TIMEOUT_S:
                    break
                time.sleep(0.1)
                state = launcher.status(cluster_id)  # one read: its epochs and its status agree
            done.append({"wall": deleted_wall, "attempt": attempt, "after_epoch": after_epoch, "gone_s": gone_s,
                         "warm": warm})
            since, victim, armed, waited = deleted_wall, None, None, 0.0
        state = wait_cluster(launcher, cluster_id, poll_s=0.5)
    finally:
        if not launcher.status(cluster_id).status.final:
            launcher.stop(cluster_id)
    output = launcher.output(cluster_id)[0]
    epoch_s = statistics.median(float(e["epoch_s"]) for e in state.epochs) if state.epochs else None
    rounds = [_one_deletion(d, state.epochs, epoch_s, output) for d in done]

    def median(key: str):
        values = [r[key] for r in rounds if r.get(key) is not None]
        return statistics.median(values) if values else None

    return {"status": state.status.value, "deleted_after_epoch": rounds[0]["deleted_after_epoch"] if rounds else None,
            "pod_gone_s": median("pod_gone_s"), "epoch_s": epoch_s, "lost_s": median("lost_s"),
            "next_epoch_s": median("next_epoch_s"),
            "resumed_at_epoch": rounds[0]["resumed_at_epoch"] if rounds else None,
            "restarts": state.restarts, "epochs_asked": epochs, "epochs_run": len(state.epochs),
            "moments": rounds[0]["moments"] if rounds else {}, "deletions": rounds, "load": os.getloadavg()[0],
            "epochs_recorded": sorted({e.get("epoch") for e in state.epochs})}


def _one_deletion(d: dict, epochs: list[dict], epoch_s: float | None, output: str) -> dict:
    """One deletion's figures from the final state's epochs (a poll that saw the run end may have read them
    before the last one) and the chief's output."""
    from ignite_tf import timeline

    deleted_wall, attempt = d["wall"], d["attempt"]
    after = next_epoch(epochs, deleted_wall, attempt)
    next_s, resumed_at = (float(after["time"]) - deleted_wall, after.get("epoch")) if after else (None, None)
    # The restarted attempt's moments: the first of each name from the deletion to its first epoch record.
    end = float(after["time"]) if after else float("inf")
    moments: dict[str, float] = {}
    for name, at in timeline.all_marks(output):
        if name in RESUME_MOMENTS and deleted_wall < at <= end and name not in moments:
            moments[name] = round(at - deleted_wall, 2)
    moments = dict(sorted(moments.items(), key=lambda kv: kv[1]))
    if next_s is not None:
        moments["next_epoch"] = round(next_s, 2)
    # What the restart cost the training: the next epoch's record, less what the interrupted epoch still had to
    # do without a deletion (a median epoch from the old attempt's last record, which may come after the deletion:
    # the deleted task trains on to the step both workers back up at, which can end an epoch). That rest is no
    # loss (its steps are done once, from the preemption checkpoint), but it is in next_epoch_s, which
    # therefore grows with the epoch's length.
    old = [float(e["time"]) for e in epochs if e.get("attempt", 0) == attempt]
    last_old = max(old) if old else deleted_wall
    lost_s = next_s - max(last_old + epoch_s - deleted_wall, 0.0) \
        if next_s is not None and epoch_s is not None else None
    return {"deleted_after_epoch": d["after_epoch"], "warm_pods_waiting": d["warm"], "pod_gone_s": d["gone_s"],
            "next_epoch_s": next_s,
            "lost_s": lost_s, "resumed_at_epoch": resumed_at, "moments": moments}


def next_epoch(epochs: list[dict], deleted_wall: float, attempt: int) -> dict | None:
    """The first epoch the restarted cluster recorded after the deletion (its ``time`` is when the chief recorded
    it): not one of ``attempt``, the attempt deleted from, which may still end an epoch while its tasks stop."""
    return next((e for e in epochs if float(e.get("time", 0)) > deleted_wall and e.get("attempt", 0) != attempt),
                None)


def locality(conn, tmp: Path, settings: dict, cache: str) -> dict:
    from ignite_tf.cluster.api import make_launcher, start_cluster

    cluster_id = f"deployed-local-{os.getpid()}"
    launcher = make_launcher(conn, kind="kubernetes", kubernetes={**settings, "placement": "required"})
    job = {"entry_point": "ignite_tf.models:tabular_classifier",
           "args": ["--epochs", "1", "--batch-size", "32", "--label-column", "label"]}
    # The launcher's own plan: it names the Ignite node of each worker, which placement needs (a plan built
    # here from the partition map alone has none, so nothing could be placed or matched).
    start_cluster(cache, job, conn=conn, mode="sync", workers=2, max_restarts=0, cluster_id=cluster_id,
                  run_root=run_root(tmp, "kubernetes"), launcher=launcher, startup_deadline_s=600)
    state = wait_cluster(launcher, cluster_id, poll_s=0.5)
    # Planned: what the launcher printed once the pods were placed (wanted node == actual node, times the
    # plan's share); measured: the rows each worker's reader counted per serving Ignite node.
    found = re.search(r"([0-9.]+)% of rows read locally as planned", launcher.output(cluster_id)[0])
    planned = float(found.group(1)) / 100 if found else None
    recorded = state.summary()["locality"]
    measured = (state.measured_locality or {}).get("locality")
    return {"status": state.status.value, "planned_locality": planned, "measured_locality": measured,
            "recorded": recorded}


def run(args, say) -> dict:
    out: dict = {"rows": args.rows, "shape": "host network" if args.host_network else "deployed"}
    with tempfile.TemporaryDirectory(prefix="k8s-deployed-bench-") as name:
        tmp = Path(name)
        with ignite(args.ignite, tmp / "ignite", say) as nodes, kubernetes(args.kubeconfig, say):
            conn = nodes.conn
            settings = pod_settings(args.namespace, args.host_network)
            try:
                out.update(measure(args, conn, tmp, settings, say))
            finally:
                clean_up(conn, settings, say)
    out["goals"] = GOALS
    return out


def measure(args, conn, tmp: Path, settings: dict, say) -> dict:
    from ignite_tf_dev.demo_data import tabular

    from ignite_tf.etl import load

    out, cache = {}, CACHE
    load(conn, cache, tabular(args.rows), key="id")
    parts = {"startup": lambda: startup(conn, tmp, settings, args.host_network, args.startup_repeat),
             "input": lambda: input_rates(conn, tmp, settings, args.input_rows, args.steps, args.repeat,
                                          args.input_warmup, args.short_steps),
             "resume": lambda: {f"standby {mode}": resume(conn, tmp, {**settings, "standby": mode == "on"},
                                                          args.epochs, cache, args.deletions) for mode in args.standby},
             "locality": lambda: locality(conn, tmp, settings, cache)}
    for part in args.parts:
        say(f"{part} ...")
        out[part] = parts[part]()
        say(f"  {out[part]}")
    return out


def clean_up(conn, settings: dict, say) -> None:
    """What a normal end leaves, whatever ended the run: no cluster of this run still running, none of their
    Kubernetes objects (waited for), none of the tables it loaded (the Ignite pods' data region is small). A
    part cut short stops its own cluster; one cut short while its cluster started is found here by the
    cluster's id, which carries this process's id, in the state store or, before its supervisor recorded a
    state, on its objects: a stop request makes that supervisor stop as it starts. Objects still there after
    ``CLEAN_UP_S`` (no supervisor came) are deleted through their root."""
    STARTUP_CACHE = k8s_startup.CACHE
    from startup_input import STEPS_CACHE

    from ignite_tf.cluster.api import make_launcher
    from ignite_tf.cluster.k8s import objects
    from ignite_tf.cluster.launcher import LauncherKind
    from ignite_tf.connection import sql

    # A SIGTERM from now on (or one waiting for a request to end) must not cut the clean-up short.
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, 0)
    ours = re.compile(rf"-{os.getpid()}(-|$)")
    namespace, core = settings["namespace"], core_v1()
    store = make_launcher(conn).store
    made = {(cm.metadata.labels or {}).get(objects.LABEL_CLUSTER, "") for cm in core.list_namespaced_config_map(
        namespace, label_selector=objects.LABEL_CLUSTER).items}
    clusters = sorted(c for c in {*store.ids(), *made} if ours.search(c))
    for cluster_id in clusters:
        state = store.get(cluster_id)
        if state is not None and state.status.final:
            continue
        say(f"stopping cluster {cluster_id} ...")
        try:
            if state is None:
                store.request_stop(cluster_id)
            else:
                kind = LauncherKind.parse((state.launcher or {}).get("kind"))
                make_launcher(conn, store=store, kind=kind,
                              kubernetes=settings if kind is LauncherKind.KUBERNETES else None).stop(cluster_id)
        except Exception as exc:  # noqa: BLE001 - its objects are deleted below all the same
            say(f"stopping {cluster_id} failed: {exc}")
    # A stopped cluster is recorded as such before its supervisor has seen all its objects gone.
    def remaining() -> dict[str, list[str]]:
        return {c: x for c in clusters if (x := objects.leftovers(core, namespace, c))}

    deadline = time.monotonic() + CLEAN_UP_S
    while (left := remaining()) and time.monotonic() < deadline:
        time.sleep(0.5)
    for cluster_id, what in left.items():
        say(f"{cluster_id}: still there after {CLEAN_UP_S:.0f}s ({', '.join(what)}): deleting its root")
        objects.delete_owner(core, namespace, cluster_id)
    client = conn.client()
    try:
        for table in (CACHE, STARTUP_CACHE, STEPS_CACHE):
            sql(client, f"DROP TABLE IF EXISTS {table.upper()}")
    finally:
        client.close()


def end_on_sigterm() -> list[int]:
    """SIGTERM (a timeout's, a kill) ends the bench the way Ctrl-C does, through its clean-up, not at once with
    its clusters left running; returns the signals got. It is raised (``SystemExit``) where the main thread is
    not inside a client's request (``IN_REQUEST``): a request cut midway leaves its connection out of step, and
    the clean-up's calls on it could hang; until then it is tried again every ``RETRY_S``. A second SIGTERM
    meanwhile is let pass (by a handler, not SIG_IGN, which the processes started by the clean-up would inherit)."""
    got: list[int] = []

    def in_request(frame) -> bool:
        while frame is not None:
            if any(part in frame.f_code.co_filename for part in IN_REQUEST):
                return True
            frame = frame.f_back
        return False

    def stop(signum, frame):
        if not got:
            got.append(signum)
            signal.signal(signal.SIGTERM, lambda *_: None)
        if in_request(frame):
            signal.signal(signal.SIGALRM, lambda _signum, later: stop(signum, later))
            signal.setitimer(signal.ITIMER_REAL, RETRY_S)
            return
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    return got


def _f(value, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def _cores(groups: dict) -> str:
    """``TF / Ignite (throttled)``: the CPU cores the input task's pod and the Ignite pods used."""
    tf, ignite = groups["tf"], groups["ignite"]
    return f"{tf['cores']:.2f} / {ignite['cores']:.2f} ({tf['nr_throttled'] + ignite['nr_throttled']})"


def table(r: dict) -> str:
    rows = [f"Kubernetes, {r['shape']} shape: {r['rows']:,} rows, 2 sync workers unless said", ""]
    s, i, res, loc = (r.get(part) for part in PARTS)
    if s or i or loc:
        rows += ["| measurement | value | goal |", "|---|---|---|"]
    if s:
        def steps(kind: str) -> str:
            each = k8s_startup.first_steps(s["runs"], kind)
            return f"{_f(statistics.median(each))} ({', '.join(_f(x) for x in each)})" if each else "-"

        rows += [
            f"| launch -> first step, local (s): median (each) | {steps('local')} | |",
            f"| launch -> first step, Kubernetes (s): median (each) | {steps('kubernetes')} | |",
            f"| first step, Kubernetes / local (medians; each round) | {_f(s['kubernetes_vs_local'])} "
            f"({', '.join(_f(x) for x in s.get('rounds', []))}) | <= {GOALS['kubernetes_vs_local']} |"]
    if i:
        rows += [
            f"| steps/s fed from Ignite pods (1 pod; {i['rows']:,} rows, {i['rows'] / 1024:.0f} a partition; "
            f"fits of {i.get('steps', '?')} steps) | {_f(i['steps_s_ignite'], '.0f')} | |",
            f"| steps/s fed from memory (same pod) | {_f(i['steps_s_memory'], '.0f')} | |",
            f"| Ignite / memory (median of rounds) | {_f(i['input_ratio'])} ({_f(i['input_ratio_median'])}) | "
            f">= {GOALS['input_ratio']} |"]
        if i.get("short"):
            sh = i["short"]
            rows += [f"| Ignite / memory, fits of {sh['steps']} steps (each reads its first block before its first "
                     f"step) | {_f(sh['input_ratio'])} ({_f(sh['input_ratio_median'])}) | |"]
        rows += [
            "| CPU cores, Ignite path: TF pod / Ignite pods (throttled periods) | "
            f"{_cores(i['pod_cpu']['ignite'])} | |",
            f"| CPU cores, memory path: TF pod / Ignite pods | {_cores(i['pod_cpu']['memory'])} | |"]
    if res:
        res = res if "epochs_asked" not in res else {"standby off": res}  # a result of before --standby
        modes = list(res)
        rows += ["", "Worker pod deleted (each column its own cluster, one after the other):", "",
                 "| measurement | " + " | ".join(modes) + " | goal |", "|---|" + "---|" * len(modes) + "---|"]

        def row(label: str, cell, goal: str = "") -> str:
            return f"| {label} | " + " | ".join(cell(res[m]) for m in modes) + f" | {goal} |"

        def each(key: str):
            def cell(x: dict) -> str:
                values = [d.get(key) for d in x.get("deletions", [])]
                return _f(x[key], ".1f") + (f" ({', '.join(_f(v, '.1f') for v in values)})" if len(values) > 1 else "")
            return cell

        rows += [
            row("deletions in the cluster", lambda x: str(len(x.get("deletions", [])) or 1)),
            row("worker pod deleted -> pod gone (s): median (each)", each("pod_gone_s")),
            row("epoch time, median (s)", lambda x: _f(x["epoch_s"], ".1f")),
            row("worker pod deleted -> next epoch (s): median (each)", each("next_epoch_s"),
                f"<= {GOALS['next_epoch_s']}"),
            row("of which the restart (next epoch - the interrupted epoch's rest) (s)", each("lost_s")),
            row("deleted after epoch / resumed at epoch", lambda x: ", ".join(
                f"{d['deleted_after_epoch']} / {d['resumed_at_epoch']}" for d in x.get("deletions", [x]))),
            row("epochs asked / epochs run (restarts)",
                lambda x: f"{x['epochs_asked']} / {x['epochs_run']} ({x['restarts']})", "equal"),
            row("load average (1 min) after", lambda x: _f(x.get("load"), ".1f"))]
    if loc:
        rows += [
            f"| rows read locally, planned (placement: required) | {_f(loc['planned_locality'], '.1%')} | |",
            f"| rows read locally, measured | {_f(loc['measured_locality'], '.1%')} | >= "
            f"{GOALS['measured_locality']:.0%} |"]
    if s:
        rows += ["", "Start-up, where the time goes:", "", k8s_startup.moments_table(s["runs"])]
    if res:
        names = sorted({n for x in res.values() for n in x.get("moments", {})},
                       key=lambda n: min(x.get("moments", {}).get(n, 1e9) for x in res.values()))
        rows += ["", "Worker pod deleted, where the time goes (s from the first deletion, the new attempt's moments up "
                 "to its first epoch record):", "",
                 "| moment | " + " | ".join(res) + " |", "|---|" + "---|" * len(res)]
        rows += [f"| {n} | " + " | ".join(_f(x.get("moments", {}).get(n)) for x in res.values()) + " |"
                 for n in names]
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    add_k8s_arguments(parser)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--deletions", type=int, default=3,
                        help="worker pods deleted in each resume part's cluster (each after the restarted attempt "
                             f"recorded {EPOCHS_BETWEEN} epochs)")
    parser.add_argument("--startup-repeat", type=int, default=3,
                        help="rounds of the startup part (a local launch, then a Kubernetes one)")
    parser.add_argument("--steps", type=int,
                        help="steps of each timed fit of the input part (default: one pass over its table)")
    parser.add_argument("--short-steps", type=int, default=300,
                        help="the input part again with fits of this many steps (0: not)")
    parser.add_argument("--repeat", type=int, default=3, help="timed fits of each input path")
    parser.add_argument("--input-rows", type=int, default=512_000,
                        help="rows of the input part's table (default 512,000: 500 a partition, as bench/startup.py)")
    parser.add_argument("--input-warmup", type=int, default=10,
                        help="untimed reads of that table first, so the Ignite pods run their scan code compiled")
    parser.add_argument("--parts", type=lambda text: [p for p in text.split(",") if p], default=list(PARTS),
                        help=f"which measurements, comma-separated (default all: {','.join(PARTS)})")
    parser.add_argument("--standby", type=lambda text: [m for m in text.split(",") if m], default=["off", "on"],
                        help="the resume part once for each of these kubernetes.standby values (off, on)")
    args = parser.parse_args(argv)
    terminated = end_on_sigterm()
    if args.smoke:
        args.rows, args.epochs, args.steps, args.repeat, args.input_rows, args.input_warmup = 2_000, 4, 5, 1, 2_000, 1
        args.short_steps, args.startup_repeat, args.deletions = 3, 1, 1
    try:
        result = run(args, say_to_stderr(args.json and not args.smoke))
    except BaseException as exc:
        if not terminated:
            raise
        if not isinstance(exc, SystemExit):  # met on the way out: said, but the exit is the signal's
            traceback.print_exc()
        return 128 + terminated[0]
    report(args, table(result), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
