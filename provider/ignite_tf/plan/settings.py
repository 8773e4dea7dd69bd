"""A pipeline spec's ``shard_plan`` section: how the cache's rows are shared among workers and held out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ignite_tf.plan.shards import Reshuffle

__all__ = ["ShardPlanConfig"]


@dataclass(frozen=True)
class ShardPlanConfig:
    """The arguments of ``ShardPlan.build`` a spec sets (``resources/pipeline.schema.json`` describes each)."""

    reshuffle: Reshuffle = Reshuffle.EPOCH
    seed: int = 0
    evaluation: float = 0.0
    """Share of the rows held out for evaluation by a hash of their key (``ignite_tf.plan.split``; 0: none)."""
    evaluation_seed: int = 0

    @classmethod
    def parse(cls, section: dict[str, Any] | None) -> ShardPlanConfig:
        """The section as checked by the schema (which refuses unknown keys)."""
        section = dict(section or {})
        return cls(**{**section, "reshuffle": Reshuffle.parse(section.get("reshuffle"))})
