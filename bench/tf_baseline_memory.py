"""TensorFlow's baseline memory: the peak of a real task process before its data and model grow, measured.

    .venv/bin/python bench/tf_baseline_memory.py [--json] [--smoke] [--samples N] [--write]

Starts N (default 3) task processes one after another (``--task``: this file), each doing what a task of
``python -m ignite_tf.runtime`` does before its data and model matter: import TensorFlow and tf_keras the
runtime's way (``ignite_tf.runtime.start.import_tf``), the reader (``ignite_tf.data``, pyignite), create a
MultiWorkerMirroredStrategy from a one-worker ``TF_CONFIG`` (its gRPC server and collectives), build the
built-in ``tabular_classifier`` (16 features, 2 classes: 1,666 parameters, Adam) in its scope and ``fit`` it
20 steps of batch 64 from memory. Each process reports its own peak:

  cgroup_peak_mib  ``memory.peak`` of its cgroup (v2), when it runs alone in one (a container: what the
                   kubelet's limit counts, page cache included);
  rss_peak_mib     else its peak resident set (``VmHWM`` of ``/proc/self/status``).

The baseline is the largest sample. ``--write`` records it with its provenance (UTC date, TensorFlow and
tf_keras versions, Python, how measured, the samples) in ``ignite_tf/resources/tf_baseline.json``, which
``ignite_tf.cluster.k8s.memory`` reads. ``--smoke``: one sample, nothing written (see ``bench/harness.py``).
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

TASK_STEPS = 20
TASK_BATCH = 64


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


def task() -> int:
    """One task process (``--task``): prints one JSON line with its peaks."""
    from ignite_tf.ports import free_port
    from ignite_tf.runtime.start import import_tf

    t0 = time.perf_counter()
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{free_port()}"]},
                                          "task": {"type": "worker", "index": 0}})
    tf = import_tf()
    import numpy as np
    import pyignite  # noqa: F401 - the reader's client, imported by every task
    import tf_keras

    import ignite_tf.data  # noqa: F401
    from ignite_tf.models import tabular_classifier

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(TASK_STEPS * TASK_BATCH, 16)).astype("float32")
    y = rng.integers(0, 2, size=TASK_STEPS * TASK_BATCH)
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    data = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(TASK_BATCH).with_options(options)
    with strategy.scope():
        model = tabular_classifier(n_features=16, n_classes=2)
    model.fit(data, epochs=1, steps_per_epoch=TASK_STEPS, verbose=0)
    out = {"rss_peak_mib": round(rss_peak_mib(), 1), "cgroup_peak_mib": own_cgroup_peak_mib(),
           "params": int(model.count_params()), "seconds": round(time.perf_counter() - t0, 1),
           "tensorflow": tf.__version__, "tf_keras": tf_keras.__version__}
    print(json.dumps(out), flush=True)
    sys.stdout.flush()
    os._exit(0)  # as the runtime ends: TensorFlow's exit handlers wait on a shutdown barrier


def sample() -> dict:
    env = {**os.environ, **BENCH_ENV}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--task"], capture_output=True, text=True,
                          env=env, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"the task process exited {done.returncode}:\n{done.stderr[-3000:]}")
    data = json.loads(done.stdout.strip().splitlines()[-1])
    data["peak_mib"] = data["cgroup_peak_mib"] or data["rss_peak_mib"]
    data["measured_by"] = "cgroup memory.peak" if data["cgroup_peak_mib"] else "peak RSS (VmHWM)"
    return data


def baseline_file() -> Path:
    from importlib.resources import files

    from ignite_tf.cluster.k8s.memory import BASELINE_FILE

    return Path(str(files("ignite_tf").joinpath("resources", BASELINE_FILE)))


def record(samples: list[dict]) -> dict:
    peak = max(s["peak_mib"] for s in samples)
    return {
        "peak_mib": round(peak, 1),
        "measured": time.strftime("%Y-%m-%d", time.gmtime()),
        "tensorflow": samples[0]["tensorflow"],
        "how": (f"bench/tf_baseline_memory.py: the largest of {len(samples)} task processes (import_tf, "
                f"ignite_tf.data and pyignite, a one-worker MultiWorkerMirroredStrategy, tabular_classifier "
                f"fitted {TASK_STEPS} steps of batch {TASK_BATCH} from memory), each measured by "
                f"{samples[0]['measured_by']}"),
        "samples_mib": [round(s["peak_mib"], 1) for s in samples],
        "tf_keras": samples[0]["tf_keras"],
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
    }


def table(samples: list[dict], rec: dict, written: str | None) -> str:
    lines = ["TensorFlow's baseline: the peak of a task process before data and model grow", "",
             "| sample | peak (MiB) | measured by | seconds |", "|---|---|---|---|"]
    for i, s in enumerate(samples, 1):
        lines.append(f"| {i} | {s['peak_mib']:.1f} | {s['measured_by']} | {s['seconds']} |")
    lines += ["", f"baseline {rec['peak_mib']} MiB (TensorFlow {rec['tensorflow']}, {rec['measured']})"
              + (f", written to {written}" if written else " (not written: pass --write)")]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--write", action="store_true", help="record the baseline for the memory estimate")
    parser.add_argument("--task", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.task:
        return task()
    if args.smoke:
        args.samples, args.write = 1, False
    samples = [sample() for _ in range(max(1, args.samples))]
    rec = record(samples)
    written = None
    if args.write:
        path = baseline_file()
        path.write_text(json.dumps(rec, indent=2) + "\n")
        written = str(path)
    report(args, table(samples, rec, written), {**rec, "samples": samples})
    return 0


if __name__ == "__main__":
    sys.exit(main())
