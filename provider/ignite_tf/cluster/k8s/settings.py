"""KubernetesSettings: where and how a cluster's pods run. One name per setting from YAML (``kubernetes:``)
to the operator (``kubernetes=``) and the CLI (``--k8s-*``)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any

from ignite_tf.errors import ConfigError

DEFAULT_CONN_ID = "kubernetes_default"
# Node label naming the Ignite host next to which a Kubernetes node sits (the local Kubernetes sets it).
HOST_LABEL = "ignite-tf.io/host"
TF_PORT = 2222  # Kubeflow's TFJob port: every pod has its own IP, so one port serves all tasks


class Placement(StrEnum):
    """How firmly a worker goes to the Kubernetes node of the Ignite node holding its partitions."""

    REQUIRED = "required"
    """The worker waits (Pending) until that node can take it; the start-up deadline names why it cannot."""
    PREFERRED = "preferred"
    """The scheduler prefers that node and takes another one when it is full."""
    NONE = "none"
    """Anywhere."""

    @classmethod
    def parse(cls, value: Placement | str | None) -> Placement:
        """``value`` as a Placement (None or empty: the default, ``PREFERRED``)."""
        return _choice(cls, value, DEFAULT_PLACEMENT, "kubernetes.placement")


DEFAULT_PLACEMENT = Placement.PREFERRED


class SupervisorMode(StrEnum):
    """Where a Kubernetes cluster's supervisor runs."""

    POD = "pod"
    """A Deployment of one pod in the cluster's namespace: Kubernetes brings it back if it dies, and the new one
    re-adopts the running task pods from the stored state."""
    PROCESS = "process"
    """A detached process on the launching host (it and the training's supervision end with that host)."""

    @classmethod
    def parse(cls, value: SupervisorMode | str | None) -> SupervisorMode:
        """``value`` as a SupervisorMode (None or empty: the default, ``POD``)."""
        return _choice(cls, value, DEFAULT_SUPERVISOR, "kubernetes.supervisor")


DEFAULT_SUPERVISOR = SupervisorMode.POD


def _choice(kind: type[StrEnum], value, default: StrEnum, key: str) -> StrEnum:
    """``value`` as a member of ``kind`` (None or empty: ``default``); a clear error naming ``key`` otherwise."""
    try:
        return kind(value or default)
    except ValueError:
        raise ConfigError(f"{key} must be one of {[m.value for m in kind]} (got {value!r})") from None


# Settings that were removed, and why; a spec that still sets one is refused with this.
REMOVED = {
    "warm_pool": "it saved about 1.5 s on a launch that followed a finished one, cost a waiting pod per task, and "
                 "let anyone holding the Ignite connection run code in those pods; remove the setting (a launch "
                 "starts new pods, TensorFlow imported once per pod)",
}


@dataclass
class KubernetesSettings:
    """Settings of the Kubernetes launcher (YAML ``training.kubernetes``, operator ``kubernetes=``).

    :param namespace: where the pods go (default: the connection's namespace, else ``default``).
    :param image: the task image (e.g. ``make image``'s archive pushed to your registry); needed unless an
        ``ignite_tf.task_image`` entry point offers a default (the source tree's dev tooling: the local image).
    :param conn_id: the Airflow connection of type ``kubernetes`` (kubeconfig or in-cluster).
    :param resources: ``{"requests": {...}, "limits": {...}}``; memory left out is the computed estimate.
    :param service_account: the task pods' service account, with its API token mounted; without one they get
        no token (``automountServiceAccountToken: false``): the tasks never call the API.
    :param node_selector: labels every pod's node must have.
    :param tolerations: Kubernetes tolerations, as in a pod spec.
    :param volumes: extra ``[{"volume": {...pod volume...}, "mount": {...volumeMount...}}]``.
    :param labels: extra labels on every object.
    :param placement: a :class:`Placement` (``required``, ``preferred`` or ``none``; default ``preferred``): workers
        next to their Ignite nodes.
    :param ignite_selector: label selector of Ignite's pods in this cluster (``app=ignite``); without it,
        Ignite nodes are matched to Kubernetes nodes by host address and the ``ignite-tf.io/host`` label.
    :param ignite_namespace: namespace of Ignite's pods (default: ``namespace``).
    :param run_volume: only for a folder as run root: the volume holding the run folder (logs, checkpoints,
        SavedModel, TensorBoard), mounted at its own path, shared by every node and Airflow (a ReadWriteMany
        claim); default a ``hostPath`` of it, which works on the launching host's node only. With an
        object-store run root (``s3://...``) the pods mount nothing and this is not used.
    :param host_network: tasks use the node's network (for Ignite reachable on the node only, as locally).
    :param dns: TF_CONFIG names the pods by their headless Service's DNS names; False (a cluster without a
        DNS add-on, like the local one) makes every task name resolve to 127.0.0.1 (host network, one node).
    :param model_params: parameters of a script's model for the memory estimate (an entry point's are counted).
    :param supervisor: where the cluster's supervisor runs: a :class:`SupervisorMode` (``pod``, the default: a
        Deployment of one pod in the namespace, so the training outlives the launching process and the
        supervisor's own pod; ``process``: a detached process on the launching host, which dies with it).
    :param max_runtime: seconds a cluster may run in all (restarts included); past it the supervisor stops it
        and every pod carries the rest as ``activeDeadlineSeconds`` (so pods end even without a supervisor).
        None: no limit.
    :param standby: keep one warm pod per task (TensorFlow imported, waiting) beside a sync cluster's running
        attempt, so that a whole-cluster restart (a lost worker) is handed to pods that are already scheduled
        and imported instead of new ones (``ignite_tf.cluster.k8s.standby``). Off by default: it doubles the
        pods' memory requests and costs a TensorFlow import per task after each (re)start.
    """

    namespace: str | None = None
    image: str | None = None
    conn_id: str = DEFAULT_CONN_ID
    resources: dict[str, dict[str, str]] = field(default_factory=dict)
    service_account: str | None = None
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict[str, Any]] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, str] = field(default_factory=dict)
    placement: Placement = DEFAULT_PLACEMENT
    ignite_selector: str | None = None
    ignite_namespace: str | None = None
    run_volume: dict[str, Any] | None = None
    host_network: bool = False
    dns: bool = True
    model_params: int | None = None
    supervisor: SupervisorMode = DEFAULT_SUPERVISOR
    max_runtime: float | None = None
    standby: bool = False

    def __post_init__(self):
        self.placement = Placement.parse(self.placement)
        self.supervisor = SupervisorMode.parse(self.supervisor)
        if self.max_runtime is not None and (isinstance(self.max_runtime, bool)
                                             or not isinstance(self.max_runtime, int | float)
                                             or self.max_runtime <= 0):
            raise ConfigError(f"kubernetes.max_runtime: seconds > 0 or null (got {self.max_runtime!r})")
        if not isinstance(self.standby, bool):
            raise ConfigError(f"kubernetes.standby: true or false (got {self.standby!r})")
        unknown = set(self.resources) - {"requests", "limits"}
        if unknown:
            raise ConfigError(f"kubernetes.resources: {sorted(unknown)} unknown; use requests and limits")
        for i, v in enumerate(self.volumes):
            if not isinstance(v, dict) or set(v) != {"volume", "mount"}:
                raise ConfigError(f"kubernetes.volumes[{i}]: give {{volume: {{...}}, mount: {{...}}}}")
        if not self.dns and not self.host_network:
            raise ConfigError("kubernetes.dns: false needs host_network: true (tasks reach each other on "
                              "127.0.0.1 of one node)")

    @classmethod
    def parse(cls, value: KubernetesSettings | dict[str, Any] | None) -> KubernetesSettings:
        if isinstance(value, KubernetesSettings):
            return value
        value = dict(value or {})
        for name, why in REMOVED.items():
            if value.pop(name, None):  # 0 or None: what a cluster recorded before the removal, so nothing asked
                raise ConfigError(f"kubernetes.{name} was removed in 0.2.0: {why}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ConfigError(f"kubernetes: unknown setting(s) {unknown} (known: {', '.join(sorted(known))})")
        return cls(**value)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["placement"] = self.placement.value
        data["supervisor"] = self.supervisor.value
        return data
