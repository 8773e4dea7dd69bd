"""Cluster state: what a supervisor is running, readable by `ps` / `attach` / `stop` in any other process.

Two stores with one interface:

- ``IgniteStateStore`` keeps the state in system caches of this project on the Ignite cluster itself, so any
  machine with the connection can list and stop clusters;
- ``LocalStateStore`` keeps JSON files in a state directory, the fallback without an Ignite connection.

Per-epoch metrics are appended by the chief's runtime under their own keys, so the supervisor's writes of
the main record and the runtime's metric reports never overwrite each other. Likewise each worker adds what
its reader measured (rows per serving Ignite node, the share from its own host or Kubernetes node: see
:mod:`ignite_tf.reader.locality`) under its own key (``add_reads``); ``ClusterState.reads`` holds one
running total per worker, ``measured_locality`` their sum. Each watcher of a cluster (an Airflow task try
whose trigger logs the chief's output) keeps how far it has logged under its own key (``watch_offset``), so
the next instance of its trigger, after a triggerer restart, continues there.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from abc import ABC, abstractmethod
from dataclasses import asdict, dataclass, field, fields
from enum import IntEnum, StrEnum
from pathlib import Path
from typing import Any

from ignite_tf.contract import ENV_STATE_DIR, ENV_STATE_STORE
from ignite_tf.errors import ConfigError, IgniteTFError
from ignite_tf.home import HomeFolder
from ignite_tf.reader.locality import combine

LOST_AFTER_S = 20.0
"""A supervisor whose last heartbeat is older than this is lost, judged the same on every host (``ps``, a
retry, a trigger elsewhere): ten of its heartbeats (``supervision.loop.HEARTBEAT_S``), more than a stop's
grace period during which its loop records nothing."""


class Status(StrEnum):
    STARTING = "starting"
    RUNNING = "running"
    RESTARTING = "restarting"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"

    @property
    def final(self) -> bool:
        return self in (Status.SUCCEEDED, Status.FAILED, Status.STOPPED)


class ExitCode(IntEnum):
    """The supervisor's (and ``ignite-tf start``'s) exit status."""

    SUCCEEDED = 0
    USER_CODE_FAILED = 1
    RESTARTS_EXHAUSTED = 2
    STARTUP_DEADLINE = 3
    STOPPED = 4
    INTERNAL_ERROR = 5
    NO_PROGRESS = 6


class TaskStatus(StrEnum):
    """Where one task stands, as its supervisor recorded it (the state store's JSON holds the value)."""

    PENDING = "pending"
    """Not started yet."""
    STARTING = "starting"
    """Started, not up yet (not listening on its port; a pod not Ready)."""
    RUNNING = "running"
    EXITED = "exited"
    """Ended with status 0."""
    FAILED = "failed"
    """Ended with another status or a signal."""
    KILLED = "killed"
    """Stopped by its supervisor (a restart, a stop, the cluster's end)."""
    GONE = "gone"
    """Its supervisor was lost (a task dies with its supervisor)."""

    @property
    def live(self) -> bool:
        return self in (TaskStatus.PENDING, TaskStatus.STARTING, TaskStatus.RUNNING)


LIVE_TASK_STATES = tuple(s for s in TaskStatus if s.live)


@dataclass
class TaskState:
    """One task as its supervisor last recorded it (``state``: see ``TaskStatus``). ``exit_code`` is negative
    when a signal ended the task."""

    role: str
    index: int
    host: str
    port: int
    pid: int = 0
    state: TaskStatus = TaskStatus.PENDING
    restarts: int = 0
    exit_code: int | None = None
    log: str = ""

    def __post_init__(self):
        self.state = TaskStatus(self.state)

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"

    @property
    def live(self) -> bool:
        return self.state.live

    @property
    def exit_text(self) -> str:
        """``0``, ``3``, ``SIGKILL``, or ``-`` while the task has not ended."""
        if self.exit_code is None:
            return "-"
        if self.exit_code < 0:
            try:
                return signal.Signals(-self.exit_code).name
            except ValueError:
                return f"signal {-self.exit_code}"
        return str(self.exit_code)


@dataclass
class ClusterState:
    cluster_id: str
    cache: str
    mode: str
    run_dir: str
    tasks: list[TaskState] = field(default_factory=list)
    status: Status = Status.STARTING
    started_at: float = field(default_factory=time.time)
    heartbeat: float = field(default_factory=time.time)
    finished_at: float | None = None
    exit_code: int | None = None
    reason: str = ""
    restarts: int = 0
    supervisor_pid: int = 0
    supervisor_host: str = ""
    chief_log: str = ""
    epochs: list[dict[str, Any]] = field(default_factory=list)
    # Each failure the supervisor saw: task, exit_code, signal, kind, retryable, action (restarted or why not).
    failures: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)  # the spec's labels: the Airflow task that started it
    # Where the tasks run beyond this machine: {} for local processes; for pods {"kind": "kubernetes",
    # "namespace", "owner", "conn_id"}, so any process that stops the cluster can also delete its objects.
    launcher: dict[str, Any] = field(default_factory=dict)
    # Per worker, the running total of its reads (``StateStore.add_reads``): rows, local_rows, by_node, passes
    # (one per pass over its shard: an epoch, or each pass of a repeated dataset), last_epoch.
    reads: list[dict[str, Any]] = field(default_factory=list)
    attempt: int = 0
    """The tasks' current attempt (``IGNITE_TF_ATTEMPT``): a resumed cluster goes on above its last one, so its
    chief's claim on the backup fences off any task of an earlier supervisor."""
    resumes: int = 0
    """How many later launches (an Airflow retry) took this cluster over after it ended or was lost."""
    evaluation: dict[str, Any] | None = None
    """The chief's held-out evaluation after training (``ignite_tf.runtime.evaluation``): rows, metrics,
    production_metrics, split; None without a held-out split."""

    def __post_init__(self):
        self.status = Status(self.status)
        self.tasks = [t if isinstance(t, TaskState) else TaskState(**t) for t in self.tasks]

    @property
    def age_s(self) -> float:
        return (self.finished_at or time.time()) - self.started_at

    def mark_lost(self) -> None:
        """The supervisor is gone without recording an end: its live tasks are gone with it (PDEATHSIG)."""
        for t in self.tasks:
            if t.live:
                t.state = TaskStatus.GONE

    @property
    def last_epoch(self) -> dict[str, Any]:
        """The chief's last epoch report (``epoch``, ``epochs``, metrics...), or {} before the first one."""
        return self.epochs[-1] if self.epochs else {}

    @property
    def measured_locality(self) -> dict[str, Any] | None:
        """All workers' reads together: rows, local_rows, by_node, locality (None before any read)."""
        return combine(*self.reads)

    def heartbeat_stale(self, after_s: float = LOST_AFTER_S) -> bool:
        """Whether a cluster that has not ended lost its supervisor (no heartbeat for ``after_s``)."""
        return not self.status.final and time.time() - self.heartbeat > after_s

    @property
    def lost(self) -> bool:
        return self.heartbeat_stale()

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        for task in data["tasks"]:
            task["state"] = TaskStatus(task["state"]).value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterState:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})  # a newer writer's extra keys are skipped

    def summary(self) -> dict[str, Any]:
        """Small JSON-able result (XCom): status, reason, restarts and the last epoch's metrics."""
        return {
            "cluster_id": self.cluster_id, "status": self.status.value, "exit_code": self.exit_code,
            "reason": self.reason, "restarts": self.restarts, "epochs": len(self.epochs),
            "metrics": self.last_epoch, "run_dir": self.run_dir,
            "seconds": round(self.age_s, 2), "failures": self.failures[-5:],
            "locality": {k: v for k, v in (self.measured_locality or {}).items() if k != "by_node"} or None,
            "evaluation": self.evaluation,
        }


EVALUATION = "evaluation"


class StateStore(ABC):
    """Where cluster state lives. Every method is safe to call from any process."""

    @abstractmethod
    def put(self, state: ClusterState) -> None: ...

    @abstractmethod
    def _get(self, cluster_id: str) -> ClusterState | None: ...

    @abstractmethod
    def ids(self) -> list[str]: ...

    @abstractmethod
    def delete(self, cluster_id: str) -> None: ...

    @abstractmethod
    def request_stop(self, cluster_id: str) -> None: ...

    @abstractmethod
    def stop_requested(self, cluster_id: str) -> bool: ...

    @abstractmethod
    def clear_stop(self, cluster_id: str) -> None:
        """Forget a stop request: a cluster resumed by a later launch is not stopped by an earlier request."""

    @abstractmethod
    def claim(self, cluster_id: str, resume: int, owner: str, stale_after_s: float) -> bool:
        """Atomically take the right to start ``cluster_id``'s supervisor number ``resume`` (0: the first):
        True for one caller only, however many launch at once; a claim older than ``stale_after_s`` (a
        launcher that died before its supervisor recorded anything) may be taken over."""

    @abstractmethod
    def add_epoch(self, cluster_id: str, metrics: dict[str, Any]) -> None: ...

    @abstractmethod
    def epochs(self, cluster_id: str) -> list[dict[str, Any]]: ...

    @abstractmethod
    def _worker_reads(self, cluster_id: str, worker: int) -> dict[str, Any] | None: ...

    @abstractmethod
    def _put_worker_reads(self, cluster_id: str, worker: int, total: dict[str, Any]) -> None: ...

    @abstractmethod
    def reads(self, cluster_id: str) -> list[dict[str, Any]]:
        """Every worker's running total of reads, by worker index."""

    @abstractmethod
    def watch_offset(self, cluster_id: str, watcher: str) -> int:
        """How much of the chief's output ``watcher`` (an Airflow task's try watching the cluster) has logged."""

    @abstractmethod
    def set_watch_offset(self, cluster_id: str, watcher: str, offset: int) -> None:
        """Record ``watcher``'s offset, for the next instance of its trigger (a triggerer restart)."""

    def add_reads(self, cluster_id: str, worker: int, epoch: int, record: dict[str, Any]) -> None:
        """Add what worker ``worker`` read in ``epoch`` (a ``ignite_tf.reader.locality.measure`` record) to its
        running total. Each worker writes only its own key, so this read-add-write has a single writer."""
        before = self._worker_reads(cluster_id, worker)
        total = combine(before, record) or {}
        total.update({"worker": int(worker), "passes": int((before or {}).get("passes", 0)) + 1,
                      "last_epoch": {"epoch": int(epoch), **{k: v for k, v in record.items() if k != "by_node"}}})
        for key in ("by", "where"):
            if key in record:
                total[key] = record[key]
        # What differed from the validated rows (on_data_change: warn), kept over every epoch.
        changes = [*(before or {}).get("data_changes", []),
                   *({"epoch": int(epoch), **c} for c in (record.get("data_check") or {}).get("changes", []))]
        if changes:
            total["data_changes"] = changes
        self._put_worker_reads(cluster_id, worker, total)

    def set_evaluation(self, cluster_id: str, evaluation: dict[str, Any]) -> None:
        """Record the held-out evaluation; it travels with the epochs' records (every store has those), as
        the one record holding an ``evaluation`` key, which ``get`` takes out of the epochs."""
        self.add_epoch(cluster_id, {EVALUATION: evaluation, "time": round(time.time(), 3)})

    def get(self, cluster_id: str, *, records: bool = True) -> ClusterState | None:
        """The cluster's state; with ``records`` (default) also its epochs, its evaluation and its workers'
        reads, each a read of its own (``records=False``: one read, for a poll of the state alone)."""
        state = self._get(cluster_id)
        if state is not None and records:
            kept = self.epochs(cluster_id)
            state.epochs = [r for r in kept if EVALUATION not in r]
            state.evaluation = next((r[EVALUATION] for r in reversed(kept) if EVALUATION in r), None)
            state.reads = self.reads(cluster_id)
        return state

    def require(self, cluster_id: str) -> ClusterState:
        state = self.get(cluster_id)
        if state is None:
            known = ", ".join(sorted(self.ids())[-10:]) or "none"
            raise ConfigError(f"no TensorFlow cluster with id {cluster_id!r} in {self.describe()} (known: {known})")
        return state

    def list(self) -> list[ClusterState]:
        states = [s for s in (self.get(i) for i in self.ids()) if s is not None]
        return sorted(states, key=lambda s: s.started_at)

    def describe(self) -> str:
        return self.__class__.__name__

    def close(self) -> None:  # noqa: B027 - only stores holding a connection need it
        """Release connections (stores that hold none need not override this)."""


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


class LocalStateStore(StateStore):
    """JSON files under ``state_dir``: ``<id>.json``, ``<id>.stop``, ``<id>.epochs.jsonl``, ``<id>.w<N>.reads``,
    ``<id>.watch-<digest>.offset``."""

    def __init__(self, state_dir: str | Path):
        self.dir = Path(state_dir)
        self.dir.mkdir(parents=True, exist_ok=True)

    def describe(self) -> str:
        return f"local state directory {self.dir}"

    def put(self, state: ClusterState) -> None:
        _write_atomic(self.dir / f"{state.cluster_id}.json", json.dumps(state.to_dict()))

    def _get(self, cluster_id: str) -> ClusterState | None:
        try:
            return ClusterState.from_dict(json.loads((self.dir / f"{cluster_id}.json").read_text()))
        except FileNotFoundError:
            return None

    def ids(self) -> list[str]:
        return [p.stem for p in self.dir.glob("*.json")]

    def delete(self, cluster_id: str) -> None:
        for suffix in (".json", ".stop", ".epochs.jsonl"):
            (self.dir / f"{cluster_id}{suffix}").unlink(missing_ok=True)
        for pattern in (f"{cluster_id}.w*.reads", f"{cluster_id}.claim*", f"{cluster_id}.watch-*.offset"):
            for path in self.dir.glob(pattern):
                path.unlink(missing_ok=True)

    def request_stop(self, cluster_id: str) -> None:
        (self.dir / f"{cluster_id}.stop").write_text(str(time.time()))

    def stop_requested(self, cluster_id: str) -> bool:
        return (self.dir / f"{cluster_id}.stop").exists()

    def clear_stop(self, cluster_id: str) -> None:
        (self.dir / f"{cluster_id}.stop").unlink(missing_ok=True)

    def claim(self, cluster_id: str, resume: int, owner: str, stale_after_s: float) -> bool:
        path = self.dir / f"{cluster_id}.claim{int(resume)}"  # not *.json: ids() lists clusters by that
        for _ in range(2):
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    taken = json.loads(path.read_text()).get("time", 0)
                except (OSError, ValueError):
                    taken = time.time()  # being written: fresh
                if time.time() - taken <= stale_after_s:
                    return False
                try:  # one caller renames the stale claim away; the others find it gone
                    path.rename(path.with_name(f".{path.name}.{os.getpid()}.{time.time_ns()}.stale"))
                except FileNotFoundError:
                    return False
                continue
            with os.fdopen(fd, "w") as f:
                f.write(json.dumps({"owner": owner, "time": time.time()}))
            return True
        return False

    def add_epoch(self, cluster_id: str, metrics: dict[str, Any]) -> None:
        # One short line per append: O_APPEND writes below PIPE_BUF are atomic across processes.
        with open(self.dir / f"{cluster_id}.epochs.jsonl", "a") as f:
            f.write(json.dumps(metrics) + "\n")

    def epochs(self, cluster_id: str) -> list[dict[str, Any]]:
        try:
            lines = (self.dir / f"{cluster_id}.epochs.jsonl").read_text().splitlines()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in lines if line.strip()]

    def _reads_path(self, cluster_id: str, worker: int) -> Path:
        return self.dir / f"{cluster_id}.w{int(worker)}.reads"  # not *.json: ids() lists clusters by that

    def _worker_reads(self, cluster_id: str, worker: int) -> dict[str, Any] | None:
        try:
            return json.loads(self._reads_path(cluster_id, worker).read_text())
        except (FileNotFoundError, ValueError):
            return None

    def _put_worker_reads(self, cluster_id: str, worker: int, total: dict[str, Any]) -> None:
        _write_atomic(self._reads_path(cluster_id, worker), json.dumps(total))

    def reads(self, cluster_id: str) -> list[dict[str, Any]]:
        out = []
        for path in self.dir.glob(f"{cluster_id}.w*.reads"):
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue  # removed or being replaced meanwhile
        return sorted(out, key=lambda r: r.get("worker", 0))

    def _watch_path(self, cluster_id: str, watcher: str) -> Path:
        # A watcher names a DAG run, whose id may hold any character: a digest makes it a file name.
        digest = hashlib.sha256(watcher.encode()).hexdigest()[:16]
        return self.dir / f"{cluster_id}.watch-{digest}.offset"

    def watch_offset(self, cluster_id: str, watcher: str) -> int:
        try:
            return int(self._watch_path(cluster_id, watcher).read_text())
        except (FileNotFoundError, ValueError):
            return 0

    def set_watch_offset(self, cluster_id: str, watcher: str, offset: int) -> None:
        _write_atomic(self._watch_path(cluster_id, watcher), str(int(offset)))


class IgniteStateStore(StateStore):
    """State in the project's system caches on the Ignite cluster (JSON strings keyed by cluster id)."""

    CLUSTERS = "ignite_tf_sys_clusters"
    STOPS = "ignite_tf_sys_stops"
    EPOCHS = "ignite_tf_sys_epochs"
    READS = "ignite_tf_sys_reads"
    CLAIMS = "ignite_tf_sys_claims"
    WATCHES = "ignite_tf_sys_watches"

    def __init__(self, conn):
        self.conn = conn
        self._client = None

    def describe(self) -> str:
        return f"Ignite at {self.conn.addresses_str}"

    def _cache(self, name: str):
        # Not partition-aware: pyignite 0.6 forgets a cache's partition map whenever a Cache object is made
        # (as get_or_create_cache does), so each keyed call re-fetched the map of all 1024 partitions, ~70 ms
        # of CPU per state poll; these few small entries gain nothing from going to their primary node.
        if self._client is None:
            self._client = self.conn.client(partition_aware=False)
        try:
            return self._client.get_or_create_cache(name)
        except Exception as exc:  # noqa: BLE001 - a broken connection: reconnect once
            self.close()
            self._client = self.conn.client(partition_aware=False)
            try:
                return self._client.get_or_create_cache(name)
            except Exception:
                raise IgniteTFError(f"cluster state cache {name} unavailable on {self.describe()}: {exc}") from exc

    def put(self, state: ClusterState) -> None:
        self._cache(self.CLUSTERS).put(state.cluster_id, json.dumps(state.to_dict()))

    def _get(self, cluster_id: str) -> ClusterState | None:
        raw = self._cache(self.CLUSTERS).get(cluster_id)
        return ClusterState.from_dict(json.loads(raw)) if raw else None

    def ids(self) -> list[str]:
        with self._cache(self.CLUSTERS).scan(page_size=256) as cursor:
            return [k for k, _ in cursor]

    def delete(self, cluster_id: str) -> None:
        self._cache(self.CLUSTERS).remove_key(cluster_id)
        self._cache(self.STOPS).remove_key(cluster_id)
        claims = self._cache(self.CLAIMS)
        with claims.scan(page_size=256) as cursor:
            keys = [k for k, _ in cursor if isinstance(k, str) and k.startswith(f"{cluster_id}/")]
        claims.remove_keys(keys)
        epochs = self._cache(self.EPOCHS)
        n = len(self.epochs(cluster_id))
        epochs.remove_keys([f"{cluster_id}/{i:06d}" for i in range(n)] + [f"{cluster_id}/n"])
        self._cache(self.READS).remove_keys([f"{cluster_id}/{r['worker']}" for r in self.reads(cluster_id)])
        prefix = f"{cluster_id}/"
        with self._cache(self.WATCHES).scan(page_size=256) as cursor:
            watches = [k for k, _ in cursor if isinstance(k, str) and k.startswith(prefix)]
        self._cache(self.WATCHES).remove_keys(watches)

    def request_stop(self, cluster_id: str) -> None:
        self._cache(self.STOPS).put(cluster_id, str(time.time()))

    def stop_requested(self, cluster_id: str) -> bool:
        return self._cache(self.STOPS).get(cluster_id) is not None

    def clear_stop(self, cluster_id: str) -> None:
        self._cache(self.STOPS).remove_key(cluster_id)

    def claim(self, cluster_id: str, resume: int, owner: str, stale_after_s: float) -> bool:
        cache, key = self._cache(self.CLAIMS), f"{cluster_id}/{int(resume)}"
        value = json.dumps({"owner": owner, "time": time.time()})
        if cache.put_if_absent(key, value):
            return True
        old = cache.get(key)
        try:
            taken = json.loads(old).get("time", 0) if old else 0
        except ValueError:
            taken = 0
        if old is None or time.time() - taken <= stale_after_s:
            return False
        return bool(cache.replace_if_equals(key, old, value))  # one caller replaces the stale claim

    def add_epoch(self, cluster_id: str, metrics: dict[str, Any]) -> None:
        cache = self._cache(self.EPOCHS)
        # Only the chief reports epochs, so a read-increment-write counter has a single writer.
        n = int(cache.get(f"{cluster_id}/n") or 0)
        cache.put(f"{cluster_id}/{n:06d}", json.dumps(metrics))
        cache.put(f"{cluster_id}/n", str(n + 1))

    def epochs(self, cluster_id: str) -> list[dict[str, Any]]:
        cache = self._cache(self.EPOCHS)
        n = int(cache.get(f"{cluster_id}/n") or 0)
        if not n:
            return []
        values = cache.get_all([f"{cluster_id}/{i:06d}" for i in range(n)])
        return [json.loads(values[k]) for k in sorted(values)]

    def _worker_reads(self, cluster_id: str, worker: int) -> dict[str, Any] | None:
        raw = self._cache(self.READS).get(f"{cluster_id}/{int(worker)}")
        return json.loads(raw) if raw else None

    def _put_worker_reads(self, cluster_id: str, worker: int, total: dict[str, Any]) -> None:
        self._cache(self.READS).put(f"{cluster_id}/{int(worker)}", json.dumps(total))

    def reads(self, cluster_id: str) -> list[dict[str, Any]]:
        prefix = f"{cluster_id}/"
        with self._cache(self.READS).scan(page_size=256) as cursor:
            out = [json.loads(v) for k, v in cursor if isinstance(k, str) and k.startswith(prefix)]
        return sorted(out, key=lambda r: r.get("worker", 0))

    def watch_offset(self, cluster_id: str, watcher: str) -> int:
        return int(self._cache(self.WATCHES).get(f"{cluster_id}/{watcher}") or 0)

    def set_watch_offset(self, cluster_id: str, watcher: str, offset: int) -> None:
        self._cache(self.WATCHES).put(f"{cluster_id}/{watcher}", str(int(offset)))

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            finally:
                self._client = None


def default_state_dir() -> Path:
    return Path(os.environ.get(ENV_STATE_DIR, HomeFolder.of().clusters))


def open_store(conn=None, state_dir: str | Path | None = None) -> StateStore:
    """The Ignite store when a connection is given, else the local state directory."""
    if conn is not None:
        return IgniteStateStore(conn)
    return LocalStateStore(state_dir or default_state_dir())


def store_to_env(store: StateStore) -> dict[str, str]:
    """Tell a child process (supervisor, runtime) which store to use; the connection travels separately."""
    if isinstance(store, LocalStateStore):
        return {ENV_STATE_STORE: "local", ENV_STATE_DIR: str(store.dir)}
    return {ENV_STATE_STORE: "ignite"}


def store_from_env(environ: dict[str, str] | None = None) -> StateStore | None:
    env = os.environ if environ is None else environ
    kind = env.get(ENV_STATE_STORE)
    if kind == "local":
        return LocalStateStore(env[ENV_STATE_DIR])
    if kind == "ignite":
        from ignite_tf.connection import IgniteConnectionConfig

        conn = IgniteConnectionConfig.from_env(env)
        return IgniteStateStore(conn) if conn else None
    return None
