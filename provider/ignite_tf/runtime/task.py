"""Where this process stands in its TensorFlow cluster: its role, index and mode, read from ``TF_CONFIG``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from ignite_tf.contract import ENV_MODE, Mode, read_tf_config
from ignite_tf.contract import is_chief as contract_is_chief
from ignite_tf.errors import ConfigError


@dataclass
class TaskInfo:
    """This process's place in the cluster, from ``TF_CONFIG`` and ``IGNITE_TF_MODE``."""

    type: str | None  # chief, worker, ps; None outside a cluster
    index: int
    mode: Mode
    cluster: dict[str, list[str]] = field(default_factory=dict)

    @property
    def workers(self) -> int:
        return len(self.cluster.get("worker", [])) or 1

    @property
    def is_chief(self) -> bool:
        return contract_is_chief({"cluster": self.cluster, "task": {"type": self.type, "index": self.index}})

    @property
    def serves(self) -> bool:
        """True for tasks that only run a TF server (async workers and parameter servers)."""
        return self.type == "ps" or (self.mode is Mode.ASYNC and self.type == "worker")


def task_info(mode: Mode | str | None = None, environ: dict[str, str] | None = None) -> TaskInfo:
    env = os.environ if environ is None else environ
    config = read_tf_config(env)
    cluster = config.get("cluster") or {}
    task = config.get("task") or {}
    chosen = mode or env.get(ENV_MODE) or (Mode.ASYNC if "ps" in cluster else Mode.SYNC)
    try:
        chosen = Mode(chosen)
    except ValueError:
        raise ConfigError(f"mode must be one of {[m.value for m in Mode]} (got {chosen!r} from "
                          f"{'the mode argument' if mode else ENV_MODE})") from None
    if chosen is Mode.ASYNC and cluster and ("ps" not in cluster or "chief" not in cluster):
        raise ConfigError(f"async mode needs a 'chief' and 'ps' tasks in TF_CONFIG's cluster "
                          f"(got {sorted(cluster)}); use mode=sync for a workers-only cluster")
    if chosen is Mode.SYNC and "ps" in cluster:
        raise ConfigError("sync mode (MultiWorkerMirroredStrategy) has no parameter servers, but TF_CONFIG's "
                          "cluster lists 'ps' tasks: use mode=async, or plan the cluster without ps")
    return TaskInfo(task.get("type") if cluster else None, int(task.get("index", 0)), chosen, cluster)
