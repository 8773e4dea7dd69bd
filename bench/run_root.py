"""Epoch time with the run in an object store beside the run in a local folder, in one table.

    .venv/bin/python bench/run_root.py [--json] [--smoke] [--ignite HOST:PORT,...] [--rows N] [--epochs E]
                                       [--repeat R] [--local-only]

Runs ``bench/end.py``'s training (``start_cluster()``, ``tabular_classifier``, sync SGD, 2 local workers, each
epoch's backup for resume written to the run root) R times with each run root, alternating which goes first:

  folder   a local folder;
  s3       ``s3://<bucket>/runs`` on an S3-compatible store: ``IGNITE_TF_RUN_ROOT`` when it is an ``s3://`` URL
           (``make k8s-up`` exports one, with the store's ``AWS_*`` variables), else a local s3proxy started
           here (``ignite_tf_dev.objstore``) and stopped at the end. The store's ``AWS_*`` variables reach the
           tasks by name, never by value. A run must leave its files in the bucket.

Reported per run root: the median epoch time (``epochs_s / epochs``, from the cluster state's epoch records),
start-up and after-the-last-epoch; ``s3_vs_folder`` is the ratio of the median epoch times (goal <= 1.05).
``--local-only``: the folder only. ``--smoke``: 1,000 rows, 1 epoch, 1 run each of 1 sync worker (see
``bench/harness.py``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))
from e2e import WORKERS  # noqa: E402
from end import CACHE, one_run  # noqa: E402
from harness import add_common_arguments, ignite, report, say_to_stderr, set_bench_env  # noqa: E402

set_bench_env()
BUCKET = "ignite-tf-bench"
GOAL = 1.05
STORE_ENV = ("AWS_ENDPOINT_URL", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION")


@contextmanager
def object_store(tmp: Path, say):
    """(the s3:// run root, an fsspec filesystem on it): the exported one, or a local s3proxy."""
    import fsspec

    given = os.environ.get("IGNITE_TF_RUN_ROOT", "")
    if given.startswith("s3://"):
        yield given.rstrip("/") + f"/run-root-bench-{os.getpid()}", fsspec.filesystem("s3")
        return
    from ignite_tf_dev import objstore

    from ignite_tf.runstore.credentials import environment

    say("starting a local S3 server (s3proxy) ...")
    store = objstore.start(tmp / "s3", buckets=[BUCKET])
    try:
        with environment(store.env()):
            yield f"s3://{BUCKET}/runs", fsspec.filesystem("s3", **store.storage_options())
    finally:
        objstore.stop(tmp / "s3", wipe=True)


def check_in_store(fs, root: str, result: dict) -> None:
    """The run must really be in the bucket (an ignite_tf without object-store run roots would write a
    local folder named ``s3:``)."""
    fs.invalidate_cache()
    found = [p for p in fs.find(root.removeprefix("s3://")) if not p.endswith("/")]
    if not found:
        raise RuntimeError(f"the run left no file under {root}: this ignite_tf does not keep runs in an object "
                           f"store (pass --local-only to measure the local folder alone)")
    result["files_in_store"] = len(found)


def run(args, say, workers: int = WORKERS) -> dict:
    from ignite_tf_dev.demo_data import tabular

    from ignite_tf.etl import load

    kinds = ["folder"] if args.local_only else ["folder", "s3"]
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    tmp = Path(tempfile.mkdtemp(prefix="run-root-bench-"))
    try:
        with ignite(args.ignite, tmp / "ignite", say, region_mb=768) as nodes:
            conn = nodes.conn
            load(conn, CACHE, tabular(args.rows), key="id")
            with object_store(tmp, say) if "s3" in kinds else _nothing() as (root, fs):
                index = 0
                for i in range(args.repeat):
                    for kind in kinds if i % 2 == 0 else kinds[::-1]:
                        say(f"run {i + 1}: {kind} ...")
                        result = one_run(conn, args.epochs, tmp, index, quiet=True,
                                         run_root=f"{root}/{kind}-{index}" if kind == "s3" else None,
                                         pass_env=list(STORE_ENV) if kind == "s3" else None, workers=workers)
                        if kind == "s3":
                            check_in_store(fs, f"{root}/{kind}-{index}", result)
                        result["epoch_s"] = result["epochs_s"] / args.epochs
                        runs[kind].append(result)
                        index += 1
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out: dict = {"rows": args.rows, "epochs": args.epochs, "workers": workers, "runs": runs}
    for kind, rs in runs.items():
        for key in ("epoch_s", "startup_s", "after_last_epoch_s"):
            out[f"{kind}_{key}"] = statistics.median(r[key] for r in rs)
    out["s3_vs_folder"] = out["s3_epoch_s"] / out["folder_epoch_s"] if "s3_epoch_s" in out else None
    return out


@contextmanager
def _nothing():
    yield None, None


def table(r: dict) -> str:
    w = r["workers"]
    lines = [f"Epoch time by run root: {r['rows']:,} rows, {r['epochs']} epochs, {w} sync worker{'s' * (w != 1)} "
             f"(local), {len(r['runs']['folder'])} run(s) each", "",
             "| run root | epoch (median s) | start-up (s) | after last epoch (s) | epoch / folder's |",
             "|---|---:|---:|---:|---:|"]
    for kind in r["runs"]:
        ratio = r[f"{kind}_epoch_s"] / r["folder_epoch_s"]
        lines.append(f"| {kind} | {r[f'{kind}_epoch_s']:.3f} | {r[f'{kind}_startup_s']:.2f} | "
                     f"{r[f'{kind}_after_last_epoch_s']:.2f} | {ratio:.3f} |")
    if r["s3_vs_folder"] is None:
        lines.append("\n(s3 not measured: --local-only)")
    else:
        lines.append(f"\ns3 / folder epoch time {r['s3_vs_folder']:.3f} (goal <= {GOAL})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_arguments(parser)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--local-only", action="store_true", help="the local folder only (no object store)")
    args = parser.parse_args(argv)
    workers = WORKERS
    if args.smoke:  # every part once: one run in each run root, a 1-worker sync cluster of 1 epoch
        args.rows, args.epochs, args.repeat, workers = 1_000, 1, 1, 1
    started = time.perf_counter()
    result = run(args, say_to_stderr(args.json and not args.smoke), workers)
    result["wall_s"] = round(time.perf_counter() - started, 1)
    report(args, table(result), result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
