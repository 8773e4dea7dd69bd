"""ShardPlan: which rows of a cache each TensorFlow worker reads, epoch by epoch.

Rules (the seeds' lessons from file-level sharding):

- Every row is read exactly once per epoch: every partition (empty ones included, rows may arrive after
  discovery) is covered, either whole or by disjoint key-hash ranges that together span the whole hash space.
- Partitions >= workers: whole partitions are dealt out by list scheduling. A partition goes to the least
  loaded worker on its primary's host when that keeps it within average + largest partition, else to the
  least loaded worker overall (never above the average), so the largest worker exceeds the average by at
  most the largest partition, and locality is as high as that bound allows.
- Partitions < workers: partitions are cut at record granularity. The plan reads the keys of the cache once,
  orders the rows of every partition by ``key_hash(key)`` and cuts the concatenation into equal runs, so
  shares differ by at most one row.
- ``reshuffle="epoch"``: the partition order (and for cut partitions, the starting offset) is drawn from a
  generator seeded by ``(seed, epoch)`` only, so a restarted run reproduces the same plan for every epoch.
- A worker's host (or the consistent id / node id of the node it runs next to) decides locality; the plan
  reports the fraction of each worker's rows whose primary copy is on that host.
- ``evaluation``: an ``EvaluationSplit`` (``ignite_tf.plan.split``) holds rows out by a salted hash of their
  key; the shards stay the same (rows are filtered as they are read), and the planned training rows
  (``rows_per_worker``) are the shards' rows times the training share.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from ignite_tf.errors import ConfigError
from ignite_tf.plan.cuts import cut_piece, merge_wraparound, read_key_hashes
from ignite_tf.plan.partitions import PartitionMap
from ignite_tf.plan.split import EvaluationSplit
from ignite_tf.reader.tasks import HASH_SPACE, ReadTask

__all__ = ["HASH_SPACE", "ReadTask", "Reshuffle", "ShardPlan", "WorkerShard", "next_to_nodes"]


class Reshuffle(StrEnum):
    """Whether a worker's shard changes from one epoch to the next (see the module docstring)."""

    EPOCH = "epoch"
    NONE = "none"

    @classmethod
    def parse(cls, value: Reshuffle | str | None) -> Reshuffle:
        """``value`` as a Reshuffle (None or empty: ``EPOCH``, the default)."""
        try:
            return cls(value or cls.EPOCH)
        except ValueError:
            raise ConfigError(f"reshuffle must be one of {[r.value for r in cls]} (got {value!r})") from None


def next_to_nodes(partition_map: PartitionMap, workers: int) -> list[str]:
    """Worker hosts that put one worker next to each server node in turn (node consistent ids, by join order)."""
    nodes = sorted(partition_map.nodes.values(), key=lambda n: n.order)
    return [nodes[i % len(nodes)].consistent_id for i in range(workers)]


@dataclass
class WorkerShard:
    """What one worker reads in one epoch, in reading order: its ``slices`` (each a ReadTask with its
    planned rows)."""

    worker: int
    epoch: int
    host: str | None
    slices: list[ReadTask]
    local_rows: int

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.slices)

    @property
    def locality(self) -> float:
        return self.local_rows / self.rows if self.rows else 1.0

    def read_tasks(self) -> list[ReadTask]:
        return list(self.slices)


@dataclass
class ShardPlan:
    """The assignment of a cache's rows to ``workers`` workers; JSON-able, rebuilt per epoch on demand.

    Build one with :meth:`build`; get a worker's share with :meth:`shard`.
    """

    partition_map: PartitionMap
    workers: int
    worker_hosts: list[str | None]
    reshuffle: Reshuffle = Reshuffle.EPOCH
    seed: int = 0
    # partition -> {"rows": n, "hashes": sorted key-hash samples}, only when partitions < workers
    cuts: dict[int, dict] | None = None
    # Where the workers actually ran, recorded by a launcher that places them (Kubernetes): per worker the
    # wanted and actual node, and the share of rows read locally (``ignite_tf.cluster.k8s.placement``).
    placement: dict[str, Any] | None = None
    # Rows held out for evaluation (never trained on): none by default.
    evaluation: EvaluationSplit = field(default_factory=EvaluationSplit)
    # What validation read, for the workers to check their reads against: ``{"expected": Fingerprints dict,
    # "on_data_change": "fail" | "warn"}`` (``ignite_tf.validation.fingerprints``); None: nothing checked.
    fingerprints: dict[str, Any] | None = None
    _cache: dict[int, list[WorkerShard]] = field(default_factory=dict, repr=False, compare=False)
    _next_to: list[frozenset[str]] | None = field(default=None, repr=False, compare=False)
    _local_workers: list[list[int]] | None = field(default=None, repr=False, compare=False)

    # -- building ----------------------------------------------------------------------------------------
    @classmethod
    def build(cls, partition_map: PartitionMap, workers: int, *, worker_hosts: list[str] | None = None,
              reshuffle: str | Reshuffle | None = Reshuffle.EPOCH, seed: int = 0, conn=None,
              evaluation: EvaluationSplit | float | None = None, evaluation_seed: int = 0) -> ShardPlan:
        """Plan ``workers`` shards over ``partition_map``.

        :param worker_hosts: host (or node consistent id / node id) each worker runs on; None = unknown.
        :param reshuffle: ``"epoch"`` to change assignment and order every epoch, ``"none"`` to keep it
            (None: ``"epoch"``).
        :param seed: with the epoch, the only input of the reshuffle.
        :param conn: needed only when partitions < workers (the keys are read to cut partitions exactly).
        :param evaluation: share of the rows held out for evaluation (0 or None: none), or an EvaluationSplit.
        :param evaluation_seed: salt of the held-out rows' key hash (kept fixed: the same rows every run).
        """
        if not isinstance(workers, int) or workers < 1:
            raise ConfigError(f"workers must be a positive integer (got {workers!r})")
        reshuffle = Reshuffle.parse(reshuffle)
        hosts = list(worker_hosts) if worker_hosts is not None else [None] * workers
        if len(hosts) != workers:
            raise ConfigError(f"worker_hosts has {len(hosts)} entries for {workers} workers: give one per worker")
        total = partition_map.total_rows
        if total == 0:
            raise ConfigError(f"cache '{partition_map.cache}' is empty: load data before planning shards")
        if total < workers:
            raise ConfigError(f"cache '{partition_map.cache}' has {total} rows for {workers} workers: "
                              f"use at most {total} workers")
        split = EvaluationSplit.parse(evaluation, evaluation_seed)
        plan = cls(partition_map, workers, hosts, reshuffle, int(seed), evaluation=split)
        nonempty = sum(1 for r in partition_map.rows if r)
        if nonempty < workers:
            if conn is None:
                raise ConfigError(
                    f"cache '{partition_map.cache}' has {nonempty} non-empty partitions for {workers} workers: "
                    f"partitions must be cut at record level, which needs a connection (pass conn=...)")
            plan.cuts = read_key_hashes(conn, partition_map)
        return plan

    # -- per epoch ---------------------------------------------------------------------------------------
    def shards(self, epoch: int = 0) -> list[WorkerShard]:
        """All workers' shards for ``epoch`` (the same for every epoch when reshuffle is ``none``)."""
        key = self._epoch_key(epoch)
        if key not in self._cache:
            self._cache[key] = self._compute(key, None)
        return [WorkerShard(s.worker, int(epoch), s.host, s.slices, s.local_rows) for s in self._cache[key]]

    def shard(self, worker: int, epoch: int = 0) -> WorkerShard:
        """Worker ``worker``'s shard for ``epoch``: the same as ``shards(epoch)[worker]``, computed alone.

        A worker needs only its own share each epoch; the deal still follows every worker's load (list
        scheduling is sequential) but builds no other worker's read tasks, and the per-partition candidate
        workers are worked out once per plan, not per epoch.
        """
        if not 0 <= worker < self.workers:
            raise ConfigError(f"worker index {worker} is outside this plan's 0..{self.workers - 1}")
        key = self._epoch_key(epoch)
        if key in self._cache:
            s = self._cache[key][worker]
        else:
            s = self._compute(key, worker)[0]
        return WorkerShard(worker, int(epoch), s.host, s.slices, s.local_rows)

    def rows_per_worker(self, epoch: int = 0) -> list[int]:
        """Planned TRAINING rows of every worker in ``epoch`` (what ``steps_per_epoch`` needs), without the read
        tasks: a shard's rows times the training share when rows are held out for evaluation."""
        key = self._epoch_key(epoch)
        if key in self._cache:
            rows = [s.rows for s in self._cache[key]]
        else:
            rng = np.random.default_rng([self.seed, key])
            if self.cuts is not None:
                rows = [sum(t.rows for t in a) for a in self._split(rng)]
            else:
                rows = [int(r) for r in self._deal(rng, None)[2]]
        share = 1.0 - self.evaluation.fraction
        return rows if share == 1.0 else [int(r * share) for r in rows]

    def _epoch_key(self, epoch: int) -> int:
        return 0 if self.reshuffle is Reshuffle.NONE else int(epoch)

    def _compute(self, key: int, only: int | None) -> list[WorkerShard]:
        """Every worker's shard (``only`` None) or just worker ``only``'s, for epoch key ``key``.

        One generator, seeded by ``(seed, key)``, draws the deal and then each worker's reading order in worker
        order; computing one worker replays the earlier workers' draws (a permutation's draws depend only on
        its length), so its shard is the one the whole plan gives it.
        """
        rng = np.random.default_rng([self.seed, key])
        if self.cuts is not None:
            assigned = self._split(rng)
            counts = [len(a) for a in assigned]
        else:
            assigned, counts, _ = self._deal(rng, only)
        workers = range(self.workers) if only is None else [only]
        out = []
        for w in workers:
            slices = assigned[w]
            if self.reshuffle is Reshuffle.EPOCH:
                if only is not None:
                    for v in range(w):
                        rng.permutation(counts[v])
                order = rng.permutation(len(slices))
                slices = [slices[i] for i in order]
            local = sum(s.rows for s in slices if self._is_local(w, s.partition))
            out.append(WorkerShard(w, key, self.worker_hosts[w], slices, local))
        return out

    def _is_local(self, worker: int, partition: int) -> bool:
        return self.partition_map.primary[partition] in self._worker_nodes()[worker]

    def _worker_nodes(self) -> list[frozenset[str]]:
        """Per worker, the ids of the Ignite nodes it runs next to (by host, consistent id or node id)."""
        if self._next_to is None:
            nodes = self.partition_map.nodes.values()
            self._next_to = [frozenset(n.node_id for n in nodes if h is not None and h in (n.host, n.consistent_id,
                                                                                           n.node_id))
                             for h in self.worker_hosts]
        return self._next_to

    def _candidates(self) -> list[list[int]]:
        """Per partition, the workers next to its primary (the same every epoch: worked out once)."""
        if self._local_workers is None:
            by_node: dict[str, list[int]] = {}
            for w, nodes in enumerate(self._worker_nodes()):
                for n in nodes:
                    by_node.setdefault(n, []).append(w)
            self._local_workers = [by_node.get(n, []) for n in self.partition_map.primary]
        return self._local_workers

    def _deal(self, rng: np.random.Generator, only: int | None = None):
        """(read tasks per worker, tasks per worker, rows per worker); with ``only``, only that worker's
        tasks are made (the others' lists stay empty) but every worker's load is followed."""
        pm = self.partition_map
        # A local worker may fill up to the bound itself; anyone else receives only while at or below the
        # average (the least loaded worker always is), so no worker ends above average + largest partition.
        limit = pm.total_rows / self.workers + max(pm.rows)
        load = [0] * self.workers  # a list, not an array: its scalar reads are what this loop costs
        counts = [0] * self.workers
        assigned: list[list[ReadTask]] = [[] for _ in range(self.workers)]
        # Any order keeps the bound (a worker only receives while at or below the average); a fixed plan
        # takes big partitions first for the smallest spread, a reshuffled one a fresh random order.
        if self.reshuffle is Reshuffle.EPOCH:
            order = [int(p) for p in rng.permutation(pm.partitions)]
        else:
            order = sorted(range(pm.partitions), key=lambda p: -pm.rows[p])
        local_workers = self._candidates()
        for p in order:
            rows = pm.rows[p]
            candidates = local_workers[p]
            # candidates ascend, so min() picks the lowest index among equally loaded workers (as argmin does)
            w = min(candidates, key=load.__getitem__) if candidates else -1
            if w < 0 or load[w] + rows > limit:
                w = load.index(min(load))
            if only is None or w == only:
                assigned[w].append(ReadTask(p, rows=rows))
            counts[w] += 1
            load[w] += rows
        return assigned, counts, load

    def _split(self, rng: np.random.Generator) -> list[list[ReadTask]]:
        pm = self.partition_map
        parts = rng.permutation(pm.partitions) if self.reshuffle is Reshuffle.EPOCH else np.arange(pm.partitions)
        cuts = [self.cuts.get(int(p), {"rows": 0, "hashes": []}) for p in parts]
        sizes = np.array([c["rows"] for c in cuts], dtype=np.int64)
        total = int(sizes.sum())
        starts = np.concatenate([[0], np.cumsum(sizes)])
        shift = int(rng.integers(total)) if self.reshuffle is Reshuffle.EPOCH else 0
        # Worker w takes rows [shift + w*total/W, shift + (w+1)*total/W) of the ring of all rows.
        bounds = [shift + (w * total) // self.workers for w in range(self.workers + 1)]
        assigned: list[list[ReadTask]] = [[] for _ in range(self.workers)]
        for w in range(self.workers):
            lo, hi = bounds[w], bounds[w + 1]
            for a, b in ((lo, min(hi, total)), (max(lo, total) - total, hi - total)):
                for i, p in enumerate(parts):
                    s, e = max(a, starts[i]), min(b, starts[i + 1])
                    if s < e:
                        piece = cut_piece(int(p), cuts[i], int(s - starts[i]), int(e - starts[i]))
                        if piece is not None:
                            assigned[w].append(piece)
        # Partitions empty at plan time still get read (whole), so rows added later are not missed.
        for i, p in enumerate(parts):
            if sizes[i] == 0:
                w = int(np.argmin([sum(s.rows for s in a) for a in assigned]))
                assigned[w].append(ReadTask(int(p), rows=0))
        return merge_wraparound(assigned)

    # -- reporting ---------------------------------------------------------------------------------------
    def planned_locality(self, epoch: int = 0) -> float:
        """The share of ``epoch``'s rows the plan gives to a worker on their primary's host (planned, not
        measured: see ``describe(measured=...)``)."""
        shards = self.shards(epoch)
        rows = sum(s.rows for s in shards)
        return sum(s.local_rows for s in shards) / rows if rows else 1.0

    def describe(self, epoch: int = 0, measured: list[dict[str, Any]] | None = None) -> str:
        """A per-worker table of ``epoch``: slices, rows, spread, the planned local share and, given the
        workers' measured reads (``ClusterState.reads``), the measured one beside it."""
        shards = self.shards(epoch)
        average = self.partition_map.total_rows / self.workers
        seen = {r.get("worker"): r.get("locality") for r in measured or []}
        lines = [
            f"ShardPlan of cache '{self.partition_map.cache}': {self.workers} worker(s), "
            f"{self.partition_map.total_rows} rows, {self.partition_map.partitions} partitions, "
            f"{'record-level cuts' if self.cuts is not None else 'whole partitions'}, "
            f"reshuffle={self.reshuffle.value}, seed={self.seed}, epoch {epoch}"
            + (f", {self.evaluation.describe()}" if self.evaluation.enabled else ""),
            f"  {'worker':>6} {'host':<16} {'slices':>7} {'rows':>10} {'vs avg':>7} {'local':>6}"
            + (f" {'measured':>8}" if measured is not None else ""),
        ]
        for s in shards:
            line = (f"  {s.worker:>6} {str(s.host or '-'):<16} {len(s.slices):>7} {s.rows:>10} "
                    f"{(s.rows / average - 1) * 100 if average else 0:>+6.1f}% {s.locality:>6.2f}")
            if measured is not None:
                value = seen.get(s.worker)
                line += f" {'-' if value is None else f'{value:.2f}':>8}"
            lines.append(line)
        if measured is not None:
            from ignite_tf.reader.locality import combine

            total = combine(*measured)
            lines.append(f"  planned local share {self.planned_locality(epoch):.2f}, measured "
                         + ("-" if not total or total["locality"] is None else
                            f"{total['locality']:.2f} of {total['rows']} rows read"))
        return "\n".join(lines)

    # -- JSON --------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {
            "partition_map": self.partition_map.to_dict(), "workers": self.workers,
            "worker_hosts": self.worker_hosts, "reshuffle": self.reshuffle.value, "seed": self.seed,
            "cuts": None if self.cuts is None else {str(k): v for k, v in self.cuts.items()},
            "placement": self.placement, "evaluation": self.evaluation.to_dict(),
            **({"fingerprints": self.fingerprints} if self.fingerprints else {}),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ShardPlan:
        cuts = data.get("cuts")
        return cls(
            PartitionMap.from_dict(data["partition_map"]), int(data["workers"]), list(data["worker_hosts"]),
            Reshuffle.parse(data.get("reshuffle")), int(data.get("seed", 0)),
            None if cuts is None else {int(k): v for k, v in cuts.items()}, data.get("placement"),
            EvaluationSplit.parse(data.get("evaluation")),
            fingerprints=data.get("fingerprints"),
        )

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, text: str) -> ShardPlan:
        return cls.from_dict(json.loads(text))

    def save(self, path) -> None:
        from pathlib import Path

        path = Path(path)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(self.to_json())
        tmp.replace(path)

    @classmethod
    def load(cls, path) -> ShardPlan:
        from pathlib import Path

        try:
            return cls.from_json(Path(path).read_text())
        except OSError as exc:
            raise ConfigError(f"shard plan file {path}: {exc.strerror}") from None

    # -- topology ----------------------------------------------------------------------------------------
    def replan_if_changed(self, conn) -> tuple[ShardPlan, list[str]]:
        """Compare with the running cluster; on a change return a new plan over the current map.

        Coverage never depends on where partitions live (readers route each scan to the current primary),
        so a re-plan restores locality and balance; the returned list says what changed.
        """
        current = PartitionMap.discover(conn, self.partition_map.cache)
        changes = self.partition_map.diff(current)
        if current.partitions != self.partition_map.partitions:
            raise ConfigError(f"cache '{current.cache}' now has {current.partitions} partitions, the plan "
                              f"{self.partition_map.partitions}: the cache was re-created; plan again")
        if current.total_rows != self.partition_map.total_rows:
            changes.append(f"rows {self.partition_map.total_rows} -> {current.total_rows}")
        if not changes:
            return self, []
        return ShardPlan.build(current, self.workers, worker_hosts=self.worker_hosts, reshuffle=self.reshuffle,
                               seed=self.seed, conn=conn, evaluation=self.evaluation), changes
