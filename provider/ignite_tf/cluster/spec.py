"""ClusterSpec: the tasks of a TensorFlow cluster, their ports, TF_CONFIG and environment.

Sync mode (MultiWorkerMirroredStrategy): workers only; worker 0 is the chief (TF's convention).
Async mode (ParameterServerStrategy): a chief (the coordinator), N workers and M parameter servers.
Worker i reads shard i of the ShardPlan and is placed on the plan's host for worker i.

Nothing here assumes local processes: a launcher (local or Kubernetes) turns the spec into running tasks.
"""

from __future__ import annotations

import json
import re
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from ignite_tf.cluster.environment import parse_env
from ignite_tf.cluster.supervision.settings import Supervision
from ignite_tf.contract import (  # noqa: F401 - ENV_CACHE, ENV_SHARD_PLAN, read_tf_config: their old home
    ENV_ATTEMPT,
    ENV_CACHE,
    ENV_CHECKPOINT_DIR,
    ENV_CLUSTER_ID,
    ENV_CODE,
    ENV_MODE,
    ENV_PROGRESS_FILE,
    ENV_RUN_DIR,
    ENV_RUN_STORE,
    ENV_SHARD_PLAN,
    ENV_TENSORBOARD_DIR,
    ENV_TF_CONFIG,
    PER_TASK_ENV,
    Mode,
    read_tf_config,
)
from ignite_tf.errors import ConfigError
from ignite_tf.ports import free_port
from ignite_tf.runstore.layout import RunFolder


class Role(StrEnum):
    CHIEF = "chief"
    WORKER = "worker"
    PS = "ps"


_ID_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")


def new_cluster_id(prefix: str = "tf") -> str:
    return f"{prefix}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def cluster_id_from(*parts: str) -> str:
    """A stable, DNS-safe cluster id from e.g. (dag_id, run_id, task_id, try_number)."""
    import hashlib

    text = "-".join(str(p) for p in parts)
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40].strip("-") or "tf"
    return f"{slug}-{hashlib.blake2b(text.encode(), digest_size=4).hexdigest()}"


def check_cluster_id(cluster_id: str) -> str:
    if not _ID_RE.match(cluster_id or ""):
        raise ConfigError(f"cluster id {cluster_id!r} is invalid: use lower-case letters, digits and '-', "
                          f"at most 63 characters, starting with a letter or digit")
    return cluster_id


@dataclass
class ClusterTask:
    """One task of a cluster: its role, index and address (``chief-0``, ``worker-1``, ``ps-0``)."""

    role: Role
    index: int
    host: str
    port: int

    @property
    def name(self) -> str:
        return f"{self.role.value}-{self.index}"

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass
class ClusterSpec:
    """Everything a launcher needs to start the cluster, JSON-able.

    :param job: what each task runs: ``{"entry_point": "module:function", ...}`` or
        ``{"command": [...], "job_dir": "..."}`` (a user script, as ``ignite-tf start``).
    """

    cluster_id: str
    cache: str
    mode: Mode
    tasks: list[ClusterTask]
    run_dir: str
    job: dict[str, Any]
    shard_plan_path: str | None = None
    supervision: Supervision = field(default_factory=Supervision)
    """How the supervisor restarts, waits for and stops the tasks."""
    env: dict[str, str] = field(default_factory=dict)
    """Variables set in every task, values recorded here (``env`` items ``NAME=VALUE``): never secrets."""
    pass_env: list[str] = field(default_factory=list)
    """Names of the launcher's variables passed to every task through the environment only (``env`` items
    ``NAME``); their values are never written down (see ``environment.py``)."""
    labels: dict[str, str] = field(default_factory=dict)
    """Who started the cluster, shown by ``ps`` and the Airflow page: ``dag_id``, ``run_id``, ``task_id``,
    ``try_number``, ``map_index`` for a cluster started by ``TFClusterOperator``; empty from the CLI."""
    run_store: str = ""
    """The run's URL in an object store (``ignite_tf.runstore``): ``run_dir`` is then a local staging folder
    whose logs, checkpoints, model and events are copied there. Empty: ``run_dir`` is the run."""

    def __post_init__(self):
        self.mode = Mode.parse(self.mode)
        self.supervision = Supervision.build(self.supervision)
        self.tasks = [t if isinstance(t, ClusterTask)
                      else ClusterTask(Role(t["role"]), t["index"], t["host"], t["port"]) for t in self.tasks]
        for t in self.tasks:
            t.role = Role(t.role)

    # -- layout --------------------------------------------------------------------------------------------
    @property
    def workers(self) -> int:
        return sum(1 for t in self.tasks if t.role is Role.WORKER)

    @property
    def chief(self) -> ClusterTask:
        """The task whose output is the job's output (async: the chief; sync: worker 0)."""
        for role in (Role.CHIEF, Role.WORKER):
            for t in self.tasks:
                if t.role is role and t.index == 0:
                    return t
        raise ConfigError(f"cluster {self.cluster_id} has no chief and no worker 0")

    def task(self, name: str) -> ClusterTask:
        for t in self.tasks:
            if t.name == name:
                return t
        raise ConfigError(f"cluster {self.cluster_id} has no task {name!r} "
                          f"(tasks: {', '.join(t.name for t in self.tasks)})")

    @property
    def folder(self) -> RunFolder:
        return RunFolder(Path(self.run_dir))

    @property
    def run_location(self) -> str:
        """Where the run lives for its readers: the store's URL, or the run folder."""
        return self.run_store or self.run_dir

    @property
    def checkpoint_dir(self) -> str:
        return str(self.folder.checkpoints)

    @property
    def tensorboard_dir(self) -> str:
        return str(self.folder.tensorboard)

    def log_path(self, task: ClusterTask) -> str:
        return str(self.folder.log(task.name))

    def progress_path(self, task: ClusterTask) -> str:
        return str(self.folder.progress(task.name))

    def task_dir(self, task: ClusterTask) -> str:
        """The task's working directory (async workers keep their data feed there)."""
        return str(self.folder.task_dir(task.name))

    # -- TF_CONFIG and environment ---------------------------------------------------------------------------
    def cluster_dict(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for role in (Role.CHIEF, Role.WORKER, Role.PS):
            members = sorted((t for t in self.tasks if t.role is role), key=lambda t: t.index)
            if members:
                out[role.value] = [t.address for t in members]
        return out

    def tf_config(self, task: ClusterTask) -> dict[str, Any]:
        return {"cluster": self.cluster_dict(), "task": {"type": task.role.value, "index": task.index}}

    def task_env(self, task: ClusterTask, attempt: int = 0) -> dict[str, str]:
        """What this spec sets in one task's environment; the supervisor adds the allowlisted rest of its own
        (the connection, ``pass_env``, PATH...), see ``environment.py``."""
        env = dict(self.env)
        env.update({
            ENV_TF_CONFIG: json.dumps(self.tf_config(task)),
            "TF_USE_LEGACY_KERAS": "1",
            ENV_CLUSTER_ID: self.cluster_id,
            ENV_MODE: self.mode.value,
            ENV_RUN_DIR: self.run_dir,
            ENV_CHECKPOINT_DIR: self.checkpoint_dir,
            ENV_TENSORBOARD_DIR: self.tensorboard_dir,
            ENV_CACHE: self.cache,
            ENV_ATTEMPT: str(attempt),
            ENV_PROGRESS_FILE: self.progress_path(task),
        })
        if self.shard_plan_path:
            env[ENV_SHARD_PLAN] = self.shard_plan_path
        if self.run_store:
            env[ENV_RUN_STORE] = self.run_store
        if self.job.get("shipped"):
            env[ENV_CODE] = ", ".join(self.job["shipped"])
        return env

    # -- JSON ------------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["mode"] = self.mode.value
        data["supervision"] = self.supervision.to_dict()
        data["tasks"] = [{"role": t.role.value, "index": t.index, "host": t.host, "port": t.port} for t in self.tasks]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ClusterSpec:
        data = dict(data)
        # A spec written before the settings were one value has them at its top level.
        flat = {k: data.pop(k) for k in [f.name for f in fields(Supervision)] if k in data}
        data["supervision"] = Supervision.build(data.get("supervision"), **flat)
        return cls(**data)

    def save(self, path: str | Path) -> None:
        path = Path(path)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.to_dict(), indent=2))
        tmp.replace(path)

    @classmethod
    def load(cls, path: str | Path) -> ClusterSpec:
        return cls.from_dict(json.loads(Path(path).read_text()))


def build_spec(*, cluster_id: str, cache: str, mode: Mode | str, workers: int, run_dir: str | Path,
               job: dict[str, Any], ps: int = 1, worker_hosts: list[str | None] | None = None,
               shard_plan_path: str | None = None, port_for=None,
               env: Iterable[str] | Mapping[str, str] | None = None,
               labels: Mapping[str, Any] | None = None, supervision: Supervision | None = None,
               run_store: str = "", **settings: Any) -> ClusterSpec:
    """Choose ports and hosts for every task.

    :param supervision: the supervisor's settings (default ``Supervision()``); ``settings`` (``max_restarts=``,
        ``restart_policy=``... the fields of ``Supervision``) change single ones.
    :param worker_hosts: where each worker should run (the ShardPlan's hosts); None/unknown -> 127.0.0.1.
    :param port_for: ``(host) -> port``; default a free local port (the local launcher).
    :param env: ``["NAME", "NAME=VALUE", ...]`` (or a mapping): variables for every task; ``NAME`` passes the
        launcher's own value.
    :param run_store: the run's object-store URL when ``run_dir`` is its local staging folder.
    """
    check_cluster_id(cluster_id)
    env_values, pass_env = parse_env(env)
    mode = Mode.parse(mode)
    supervision = Supervision.build(supervision, **settings)
    if workers < 1:
        raise ConfigError(f"workers must be at least 1 (got {workers})")
    if mode is Mode.ASYNC and ps < 1:
        raise ConfigError(f"async mode needs at least one parameter server (got ps={ps})")
    port_for = port_for or free_port
    hosts = list(worker_hosts or [])
    hosts += [None] * (workers - len(hosts))

    def where(h: str | None) -> str:
        # Consistent ids / node ids are not network hosts; the local launcher runs everything on loopback.
        return h if h and _looks_like_host(h) else "127.0.0.1"

    tasks: list[ClusterTask] = []
    if mode is Mode.ASYNC:
        tasks.append(ClusterTask(Role.CHIEF, 0, "127.0.0.1", 0))
    for i in range(workers):
        tasks.append(ClusterTask(Role.WORKER, i, where(hosts[i]), 0))
    if mode is Mode.ASYNC:
        for i in range(ps):
            tasks.append(ClusterTask(Role.PS, i, where(hosts[i % workers]), 0))
    taken: set[tuple[str, int]] = set()
    for t in tasks:
        port = port_for(t.host)
        while (t.host, port) in taken:
            port = port_for(t.host)
        taken.add((t.host, port))
        t.port = port
    return ClusterSpec(cluster_id=cluster_id, cache=cache, mode=mode, tasks=tasks, run_dir=str(run_dir), job=job,
                       shard_plan_path=shard_plan_path, supervision=supervision, env=env_values,
                       pass_env=list(pass_env), labels={str(k): str(v) for k, v in (labels or {}).items()},
                       run_store=run_store)


def _looks_like_host(value: str) -> bool:
    return value in ("localhost",) or bool(re.match(r"^[0-9.]+$|^[a-z0-9.-]+\.[a-z]{2,}$", value))
