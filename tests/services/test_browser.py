"""The ignite-tf page and the trigger form in a real browser, on real Airflow services after a real training run.

The session's Airflow services (``airflow_services`` in conftest: API server with this project's plugins/,
scheduler, DAG processor, triggerer) are shared with tests/services/test_api_server.py; a successful run of the
sync example DAG is reused when that module made one, else triggered here. Screenshots go to the test's
temporary folder (the printed path).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from ignite_tf.ports import listening
from tests.support import polling
from tests.support.airflow import SECRET
from tests.support.airflow_services import free_ports, wait_parsed
from tests.ui.browser import chrome, click, login, wait_for

DAG_ID = "ignite_tf_tabular_sync"


@pytest.fixture(scope="module")
def trained(airflow_services):
    """A successful run of the sync example: (services, root, run id, the train task's result)."""
    svc, root = airflow_services
    wait_parsed(svc, DAG_ID)
    runs = svc.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns?state=success&order_by=-start_date")["dag_runs"]
    if runs:
        run_id = runs[0]["dag_run_id"]
    else:
        svc.request("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
        run_id = svc.request("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                             {"logical_date": None, "conf": {"epochs": 2}})["dag_run_id"]
        polling.wait_for(lambda: _run_state(svc, run_id) in ("success", "failed"), 480, "the training run to finish",
                         poll=2)
    base = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}"
    assert svc.request("GET", base)["state"] == "success", svc.log("scheduler").read_text()[-3000:]
    train = svc.request("GET", f"{base}/taskInstances/train/xcomEntries/return_value?deserialize=true")["value"]
    return svc, root, run_id, train


def _run_state(svc, run_id: str) -> str | None:
    try:
        return svc.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}")["state"]
    except (TimeoutError, urllib.error.URLError):  # an API server starved of CPU on a busy machine: ask again
        return None


def test_page_needs_an_airflow_login(trained):
    svc, *_ = trained
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{svc.base}/ignite-tf/", timeout=30)
    assert refused.value.code == 401
    plugins = svc.request("GET", "/api/v2/plugins")["plugins"]
    ours = next(p for p in plugins if p["name"] == "ignite_tf")
    assert [a["url_prefix"] for a in ours["fastapi_apps"]] == ["/ignite-tf"]
    assert ours["external_views"][0]["href"] == "/ignite-tf/"


def test_cluster_page_after_a_run_in_a_browser(trained, tmp_path):
    svc, root, run_id, train = trained
    cluster_id = train["cluster_id"]
    driver = chrome()
    try:
        login(driver, svc)
        driver.get(f"{svc.base}/ignite-tf/")
        section = wait_for(lambda: driver.find_elements("css selector", f'section[data-cluster="{cluster_id}"]'),
                           what=f"cluster {cluster_id} on the page", driver=driver)[0]
        text = section.text
        epochs = train["epochs"]
        assert f"epochs {epochs}/{epochs}" in text, text
        assert f"{DAG_ID} / {run_id} / train" in text and "succeeded" in text
        charts = section.find_elements("css selector", "svg.chart")
        titles = [c.get_attribute("aria-label") for c in charts]
        assert "loss" in titles and "accuracy" in titles and "examples/s" in titles, titles
        loss = section.find_element("css selector", 'svg.chart polyline[data-series="loss"]')
        assert len(loss.get_attribute("points").split()) == epochs
        assert loss.size["width"] > 50, "the loss curve must be drawn"
        assert "worker" in section.find_element("css selector", "table.plan").text
        assert "passed" in text and "tabular_sync" in text and "production" in text, text
        tensorboard = section.find_element("link text", "TensorBoard").get_attribute("href")
        assert cluster_id in tensorboard
        assert SECRET not in driver.page_source
        driver.save_screenshot(str(tmp_path / "ignite-tf-page.png"))
        # The navigation entry (Browse > TensorFlow clusters) opens the same page inside Airflow's UI.
        # A click while the menu is still opening can land on nothing: open it and click again, from the home
        # page, until the route changes (once, in a clean-clone run, a single try never got there).
        def through_the_menu() -> bool:
            driver.get(f"{svc.base}/")
            click(driver, "//button[normalize-space()='Browse']", "the Browse menu")
            # The innermost element with that text: the last in document order.
            click(driver, "(//*[normalize-space()='TensorFlow clusters'])[last()]", "the TensorFlow clusters entry")
            try:
                return bool(wait_for(lambda: driver.current_url.endswith("/plugin/ignite-tf"), 15, "the route"))
            except AssertionError:
                return False

        wait_for(through_the_menu, 120, "the plugin's route after Browse > TensorFlow clusters", driver=driver)
        frame = wait_for(lambda: driver.find_elements("css selector", "iframe"), what="the plugin's iframe",
                         driver=driver)[0]
        assert frame.get_attribute("src").endswith("/ignite-tf/")
        driver.switch_to.frame(frame)
        wait_for(lambda: driver.find_elements("css selector", f'section[data-cluster="{cluster_id}"]'),
                 what="the page inside Airflow's UI", driver=driver)
        driver.switch_to.default_content()
        driver.save_screenshot(str(tmp_path / "ignite-tf-in-airflow.png"))
        print(f"screenshots: {tmp_path}")
    finally:
        driver.quit()


def test_extra_links_of_the_training_and_publish_tasks(trained):
    svc, _, run_id, train = trained
    base = f"/api/v2/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances"
    train_links = svc.request("GET", f"{base}/train/links")["extra_links"]
    assert f"/ignite-tf/?cluster={train['cluster_id']}" in train_links["Training page"], train_links
    assert train["cluster_id"] in train_links["TensorBoard"]
    publish_links = svc.request("GET", f"{base}/publish/links")["extra_links"]
    assert "#model-tabular_sync-" in publish_links["Registry version"], publish_links


def test_tensorboard_command_serves_the_run(trained):
    svc, root, _, train = trained
    port = free_ports(1, 22000, 22500)[0]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen([sys.executable, "-m", "ignite_tf.cli", "tensorboard", str(root / "runs"), "--port",
                             str(port)], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        def runs():
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")[-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/data/runs", timeout=5) as resp:
                    return json.loads(resp.read())
            except OSError:
                return None

        names = wait_for(lambda: [r for r in (runs() or []) if r.startswith(train["cluster_id"])], timeout=120,
                         what="TensorBoard listing the run")
        assert names == [f"{train['cluster_id']}/train"], names
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    assert not listening(port)


def test_trigger_form_shows_the_params_and_refuses_a_bad_value(trained, tmp_path):
    """What Airflow's form really does: it shows each Param's title, description and default; it does not show
    the bounds (the descriptions say them); it clamps a number below ``minimum`` to the bound when the field is
    left (0 workers becomes 1, visibly); it does not check ``exclusiveMinimum``, so a learning rate of 0 goes
    to the API, which refuses it (the form says "Failed to Trigger Dag") and creates no run."""
    from selenium.webdriver.common.keys import Keys

    svc, *_ = trained
    before = svc.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns")["total_entries"]
    driver = chrome()
    try:
        login(driver, svc)
        driver.get(f"{svc.base}/dags/{DAG_ID}")
        click(driver, "//button[normalize-space()='Trigger']", "the Trigger button")
        field = {name: wait_for(lambda n=name: driver.find_elements("css selector", f"input[name=element_{n}]"),
                                what=f"the {name} field", driver=driver)[0]
                 for name in ("epochs", "batch_size", "learning_rate", "workers")}
        text = driver.find_element("css selector", "[data-scope=dialog][role=dialog]").text
        for title in ("Mode (sync / async SGD)", "Model arguments", "Epochs", "Batch size", "Learning rate",
                      "Workers", "Parameter servers"):
            assert title in text, (title, text)
        assert "a whole number, 1 to 64" in text and "a number, above 0, at most 10" in text, text
        assert field["epochs"].get_attribute("value") == "3"
        driver.save_screenshot(str(tmp_path / "trigger-form.png"))

        def enter(name: str, value: str) -> None:
            driver.execute_script("arguments[0].scrollIntoView({block: 'center'})", field[name])
            field[name].send_keys(Keys.CONTROL, "a")
            field[name].send_keys(value)

        enter("workers", "0")
        enter("learning_rate", "0")
        assert field["workers"].get_attribute("value") == "1", "the form clamps to the Param's minimum"
        driver.find_element("css selector", "[data-testid=trigger-dag-submit]").click()
        wait_for(lambda: "Failed to Trigger Dag" in driver.find_element("css selector", "body").text,
                 what="the refusal", driver=driver)
        driver.save_screenshot(str(tmp_path / "trigger-form-refused.png"))
        print(f"screenshots: {tmp_path}")
    finally:
        driver.quit()
    assert svc.request("GET", f"/api/v2/dags/{DAG_ID}/dagRuns")["total_entries"] == before, "no run may be created"
