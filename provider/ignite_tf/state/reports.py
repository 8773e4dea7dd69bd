"""What a training task writes to its cluster's state: the chief's epochs and held-out evaluation, each
worker's reads. The task side's one door to the store: the runtime and the data API (``ignite_tf.data``)
record through ``TaskReports``, never through a store of their own making, so which store and which keys are
this package's alone.

A task finds its cluster and its store in its environment (``IGNITE_TF_CLUSTER_ID``, ``IGNITE_TF_STATE_STORE``
and what names the store, as the launcher sets them): ``TaskReports.from_env()`` is None outside a cluster (a
script run by hand).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ignite_tf.contract import ENV_CLUSTER_ID
from ignite_tf.state.store import StateStore, store_from_env

__all__ = ["TaskReports"]


class TaskReports:
    """The records one task adds to cluster ``cluster_id``'s state. Each call is one write of its own keys
    (see :mod:`ignite_tf.state.store`); errors are the caller's to report, as a report must not end a training."""

    def __init__(self, cluster_id: str, store: StateStore):
        self.cluster_id, self.store = cluster_id, store

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> TaskReports | None:
        """This task's reports, or None when it runs outside a cluster (no cluster id or no store named)."""
        env = os.environ if environ is None else environ
        cluster_id = env.get(ENV_CLUSTER_ID)
        store = store_from_env(env) if cluster_id else None
        return cls(cluster_id, store) if store is not None else None

    def epoch(self, metrics: dict[str, Any]) -> None:
        """The chief's report of an epoch (``ignite_tf.runtime.report.EpochReporter``)."""
        self.store.add_epoch(self.cluster_id, metrics)

    def reads(self, worker: int, epoch: int, record: dict[str, Any]) -> None:
        """What worker ``worker`` read in ``epoch`` (an ``ignite_tf.reader.locality`` record), added to its total."""
        self.store.add_reads(self.cluster_id, worker, epoch, record)

    def evaluation(self, evaluation: dict[str, Any]) -> None:
        """The chief's held-out evaluation (``ignite_tf.evaluation.heldout.report``)."""
        self.store.set_evaluation(self.cluster_id, evaluation)

    def describe(self) -> str:
        return self.store.describe()

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> TaskReports:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
