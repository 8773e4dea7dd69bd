"""Data-aware retraining and OpenLineage through the real Airflow services (API server, scheduler with
LocalExecutor, DAG processor, triggerer; the session's ``airflow_services``), on the session Ignite cluster and
real TF processes. Nothing here is simulated:

- a producer DAG's ``IgniteLoadOperator`` loads new rows (a CSV file) into a table; its Asset event makes the
  scheduler start the YAML pipeline that says ``schedule: {table: ...}``; that run trains (one worker, one
  epoch, a few hundred rows) and publishes a model whose metadata counts the new rows;
- Airflow's openlineage provider, with its real file transport (``tests/support/airflow_services.py``), writes
  each task's events; they name the CSV and the Ignite table as the load's input and output, the table with the
  validation result as the gate's input, the table as the training's input, and the model version as the
  publish task's output.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from tests.support.airflow_services import add_spec, wait_parsed
from tests.support.polling import wait_for

PRODUCER, RETRAIN = "ignite_tf_test_lineage_load", "ignite_tf_test_lineage_retrain"
SEED_ROWS, NEW_ROWS = 300, 60
BUSY = (OSError,)  # a REST call timing out on a loaded machine means "not yet" while polling

SUITE = """\
name: lineage
row_count: {min: 100, max: 100000}
unique: [id]
columns:
  f0: {type: float32, not_null: true, between: [-10, 10], mostly: 0.999}
  label: {type: int32, not_null: true, in_set: [0, 1, 2]}
"""

SPEC = """\
dag_id: {dag_id}
cache: {cache}
schedule: {{table: {cache}}}
source:
  generator: ignite_tf_dev.demo_data:tabular
  rows: {rows}
key: id
suite: ../expectations/{suite}
training:
  workers: 1
  entry_point: ignite_tf.models:tabular_classifier
  epochs: 1
  batch_size: 32
  label_column: label
  startup_deadline_s: 180
  deferrable: false             # one epoch: waiting in the worker is quicker than the triggerer's hand-over
publish:
  model: {model}
"""

PRODUCER_DAG = """
from airflow.sdk import DAG
from ignite_tf.operators.ignite import IgniteLoadOperator

with DAG({dag_id!r}, schedule=None):
    IgniteLoadOperator(task_id="load_new_rows", cache={cache!r}, source={csv!r}, key="id", schema={schema!r})
"""


def events(folder: Path) -> list[dict]:
    out = []
    for path in folder.glob("event-*.json"):
        try:
            out.append(json.loads(path.read_text()))
        except ValueError:  # being written
            continue
    return out


def event(found: list[dict], job: str, kind: str) -> dict | None:
    return next((e for e in found if e["job"]["name"] == job and e["eventType"] == kind), None)


def dataset(datasets: list[dict], namespace: str, name: str) -> dict:
    match = [d for d in datasets if d["namespace"] == namespace and d["name"] == name]
    assert len(match) == 1, (namespace, name, datasets)
    return match[0]


def test_new_rows_start_the_retraining_run_and_every_stage_reports_its_lineage(airflow_services, ignite_conn):
    from ignite_tf_dev.demo_data import tabular

    svc, root = airflow_services
    tag = uuid.uuid4().hex[:8]
    cache, model, suite = f"lineage_{tag}", f"lineage_{tag}", f"lineage_{tag}.yaml"
    new_rows = tabular(NEW_ROWS, seed=7, start_id=100_000)
    csv = root / f"new_rows_{tag}.csv"
    new_rows.to_csv(csv, index=False)
    schema = {c: ("int64" if c == "id" else "int32" if c == "label" else "float32") for c in new_rows.columns}
    (root / "dags" / "expectations" / suite).write_text(SUITE)
    add_spec(root, f"lineage_{tag}.yaml", SPEC.format(dag_id=RETRAIN, cache=cache, rows=SEED_ROWS, suite=suite,
                                                   model=model))
    (root / "dags" / f"lineage_producer_{tag}.py").write_text(
        PRODUCER_DAG.format(dag_id=PRODUCER, cache=cache, csv=str(csv), schema=schema))
    try:
        for dag_id in (RETRAIN, PRODUCER):
            wait_parsed(svc, dag_id)
            svc.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        produced = svc.request("POST", f"/api/v2/dags/{PRODUCER}/dagRuns", {"logical_date": None})["dag_run_id"]

        def retrain_run():
            runs = svc.request("GET", f"/api/v2/dags/{RETRAIN}/dagRuns")["dag_runs"]
            done = [r for r in runs if r["state"] in ("success", "failed")]
            return done[0] if done else None

        run = wait_for(retrain_run, timeout=900, poll=3, errors=BUSY, what=f"a finished run of {RETRAIN}",
                       seen=lambda: svc.log("scheduler").read_text()[-3000:])
        base = f"/api/v2/dags/{RETRAIN}/dagRuns/{run['dag_run_id']}"
        listed = svc.request("GET", f"{base}/taskInstances")["task_instances"]
        tis = {t["task_id"]: t["state"] for t in listed}
        print("retraining run", run["queued_at"], run["start_date"], run["end_date"])  # where the time goes
        for t in sorted(listed, key=lambda t: t["start_date"] or ""):
            print(t["task_id"], t["map_index"], t["queued_when"], t["start_date"], t["end_date"], t["duration"])
        assert run["state"] == "success", tis
        assert run["run_type"] == "asset_triggered", run
        producer_state = svc.request("GET", f"/api/v2/dags/{PRODUCER}/dagRuns/{produced}")["state"]
        assert producer_state == "success"

        # The run trained on the table with the new rows, and published the model.
        published = svc.request("GET", f"{base}/taskInstances/publish/xcomEntries/return_value?deserialize=true")
        published = published["value"]
        metadata = json.loads((Path(published["path"]) / "metadata.json").read_text())
        assert metadata["data"]["rows"] == SEED_ROWS + NEW_ROWS, metadata["data"]
        # Its own load re-wrote the seed rows without updating the table's Asset: one run, not a loop.
        runs = svc.request("GET", f"/api/v2/dags/{RETRAIN}/dagRuns")["dag_runs"]
        assert len(runs) == 1, [(r["run_type"], r["state"]) for r in runs]

        host, port = ignite_conn.addresses[0]
        table = (f"ignite://{host}:{port}", cache)
        wanted = [(f"{PRODUCER}.load_new_rows", "COMPLETE"), (f"{RETRAIN}.validation_gate", "COMPLETE"),
                  (f"{RETRAIN}.train", "START"), (f"{RETRAIN}.publish", "COMPLETE")]
        found = wait_for(lambda: (lambda f: f if all(event(f, *w) for w in wanted) else None)(
            events(root / "openlineage")), timeout=120, what=f"OpenLineage events {wanted}",
            seen=lambda: sorted({(e["job"]["name"], e["eventType"]) for e in events(root / "openlineage")}))

        load = event(found, *wanted[0])
        assert dataset(load["inputs"], "file", str(csv))
        written = dataset(load["outputs"], *table)
        assert written["outputFacets"]["outputStatistics"]["rowCount"] == NEW_ROWS
        assert {f["name"]: f["type"] for f in written["facets"]["schema"]["fields"]} == schema

        gate = dataset(event(found, *wanted[1])["inputs"], *table)
        assertions = gate["facets"]["dataQualityAssertions"]["assertions"]
        checked = {(a["assertion"], a.get("column")) for a in assertions}
        assert ("expect_column_values_to_be_between", "f0") in checked, checked
        assert all(a["success"] for a in assertions), assertions
        assert gate["inputFacets"]["dataQualityMetrics"]["rowCount"] == SEED_ROWS + NEW_ROWS

        assert dataset(event(found, *wanted[2])["inputs"], *table)

        publish = event(found, *wanted[3])
        assert dataset(publish["inputs"], *table)["facets"]["dataQualityAssertions"]["assertions"] == assertions
        version = dataset(publish["outputs"], "file", published["path"])
        assert version["facets"]["version"]["datasetVersion"] == published["version"]
    finally:
        client = ignite_conn.client()
        try:
            if cache in client.get_cache_names():
                client.get_cache(cache).destroy()
        finally:
            client.close()
