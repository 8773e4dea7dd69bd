"""TensorFlow's memory, measured: a real task process's peak at two model sizes (the baseline and the cost
of each parameter).

    .venv/bin/python bench/tf_baseline_memory.py [--json] [--smoke] [--samples N] [--write]

Starts task processes one after another (``--task HIDDEN``: this file), each doing what a task of ``python -m
ignite_tf.runtime`` does apart from reading Ignite: import TensorFlow and tf_keras the runtime's way
(``ignite_tf.runtime.start.import_tf``), the reader (``ignite_tf.data``, pyignite), create a
MultiWorkerMirroredStrategy of 2 workers (2 processes: gRPC servers, gradients all-reduced between them), build the
built-in ``tabular_classifier`` (16 features, 2 classes, Adam) in its scope, ``fit`` it 3 epochs of 150 steps
of batch 64 from memory with ``BackupAndRestore`` (the runtime's backup for resume) and save it as a
SavedModel (as the chief does). Each process reports its own peak; a sample is the larger of the two:

  cgroup_peak_mib  ``memory.peak`` of its cgroup (v2), when it runs alone in one (a container: what the
                   kubelet's limit counts, page cache included);
  rss_peak_mib     else its peak resident set (``VmHWM`` of ``/proc/self/status``).

N samples (default 3) of the small model (hidden=32, 1,666 parameters) give the baseline (the largest); one
of the large model (hidden=2,048, about 4.2 million parameters) gives the memory per parameter beyond it
(``param_bytes``: weights, gradients, Adam's 2 slots and what TensorFlow's kernels, collectives and
checkpoints add; it grows with the steps taken: 59 B at 90 steps, 72 B at 450 here, which is why the tasks
train 450 steps). ``--write`` records both with their provenance (UTC date, TensorFlow and tf_keras versions,
Python, how measured, the samples) in ``ignite_tf/resources/tf_baseline.json`` as its ``process_*`` keys: what a
process holds, TensorFlow's shared libraries included (about 330 MiB), i.e. about what the first pod on a fresh
node is charged. The estimate (``ignite_tf.cluster.k8s.memory``) uses the pods' own cgroup charge, which
``bench/k8s/memory.py --write-baseline`` measures and records in the same file. ``--smoke``: one sample of each, 1 epoch
of 10 steps, 1 task process a sample, the large model at hidden=512, nothing written (see ``bench/harness.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
from harness import BENCH_ENV, add_common_arguments, report  # noqa: E402

TASK_STEPS = 150
TASK_EPOCHS = 3
WORKERS = 2
TASK_BATCH = 64
SMALL, LARGE = 32, 2048  # hidden units of the two sizes


def own_cgroup_peak_mib() -> float | None:
    """``memory.peak`` of this process's cgroup v2, if this process is the only one in it."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    path = next((line[3:] for line in lines if line.startswith("0::")), None)
    if path is None:
        return None
    folder = Path("/sys/fs/cgroup") / path.lstrip("/")
    try:
        procs = {int(p) for p in (folder / "cgroup.procs").read_text().split()}
        peak = int((folder / "memory.peak").read_text())
    except (OSError, ValueError):
        return None
    return peak / 2**20 if procs <= {os.getpid()} else None


def rss_peak_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def task(hidden: int, steps: int = TASK_STEPS, epochs: int = TASK_EPOCHS) -> int:
    """One task process (``--task HIDDEN``): prints one JSON line with its peaks."""
    import tempfile

    from ignite_tf.runtime.start import import_tf

    t0 = time.perf_counter()
    tf = import_tf()
    import numpy as np
    import pyignite  # noqa: F401 - the reader's client, imported by every task
    import tf_keras

    import ignite_tf.data  # noqa: F401
    from ignite_tf.models import tabular_classifier

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(steps * TASK_BATCH, 16)).astype("float32")
    y = rng.integers(0, 2, size=steps * TASK_BATCH)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(TASK_BATCH).with_options(options)
    with strategy.scope():
        model = tabular_classifier(n_features=16, n_classes=2, hidden=hidden)
    with tempfile.TemporaryDirectory(prefix="tf-baseline-") as tmp:
        backup = tf_keras.callbacks.BackupAndRestore(str(Path(tmp) / "backup"), save_freq="epoch")
        model.fit(data, epochs=epochs, steps_per_epoch=steps, callbacks=[backup], verbose=0)
        model.save(str(Path(tmp) / "model"), save_format="tf")
    out = {"rss_peak_mib": round(rss_peak_mib(), 1), "cgroup_peak_mib": own_cgroup_peak_mib(), "steps": steps,
           "epochs": epochs,
           "params": int(model.count_params()), "seconds": round(time.perf_counter() - t0, 1),
           "tensorflow": tf.__version__, "tf_keras": tf_keras.__version__}
    print(json.dumps(out), flush=True)
    sys.stdout.flush()
    os._exit(0)  # as the runtime ends: TensorFlow's exit handlers wait on a shutdown barrier


def sample(hidden: int, steps: int = TASK_STEPS, epochs: int = TASK_EPOCHS, n_workers: int = WORKERS) -> dict:
    """A cluster of ``n_workers`` task processes (the collectives move gradients between processes, as in
    training); the larger of their peaks."""
    from ignite_tf.ports import free_port

    workers = [f"localhost:{free_port()}" for _ in range(n_workers)]
    procs = []
    for index in range(n_workers):
        config = json.dumps({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
        procs.append(subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--task", str(hidden),
                                       "--steps", str(steps), "--epochs", str(epochs)],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                      env={**os.environ, **BENCH_ENV, "TF_CONFIG": config}))
    found = []
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"a task process exited {proc.returncode}:\n{err[-3000:]}")
        found.append(json.loads(out.strip().splitlines()[-1]))
    data = max(found, key=lambda d: d["cgroup_peak_mib"] or d["rss_peak_mib"])
    data["peak_mib"] = data["cgroup_peak_mib"] or data["rss_peak_mib"]
    data["measured_by"] = "cgroup memory.peak" if data["cgroup_peak_mib"] else "peak RSS (VmHWM)"
    data["hidden"], data["workers"] = hidden, n_workers
    return data


def baseline_file() -> Path:
    from importlib.resources import files

    from ignite_tf.cluster.k8s.memory import BASELINE_FILE

    return Path(str(files("ignite_tf").joinpath("resources", BASELINE_FILE)))


def record(small: list[dict], large: dict) -> dict:
    peak = max(s["peak_mib"] for s in small)
    param_bytes = (large["peak_mib"] - peak) * 2**20 / (large["params"] - small[0]["params"])
    return {
        "peak_mib": round(peak, 1),
        "param_bytes": round(max(param_bytes, 16.0), 1),  # never under weights + gradients + Adam's slots
        "param_bytes_optimizer": "adam",
        "measured": time.strftime("%Y-%m-%d", time.gmtime()),
        "tensorflow": small[0]["tensorflow"],
        "how": (f"bench/tf_baseline_memory.py: task processes (import_tf, ignite_tf.data and pyignite, a "
                f"{small[0]['workers']}-worker MultiWorkerMirroredStrategy, tabular_classifier with Adam fitted "
                f"{small[0]['epochs']} epochs of {small[0]['steps']} steps of batch {TASK_BATCH} from memory with "
                "BackupAndRestore, saved as "
                f"a SavedModel), each measured by {small[0]['measured_by']}: peak_mib the largest of "
                f"{len(small)} with {small[0]['params']:,} parameters, param_bytes the growth per parameter "
                f"with {large['params']:,}"),
        "samples_mib": [round(s["peak_mib"], 1) for s in small],
        "large_mib": round(large["peak_mib"], 1),
        "large_params": large["params"],
        "tf_keras": small[0]["tf_keras"],
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }


def table(samples: list[dict], rec: dict, written: str | None) -> str:
    lines = ["TensorFlow's memory: the peak of a task process at two model sizes", "",
             "| sample | parameters | peak (MiB) | measured by | seconds |", "|---|---|---|---|---|"]
    for i, s in enumerate(samples, 1):
        lines.append(f"| {i} | {s['params']:,} | {s['peak_mib']:.1f} | {s['measured_by']} | {s['seconds']} |")
    lines += ["", f"baseline {rec['peak_mib']} MiB, {rec['param_bytes']} B per parameter (Adam) (TensorFlow "
                  f"{rec['tensorflow']}, {rec['measured']})"
              + (f", written to {written}" if written else " (not written: pass --write)")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="record the baseline for the memory estimate")
    parser.add_argument("--steps", type=int, default=TASK_STEPS, help="steps of each of the tasks' epochs")
    parser.add_argument("--epochs", type=int, default=TASK_EPOCHS, help="epochs of the tasks' fit")
    parser.add_argument("--task", type=int, metavar="HIDDEN", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.task:
        return task(args.task, args.steps, args.epochs)
    large_hidden, workers = LARGE, WORKERS
    if args.smoke:  # both sizes once (param_bytes needs the two), each one small process
        args.samples, args.write, large_hidden, args.steps, args.epochs, workers = 1, False, 512, 10, 1, 1
    small = [sample(SMALL, args.steps, args.epochs, workers) for _ in range(max(1, args.samples))]
    large = sample(large_hidden, args.steps, args.epochs, workers)
    samples = [*small, large]
    rec = record(small, large)
    written = None
    if args.write:
        # Beside the pods' figures (bench/k8s/memory.py --write-baseline), which the estimate uses: a process's
        # peak resident set also counts TensorFlow's shared libraries, which a pod's cgroup is charged for only
        # when it is the first on its node to read them (then as clean page cache, reclaimed at its limit).
        path = baseline_file()
        data = json.loads(path.read_text())
        data.update({f"process_{k}": rec[k] for k in ("peak_mib", "param_bytes", "measured", "how", "samples_mib",
                                                      "large_mib")})
        path.write_text(json.dumps(data, indent=2) + "\n")
        written = str(path) + " (process_* keys)"
    report(args, table(samples, rec, written), {**rec, "samples": samples})
    return 0


if __name__ == "__main__":
    sys.exit(main())
