"""A task's memory request, computed from what the task will hold rather than chosen by hand.

    estimate = TensorFlow's measured baseline + model (copies of the weights: weights + gradients + optimizer
               slots, each at the measured bytes per weight)
               + input (tf.data's prefetched batches and the blocks the reader hands it, at the table's row width)
               + reader (scan pages in flight, decoded)
               + growth (steps the task trains x the measured growth per step, when several workers train), then
               headroom

- **Baseline and bytes per parameter**: what a pod's cgroup is charged, measured in real pods by
  ``bench/k8s/memory.py --write-baseline`` (2-worker sync clusters doing what a task does: imports, strategy,
  gRPC server, a model fitted with the runtime's backup and saved) at a tiny and a large model, the largest
  peaks of several runs: the tiny one's is the baseline, the growth per parameter to the large one's (Adam)
  ``param_bytes``; in ``ignite_tf/resources/tf_baseline.json`` with the date, TensorFlow version and method. A
  weight costs far more than its 4 bytes per copy (TensorFlow 2.21: about 30): the optimizer's update
  temporaries, the collectives' buffers, the checkpoints' serialisation and the page cache of what they write.
- **The chief and the others**: a sync cluster's chief alone saves the model (its large model peaked 13-22%
  above its peer), so the other workers' cost per parameter is measured apart (``peer_param_bytes``) and the
  Kubernetes launcher gives their pods ``MemoryEstimate.for_peer``; an async cluster's tasks get the chief's.
- **Shared libraries** (``process_peak_mib`` in the same file, from ``bench/tf_baseline_memory.py``, is about
  330 MiB more): a pod is charged for TensorFlow's libraries only as the first on its node to read them, as
  clean page cache the kernel reclaims at the limit; counting them would double every small task's request.
- **Row width**: the columns the task reads, from the cache itself (``ignite_tf.reader.columns.cache_columns``)
  with the job's ``label_column`` and ``features`` (``ignite_tf.cluster.job.TrainingJob``): features are fed
  as one float32 matrix, the label in its own type, and the reader decodes every column in its own type.
- **Growth**: a worker of a multi-worker ``fit`` (TensorFlow 2.21, MultiWorkerMirroredStrategy) keeps 7-12 KiB
  more anonymous memory after each training step, for good (``bench/k8s/memory_growth.py``: pods and local
  processes, and a bare 2-worker tf_keras ``fit`` over memory; one process's ``fit``, the reader and the
  ``tf.data`` pipeline alone keep flat): ``epochs`` x the steps of an epoch (``steps_per_epoch``, else the
  largest shard of the plan's first epoch over the batch) x ``STEP_GROWTH_BYTES``.
- **Model**: parameters from ``kubernetes.model_params`` or the entry point's ``parameters(**model_args)``
  attribute; the optimizer from the entry point's ``optimizer`` model argument (its default when not given),
  or its ``optimizer`` attribute. ``model_footprint`` reads both from a built tf_keras model, which is how the
  tests check the table of slots. What is not known is counted as the largest usual case and said so.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any

from ignite_tf.cluster.job import TrainingJob

# Copies of the weights an optimizer keeps, as tf_keras 2.21 builds them (``model_footprint`` measures it):
# its SGD makes a momentum slot per weight even with momentum=0; RMSprop's ``centered`` adds a second.
OPTIMIZER_SLOTS = {"sgd": 1, "momentum": 1, "rmsprop": 1, "adagrad": 1, "lion": 1, "adam": 2, "adamw": 2,
                   "nadam": 2, "adamax": 2, "adadelta": 2, "ftrl": 2}
ASSUMED_OPTIMIZER = "adam"  # the usual choice, and the larger of the common ones: never below
PREFETCHED_BATCHES = 4  # ignite_tf.reader.blocks.PREFETCH_BATCHES, and the batch being trained on
BLOCKS_HELD = 3  # ignite_tf.data: the block being cut into batches, the one read ahead, the one being read
READER_PAGE_ROWS = 1024  # rows of one scan page (the reader's page_size) ...
READER_PAGES = 5  # ... pages in flight: the reader's scans_ahead (4) and the one being decoded
ASSUMED_ROW_BYTES = 256  # a row of a table that could not be read: 64 float32 columns
STEP_GROWTH_BYTES = 12 * 1024  # the largest growth per step measured (see Growth above): never below
# Over the measured charge: none. The baseline and bytes per parameter are the largest container's peak with
# its page cache unconstrained (a 3Gi limit), so they hold their own slack: a tighter limit makes the kernel
# reclaim that cache (checkpoints written, libraries read) before it would kill the task. More would push
# the smaller containers past the goal (+25%).
HEADROOM = 1.0
BASELINE_FILE = "tf_baseline.json"
MIB = 1 << 20


@dataclass(frozen=True)
class Baseline:
    """TensorFlow's baseline as measured by ``bench/tf_baseline_memory.py`` (see ``BASELINE_FILE``)."""

    peak_mib: float
    measured: str
    """UTC date of the measurement."""
    tensorflow: str
    how: str
    """What was measured, and with what (cgroup ``memory.peak`` or peak RSS of the task process)."""
    param_bytes: float = 16.0
    """Memory per parameter, measured with ``param_bytes_optimizer`` on the chief (the largest container)."""
    param_bytes_optimizer: str = "adam"
    peer_param_bytes: float | None = None
    """The same on the largest of a sync cluster's other workers, which do not save the model (None: not
    measured, ``param_bytes``)."""
    samples_mib: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def copy_bytes_of(self, peer: bool = False) -> float:
        """Measured bytes of one copy of a weight (``param_bytes``, or ``peer_param_bytes`` for a sync cluster's
        worker that is not the chief, over the copies the measured optimizer keeps)."""
        measured = self.peer_param_bytes if peer and self.peer_param_bytes else self.param_bytes
        return measured / (2 + optimizer_slots(self.param_bytes_optimizer))

    @property
    def copy_bytes(self) -> float:
        """``copy_bytes_of`` the chief."""
        return self.copy_bytes_of()


@lru_cache(maxsize=1)
def tf_baseline() -> Baseline:
    """The measured baseline shipped with the provider (``ignite_tf/resources/tf_baseline.json``)."""
    from importlib.resources import files

    data = json.loads(files("ignite_tf").joinpath("resources", BASELINE_FILE).read_text())
    known = {k: data.pop(k) for k in ("peak_mib", "measured", "tensorflow", "how", "param_bytes",
                                      "param_bytes_optimizer", "peer_param_bytes", "samples_mib") if k in data}
    return Baseline(**known, extra=data)


@dataclass(frozen=True)
class RowWidth:
    """Bytes of one row: ``fed`` as training batches hold it (float32 features + the label in its type) and
    ``read`` as the reader decodes it (the key and every column read, each in its own type)."""

    fed: int
    read: int
    source: str
    """Where the width came from: the table's name and columns, or why it is assumed."""

    @classmethod
    def of_columns(cls, dtypes: dict[str, Any], features: list[str], label: str | None, key: str | None,
                   source: str) -> RowWidth:
        import numpy as np

        def size(name: str) -> int:
            dtype = np.dtype(dtypes[name])
            return dtype.itemsize if dtype.kind in "biufc" else 8 + 32  # a string: pointer + a short value

        fed = 4 * len(features) + (size(label) if label else 0)
        read = sum(size(n) for n in dict.fromkeys([*([key] if key else []), *features, *([label] if label else [])])
                   if n in dtypes)
        return cls(fed, max(fed, read), source)

    @classmethod
    def assumed(cls, why: str) -> RowWidth:
        return cls(ASSUMED_ROW_BYTES, ASSUMED_ROW_BYTES, f"assumed {ASSUMED_ROW_BYTES} B ({why})")


@dataclass(frozen=True)
class ModelSize:
    """Parameters of the model (None: unknown) and its optimizer's name (None: unknown, Adam assumed)."""

    params: int | None
    optimizer: str | None

    @property
    def slots(self) -> int:
        return optimizer_slots(self.optimizer)


def optimizer_slots(optimizer: str | None) -> int:
    """Copies of the weights the named optimizer keeps (``OPTIMIZER_SLOTS``); unknown counts as Adam's."""
    return OPTIMIZER_SLOTS.get((optimizer or ASSUMED_OPTIMIZER).lower().replace("_", ""),
                               OPTIMIZER_SLOTS[ASSUMED_OPTIMIZER])


def model_footprint(model) -> tuple[int, int]:
    """(parameters, optimizer slots per weight) of a compiled tf_keras model, measured on its variables: the
    optimizer is built over the trainable weights and its slot variables counted."""
    import numpy as np

    params = int(model.count_params())
    weights = [v for v in model.trainable_variables]
    trainable = sum(int(np.prod(v.shape)) for v in weights)
    opt = model.optimizer
    opt.build(weights)
    variables = opt.variables() if callable(opt.variables) else opt.variables
    slot_values = sum(int(np.prod(v.shape)) for v in variables if len(v.shape) and "iteration" not in v.name)
    return params, round(slot_values / trainable) if trainable else 0


@dataclass
class MemoryEstimate:
    params: int | None
    optimizer_slots: int
    batch_size: int
    row: RowWidth
    shuffle_buffer: int = 0
    optimizer: str | None = None
    baseline: Baseline = field(default_factory=tf_baseline)
    steps: int = 0
    """Training steps of one worker over the whole run, when several workers train together (else 0)."""
    peer: bool = False
    """For a sync cluster's worker that is not the chief (``for_peer``): its model part at the peers' measured
    bytes per parameter (the chief alone saves the model)."""

    def for_peer(self) -> MemoryEstimate:
        """The estimate of a sync cluster's other workers (``peer``)."""
        from dataclasses import replace

        return replace(self, peer=True)

    @property
    def baseline_mib(self) -> float:
        return self.baseline.peak_mib

    @property
    def row_bytes(self) -> int:
        return self.row.fed

    @property
    def model_mib(self) -> float:
        # Weights, one gradient per weight, and the optimizer's slots, each at the measured bytes of a copy.
        return (self.params or 0) * self.baseline.copy_bytes_of(self.peer) * (2 + self.optimizer_slots) / MIB

    @property
    def block_rows(self) -> int:
        from ignite_tf.reader.blocks import BLOCK_ROWS

        return max(BLOCK_ROWS, self.batch_size, self.shuffle_buffer)

    @property
    def batch_mib(self) -> float:
        rows = PREFETCHED_BATCHES * self.batch_size + BLOCKS_HELD * self.block_rows
        return rows * self.row.fed / MIB

    @property
    def reader_mib(self) -> float:
        return READER_PAGE_ROWS * READER_PAGES * self.row.read * 2 / MIB  # wire bytes + decoded columns

    @property
    def growth_mib(self) -> float:
        return self.steps * STEP_GROWTH_BYTES / MIB

    @property
    def total_mib(self) -> int:
        raw = self.baseline_mib + self.model_mib + self.batch_mib + self.reader_mib + self.growth_mib
        return int(math.ceil(raw * HEADROOM / 16) * 16)

    def quantity(self) -> str:
        return f"{self.total_mib}Mi"

    def describe(self) -> str:
        params = "unknown (counted as 0; set kubernetes.model_params)" if self.params is None else f"{self.params:,}"
        optimizer = self.optimizer or f"unknown ({ASSUMED_OPTIMIZER} assumed)"
        who = "a sync worker but the chief" if self.peer else "per task"
        return (f"memory estimate {who}: {self.quantity()} = (TensorFlow baseline {self.baseline_mib:.0f} MiB "
                f"[measured {self.baseline.measured}, TensorFlow {self.baseline.tensorflow}] "
                f"+ model {self.model_mib:.1f} MiB [parameters {params} x {2 + self.optimizer_slots} copies x "
                f"{self.baseline.copy_bytes_of(self.peer):.1f} B; optimizer {optimizer}: "
                f"{self.optimizer_slots} slot(s)] + input {self.batch_mib:.1f} MiB [{PREFETCHED_BATCHES} x "
                f"{self.batch_size} + {BLOCKS_HELD} x {self.block_rows} rows x {self.row.fed} B] + reader "
                f"{self.reader_mib:.1f} MiB [{self.row.read} B a row, {self.row.source}] + growth "
                f"{self.growth_mib:.1f} MiB [{self.steps:,} steps x {STEP_GROWTH_BYTES / 1024:.0f} KiB]) x {HEADROOM} "
                f"headroom")

    def to_dict(self) -> dict:
        return {"params": self.params, "optimizer": self.optimizer, "optimizer_slots": self.optimizer_slots,
                "batch_size": self.batch_size, "shuffle_buffer": self.shuffle_buffer, "row": asdict(self.row),
                "baseline_mib": self.baseline_mib, "model_mib": self.model_mib, "batch_mib": self.batch_mib,
                "reader_mib": self.reader_mib, "steps": self.steps, "growth_mib": self.growth_mib, "headroom": HEADROOM,
                "peer": self.peer, "total_mib": self.total_mib}


def parse_mib(quantity: str | None) -> float | None:
    """A Kubernetes memory quantity (``512Mi``, ``1G``, ``1073741824``) in MiB."""
    if not quantity:
        return None
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024, "Ti": 1 << 20, "k": 1e3 / MIB, "M": 1e6 / MIB, "G": 1e9 / MIB,
             "T": 1e12 / MIB}
    text = str(quantity)
    for unit in sorted(units, key=len, reverse=True):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * units[unit]
    return float(text) / MIB


def row_width(plan, conn=None, label_column: str | None = None, features: list[str] | None = None) -> RowWidth:
    """The width of the rows the task reads from the plan's cache, asked from the cache itself (the columns
    the runtime picks: ``features``, default every numeric column but the key and the label). ``conn``: the
    cluster (default: ``IGNITE_TF_*`` of this process). A cache that cannot be read gives an assumed width."""
    import numpy as np

    from ignite_tf.connection import IgniteConnectionConfig
    from ignite_tf.defaults import DEFAULT_LABEL_COLUMN
    from ignite_tf.reader.columns import cache_columns

    if plan is None:
        return RowWidth.assumed("no shard plan")
    conn = conn or IgniteConnectionConfig.from_env()
    if conn is None:
        return RowWidth.assumed("no Ignite connection to read the table's columns")
    label = label_column or DEFAULT_LABEL_COLUMN
    try:
        names, label_name, dtypes, layout = cache_columns(plan, conn, label, features)
    except Exception as exc:  # noqa: BLE001 - an estimate must not stop a launch; the printed line says why
        return RowWidth.assumed(f"columns of '{plan.partition_map.cache}' not read: {str(exc)[:120]}")
    key = layout[2][0]
    numeric = [n for n in names if np.dtype(dtypes[n]).kind in "biuf"]
    return RowWidth.of_columns(dtypes, numeric, label_name, key,
                               f"table '{plan.partition_map.cache}': {len(numeric)} feature(s) + label "
                               f"{label_name} ({dtypes[label_name]})")


def entry_point_model(job: TrainingJob | dict) -> ModelSize:
    """Parameters and optimizer of an entry point's model, without TensorFlow: its ``parameters(**model_args)``
    attribute, and its ``optimizer`` model argument (the function's default when not given) or attribute."""
    job = TrainingJob.from_job(job)
    entry = job.model_entry_point
    if not entry:
        return ModelSize(None, None)
    import inspect

    module, _, name = entry.partition(":")
    try:
        fn = getattr(_import_shipped(module, job.job_dir), name)
    except (ImportError, AttributeError):
        return ModelSize(None, None)
    kwargs = dict(job.model_args)
    params = None
    count = getattr(fn, "parameters", None)
    if count is not None:
        try:
            params = int(count(**kwargs))
        except TypeError:
            params = None
    optimizer = kwargs.get("optimizer")
    if optimizer is None:
        try:
            default = inspect.signature(fn).parameters.get("optimizer")
        except (TypeError, ValueError):
            default = None
        optimizer = default.default if default is not None and default.default is not inspect.Parameter.empty \
            else getattr(fn, "optimizer", None)
    return ModelSize(params, str(optimizer).lower() if isinstance(optimizer, str) else None)


def _import_shipped(module: str, job_dir: str | None):
    """``module``, from the job's own folder when it is not importable here: the launcher estimates where the
    user's code is a folder shipped to the tasks, not on this process's path (a model defined there would
    otherwise count as 0 parameters)."""
    import importlib
    import sys
    from pathlib import Path

    try:
        return importlib.import_module(module)
    except ImportError:
        if not job_dir or not Path(job_dir).is_dir():
            raise
    sys.path.insert(0, str(job_dir))
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(str(job_dir))


def estimate(job: TrainingJob | dict, plan=None, params: int | None = None, optimizer: str | None = None, *,
             conn=None, row: RowWidth | None = None) -> MemoryEstimate:
    """The memory of one task of ``job`` (a TrainingJob, or a job dict as ``TrainingJob.from_job`` reads it)
    over ``plan``'s cache.

    :param params: the model's parameters (``kubernetes.model_params``); default: the entry point's count.
    :param optimizer: the optimizer's name; default: the entry point's (Adam assumed when unknown).
    :param conn: the Ignite cluster to read the table's columns from (default: this process's ``IGNITE_TF_*``).
    :param row: the row width, when already known (else read from the table).
    """
    job = TrainingJob.from_job(job)
    model = entry_point_model(job)
    params = params if params is not None else model.params
    optimizer = (optimizer or model.optimizer or "").lower() or None
    if row is None:
        row = row_width(plan, conn, job.label_column, list(job.features) or None)
    return MemoryEstimate(params, optimizer_slots(optimizer), job.batch_size, row, job.shuffle_buffer, optimizer,
                          steps=training_steps(job, plan))


def training_steps(job: TrainingJob, plan) -> int:
    """Steps one worker trains over the run when several train together (``MemoryEstimate.steps``): ``epochs``
    x ``steps_per_epoch``, else x the largest shard of the plan's first epoch over the batch size. 0 for one
    worker, or without ``epochs`` (a script's own loop: not known)."""
    if plan is None or not job.epochs:
        return 0
    rows = plan.rows_per_worker(0)
    if len(rows) < 2:
        return 0
    return job.epochs * (job.steps_per_epoch or max(rows) // max(job.batch_size, 1))
