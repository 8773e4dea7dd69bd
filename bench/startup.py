"""Start-up and input benchmark: time to the first training step, and whether training is input-bound.

    .venv/bin/python bench/startup.py [--json] [--smoke] [--ignite HOST:PORT,...] [--rows N] [--steps S]
                                      [--rounds R] [--input-only] [--profile] [--start-rounds N]
                                      [--read-ahead MODES] [--forkserver MODES]
                                      [--baseline DIR [--baseline-forkserver MODE]] [--epochs N]

Starts its own 2-node local Ignite cluster on free ports (stopped at the end, also on error; ``--ignite``: uses
a running one, whose nodes' CPU is then not measured) and measures:

  tf_import_s     a bare ``python -c "import tensorflow"`` subprocess (Keras 2 via TF_USE_LEGACY_KERAS=1,
                  no GPU), median of 3, with the Python bytecode cache the supervisor gives its tasks
                  (``ignite_tf.cluster.bytecode``), filled by one untimed import first: the floor under every
                  task's start-up, and what first_step_s is divided by; ``tf_import_cold_s``, the same import
                  as this environment runs it (here ``PYTHONDONTWRITEBYTECODE=1`` and no bytecode in the
                  virtual environment: TensorFlow's Python compiled at every import), is reported beside it;
  first_step_s    median over ``--start-rounds`` clusters (3) of the seconds from the ``start_cluster(...)``
                  call (discovery, shard plan, supervisor, tasks, MultiWorkerMirroredStrategy, dataset,
                  tracing) to the end of the chief's first training batch, for 1, 2 and 3 local sync
                  workers over a 6,000-row cache. The entry point
                  ``bench/startup_model.py:model`` adds a callback that writes the time of batch 0's end on
                  the chief; each cluster trains one short epoch (``--epochs N``: N of them, which the
                  tasks prepare before the first step) and must finish with nothing left running.
                  The chief's ``timing:`` lines (``ignite_tf.timeline``) split it: to the runtime's
                  start (discovery, plan, supervisor, Python; for a task forked from the fork server, also
                  the server's imports), TF imported, strategy ready (TF_CONFIG, gRPC
                  servers, every worker joined), fit started (plan, columns, model, dataset) and the first
                  step (tracing, the first read, the step). Variants run side by side, alternating which
                  goes first: ``--read-ahead`` and ``--forkserver`` modes (``IGNITE_TF_READ_AHEAD``,
                  ``IGNITE_TF_FORKSERVER``: ``off`` starts each task as a new process, as before the fork
                  server), and ``--baseline DIR``: clusters launched by a process that imports the
                  ``ignite_tf`` under DIR (an older commit's ``provider/``) for everything, from
                  ``start_cluster`` to the tasks (``--baseline-forkserver off`` for one from before the fork
                  server);
  bare_first_step_s  the same for a bare TensorFlow program (``bench/startup_bare.py``: the same model under
                  MultiWorkerMirroredStrategy, its rows in memory, no Ignite and no supervisor) launched as
                  as many local processes beside each cluster: first_step_s / bare_first_step_s is what
                  ignite-tf adds to a TensorFlow program's start;
  steps_s_ignite  steps/s of ``tabular_classifier`` trained in THIS process (no cluster) on batches of 256
                  from ``ignite_tf.data.dataset(..., stack=True, cache=...)`` (one worker, whole cache);
  steps_s_memory  the same model, steps and batch size on the same rows from a NumPy array through
                  ``tf.data.Dataset.from_tensor_slices(...).batch(256)``;
  input_ratio     steps_s_ignite / steps_s_memory (target >= 0.9: training is not input-bound).

Both step rates are the best (and the median) of R ``fit`` calls of S steps (R = 3 by default), interleaved,
after one untimed warm-up epoch per path; input_ratio is best over best, and its median is the median of the
rounds' ratios. Each Ignite dataset is built before its timer starts (``fit`` times opening the reader and
reading). A run's time ends with its last step (``on_train_end``), not when ``fit`` returns: deleting a
tf.data iterator with autotuning on waits for the tuner's next tick (1.3, 2.6, 5.1 ... s after the epoch
began; TF 2.21), which at random added up to 1.3 s to runs of either path; ``teardown_s`` reports it.
Before the step rates the Ignite nodes are warmed by ``--jvm-warmup`` untimed reads of the cache (default
25): a node in service runs its scan code JIT-compiled, a fresh one spends about 3x the CPU per row at first.
``--input-only`` skips the import and first-step parts.
The Ignite path pays a fixed cost per partition scanned (1024 partitions, every epoch) on top of a cost per
row, so the ratio depends on rows per partition: the default 512,000 rows is 500 a partition.
``--profile`` adds a third path (the same NumPy batches through ``from_generator``), a breakdown of the
Ignite data path without training, and the CPU each path burns (this process and the Ignite JVMs).
``--smoke``: every part once, small: one import of each kind (no untimed fill of the bytecode cache first; the
bare import timed for tf_import_s also stands for the one just before the cluster), one 1-worker cluster beside
one bare program, 512 rows (2 steps) for the step rates, 1 round, 1 warm-up read (see ``bench/harness.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))  # startup_input.py beside this file, however this script is started
from harness import BENCH_ENV, add_common_arguments, ignite, report, set_bench_env  # noqa: E402
from startup_input import BATCH, STEPS_CACHE, cpu_s, profile_data_path, step_rates, warm_nodes  # noqa: E402

set_bench_env()  # before anything imports TensorFlow

STARTUP_CACHE = "startup_bench"
ONE_CLUSTER = "--one-cluster"  # internal: one baseline cluster in a process importing the baseline's provider
ENV_BASELINE_CHILD = "IGNITE_TF_BENCH_BASELINE_CHILD"
STARTUP_ROWS = 6000
STARTUP_BATCH = 64
STARTUP_STEPS = 5
WORKER_COUNTS = (1, 2, 3)  # 2 cores: at most 3 TF workers
FIRST_STEP_TIMEOUT_S = 300.0
ENV_MARK = "IGNITE_TF_BENCH_FIRST_STEP"  # read by bench/startup_model.py
SPLIT = ("runtime_started", "tf_imported", "strategy_ready", "fit_start")  # the chief's timeline, in order


def say(msg: str, quiet: bool) -> None:
    if not quiet:
        print(msg, file=sys.stderr, flush=True)


# -- 1. bare TensorFlow import --------------------------------------------------------------------------------
def tf_import_s(repeat: int = 3, cached: bool = True, fill: bool = True,
                code: str = "import tensorflow") -> tuple[float, list[float], float]:
    """Median wall seconds of a bare import (``code``), the runs, and the median CPU seconds (user + sys) it
    burns.

    ``cached``: with the tasks' bytecode cache, filled by an untimed import first (``fill``)."""
    from ignite_tf.cluster.bytecode import with_bytecode_cache

    env = {**os.environ, **BENCH_ENV}
    if cached:
        env = with_bytecode_cache(env)
    if cached and fill:
        subprocess.run([sys.executable, "-c", code], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    times, cpu = [], []
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(times), times, statistics.median(cpu)


RUNTIME_IMPORTS = {"keras": "import tensorflow, tf_keras",
                   "runtime": "from ignite_tf.runtime.start import import_tf; import_tf()"}


def runtime_import_s(repeat: int = 5, fill: bool = True) -> dict:
    """What a task (or the fork server) imports: TensorFlow and tf_keras as plain imports against the
    runtime's ``import_tf`` (collector paused, pandas left out), alternating, ``repeat`` each; medians."""
    runs: dict[str, list[float]] = {name: [] for name in RUNTIME_IMPORTS}
    for i in range(repeat):
        for name, code in RUNTIME_IMPORTS.items() if i % 2 == 0 else reversed(RUNTIME_IMPORTS.items()):
            runs[name].append(tf_import_s(repeat=1, fill=fill and i == 0, code=code)[0])
    return {f"{name}_import_s": statistics.median(times) for name, times in runs.items()} | {"_import_runs": runs}


# -- 2. launch -> first step --------------------------------------------------------------------------------
def first_step(conn, workers: int, tmp: Path, provider: str | None = None, settings: dict | None = None,
               node_pids: tuple[int, ...] = (), epochs: int = 1) -> dict:
    """Launch a sync cluster of ``workers`` tasks, wait for its first step and its end; check nothing is left.
    ``provider``: launched by a process importing the ``ignite_tf`` under this folder (``--baseline``), and its
    tasks too; ``settings``: variables set for the cluster (``IGNITE_TF_READ_AHEAD`` from ``--read-ahead``,
    ``IGNITE_TF_FORKSERVER`` from ``--forkserver``); ``epochs``: the job's ``--epochs``, of
    ``STARTUP_STEPS`` steps each. The CPU-s the tasks, the fork server and the Ignite nodes
    (``node_pids``) spent until the first step are read once it is marked (``_cpu_use``)."""
    settings = settings or {}
    if provider and not os.environ.get(ENV_BASELINE_CHILD):
        return _first_step_in(provider, conn, workers, tmp, settings, node_pids, epochs)
    label = _label(settings)
    from ignite_tf_dev.ignite.cluster import pid_alive

    from ignite_tf.cluster.api import make_launcher, start_cluster
    from ignite_tf.state import LocalStateStore, Status

    root = tmp / f"w{workers}{'-baseline' if provider else ''}-{label or 'default'}".replace(" ", "-")
    mark = root / "first_step"
    root.mkdir(parents=True, exist_ok=True)
    launcher = make_launcher(conn, store=LocalStateStore(root / "state"))
    env = {**BENCH_ENV, ENV_MARK: str(mark),
           "PYTHONPATH": os.pathsep.join(filter(None, [provider, str(BENCH_DIR), os.environ.get("PYTHONPATH")])),
           **settings}
    job = {"entry_point": "startup_model:model",
           "args": ["--epochs", str(epochs), "--batch-size", str(STARTUP_BATCH), "--label-column", "label",
                    "--steps-per-epoch", str(STARTUP_STEPS)]}
    cluster_id = f"startup-bench-{workers}{'-b' if provider else ''}-{abs(hash(label)) % 10**6}-{os.getpid()}"
    state = None
    nodes_before = cpu_s(node_pids)
    t0_wall, t0 = time.time(), time.perf_counter()
    try:
        state = start_cluster(STARTUP_CACHE, job, conn=conn, mode="sync", workers=workers, max_restarts=0,
                              cluster_id=cluster_id, run_root=root / "runs", launcher=launcher, env=env)
        launched_s = time.perf_counter() - t0
        deadline = t0 + FIRST_STEP_TIMEOUT_S
        while not mark.exists():
            state = launcher.status(cluster_id)
            if state.status.final or time.perf_counter() > deadline:
                raise RuntimeError(f"{workers}-worker cluster: no first step ({state.status.value}: "
                                   f"{state.reason or 'timed out'}); chief log:\n{launcher.tail(cluster_id, 30)}")
            time.sleep(0.02)
        # The file can exist a moment before its content is written.
        while not (text := mark.read_text().strip()):
            time.sleep(0.01)
        cpu = _cpu_use(state.supervisor_pid, node_pids, nodes_before)
        first_s = float(text) - t0_wall
        state = launcher.wait(cluster_id, timeout=FIRST_STEP_TIMEOUT_S)
        if state.status is not Status.SUCCEEDED:
            raise RuntimeError(f"{workers}-worker cluster ended {state.status.value}: {state.reason}; chief log:\n"
                               f"{launcher.tail(cluster_id, 30)}")
        log = launcher.output(cluster_id)[0]
    finally:
        if state is not None and not launcher.status(cluster_id).status.final:
            launcher.stop(cluster_id, timeout=60)
        if state is not None:
            _reap(state.supervisor_pid)
    pids = [state.supervisor_pid, *(t.pid for t in state.tasks)]
    left = [p for p in pids if p and pid_alive(p)]
    if left:
        raise RuntimeError(f"{workers}-worker cluster {cluster_id} left processes running: {left}")
    up = re.search(r"all \d+ tasks up after ([0-9.]+)s", log)
    from ignite_tf.timeline import marks

    moments = marks(log)
    split, before = {}, t0_wall
    for name in (*SPLIT, "first_step"):
        at = float(text) if name == "first_step" else moments.get(name)
        if at is not None:
            split[name] = at - before
            before = at
    return {"workers": workers, "variant": label, "first_step_s": first_s, "launched_s": launched_s,
            "tasks_up_s": float(up.group(1)) if up else None, "total_s": time.perf_counter() - t0,
            "checked_pids": len(pids), "split": split, "cpu": cpu}


def _cpu_use(supervisor: int, node_pids, nodes_before: float) -> dict:
    """CPU-s so far of the supervisor's runtime tasks and its fork server, and of the Ignite nodes since
    ``nodes_before`` was read."""
    import psutil

    tasks, server = [], 0.0
    for proc in psutil.Process(supervisor).children(recursive=True):
        try:
            spent = sum(proc.cpu_times()[:2])
            # The server is the supervisor's child; its forked tasks keep its command line.
            if proc.ppid() == supervisor and "ignite_tf.cluster.forkserver" in proc.cmdline():
                server += spent
            else:
                tasks.append(spent)
        except psutil.NoSuchProcess:
            continue
    return {"tasks": tasks, "server": server, "nodes": cpu_s(node_pids) - nodes_before}


def _first_step_in(provider: str, conn, workers: int, tmp: Path, settings: dict, node_pids=(), epochs: int = 1) -> dict:
    """``first_step`` in a new Python process that imports the ``ignite_tf`` under ``provider`` for everything
    (``start_cluster``, the launcher, the supervisor, the fork server, the tasks), so a baseline is timed with
    its own launch; it is told the Ignite connection through the environment."""
    env = {**os.environ, **conn.to_env(), ENV_BASELINE_CHILD: "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [provider, os.environ.get("PYTHONPATH")]))}
    args = json.dumps({"workers": workers, "tmp": str(tmp), "provider": provider, "settings": settings,
                       "node_pids": list(node_pids), "epochs": epochs})
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), ONE_CLUSTER, args], env=env,
                          capture_output=True, text=True, timeout=FIRST_STEP_TIMEOUT_S * 3)
    if done.returncode != 0:
        raise RuntimeError(f"the baseline's cluster ({provider}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _one_cluster(args: str) -> int:
    """The child's side of ``_first_step_in``."""
    from ignite_tf.connection import IgniteConnectionConfig

    a = json.loads(args)
    print(json.dumps(first_step(IgniteConnectionConfig.from_env(), a["workers"], Path(a["tmp"]), a["provider"],
                                a["settings"], tuple(a["node_pids"]), a["epochs"])))
    return 0


def bare_first_step(workers: int, tmp: Path) -> dict:
    """Launch ``bench/startup_bare.py`` (bare TensorFlow, MWMS, data in memory) as ``workers`` local processes
    and time launch -> the end of worker 0's first batch; every process is waited for, or killed."""
    from ignite_tf_dev.demo_data import N_CLASSES

    from ignite_tf.cluster.bytecode import with_bytecode_cache
    from ignite_tf.ports import free_port

    mark = tmp / f"bare-{workers}-{time.monotonic_ns()}"
    ports = [free_port() for _ in range(workers)]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    env = with_bytecode_cache({**os.environ, **BENCH_ENV})
    t0_wall = time.time()
    procs = [subprocess.Popen(
        [sys.executable, str(BENCH_DIR / "startup_bare.py"), str(STARTUP_ROWS), str(N_CLASSES), str(mark)],
        env={**env, "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True) for i in range(workers)]
    try:
        deadline = time.monotonic() + FIRST_STEP_TIMEOUT_S
        while not (mark.exists() and mark.read_text().strip()):
            if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in procs):
                raise RuntimeError(
                    f"bare TensorFlow program, {workers} worker(s): no first step; worker 0 said:\n"
                    f"{procs[0].communicate(timeout=5)[1][-3000:] if procs[0].poll() is not None else ''}")
            time.sleep(0.02)
        first_s = float(mark.read_text()) - t0_wall
        for p in procs:
            p.communicate(timeout=FIRST_STEP_TIMEOUT_S)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return {"workers": workers, "first_step_s": first_s}


def _reap(pid: int) -> None:
    # The supervisor is our child (detached session, but still our child): reap it so no zombie remains.
    if not pid:
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done:
            return
        time.sleep(0.05)


# -- orchestration -------------------------------------------------------------------------------------------
def run(rows: int, steps: int, quiet: bool, profile: bool, rounds: int = 3, startup: bool = True,
        jvm_warmup: int = 25, baseline: str | None = None, read_ahead: tuple[str, ...] = ("auto",),
        forkserver: tuple[str, ...] = ("auto",), start_rounds: int = 3, baseline_forkserver: str = "auto",
        epochs: int = 1, worker_counts: tuple[int, ...] = WORKER_COUNTS, import_repeat: int = 3,
        runtime_import_repeat: int = 5, fill: bool = True, adjacent_imports: bool = True,
        addresses: str | None = None) -> dict:
    from ignite_tf_dev.demo_data import tabular

    from ignite_tf.etl import load

    result: dict = {"_load_before": os.getloadavg()[0], "_starts": [], "_rounds": rounds,
                    "_start_rounds": start_rounds, "_epochs": epochs}
    if startup:
        cold, cold_times, cold_cpu = tf_import_s(repeat=import_repeat, cached=False)
        median, times, cpu = tf_import_s(repeat=import_repeat, fill=fill)
        result.update({"tf_import_s": median, "_tf_import_cpu_s": cpu, "_tf_import_runs": times,
                       "tf_import_cold_s": cold, "_tf_import_cold_cpu_s": cold_cpu, "_tf_import_cold_runs": cold_times})
        say(f"bare `import tensorflow`: {median:.2f}s, {cpu:.2f} CPU-s with the tasks' bytecode cache (runs: "
            f"{', '.join(f'{t:.2f}' for t in times)}); {cold:.2f}s, {cold_cpu:.2f} CPU-s without (runs: "
            f"{', '.join(f'{t:.2f}' for t in cold_times)})", quiet)
        result.update(runtime_import_s(repeat=runtime_import_repeat, fill=fill))
        say(f"tensorflow + tf_keras: {result['keras_import_s']:.2f}s as plain imports, "
            f"{result['runtime_import_s']:.2f}s through import_tf", quiet)
    with tempfile.TemporaryDirectory(prefix="startup-bench-") as tmp_name:
        tmp = Path(tmp_name)
        with ignite(addresses, tmp / "ignite", lambda msg: say(msg, quiet), heap_mb=512, region_mb=768) as nodes:
            conn, node_pids = nodes.conn, nodes.node_pids
            load(conn, STARTUP_CACHE, tabular(STARTUP_ROWS), key="id")
            frame = tabular(rows, seed=1)
            load(conn, STEPS_CACHE, frame, key="id")
            say(f"loaded {STARTUP_ROWS:,} rows into {STARTUP_CACHE}, {rows:,} into {STEPS_CACHE}", quiet)
            starts = []
            if startup and jvm_warmup:
                # As before the step rates: nodes in service run their scan and discovery code compiled.
                spent = warm_nodes(conn, jvm_warmup, node_pids, cache=STARTUP_CACHE,
                                   discover=True)
                result["_jvm_warmup_startup"] = spent
                say(f"warmed the Ignite nodes for start-up: {jvm_warmup} reads and discoveries of {STARTUP_CACHE}, "
                    f"nodes' CPU-s per pass {spent[0]:.2f} first, {spent[-1]:.2f} last", quiet)
            # Each variant (read-ahead and fork server modes), and the baseline, alternating which goes first,
            # start_rounds times over.
            variants = [(None, {"IGNITE_TF_READ_AHEAD": ra, "IGNITE_TF_FORKSERVER": fs})
                        for fs in forkserver for ra in read_ahead] + (
                [(baseline, {"IGNITE_TF_FORKSERVER": baseline_forkserver})] if baseline else [])
            for i, workers in enumerate([w for _ in range(start_rounds) for w in worker_counts] if startup else ()):
                for provider, settings in variants if i % 2 == 0 else variants[::-1]:
                    # A bare import right before each cluster too: the load of a shared machine drifts in minutes.
                    # Without adjacent_imports (--smoke) the bare import timed for tf_import_s, the same call,
                    # stands in.
                    adjacent = tf_import_s(repeat=1, fill=False)[0] if adjacent_imports else result["tf_import_s"]
                    # The bare TensorFlow program beside it, alternately before and after.
                    bare_first = len(starts) % 2 == 0
                    bare = bare_first_step(workers, tmp)["first_step_s"] if bare_first else None
                    start = first_step(conn, workers, tmp / f"round{i}", provider, settings,
                                       tuple(node_pids), epochs)
                    if bare is None:
                        bare = bare_first_step(workers, tmp)["first_step_s"]
                    starts.append({**start, "tf_import_adjacent_s": adjacent, "baseline": bool(provider),
                                   "bare_s": bare})
                    s = starts[-1]
                    say(f"{workers} worker(s){_variant(s)}: first step after {s['first_step_s']:.2f}s, the bare "
                        f"TF program's after {bare:.2f}s (start_cluster returned after {s['launched_s']:.2f}s, "
                        f"all tasks listening {s['tasks_up_s']}s later)", quiet)
            result["_starts"] = starts
            if jvm_warmup:
                spent = warm_nodes(conn, jvm_warmup, node_pids)
                result["_jvm_warmup"] = spent
                say(f"warmed the Ignite nodes: {jvm_warmup} reads of {STEPS_CACHE}, nodes' CPU-s per read "
                    f"{spent[0]:.2f} first, {spent[-1]:.2f} last", quiet)
            say(f"training in this process, batch {BATCH}, {steps} steps per run ...", quiet)
            result.update(step_rates(conn, frame, steps, node_pids=node_pids, quiet=quiet,
                                     profile=profile, repeat=rounds))
            if profile:
                result["_profile"] = profile_data_path(conn)
    groups = _groups([s for s in result["_starts"] if not s["baseline"]])
    result["first_step_s"] = {key: statistics.median(s["first_step_s"] for s in g) for key, g in groups.items()}
    result["bare_first_step_s"] = {key: statistics.median(s["bare_s"] for s in g) for key, g in groups.items()}
    result["input_ratio"] = result["steps_s_ignite"] / result["steps_s_memory"]
    result.update({"_rows": rows, "_steps": steps, "_load_after": os.getloadavg()[0]})
    return result


def _groups(starts: list[dict]) -> dict[str, list[dict]]:
    """The starts by worker count and variant, in the order they first ran."""
    groups: dict[str, list[dict]] = {}
    for s in starts:
        groups.setdefault(_key(s) + (" baseline" if s["baseline"] else ""), []).append(s)
    return groups


def _label(settings: dict) -> str:
    """What a variant sets other than the defaults: ``""``, ``"forkserver off"``, ``"read-ahead off, ..."``."""
    names = {"IGNITE_TF_READ_AHEAD": "read-ahead", "IGNITE_TF_FORKSERVER": "forkserver"}
    return ", ".join(f"{names[k]} {v}" for k, v in settings.items() if v not in (None, "auto"))


def _key(start: dict) -> str:
    """``"2"``, or ``"2 forkserver off"`` for a variant other than the defaults."""
    return f"{start['workers']} {start['variant']}".strip()


def _variant(start: dict) -> str:
    if start["baseline"]:
        return f" (baseline{', ' + start['variant'] if start['variant'] else ''})"
    return f" ({start['variant']})" if start["variant"] else ""


def table(r: dict) -> str:
    lines = [
        f"Start-up benchmark: {os.cpu_count()} cores (1-min load average {r['_load_before']:.1f} before, "
        f"{r['_load_after']:.1f} after), 2 local Ignite nodes",
    ]
    if r["_starts"]:
        lines += [
            "", f"Sync (MultiWorkerMirroredStrategy) workers on localhost, {STARTUP_ROWS:,}-row cache, "
            f"batch {STARTUP_BATCH}/worker, {r['_epochs']} epoch(s) of {STARTUP_STEPS} steps", "",
            "| sync workers | first step (s) | runs | / tf_import_s | / import just before "
            "| bare TF program (s) | / bare TF program | start_cluster returned (s) | "
            + " | ".join(f"-> {n}" for n in (*SPLIT, "first_step")) + " | CPU-s per task | fork server CPU-s "
            "| Ignite nodes CPU-s |",
            "|---|---:|---|---:|---:|---:|---:|---:|" + "---:|" * (len(SPLIT) + 4),
        ]
        for group in _groups(r["_starts"]).values():
            def med(f, group=group):
                return statistics.median(f(s) for s in group)
            first = [s["first_step_s"] for s in group]
            split = " | ".join(f"{med(lambda s, n=n: s['split'][n]):.2f}" if all(n in s["split"] for s in group)
                               else "-" for n in (*SPLIT, "first_step"))
            lines.append(
                f"| {group[0]['workers']}{_variant(group[0])} | {med(lambda s: s['first_step_s']):.2f} "
                f"| {', '.join(f'{x:.2f}' for x in first)} "
                f"| {med(lambda s: s['first_step_s']) / r['tf_import_s']:.2f}x "
                f"| {med(lambda s: s['first_step_s'] / s['tf_import_adjacent_s']):.2f}x "
                f"| {med(lambda s: s['bare_s']):.2f} | {med(lambda s: s['first_step_s'] / s['bare_s']):.2f}x "
                f"| {med(lambda s: s['launched_s']):.2f} | {split} "
                f"| {med(lambda s: statistics.mean(s['cpu']['tasks'] or [0])):.2f} "
                f"| {med(lambda s: s['cpu']['server']):.2f} | {med(lambda s: s['cpu']['nodes']):.2f} |")
        lines += [
            "",
            f"Medians of {r['_start_rounds']} rounds (runs: each round's first step)"
            + (f", the Ignite nodes warmed first by {len(r['_jvm_warmup_startup'])} untimed reads and discoveries "
               f"of the cache" if r.get("_jvm_warmup_startup") else "") + ". All times count from the "
            "start_cluster() call; '/ import just before' is the median of the ratios to one bare import (bytecode "
            "cache) timed right before each cluster; 'bare TF program' is bench/startup_bare.py launched as as many "
            "local processes (the same model under MultiWorkerMirroredStrategy, its rows in memory: no Ignite, "
            "no supervisor), launch to its first step, timed alternately before and after that cluster; the '-> name' "
            "columns are the seconds from the moment before "
            "to the chief's timeline mark (runtime_started: launch, supervisor, Python, and with the fork server "
            "its imports; tf_imported: the import, or nothing for a forked task; "
            "strategy_ready: TF_CONFIG, gRPC, all workers joined; fit_start: plan, columns, model, dataset; "
            "first_step: tracing, first read, the step). The CPU-s are read when the first step is marked: each "
            "runtime task's own (the mean of the cluster's tasks; a forked task's count from its fork), the fork "
            "server's (its imports and preload), and the Ignite nodes' since start_cluster() was called.",
            "",
            f"tf_import_s (bare `python -c \"import tensorflow\"` with the tasks' bytecode cache, median of "
            f"{len(r['_tf_import_runs'])}): "
            f"{r['tf_import_s']:.2f} ({r['_tf_import_cpu_s']:.1f} CPU-s each; runs "
            f"{', '.join(f'{t:.2f}' for t in r['_tf_import_runs'])}); tf_import_cold_s (as this environment "
            f"imports it, compiling): {r['tf_import_cold_s']:.2f} ({r['_tf_import_cold_cpu_s']:.1f} CPU-s; runs "
            f"{', '.join(f'{t:.2f}' for t in r['_tf_import_cold_runs'])})",
            "",
            f"What a task imports, TensorFlow and tf_keras, alternating, median of "
            f"{len(r['_import_runs']['keras'])}: {r['keras_import_s']:.2f}s as plain imports (runs "
            f"{', '.join(f'{t:.2f}' for t in r['_import_runs']['keras'])}), {r['runtime_import_s']:.2f}s through "
            f"ignite_tf.runtime.start.import_tf, collector paused and pandas left out (runs "
            f"{', '.join(f'{t:.2f}' for t in r['_import_runs']['runtime'])})",
        ]
    warm = r.get("_jvm_warmup")
    lines += [
        "",
        f"Input path: tabular_classifier trained in one process, batch {BATCH}, {r['_steps']} steps per run, "
        f"{r['_rows']:,} rows, {r['_rounds']} interleaved rounds after a warm-up epoch"
        + (f"; the Ignite nodes warmed first by {len(warm)} untimed reads of the cache (nodes' CPU-s per read: "
           f"{warm[0]:.2f} first, {warm[-1]:.2f} last)" if warm else "; Ignite nodes not warmed"),
        "",
        "| fed from | steps/s (best) | steps/s (median) | runs | rows/s (best) |",
        "|---|---:|---:|---:|---:|",
    ]
    names = {"ignite": "Ignite: ignite_tf.data.dataset(stack=True)", "memory": "memory: from_tensor_slices().batch()",
             "numpy_generator": "memory through from_generator (profile)"}
    for key, runs in r["_rates"].items():
        lines.append(f"| {names[key]} | {max(runs):.0f} | {statistics.median(runs):.0f} | "
                     f"{', '.join(f'{v:.0f}' for v in runs)} | {max(runs) * BATCH:,.0f} |")
    lines += ["", f"input_ratio = steps_s_ignite / steps_s_memory = {r['input_ratio']:.2f} best over best, "
              f"{r['input_ratio_median']:.2f} median of the rounds' ratios (target >= 0.9)", "",
              "teardown_s (fit's return after its last step: TF deleting the iterator), per run: "
              + "; ".join(f"{k} {', '.join(f'{v:.2f}' for v in vs)}" for k, vs in r["_teardown"].items())]
    if "_profile" in r:
        p = r["_profile"]
        lines += [
            "", f"Ignite data path alone (no training), best of 3, {r['_rows']:,} rows in {p['partitions']} partitions "
            f"({r['_rows'] / p['partitions']:.0f} rows per partition):", "",
            f"- PartitionReader: open {p['reader_open_s'] * 1e3:.0f} ms; reading (features stacked) "
            f"{p['reader_rows_s']:,.0f} rows/s = {p['reader_ms_per_partition']:.3f} ms per partition scanned",
            f"- ignite_tf.data.blocks (plan routes, shuffle): {p['blocks_rows_s']:,.0f} rows/s, "
            f"{p['blocks_cpu_us_per_row']:.2f} CPU-µs per row in this process",
            f"- ignite_tf.data.batches (columns, cut into NumPy batches): {p['batches_rows_s']:,.0f} rows/s",
            f"- ignite_tf.data.dataset(stack=True) iterated eagerly: {p['dataset_rows_s']:,.0f} rows/s "
            f"(building it with cache=: {p['dataset_build_s'] * 1e3:.0f} ms)",
            f"- the memory path trains at {r['steps_s_memory'] * BATCH:,.0f} rows/s",
            "",
            "CPU of each path's fastest training run (2 cores: 2 CPU-s per wall second at most):",
            "",
            "| fed from | wall s | this process CPU-s | Ignite nodes CPU-s | cores busy |",
            "|---|---:|---:|---:|---:|",
        ]
        for key, (wall, own, jvm) in r["_cpu"].items():
            lines.append(f"| {key} | {wall:.2f} | {own:.2f} | {jvm:.2f} | {(own + jvm) / wall:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == [ONE_CLUSTER]:
        return _one_cluster(argv[1])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser)
    parser.add_argument("--rows", type=int, default=512_000,
                        help="rows of the cache the step rates read (default 512,000: 500 a partition)")
    parser.add_argument("--steps", type=int, help=f"steps per timed run (default rows // {BATCH})")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timed runs per path (default 3)")
    parser.add_argument("--input-only", action="store_true",
                        help="skip the TensorFlow import and first-step parts: only the input path")
    parser.add_argument("--profile", action="store_true", help="also time each layer of the Ignite data path")
    parser.add_argument("--jvm-warmup", type=int, default=25, metavar="N",
                        help="untimed reads of the cache before the step rates, so the Ignite JVMs are "
                             "past JIT compilation as in service (default 25; 0: none)")
    parser.add_argument("--start-rounds", type=int, default=3,
                        help="clusters per worker count and variant; the table shows medians (default 3)")
    parser.add_argument("--read-ahead", default="auto", metavar="MODES",
                        help="IGNITE_TF_READ_AHEAD of the tasks, comma-separated: one cluster per mode and worker "
                             "count, alternating which goes first (default auto; e.g. off,process,thread)")
    parser.add_argument("--forkserver", default="auto", metavar="MODES",
                        help="IGNITE_TF_FORKSERVER of the clusters, comma-separated, side by side as --read-ahead "
                             "(default auto; auto,off: forked tasks against a new process per task)")
    parser.add_argument("--baseline", metavar="DIR",
                        help="also launch each cluster from a process importing the ignite_tf under DIR (e.g. an "
                             "older commit's provider/), alternating with this one's, for before/after in one run")
    parser.add_argument("--baseline-forkserver", default="auto", metavar="MODE",
                        help="IGNITE_TF_FORKSERVER of the baseline's clusters (default auto; off for a provider "
                             "from before the fork server, whose tasks were each a new process)")
    parser.add_argument("--epochs", type=int, default=1,
                        help="epochs of the start-up clusters' job, of 5 steps each (default 1): what a task "
                             "prepares before its first step for a job of many epochs")
    args = parser.parse_args(argv)
    # Every part once, and no untimed import to fill the bytecode cache first, nor one more before the cluster.
    smoke = {"worker_counts": (1,), "import_repeat": 1, "runtime_import_repeat": 1, "fill": False,
             "adjacent_imports": False} if args.smoke else {}
    if args.smoke:
        args.rows, args.steps, args.rounds, args.start_rounds, args.jvm_warmup = 2 * BATCH, None, 1, 1, 1
    from ignite_tf.cluster.forkserver import FORKSERVER_MODES
    from ignite_tf.runtime.start import READ_AHEAD_MODES

    bad = [m for m in args.read_ahead.split(",") if m.strip() and m.strip() not in READ_AHEAD_MODES]
    if bad:
        parser.error(f"--read-ahead {bad}: the modes are {', '.join(READ_AHEAD_MODES)}")
    bad = [m for m in args.forkserver.split(",") if m.strip() and m.strip() not in FORKSERVER_MODES]
    if bad:
        parser.error(f"--forkserver {bad}: the modes are {', '.join(FORKSERVER_MODES)}")
    steps = args.steps or args.rows // BATCH
    if steps < 1 or steps * BATCH > args.rows:
        parser.error(f"--steps {steps} x batch {BATCH} needs at least {steps * BATCH} rows (--rows {args.rows})")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.epochs < 1:
        parser.error("--epochs must be >= 1")
    # SIGTERM runs the finally blocks too (the nodes also die with this process: die_with_parent).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    result = run(args.rows, steps, quiet=args.json, profile=args.profile, rounds=args.rounds,
                 startup=not args.input_only, jvm_warmup=args.jvm_warmup, baseline=args.baseline,
                 read_ahead=tuple(m.strip() for m in args.read_ahead.split(",") if m.strip()),
                 forkserver=tuple(m.strip() for m in args.forkserver.split(",") if m.strip()),
                 start_rounds=args.start_rounds, baseline_forkserver=args.baseline_forkserver,
                 epochs=args.epochs, addresses=args.ignite, **smoke)
    keys = ("steps_s_ignite", "steps_s_memory", "input_ratio", "input_ratio_median")
    if not args.input_only:
        keys = ("tf_import_s", "tf_import_cold_s", "first_step_s", "bare_first_step_s", *keys)
    report(args, table(result), {k: result[k] for k in keys})
    return 0


if __name__ == "__main__":
    sys.exit(main())
