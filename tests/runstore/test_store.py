"""The run store over a REAL S3 server (s3proxy, the ``s3_bucket`` fixture) and over a local folder: reads,
writes, folder copies, the log mirror, credentials, code shipping and the pod's first process fetching a run.
Nothing is simulated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from ignite_tf.contract import ENV_CODE
from ignite_tf.errors import ConfigError
from ignite_tf.runstore import LAYOUT, RunStore, is_remote
from ignite_tf.runstore import code as shipping
from ignite_tf.runstore.credentials import (
    CREDENTIAL_NAMES,
    connection_env,
    env_to_options,
    environment,
    storage_options,
)
from ignite_tf.runstore.mirror import Mirror


@pytest.mark.parametrize("remote", [True, False])
def test_reads_and_writes_of_a_run(remote, s3_bucket, tmp_path):
    url = f"s3://{s3_bucket}/runs/c1" if remote else str(tmp_path / "runs" / "c1")
    store = RunStore(url)
    assert store.remote is remote and is_remote(url) is remote
    assert store.read_bytes(LAYOUT.log("chief-0")) is None and store.read_json(LAYOUT.shard_plan) is None
    store.write_text(LAYOUT.log("chief-0"), "line 1\nline 2\n")
    assert store.read_bytes(LAYOUT.log("chief-0"), offset=7) == b"line 2\n"
    assert store.read_bytes(LAYOUT.log("chief-0"), offset=14) == b""  # at the end: nothing new yet
    store.write_text(LAYOUT.shard_plan, json.dumps({"workers": 2}))
    assert store.read_json(LAYOUT.shard_plan) == {"workers": 2}
    assert store.path(LAYOUT.model) == (f"{url}/checkpoints/model" if remote else str(Path(url) / "checkpoints/model"))
    assert {"logs", "shard_plan.json"} <= set(store.listdir())

    local = tmp_path / "backup"
    (local / "sub").mkdir(parents=True)
    (local / "a").write_text("1")
    (local / "sub" / "b").write_text("2")
    seen: dict = {}
    if remote:
        assert store.put_dir(local, LAYOUT.backup, seen) == 2
        assert store.put_dir(local, LAYOUT.backup, seen) == 0  # nothing changed: nothing copied
        (local / "a").unlink()  # a backup TensorFlow replaced: the store follows
        (local / "sub" / "b").write_text("22")
        assert store.put_dir(local, LAYOUT.backup, seen) == 1
        back = tmp_path / "back"
        assert store.get_dir(LAYOUT.backup, back)
        assert sorted(p.relative_to(back).as_posix() for p in back.rglob("*") if p.is_file()) == ["sub/b"]
        assert (back / "sub" / "b").read_text() == "22"
        store.remove_dir(LAYOUT.backup)
        assert not store.get_dir(LAYOUT.backup, tmp_path / "none")


def test_a_log_read_while_its_writer_rewrites_it(s3_bucket):
    """The mirror rewrites a growing log whole; a reader polling it (``launcher.output``) must get a prefix of
    some version, never an error (a read pinned to the object's ETag failed with PreconditionFailed)."""
    import threading

    store = RunStore(f"s3://{s3_bucket}/runs/c2")
    name = LAYOUT.log("worker-0")
    store.write_text(name, "x\n")
    stop = threading.Event()

    def writer():
        n = 1
        while not stop.is_set():
            n += 1
            store.write_text(name, "x\n" * n)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        for _ in range(60):
            data = store.read_bytes(name, offset=2)
            assert data is not None and set(data.decode()) <= {"x", "\n"}
    finally:
        stop.set()
        thread.join()


def test_mirror_copies_growing_logs_and_a_last_time_at_stop(s3_bucket, tmp_path):
    store = RunStore(f"s3://{s3_bucket}/runs/m1")
    logs = tmp_path / "logs"
    logs.mkdir()
    mirror = Mirror(store, tmp_path, ("logs",), every_s=0.2).start()
    try:
        (logs / "worker-0.log").write_text("first\n")
        from tests.support.polling import wait_for

        wait_for(lambda: store.read_text(LAYOUT.log("worker-0")) == "first\n", timeout=20, what="log copied")
        with open(logs / "worker-0.log", "a") as f:
            f.write("second\n")
    finally:
        mirror.stop()
    assert store.read_text(LAYOUT.log("worker-0")) == "first\nsecond\n"


def test_options_refuse_secrets_and_connection_becomes_the_clients_variables(monkeypatch):
    monkeypatch.setenv("IGNITE_TF_RUN_STORE_OPTIONS", '{"client_kwargs": {"region_name": "eu-west-1"}}')
    assert storage_options() == {"client_kwargs": {"region_name": "eu-west-1"}}
    monkeypatch.setenv("IGNITE_TF_RUN_STORE_OPTIONS", '{"secret": "s3cr3t"}')
    with pytest.raises(ConfigError, match="secret.*run_store_conn_id"):
        storage_options()
    monkeypatch.setenv("AIRFLOW_CONN_RUNS_S3", json.dumps({
        "conn_type": "aws", "login": "AKIDRUNS", "password": "runs-secret-value",
        "extra": {"endpoint_url": "http://127.0.0.1:9", "region_name": "us-east-1"}}))
    env = connection_env("runs_s3")
    assert env == {"AWS_ACCESS_KEY_ID": "AKIDRUNS", "AWS_SECRET_ACCESS_KEY": "runs-secret-value",
                   "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_DEFAULT_REGION": "us-east-1"}
    assert set(env) <= set(CREDENTIAL_NAMES)
    assert env_to_options(env, "s3://b/x") == {"key": "AKIDRUNS", "secret": "runs-secret-value",
                                               "endpoint_url": "http://127.0.0.1:9",
                                               "client_kwargs": {"region_name": "us-east-1"}}
    monkeypatch.delenv("AWS_ACCESS_KEY_ID", raising=False)
    with environment(env):
        assert os.environ["AWS_ACCESS_KEY_ID"] == "AKIDRUNS"
    assert "AWS_ACCESS_KEY_ID" not in os.environ


def _team(tmp_path: Path) -> Path:
    """A team's own code in a folder of theirs: a module, a package it imports, and a helper file."""
    team = tmp_path / "team"
    (team / "teamlib").mkdir(parents=True)
    (team / "teamlib" / "__init__.py").write_text("WIDTH = 7\n")
    (team / "team_model.py").write_text("import teamlib\n\ndef build():\n    return teamlib.WIDTH\n")
    (tmp_path / "extra").mkdir()
    (tmp_path / "extra" / "helpers.py").write_text("HELP = 'yes'\n")
    # Another test's team_model (tests/cluster/k8s/test_training.py: the launcher imports the entry point for
    # its memory estimate) would be found in sys.modules before this folder.
    for name in ("team_model", "teamlib"):
        sys.modules.pop(name, None)
    return team


def test_ignite_tf_itself_is_never_shipped_even_from_an_editable_install():
    # bench/end.py's entry point: with the provider installed editable (``make setup``), its folder is outside
    # site-packages; shipped, the copy shadowed the tasks' own and a run failed on a mixed import.
    assert shipping.entry_point_source("ignite_tf.models:tabular_classifier") is None


def test_entry_point_module_and_py_modules_are_shipped_never_installed_ones(tmp_path, monkeypatch):
    team = _team(tmp_path)
    monkeypatch.syspath_prepend(str(team))
    assert shipping.entry_point_source("team_model:build") == team / "team_model.py"
    assert shipping.entry_point_source("teamlib.sub:f") == team / "teamlib"
    assert shipping.entry_point_source("numpy:array") is None  # installed: the image has it
    assert shipping.entry_point_source("ignite_tf.models:tabular_classifier") is None or \
        "site-packages" not in str(shipping.entry_point_source("ignite_tf.models:tabular_classifier"))
    assert shipping.entry_point_source("no_such_module_here:f") is None
    data, names = shipping.pack("team_model:build", [team / "teamlib", tmp_path / "extra"])
    assert names == ["team_model.py", "teamlib/", "extra/*"]
    with zipfile.ZipFile(__import__("io").BytesIO(data)) as zf:
        assert sorted(zf.namelist()) == ["helpers.py", "team_model.py", "teamlib/__init__.py"]
    with pytest.raises(ConfigError, match="py_modules: .*does not exist"):
        shipping.pack(None, [tmp_path / "missing"])
    assert shipping.pack("numpy:array") is None


def test_shipped_code_imports_in_a_task_that_does_not_have_the_folder(s3_bucket, tmp_path, monkeypatch):
    """The pod's first process (``ignite_tf.cluster.k8s.entry``), run here as a plain process in another
    folder: it fetches the plan and the code from the bucket, and the command imports the team's module."""
    team = _team(tmp_path)
    monkeypatch.syspath_prepend(str(team))
    store = RunStore(f"s3://{s3_bucket}/runs/ship1")
    # A single-module entry point ships alone: the package it imports is named in py_modules.
    shipped = shipping.ship(store, "team_model:build", [team / "teamlib", tmp_path / "extra"])
    store.write_text(LAYOUT.shard_plan, '{"plan": 1}')
    pod_run = tmp_path / "pod" / "run"
    pod_run.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update({"IGNITE_TF_RUN_STORE": store.url, "IGNITE_TF_RUN_DIR": str(pod_run),
                "IGNITE_TF_SHARD_PLAN": str(pod_run / "shard_plan.json"), ENV_CODE: ", ".join(shipped)})
    script = ("import os, team_model, helpers; print(team_model.build(), helpers.HELP, "
              "open(os.environ['IGNITE_TF_SHARD_PLAN']).read())")
    out = subprocess.run([sys.executable, "-m", "ignite_tf.cluster.k8s.entry", str(pod_run / "tasks" / "worker-0"),
                          "--", sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
                         cwd=tmp_path / "pod")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["7", "yes", '{"plan":', '1}']
    assert str(team) not in env.get("PYTHONPATH", "") and str(team) not in out.stdout

    # What was not shipped fails with a message naming what was, and how to ship the rest.
    from ignite_tf.runtime.model import load_entry_point

    monkeypatch.setenv(ENV_CODE, ", ".join(shipped))
    with pytest.raises(ConfigError, match=r"shipped to the tasks: team_model.py, teamlib/, extra/\*.*py_modules"):
        load_entry_point("not_shipped_model:build")


def test_a_store_uses_the_variables_of_its_own_time(s3_bucket, monkeypatch):
    """s3fs reads the endpoint when an instance is made and fsspec caches instances by their arguments: a
    store used under other variables earlier in this process (another store, another connection's task)
    must not make a later store talk to that endpoint. Real s3proxy; the first endpoint is a closed port."""
    right = os.environ["AWS_ENDPOINT_URL"]
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "1")
    with pytest.raises(Exception):  # noqa: B017 - whatever botocore raises for a refused connection
        RunStore(f"s3://{s3_bucket}/early").write_text("a.txt", "never")
    monkeypatch.setenv("AWS_ENDPOINT_URL", right)
    later = RunStore(f"s3://{s3_bucket}/later")
    later.write_text("a.txt", "here")
    assert later.read_text("a.txt") == "here"
