"""The blessing gate alone (no registry, no model): what it refuses."""

import math

import pytest

from ignite_tf.registry.gate import BlessingGate


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_a_non_finite_metric_is_never_blessed_gated_or_not(bad):
    reasons, _ = BlessingGate().evaluate({"accuracy": 0.9, "loss": bad}, None)
    assert reasons == [f"metric 'loss' is {bad}: the training diverged"]
    gated = BlessingGate(thresholds={"loss": (None, 1.0)})
    reasons, _ = gated.evaluate({"accuracy": 0.9, "loss": bad}, {"loss": 0.5}, "v0001")
    assert reasons == [f"metric 'loss' is {bad}: the training diverged"]


def test_finite_metrics_and_non_numbers_pass_an_empty_gate():
    assert BlessingGate().evaluate({"accuracy": 0.9, "loss": 0.1, "epoch": 3, "note": "x", "ok": True}, None) \
        == ([], {})
