"""Example (a) through real Airflow services, triggered through the REST API as a person or a CI job would.

The API server, scheduler (LocalExecutor), DAG processor and triggerer run as separate processes on their
own SQLite DB; the run's conf changes the number of epochs, and the training task must defer to the
triggerer while the TF cluster trains. Everything is stopped after, and the test checks that nothing is
left and that the Ignite password is in none of the services' logs.
"""

from __future__ import annotations

import json
import urllib.error

import pytest

from tests.support.airflow import SECRET
from tests.support.airflow_services import wait_parsed
from tests.support.polling import wait_for

DAG_ID = "ignite_tf_tabular_sync"


@pytest.fixture(scope="module")
def services(airflow_services):
    return airflow_services


def test_rest_triggered_run_with_conf_defers_training_to_the_triggerer(services):
    from ignite_tf.registry.publish import ModelRegistry
    from tests.support.clusters import assert_nothing_left

    svc, root = services
    dag = wait_parsed(svc, DAG_ID)
    assert dag["dag_id"] == DAG_ID
    svc.request("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
    runs_before = svc.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns")["total_entries"]

    # A conf that breaks a Param's bounds is refused by the API: no run is created, no cluster starts.
    with pytest.raises(urllib.error.HTTPError) as refused:
        svc.request("POST", f"/api/v2/dags/{DAG_ID}/dagRuns", {"logical_date": None, "conf": {"workers": 0}})
    assert refused.value.code == 400 and "workers" in refused.value.read().decode()

    run = svc.request("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                      {"logical_date": None, "conf": {"epochs": 2, "workers": 2}})
    run_id = run["dag_run_id"]
    assert run["conf"] == {"epochs": 2, "workers": 2}
    runs = svc.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns")
    assert runs["total_entries"] == runs_before + 1, "the refused conf must not have created a run"

    base = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}"
    train_states: list[str] = []

    def run_ended() -> str | None:
        state = svc.request("GET", base)["state"]
        ti = svc.request("GET", f"{base}/taskInstances/train")
        if not train_states or train_states[-1] != ti["state"]:
            train_states.append(ti["state"])
        return state if state in ("success", "failed") else None

    state = wait_for(run_ended, 480, "the DAG run to end", poll=1,
                     seen=lambda: f"train task states: {train_states}\n{svc.log('scheduler').read_text()[-3000:]}")
    tis = svc.request("GET", f"{base}/taskInstances")["task_instances"]
    summary = {(t["task_id"], t["map_index"]): t["state"] for t in tis}
    assert state == "success", (summary, svc.log("scheduler").read_text()[-3000:])
    assert "deferred" in train_states, train_states

    xcom = svc.request("GET", f"{base}/taskInstances/train/xcomEntries/return_value?deserialize=true")
    train = xcom["value"]
    assert train["status"] == "succeeded" and train["epochs"] == 2, train  # the conf's 2, not the spec's 3
    # The trigger ran in the triggerer process, which writes the task's trigger log: the chief's output and
    # the per-epoch metrics of this cluster, then the event that resumed the task.
    trigger_logs = list((svc.home / "logs").rglob(f"run_id={run_id}/task_id=train/attempt=1.log.trigger.*"))
    assert len(trigger_logs) == 1, list((svc.home / "logs").rglob("*"))
    events = [json.loads(line)["event"] for line in trigger_logs[0].read_text().splitlines() if line.strip()]
    assert any(f"cluster {train['cluster_id']} succeeded" in e for e in events), events
    assert any(e.startswith("epoch 2/2 loss=") for e in events), events
    assert "Trigger fired event" in events

    registry = ModelRegistry(root / "registry")
    publish = svc.request("GET", f"{base}/taskInstances/publish")
    assert publish["state"] == "success"
    assert registry.production("tabular_sync") == registry.versions("tabular_sync")[-1]
    assert registry.metadata("tabular_sync", registry.production("tabular_sync"))["params"]["epochs"] == "2"
    assert_nothing_left(train["cluster_id"], train["run_dir"])

    logs = [svc.log(s) for s in ("api-server", "scheduler", "dag-processor", "triggerer")]
    logs += list((svc.home / "logs").rglob("*"))
    leaked = [str(p) for p in logs if p.is_file() and SECRET in p.read_text(errors="replace")]
    assert not leaked, f"the Ignite password is in {leaked}"
