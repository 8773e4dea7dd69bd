"""Ignite with authentication and TLS, for real: logins and certificates are checked, a wrong password fails at
once, and a whole pipeline (``dag.test()``) and an ``ignite-tf start -c`` job run against the secured cluster
without the password showing up anywhere a user or another task could read it."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from ignite_tf_dev.ignite.cluster import CONNECTION_FILE, LocalIgniteCluster

from ignite_tf.errors import AuthenticationFailedError, IgniteUnavailableError
from tests.support.airflow import migrate_db
from tests.support.clusters import assert_nothing_left

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
CLI = [sys.executable, "-m", "ignite_tf.cli"]


@pytest.fixture(scope="module")
def secure_conn(secure_ignite_cluster):
    return secure_ignite_cluster.connection()


def cli_env() -> dict[str, str]:
    """This process's environment without any Ignite or Airflow connection: the CLI must use its -c file."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("IGNITE_TF_", "AIRFLOW_CONN_"))}


def conn_file(conn, path: Path, **changes) -> Path:
    data = {**{k: v for k, v in dataclasses.asdict(conn).items() if v not in (None, False)},
            "addresses": conn.addresses_str, **changes}
    path.write_text(json.dumps(data))
    return path


# -- logins and certificates ---------------------------------------------------------------------------------

def test_login_and_certificate_are_required(secure_ignite_cluster, secure_conn, tmp_path):
    client = secure_conn.client()
    try:
        with client.sql("SELECT COUNT(*) FROM SYS.NODES WHERE IS_CLIENT = FALSE") as cur:
            assert next(iter(cur))[0] == 2
        with client.sql("SELECT COUNT(*) FROM SYS.BASELINE_NODES WHERE ONLINE = TRUE") as cur:
            assert next(iter(cur))[0] == 2, "activation puts every node in the baseline"
        # The statement that set the password is not kept in Ignite's query history.
        with client.sql("SELECT SQL FROM SYS.SQL_QUERIES_HISTORY") as cur:
            assert not [row for row in cur if secure_ignite_cluster.password in row[0]]
    finally:
        client.close()

    with pytest.raises(AuthenticationFailedError, match="user 'ignite'.*set the connection's username and password"):
        dataclasses.replace(secure_conn, password="ignite").client()  # Ignite's default was replaced
    with pytest.raises(AuthenticationFailedError, match="without a username"):
        dataclasses.replace(secure_conn, username=None, password=None).client()
    with pytest.raises(IgniteUnavailableError, match="TLS settings"):
        dataclasses.replace(secure_conn, use_ssl=False, ssl_ca_certfile=None).client()
    # The client verifies the nodes' certificate: another CA's certificate is refused.
    other_ca = tmp_path / "other-ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                    "-keyout", str(tmp_path / "k.pem"), "-out", str(other_ca), "-subj", "/CN=localhost",
                    "-days", "1"], check=True, capture_output=True)
    with pytest.raises(IgniteUnavailableError, match="CERTIFICATE_VERIFY_FAILED"):
        dataclasses.replace(secure_conn, ssl_ca_certfile=str(other_ca)).client()

    state = secure_ignite_cluster.state_dir / CONNECTION_FILE
    assert state.stat().st_mode & 0o077 == 0, "the connection file of `up` holds the password: owner only"
    assert json.loads(state.read_text())["ssl_ca_certfile"] == str(secure_ignite_cluster.tls_files.ca_certfile)


def test_wrong_password_fails_at_once_naming_the_user(secure_ignite_cluster, secure_conn, tmp_path):
    # The readiness check (make ignite-up / ignite-status) used to retry a refused login until its limit.
    wrong = LocalIgniteCluster.from_state(secure_ignite_cluster.state_dir)
    wrong.password = "not-the-password"
    with pytest.raises(AuthenticationFailedError, match="user 'ignite'"):
        wrong.wait_for_topology(2, timeout=3600)

    ps = subprocess.run([*CLI, "ps", "-c", str(conn_file(secure_conn, tmp_path / "wrong.json", password="x"))],
                        env=cli_env(), capture_output=True, text=True, timeout=300)
    assert ps.returncode == 1 and ps.stderr.count("\n") == 1, ps.stderr
    assert "refused the login of user 'ignite'" in ps.stderr and "IGNITE_TF_PASSWORD" in ps.stderr

    from ignite_tf.hooks.ignite import IgniteHook

    for password, expect in ((secure_ignite_cluster.password, "2 server node(s)"), ("x", "refused the login")):
        value = {"conn_type": "ignite", "host": secure_conn.addresses_str, "login": "ignite", "password": password,
                 "extra": {"use_ssl": True, "ssl_ca_certfile": secure_conn.ssl_ca_certfile}}
        with pytest.MonkeyPatch.context() as patch:
            patch.setenv("AIRFLOW_CONN_IGNITE_SECURE", json.dumps(value))
            ok, message = IgniteHook("ignite_secure").test_connection()
        assert ok is (password != "x") and expect in message, message
        assert secure_ignite_cluster.password not in message


# -- a pipeline and a CLI job, then a search for the password --------------------------------------------------

class CmdlineSampler(threading.Thread):
    """Reads /proc/*/cmdline of every process on the machine until stopped: which ones held the password,
    and which task processes were seen (so that the search is known to have covered them)."""

    def __init__(self, secret: str):
        super().__init__(daemon=True)
        self.secret = secret.encode()
        self.hits: dict[int, str] = {}
        self.tasks: set[int] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.3):
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    cmdline = (entry / "cmdline").read_bytes()
                except OSError:
                    continue
                if self.secret in cmdline:
                    self.hits[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
                if b"ignite_tf.runtime" in cmdline:
                    self.tasks.add(int(entry.name))

    def stop(self) -> None:
        self.done.set()
        self.join()


@pytest.fixture(scope="module")
def sampler(secure_ignite_cluster):
    thread = CmdlineSampler(secure_ignite_cluster.password)
    thread.start()
    yield thread
    thread.stop()


@pytest.fixture(scope="module")
def secure_airflow(secure_conn, secure_ignite_cluster, tmp_path_factory):
    migrate_db()
    root = tmp_path_factory.mktemp("secure-runs")
    dags = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    shutil.copytree(DAGS, dags, ignore=shutil.ignore_patterns("__pycache__"), dirs_exist_ok=True)
    value = {"conn_type": "ignite", "host": secure_conn.addresses_str, "login": "ignite",
             "password": secure_ignite_cluster.password,
             "extra": {"use_ssl": True, "ssl_ca_certfile": secure_conn.ssl_ca_certfile}}
    patch = pytest.MonkeyPatch()
    patch.setenv("AIRFLOW_CONN_IGNITE_DEFAULT", json.dumps(value))
    patch.setenv("IGNITE_TF_RUN_ROOT", str(root / "runs"))
    patch.setenv("IGNITE_TF_REGISTRY", str(root / "registry"))
    patch.setenv("IGNITE_TF_DEMO_ROWS", "3000")
    yield root
    patch.undo()


DAG_TEST = """
import json, sys
from pathlib import Path
from tests.operators.test_operators import load_dag
run = load_dag(Path(sys.argv[1])).test(run_conf=json.loads(sys.argv[2]))
print("DAG TEST RESULT", json.dumps([run.run_id, run.state]))
"""


@pytest.fixture(scope="module")
def dag_run(secure_airflow, sampler):
    """The hand-written pipeline (load, partitions, plan, validation, gate, deferred training, publish).

    ``dag.test()`` runs every task in its own process and logs to that process's output: it runs in a
    subprocess here so that the whole task log lands in ``dag-test.log``. Returns the XCom values.
    """
    from tests.operators.test_operators import xcoms

    dag_file = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / "tabular_handwritten.py"
    conf = {"epochs": 2, "workers": 2, "batch_size": 32, "learning_rate": 0.02}
    log = secure_airflow / "dag-test.log"
    with open(log, "w") as out:
        proc = subprocess.run([sys.executable, "-c", DAG_TEST, str(dag_file), json.dumps(conf)], cwd=REPO,
                              stdout=out, stderr=subprocess.STDOUT, timeout=1500)
    text = log.read_text()
    assert proc.returncode == 0, text[-5000:]
    run_id, state = json.loads(text.rsplit("DAG TEST RESULT", 1)[1].splitlines()[0])
    assert state == "success", text[-5000:]
    # The task log is all there: it has the operators' own lines.
    assert "loaded 3000 rows into tabular_hw" in text
    return xcoms("ignite_tf_tabular_handwritten", run_id)


@pytest.fixture(scope="module")
def cli_run(dag_run, secure_conn, secure_ignite_cluster, secure_airflow, sampler, tmp_path_factory):
    """``ignite-tf start -c FILE`` of the runtime's built-in classifier on the cache the pipeline loaded, then
    ``ps``; returns every output the user saw."""
    work = tmp_path_factory.mktemp("secure-cli")
    config = conn_file(secure_conn, work / "conn.json", password=secure_ignite_cluster.password)
    (work / "job").mkdir()
    env = {**cli_env(), "IGNITE_TF_RUN_ROOT": str(secure_airflow / "runs")}

    def ignite_tf(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=900)

    started = ignite_tf("start", "-c", str(config), "--workers", "2", "--id", "secure-cli",
                        "--startup-deadline", "900", "tabular_hw",
                        str(work / "job"), sys.executable, "-m", "ignite_tf.runtime",
                        "--entry-point", "ignite_tf.models:tabular_classifier", "--epochs", "2",
                        "--batch-size", "32", "--label-column", "label", "--learning-rate", "0.02")
    assert started.returncode == 0, started.stdout[-3000:] + started.stderr[-3000:]
    assert "epoch 2/2" in started.stdout
    outputs = [started.stdout, started.stderr]
    for args in (("ps", "-a"), ("ps",)):
        listed = ignite_tf(*args, "-c", str(config))
        assert listed.returncode == 0, listed.stderr
        outputs += [listed.stdout, listed.stderr]
    assert "secure-cli" in outputs[2]
    return outputs


def files_holding(secret: bytes, *folders: Path, skip: tuple[Path, ...] = ()) -> list[str]:
    hits = []
    for folder in folders:
        for path in folder.rglob("*"):
            if path in skip or not path.is_file() or path.is_symlink():
                continue
            try:
                if secret in path.read_bytes():
                    hits.append(str(path))
            except OSError:
                continue
    return hits


@pytest.mark.timeout(2400)
def test_pipeline_and_cli_job_never_leak_the_password(dag_run, cli_run, sampler, secure_airflow, secure_conn,
                                                       secure_ignite_cluster):
    secret = secure_ignite_cluster.password
    sampler.stop()
    train = dag_run[("train", -1, "return_value")]
    assert train["status"] == "succeeded" and train["epochs"] == 2, train
    assert dag_run[("publish", -1, "return_value")]["status"] == "production"
    assert_nothing_left(train["cluster_id"], train["run_dir"])
    assert len(sampler.tasks) >= 4, f"task processes seen while sampling: {sampler.tasks}"

    # Command lines of every process on the machine while the tasks ran.
    assert not sampler.hits, f"password on a command line: {sampler.hits}"
    # XCom values, as Airflow stores and returns them.
    assert secret not in json.dumps(list(dag_run.values()), default=str)
    # Task logs (dag-test.log), the metadata DB, the run folders (logs, specs, checkpoints), the nodes' logs and
    # persistence (the connection file `up` writes for the user is the one place meant to hold it).
    home = Path(os.environ["AIRFLOW_HOME"])
    state = secure_ignite_cluster.state_dir
    assert not files_holding(secret.encode(), home, secure_airflow, state, skip=(state / CONNECTION_FILE,))
    # What `ignite-tf start` and `ignite-tf ps` printed.
    assert not [out for out in cli_run if secret in out]
    # The cluster state in Ignite, read with the authenticated client.
    client = secure_conn.client()
    try:
        caches = [name for name in client.get_cache_names() if name.startswith("ignite_tf_sys_")]
        assert caches
        entries = [repr(kv) for name in caches for kv in client.get_cache(name).scan(page_size=500)]
    finally:
        client.close()
    assert any("secure-cli" in e for e in entries) and not [e for e in entries if secret in e]
