"""Trained on what was validated: the validated data's fingerprints, and the training's check against them.

Validation fingerprints every read task of every shard while it reads (:mod:`ignite_tf.reader.fingerprint`);
the gate's summary carries them (``ValidationSummary.fingerprints``), the training's ShardPlan carries them to
every worker (``ShardPlan.fingerprints``), and each worker compares every task it reads to the end with
:class:`DataCheck`: the same rows, the same keys, the same values in every column both read. On a difference
the worker fails with :class:`DataChangedError` naming the partition and what changed (``on_data_change:
fail``, the default), or logs and records it (``warn``: ``DataCheck.changes``, kept in the cluster state
with the worker's reads).

What is compared: a training task that validation read as the same task (a whole partition, or the same
key-hash slice). A slice the training's epoch cuts differently from validation's (record-level cuts of a
reshuffled plan with fewer partitions than workers) is not compared: its rows are in no validated slice of
the same bounds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from enum import StrEnum

from ignite_tf.errors import ConfigError, DataChangedError
from ignite_tf.reader.fingerprint import combine, task_key

log = logging.getLogger(__name__)


class OnDataChange(StrEnum):
    """What the training does when the rows it reads are not the rows validation read."""

    FAIL = "fail"
    """The worker fails naming the partitions and what changed; the run fails (not retried)."""
    WARN = "warn"
    """The worker logs it and records it in the cluster state; the training goes on."""

    @classmethod
    def parse(cls, value: str | OnDataChange | None) -> OnDataChange:
        if value is None:
            return cls.FAIL
        try:
            return cls(str(value).lower())
        except ValueError:
            raise ConfigError(f"on_data_change must be one of {[p.value for p in cls]} (got {value!r})") from None


@dataclass
class Fingerprints:
    """Per read task (``task_key``), ``{"rows", "keys", "columns": {name: hash}}``; ``columns``: those read."""

    columns: list[str]
    tasks: dict[str, dict] = field(default_factory=dict)

    @classmethod
    def of_reader(cls, reader) -> Fingerprints:
        """What a ``PartitionReader(fingerprint=True)`` fingerprinted so far (its tasks read to the end)."""
        return cls([c for c in reader.schema if c != reader.key_column], dict(reader.fingerprints.done))

    @classmethod
    def merged(cls, parts: list[Fingerprints]) -> Fingerprints:
        """Several shards' (disjoint tasks; a task read twice is added once)."""
        columns = sorted(set.intersection(*(set(p.columns) for p in parts))) if parts else []
        tasks: dict[str, dict] = {}
        for part in parts:
            tasks.update(part.tasks)
        return cls(columns, tasks)

    def partitions(self) -> dict[int, dict]:
        """Per partition, its tasks' fingerprints added up (the partition's, when the tasks cover it)."""
        out: dict[int, dict] = {}
        for key, fp in self.tasks.items():
            p = int(key.split(":")[0])
            out[p] = combine(out[p], fp) if p in out else fp
        return out

    # A task as ``[rows, keys, hash per column in self.columns order]``: XCom and JSON stay about 20 bytes a
    # number, not a dict per task.
    def to_dict(self) -> dict:
        return {"columns": list(self.columns), "rows": sum(fp["rows"] for fp in self.tasks.values()),
                "tasks": {k: [fp["rows"], fp["keys"], *(fp["columns"].get(c, 0) for c in self.columns)]
                          for k, fp in sorted(self.tasks.items(), key=lambda kv: _order(kv[0]))}}

    @classmethod
    def from_dict(cls, data: dict) -> Fingerprints:
        columns = list(data["columns"])
        return cls(columns, {k: {"rows": int(v[0]), "keys": int(v[1]),
                                 "columns": {c: int(h) for c, h in zip(columns, v[2:], strict=True)}}
                             for k, v in data["tasks"].items()})


def _order(key: str) -> tuple[int, ...]:
    return tuple(int(x) for x in key.split(":"))


def difference(task: str, validated: dict, read: dict, columns: list[str]) -> dict | None:
    """What changed in one task between validation and a training read (None: nothing)."""
    changed = [c for c in columns if validated["columns"].get(c, 0) != read["columns"].get(c, 0)]
    if validated["rows"] == read["rows"] and validated["keys"] == read["keys"] and not changed:
        return None
    partition = int(task.split(":")[0])
    out = {"partition": partition, "task": task, "validated_rows": validated["rows"], "read_rows": read["rows"],
           "keys_changed": validated["keys"] != read["keys"], "columns_changed": changed}
    return out


def describe(change: dict) -> str:
    """``partition 17: 3 rows validated, 4 read; keys added or removed; values changed in f0, label``."""
    parts = [f"{change['validated_rows']} rows validated, {change['read_rows']} read"]
    if change["keys_changed"]:
        delta = change["read_rows"] - change["validated_rows"]
        parts.append("rows added or removed" if delta else "as many rows but other keys (rows replaced)")
    if change["columns_changed"]:
        parts.append(f"values changed in {', '.join(change['columns_changed'])}")
    where = f"partition {change['partition']}" + ("" if change["task"] == str(change["partition"])
                                                  else f" (key-hash slice {change['task']})")
    return f"{where}: {'; '.join(parts)}"


class DataCheck:
    """The training's side: each task a reader reads to its end, compared with validation's fingerprint.

    Pass it as ``PartitionReader(fingerprint=check)``. ``changes``: what differed, in reading order.

    :param expected: the validated fingerprints.
    :param on_change: fail (raise :class:`DataChangedError`) or warn.
    :param cache: named in messages.
    """

    def __init__(self, expected: Fingerprints, on_change: OnDataChange | str | None = None, *, cache: str = ""):
        self.expected, self.on_change, self.cache = expected, OnDataChange.parse(on_change), cache
        self.changes: list[dict] = []
        self.checked = 0

    def __call__(self, task, fingerprint: dict) -> None:
        key = task_key(task)
        validated = self.expected.tasks.get(key)
        if validated is None:
            return
        self.checked += 1
        # Values are compared in the columns both read (validation reads those its suite names).
        columns = [c for c in self.expected.columns if c in fingerprint["columns"]]
        change = difference(key, validated, fingerprint, columns)
        if change is None:
            return
        self.changes.append(change)
        message = (f"cache {self.cache!r} changed since validation: {describe(change)}. The model would train "
                   f"on rows no expectation checked: validate again (rerun the DAG), or set on_data_change: warn "
                   f"to train on the current rows and record the change")
        if self.on_change is OnDataChange.FAIL:
            raise DataChangedError(message, list(self.changes))
        log.warning("%s", message.split(". The model")[0] + " (on_data_change: warn: training goes on)")


__all__ = ["DataChangedError", "DataCheck", "Fingerprints", "OnDataChange", "describe", "difference"]
