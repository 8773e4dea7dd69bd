"""``make demo``: the whole pipeline on a fresh machine, as an Airflow DAG run.

1. starts 2 real Ignite nodes on free ports;
2. shows the data layer: loads the shipped synthetic tabular data, prints its PartitionMap and the
   partition reader's throughput;
3. runs the example pipeline DAG through Airflow (a real DAG run with ``dag.test()`` on a SQLite metadata
   DB under ``.airflow/``): load -> partitions -> shard plan -> validate per shard -> gate -> train (sync
   SGD, 2 workers, deferred) -> publish;
4. prints the published model's path and metrics, the validation summary, the time of each stage, the
   held-out evaluation and what the blessing gate compared; when no production version was there to compare
   with, runs the DAG once more, so the new model is judged against the one just published on the same
   held-out rows (champion/challenger);
5. stops everything it started, also on error.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from ignite_tf.defaults import ENV_REGISTRY_ROOT
from ignite_tf_dev import SOURCE_TREE

REPO = SOURCE_TREE
DEFAULT_DAG = "ignite_tf_tabular_sync"
FALLBACK_DAG = "ignite_tf_tabular_handwritten"


def airflow_env(conn, home: Path, dags: Path) -> None:
    """Point Airflow at this project's DAGs and the demo cluster (before airflow is imported)."""
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(dags)
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    os.environ.setdefault("AIRFLOW__LOGGING__LOGGING_LEVEL", "WARNING")  # the demo prints its own summary
    os.environ["AIRFLOW_CONN_IGNITE_DEFAULT"] = json.dumps({"conn_type": "ignite", "host": conn.addresses_str})
    # Run folders (validation results, checkpoints, TF logs) stay next to the registry, so the paths the
    # demo prints still exist after it ends.
    os.environ["IGNITE_TF_RUN_ROOT"] = str(home / "runs")
    os.environ.setdefault(ENV_REGISTRY_ROOT, str(home / "registry"))  # kept: the next demo's gate compares
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def migrate(home: Path) -> None:
    import subprocess

    marker = home / ".migrated"
    if not marker.exists():
        airflow = Path(sys.executable).with_name("airflow")
        subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True)
        marker.write_text("ok")


def data_layer(conn, rows: int) -> dict[str, float]:
    from ignite_tf.etl import load
    from ignite_tf.plan.partitions import PartitionMap
    from ignite_tf.reader.partition import PartitionReader
    from ignite_tf_dev import demo_data

    t = time.monotonic()
    report = load(conn, "demo_tabular", demo_data.tabular(rows, seed=0), key="id")
    load_s = time.monotonic() - t
    print(f"ETL load: {report.rows_written} rows into cache 'demo_tabular' in {load_s:.1f}s")
    pm = PartitionMap.discover(conn, "demo_tabular")
    print(pm.summary())
    t = time.monotonic()
    read = 0
    with PartitionReader(conn, "demo_tabular", batch_size=1024, page_size=1024) as reader:
        for batch in reader.batches(range(pm.partitions)):
            read += len(batch[reader.key_column])
    seconds = time.monotonic() - t
    print(f"reader: {read} rows in {seconds:.2f}s = {read / seconds:,.0f} rows/s (NumPy batches of 1024, "
          f"each partition scanned on its primary node)")
    return {"ETL load (data layer)": load_s, "read all partitions": seconds}


def load_dag(dag_id: str, dags: Path):
    """Parse the DAG folder ``dags`` and return the DAG ``dag_id`` (exits naming what was found if absent)."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(dags))
    if dag_id not in bag.dags:
        raise SystemExit(f"DAG {dag_id} not found in {dags} (found: {', '.join(sorted(bag.dags))}; "
                         f"import errors: {bag.import_errors})")
    return bag.dags[dag_id]


def run_dag(dag_id: str, dags: Path, conf: dict) -> tuple[object, object]:
    import warnings

    dag = load_dag(dag_id, dags)
    with warnings.catch_warnings():
        # dag.test() talks to its in-process Execution API through Starlette's test client, which warns
        # about its own httpx use: nothing a demo user can act on.
        warnings.filterwarnings("ignore", message=".*httpx.*")
        return dag, dag.test(run_conf=conf)


def stage_times(run) -> dict[str, float]:
    """Seconds each task of a finished DAG run took, mapped task instances summed, in the order they started.

    :param run: the DagRun that ``dag.test()`` returned.
    """
    stages: dict[str, float] = {}
    for ti in sorted(run.get_task_instances(), key=lambda t: (t.start_date or run.start_date, t.map_index)):
        if ti.start_date and ti.end_date:
            stages[ti.task_id] = stages.get(ti.task_id, 0.0) + (ti.end_date - ti.start_date).total_seconds()
    return stages


def task_results(dag, run) -> dict[str, object]:
    """The return values (XCom) of the run's unmapped tasks, by task id.

    :param dag: the DAG that ran; ``run``: its DagRun.
    """
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel).filter(XComModel.dag_id == dag.dag_id, XComModel.run_id == run.run_id,
                                               XComModel.key == "return_value").all()
        return {r.task_id: XComModel.deserialize_value(r) for r in rows if r.map_index < 0}


def gate_line(publish: dict) -> str:
    """What the blessing gate compared, from the published version's metadata.json."""
    try:
        gate = json.loads((Path(publish["path"]) / "metadata.json").read_text())["gate"]
    except (OSError, KeyError, TypeError, ValueError):
        return "gate: -"
    compared = "; ".join(f"{k} {c['new']:.4f} vs production {c['production']:.4f}"
                         + (" (worse)" if c["worse"] else "") for k, c in sorted(gate["comparisons"].items()))
    against = f"against production {gate['compared_to']}: {compared}" if compared else "no production to compare with"
    why = "; ".join([*gate["reasons"], *gate.get("notes", [])])
    return (f"gate on {gate.get('on', 'training')} metrics, {against} -> "
            f"{'blessed' if gate['blessed'] else 'not blessed'}" + (f" ({why})" if why else ""))


def report(dag, run) -> int:
    tis = run.get_task_instances()
    print(f"\nDAG run {run.run_id} of {dag.dag_id}: {run.state}")
    stages = stage_times(run)
    print("stage times: " + ", ".join(f"{k} {v:.1f}s" for k, v in stages.items()))
    values = task_results(dag, run)
    gate = next((v for k, v in values.items() if "gate" in k), None)
    if gate:
        print(f"validation: {'passed' if gate.get('passed') else 'FAILED'}; rows checked per shard "
              f"{gate.get('rows_per_shard') or gate.get('shards')}; results in {gate.get('files', {}).get('json')}")
    train = next((v for k, v in values.items() if k.startswith("train")), None)
    if train:
        print(f"training: cluster {train.get('cluster_id')} {train.get('status')} after {train.get('epochs')} "
              f"epochs, {train.get('restarts')} restart(s); final metrics {train.get('metrics')}")
    if train and train.get("evaluation"):
        from ignite_tf.evaluation.heldout import describe

        print(describe(train["evaluation"]))
    publish = next((v for k, v in values.items() if k.startswith("publish")), None)
    if publish:
        print(f"published model: {publish.get('path')} ({publish.get('model')} {publish.get('version')}, "
              f"{publish.get('status')})")
        print(gate_line(publish))
    failed = [ti.task_id for ti in tis if ti.state != "success"]
    if run.state != "success":
        print(f"failed tasks: {failed}", file=sys.stderr)
        return 1
    return 0


def compared(dag, run) -> bool:
    """Whether this run's held-out evaluation had a production version to compare with."""
    train = next((v for k, v in task_results(dag, run).items() if k.startswith("train")), None) or {}
    return bool(((train.get("evaluation") or {}).get("production") or {}).get("version"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ignite_tf_dev.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000, help="rows for the data-layer part (default 100000)")
    parser.add_argument("--dag", default=None, help=f"DAG to run (default {DEFAULT_DAG})")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--skip-dag", action="store_true", help="only the data layer")
    args = parser.parse_args(argv)

    from ignite_tf_dev.ignite.cluster import LocalIgniteCluster

    started = time.monotonic()
    state = Path(tempfile.mkdtemp(prefix="ignite-tf-demo-"))
    cluster = LocalIgniteCluster.on_free_ports(state, "demo", region_mb=768, die_with_parent=True)
    home = REPO / ".airflow"
    home.mkdir(exist_ok=True)
    code = 1
    try:
        t = time.monotonic()
        cluster.up(2)
        print(f"Ignite: 2 server nodes at {', '.join(cluster.addresses)} (up in {time.monotonic() - t:.1f}s; "
              f"logs in {state / 'logs'})")
        conn = cluster.connection()
        data_layer(conn, args.rows)
        code = 0 if args.skip_dag else 1
        if not args.skip_dag:
            airflow_env(conn, home, REPO / "dags")
            migrate(home)
            dag_id = args.dag or DEFAULT_DAG
            if args.dag is None and not any((REPO / "dags" / "specs").glob("tabular_sync.y*ml")):
                dag_id = FALLBACK_DAG
            print(f"\nrunning DAG {dag_id} through Airflow (SQLite metadata DB in {home}) ...", flush=True)
            dag, run = run_dag(dag_id, REPO / "dags", {"epochs": args.epochs, "workers": 2})
            code = report(dag, run)
            if code == 0 and not compared(dag, run):
                # No production version was there to compare with: retrain once, and the gate compares the
                # new model with the one just published, on the same held-out rows.
                print(f"\nretraining: DAG {dag_id} again (champion/challenger on the held-out rows) ...", flush=True)
                dag, run = run_dag(dag_id, REPO / "dags", {"epochs": args.epochs, "workers": 2})
                code = report(dag, run)
    finally:
        cluster.down()
        if code == 0:  # the node logs and TF run folders are kept only when something failed
            shutil.rmtree(state, ignore_errors=True)
        else:
            print(f"Ignite logs and TF run folders kept in {state}", file=sys.stderr)
        print(f"all Ignite nodes stopped; demo took {time.monotonic() - started:.0f}s")
    return code


if __name__ == "__main__":
    sys.exit(main())
