"""The blessing gate of the model registry: whether a newly published version becomes production."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ignite_tf.errors import ConfigError


def as_number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise ConfigError(f"{what} must be a number (got {value!r})")
    return float(value)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass
class BlessingGate:
    """Decides whether a new version becomes production.

    A version is blessed when every gated metric (each key of ``thresholds``) lies within its bounds AND is
    not worse than the production version's value by more than ``tolerance``, taken RELATIVE to the
    production value: a higher-is-better metric passes when ``new >= prod - tolerance * |prod|``, a
    lower-is-better one when ``new <= prod + tolerance * |prod|``. With no production version only the
    bounds apply; with no thresholds every version is blessed (the latest wins). A NaN or infinite metric,
    gated or not, is never blessed: the training that reported it diverged.

    :param thresholds: metric -> ``(min, max)``; either may be None. ``(None, None)`` only compares the
        metric with production.
    :param tolerance: relative slack against production, >= 0 (0.01: up to 1% worse still passes).
    :param higher_is_better: metric -> direction; default: names containing "loss" or "error" are
        lower-is-better, every other metric higher-is-better.
    """

    thresholds: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    tolerance: float = 0.0
    higher_is_better: dict[str, bool] = field(default_factory=dict)

    def __post_init__(self):
        clean = {}
        for name, bounds in dict(self.thresholds or {}).items():
            if not isinstance(bounds, (list, tuple)) or len(bounds) != 2:
                raise ConfigError(f"BlessingGate.thresholds[{name!r}] must be (min, max) (got {bounds!r})")
            lo, hi = (None if b is None else as_number(b, f"BlessingGate.thresholds[{name!r}]") for b in bounds)
            if lo is not None and hi is not None and lo > hi:
                raise ConfigError(f"BlessingGate.thresholds[{name!r}]: min {lo} is above max {hi}")
            clean[str(name)] = (lo, hi)
        self.thresholds = clean
        self.tolerance = as_number(self.tolerance, "BlessingGate.tolerance")
        if not math.isfinite(self.tolerance) or self.tolerance < 0:
            raise ConfigError(f"BlessingGate.tolerance must be a finite number >= 0 (got {self.tolerance})")
        self.higher_is_better = {str(k): bool(v) for k, v in dict(self.higher_is_better or {}).items()}

    def higher(self, metric: str) -> bool:
        if metric in self.higher_is_better:
            return self.higher_is_better[metric]
        return not ("loss" in metric.lower() or "error" in metric.lower())

    def evaluate(self, metrics: dict[str, float], production: dict[str, float] | None,
                 production_version: str | None = None) -> tuple[list[str], dict]:
        """Reasons the version is NOT blessed (empty when it is), and the per-metric comparison."""
        reasons, compared = [], {}
        for name, value in sorted(metrics.items()):
            if name not in self.thresholds and _is_number(value) and not math.isfinite(value):
                reasons.append(f"metric {name!r} is {value}: the training diverged")
        for name, (lo, hi) in sorted(self.thresholds.items()):
            if name not in metrics:
                reasons.append(f"metric {name!r} is gated but missing from this run's metrics "
                               f"(have: {', '.join(sorted(metrics)) or 'none'})")
                continue
            value = metrics[name]
            if not math.isfinite(value):
                reasons.append(f"metric {name!r} is {value}: the training diverged")
                continue
            if lo is not None and value < lo:
                reasons.append(f"{name} = {value:.6g} is below the threshold min {lo:.6g}")
            if hi is not None and value > hi:
                reasons.append(f"{name} = {value:.6g} is above the threshold max {hi:.6g}")
            old = (production or {}).get(name)
            if production is None or old is None or not math.isfinite(old):
                continue
            higher, slack = self.higher(name), self.tolerance * abs(old)
            worse = value < old - slack if higher else value > old + slack
            compared[name] = {"new": value, "production": old, "higher_is_better": higher, "worse": worse}
            if worse:
                reasons.append(f"{name} = {value:.6g} is worse than production {production_version} ({old:.6g}; "
                               f"{'higher' if higher else 'lower'} is better, relative tolerance {self.tolerance:g})")
        return reasons, compared

    def to_dict(self) -> dict:
        return {"thresholds": {k: list(v) for k, v in self.thresholds.items()}, "tolerance": self.tolerance,
                "higher_is_better": dict(self.higher_is_better)}

    @classmethod
    def from_dict(cls, data: dict) -> BlessingGate:
        return cls(**{k: v for k, v in data.items() if k in ("thresholds", "tolerance", "higher_is_better")})


NOT_BLESSED = "not blessed: "  # a note of held_out_inputs that is also a reason not to bless


def held_out_inputs(training: dict[str, float], production: dict[str, float] | None, production_version: str | None,
                    evaluation: dict | None) -> tuple[dict[str, float], dict[str, float] | None, list[str]]:
    """(metrics to judge, production metrics to compare with, notes) for ``BlessingGate.evaluate``.

    Without a held-out evaluation the gate judges the training metrics against production's recorded ones (as
    before held-out splits). With one it judges the held-out metrics, and compares them with the production
    version's metrics ON THE SAME ROWS, measured in the same run (TFX's Evaluator against its baseline):
    production's numbers from its own run came from other data. When production could not be evaluated (its
    inputs no longer match the table, say) only the thresholds apply, and a note says why; when production
    changed since the evaluation, the numbers are not comparable and the version is not blessed.
    """
    if not evaluation or not evaluation.get("metrics"):
        return training, production, []
    judged = {str(k): as_number(v, f"held-out metric {k!r}") for k, v in evaluation["metrics"].items()}
    evaluated = evaluation.get("production") or {}
    if production_version is None:
        return judged, None, []
    if evaluated.get("error"):
        return judged, None, [f"production {production_version} was not evaluated on the held-out rows "
                              f"({evaluated['error']}): only the thresholds apply"]
    if evaluated.get("version") != production_version or evaluation.get("production_metrics") is None:
        return judged, None, [f"{NOT_BLESSED}production is {production_version} but the held-out evaluation "
                              f"compared {evaluated.get('version') or 'no production version'}: the numbers are "
                              f"not from the same rows; train again, or promote by hand"]
    return judged, {str(k): float(v) for k, v in evaluation["production_metrics"].items()}, []
