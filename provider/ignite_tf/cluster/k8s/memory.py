"""A task's memory request, computed rather than chosen by hand.

    estimate = TensorFlow's baseline + model (parameters + optimizer slots + gradients)
               + batch buffers (prefetched batches) + reader buffers (pages decoded into NumPy), then headroom

The baseline was measured on this project's machine: a tf_keras task (TF 2.21, the Keras 2 API) that has
imported TensorFlow and fitted a small model in one process peaks at 674 MiB RSS; ``TF_BASELINE_MIB`` adds
room for a distributed task's gRPC server and the partition reader's client.
Parameters come from ``kubernetes.model_params``, or from the entry point's ``parameters(**kwargs)``
attribute when it has one (``ignite_tf.models:tabular_classifier`` does); a model of unknown size counts 0,
which the printed estimate says.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

TF_BASELINE_MIB = 800
OPTIMIZER_SLOTS = {"adam": 2, "adamw": 2, "rmsprop": 1, "adagrad": 1, "sgd": 1, "momentum": 1}
PREFETCHED_BATCHES = 4  # tf.data's AUTOTUNE prefetch and the batch being trained on
READER_PAGE_ROWS = 1024  # rows of one decoded page (ignite_tf.reader) ...
READER_PAGES = 4  # ... pages in flight per worker
HEADROOM = 1.25
MIB = 1 << 20


@dataclass
class MemoryEstimate:
    params: int | None
    optimizer_slots: int
    batch_size: int
    row_bytes: int
    baseline_mib: float = TF_BASELINE_MIB

    @property
    def model_mib(self) -> float:
        # Weights, one gradient per weight, and the optimizer's slots; float32.
        return (self.params or 0) * 4 * (2 + self.optimizer_slots) / MIB

    @property
    def batch_mib(self) -> float:
        return self.batch_size * self.row_bytes * PREFETCHED_BATCHES / MIB

    @property
    def reader_mib(self) -> float:
        return READER_PAGE_ROWS * READER_PAGES * self.row_bytes * 2 / MIB  # wire bytes + decoded columns

    @property
    def total_mib(self) -> int:
        raw = self.baseline_mib + self.model_mib + self.batch_mib + self.reader_mib
        return int(math.ceil(raw * HEADROOM / 16) * 16)

    def quantity(self) -> str:
        return f"{self.total_mib}Mi"

    def describe(self) -> str:
        params = "unknown (counted as 0; set kubernetes.model_params)" if self.params is None else f"{self.params:,}"
        return (f"memory estimate per task: {self.quantity()} = (TensorFlow baseline {self.baseline_mib:.0f} MiB "
                f"+ model {self.model_mib:.1f} MiB [parameters {params}, {self.optimizer_slots} optimizer slot(s)] "
                f"+ batches {self.batch_mib:.1f} MiB [{PREFETCHED_BATCHES} x {self.batch_size} rows x "
                f"{self.row_bytes} B] + reader {self.reader_mib:.1f} MiB) x {HEADROOM} headroom")

    def to_dict(self) -> dict:
        return {**asdict(self), "total_mib": self.total_mib}


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


def row_bytes_of(plan) -> int:
    """Bytes of one row as the reader yields it: 4 per column (float32/int32), at least 64."""
    columns = len(getattr(plan.partition_map, "columns", None) or []) if plan is not None else 0
    return max(64, 4 * (columns or 17))


def entry_point_params(job: dict) -> int | None:
    """Parameters of an entry point's model, from its ``parameters(**model_args)`` attribute, without TF."""
    entry = job.get("entry_point")
    if not entry:
        return None
    import importlib

    module, _, name = entry.partition(":")
    try:
        fn = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        return None
    count = getattr(fn, "parameters", None)
    if count is None:
        return None
    kwargs = _model_args(job.get("args", []))
    try:
        return int(count(**kwargs))
    except TypeError:
        return None


def _model_args(args: list[str]) -> dict:
    import json

    out = {}
    for i, a in enumerate(args[:-1]):
        if a == "--model-arg":
            key, _, value = args[i + 1].partition("=")
            try:
                out[key] = json.loads(value)
            except ValueError:
                out[key] = value
    return out


def estimate(job: dict, plan=None, params: int | None = None, optimizer: str = "adam") -> MemoryEstimate:
    batch = 64
    args = job.get("args", [])
    if "--batch-size" in args[:-1]:
        batch = int(args[args.index("--batch-size") + 1])
    params = params if params is not None else entry_point_params(job)
    return MemoryEstimate(params, OPTIMIZER_SLOTS.get(optimizer, 2), batch, row_bytes_of(plan))
