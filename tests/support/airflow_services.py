"""Real Airflow services for tests: API server, scheduler, DAG processor and triggerer on a SQLite DB.

``AirflowServices`` gives them their own AIRFLOW_HOME, free ports (API, and the two log servers that
otherwise take the fixed ports 8793/8794), a random JWT secret shared by all four, a LocalExecutor, and
a user whose password is written to the simple auth manager's password file (never on a command line).
Each service runs in its own process group, so ``stop()`` reaches the executor's workers and the task
supervisors too; it then checks that no process and no port is left.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil

from ignite_tf.ports import port_free

REPO = Path(__file__).resolve().parents[2]
SERVICES = ("api-server", "scheduler", "dag-processor", "triggerer")


def free_ports(count: int, first: int = 21500, last: int = 22000) -> list[int]:
    found = [p for p in range(first + os.getpid() % 200, last) if port_free(p)][:count]
    if len(found) < count:
        raise RuntimeError(f"no {count} free ports in {first}-{last}")
    return found


class AirflowServices:
    def __init__(self, home: Path, dags: Path, env: dict[str, str] | None = None):
        self.home, self.dags = Path(home), Path(dags)
        self.api_port, worker_logs, trigger_logs = free_ports(3)
        self.base = f"http://127.0.0.1:{self.api_port}"
        self.user, self._password = "tester", secrets.token_urlsafe(12)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        self.env.update({
            "AIRFLOW_HOME": str(self.home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__PARALLELISM": "4",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(self.api_port),
            "AIRFLOW__API__BASE_URL": self.base,
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base}/execution/",
            "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{self.user}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(self.home / "passwords.json"),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(worker_logs),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(trigger_logs),
            "AIRFLOW__SCHEDULER__SCHEDULER_HEARTBEAT_SEC": "2",
            "AIRFLOW__TRIGGERER__JOB_HEARTBEAT_SEC": "2",
            # A task's calls to the API server: 5 s (the default) is too short for a loaded 2-core machine, where a
            # timed-out start failed the task before it ran.
            "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30",
            # A killed triggerer's triggers go to a live one once its heartbeat is this old (default 30 s).
            "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "15",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
            # A task whose runner died (SIGKILL) is failed, and retried, once its heartbeat is this old: the default
            # 300 s let a killed training's cluster finish long before its retry could re-attach to it. A live
            # task's runner heartbeats every 3 s (min_heartbeat_interval), well inside the 30 s; the scheduler
            # looks every 3 s (default 10 s).
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "3",
            "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "3",
        })
        self.env.update(env or {})
        self.ports = [self.api_port, worker_logs, trigger_logs]
        self.procs: dict[str, subprocess.Popen] = {}
        self._token: str | None = None

    def log(self, service: str) -> Path:
        return self.home / f"{service}.log"

    def start(self, timeout: float = 240.0) -> AirflowServices:
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "passwords.json").write_text(json.dumps({self.user: self._password}))
        airflow = str(Path(sys.executable).with_name("airflow"))
        migrate = subprocess.run([airflow, "db", "migrate"], env=self.env, capture_output=True, text=True,
                                 timeout=300)
        assert migrate.returncode == 0, migrate.stderr[-3000:]
        try:
            for service in SERVICES:
                self._spawn(service)
            self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _spawn(self, service: str) -> None:
        airflow = str(Path(sys.executable).with_name("airflow"))
        with open(self.log(service), "ab") as out:
            self.procs[service] = subprocess.Popen([airflow, service], env=self.env, stdout=out,
                                                   stderr=subprocess.STDOUT, start_new_session=True)

    def kill(self, service: str) -> None:
        """SIGKILL ``service`` and every process of its session (a crash of its machine or pod, as Airflow sees it)."""
        proc = self.procs[service]
        members = [p for p in self.processes() if os.getsid(p.pid) == proc.pid]
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=30)
        psutil.wait_procs(members, timeout=30)

    def restart(self, service: str, timeout: float = 240.0) -> None:
        """Start ``service`` again (after ``kill``) and wait until the services are healthy."""
        self._spawn(service)
        self.wait_healthy(timeout)

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        health: dict = {}
        while time.monotonic() < deadline:
            dead = {s: p.returncode for s, p in self.procs.items() if p.poll() is not None}
            if dead:
                raise RuntimeError(f"Airflow {dead} exited early:\n" + "\n".join(
                    self.log(s).read_text()[-2000:] for s in dead))
            try:
                health = self.request("GET", "/api/v2/monitor/health", auth=False)
                if all(health.get(c, {}).get("status") == "healthy"
                       for c in ("metadatabase", "scheduler", "triggerer", "dag_processor")):
                    return
            except (OSError, urllib.error.URLError):
                pass
            time.sleep(1)
        raise TimeoutError(f"Airflow services not healthy after {timeout:.0f}s: {health}")

    def token(self) -> str:
        if self._token is None:
            body = self.request("POST", "/auth/token", {"username": self.user, "password": self._password},
                                auth=False)
            self._token = body["access_token"]
        return self._token

    def request(self, method: str, path: str, body: dict | None = None, *, auth: bool = True):
        """One REST call; returns the decoded JSON, raises ``urllib.error.HTTPError`` (with its body) on 4xx/5xx."""
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, headers=headers, method=method)
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"null")

    def processes(self) -> list[psutil.Process]:
        """Every live process of the services' sessions (executor workers, task supervisors included)."""
        sids = {p.pid for p in self.procs.values()}
        found = []
        for proc in psutil.process_iter():
            try:
                if os.getsid(proc.pid) in sids and proc.status() != psutil.STATUS_ZOMBIE:
                    found.append(proc)
            except (psutil.Error, ProcessLookupError, PermissionError):
                continue
        return found

    def stop(self, grace: float = 45.0) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self.processes():
            for proc in self.procs.values():
                proc.poll()
            time.sleep(0.5)
        for proc in self.processes():
            try:
                proc.kill()
            except psutil.Error:
                pass
        for proc in self.procs.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def leftovers(self) -> tuple[list[int], list[int]]:
        """Processes and listening ports still there after ``stop()`` (both should be empty)."""
        return [p.pid for p in self.processes()], [p for p in self.ports if not port_free(p)]


def start_project_services(root: Path, ignite_conn, rows: int = 2000) -> tuple[AirflowServices, Path]:
    """This project's dags/ (copied) and plugins/ on real services; runs and the registry under ``root``."""
    import shutil

    from tests.support.airflow import ignite_connection_env

    shutil.copytree(REPO / "dags", root / "dags", ignore=shutil.ignore_patterns("__pycache__"))
    env = dict(ignite_connection_env(ignite_conn))
    env.update({"IGNITE_TF_RUN_ROOT": str(root / "runs"), "IGNITE_TF_REGISTRY": str(root / "registry"),
                "IGNITE_TF_DEMO_ROWS": str(rows), "AIRFLOW__CORE__PLUGINS_FOLDER": str(REPO / "plugins"),
                # Airflow's openlineage provider sends every task's events to files (one per event) under
                # openlineage/: the real transport, read by tests/services/test_lineage.py.
                "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
                    {"type": "file", "log_file_path": str(root / "openlineage" / "event"), "append": False})})
    (root / "openlineage").mkdir(exist_ok=True)
    svc = AirflowServices(root / "home", root / "dags", env)
    svc.start()
    return svc, root


def add_spec(root: Path, name: str, text: str) -> Path:
    """Write the YAML spec ``name`` into the services' dags/specs and touch pipelines.py, the file that loads
    the specs: the DAG processor parses a file changed since its last parse at once, an unchanged one only at
    its next round (``min_file_process_interval``, 30 s)."""
    path = root / "dags" / "specs" / name
    path.write_text(text)
    (root / "dags" / "pipelines.py").touch()
    return path


def wait_parsed(svc: AirflowServices, dag_id: str, timeout: float = 180.0) -> dict:
    """The DAG once the DAG processor has parsed it."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return svc.request("GET", f"/api/v2/dags/{dag_id}")
        except urllib.error.HTTPError as err:
            if err.code != 404 or time.monotonic() > deadline:
                raise
        time.sleep(2)
