"""Batch inference, TensorFlowOnSpark's ``inference()``: score cache partitions with a published model.

The model side (a SavedModel as a function, its outputs as predictions) is :mod:`ignite_tf.inference.model`;
reading a shard, scoring it and writing the predictions is :mod:`ignite_tf.inference.shard`.

    report = predict_shard(conn, registry_root="/models", model="churn", input_cache="churn",
                           output_cache="churn_scores", tasks=[0, 1, 2])
"""

from __future__ import annotations

from ignite_tf.inference.model import KINDS, Predictor, postprocess
from ignite_tf.inference.shard import InferenceReport, PredictionWriter, predict_shard

__all__ = ["KINDS", "InferenceReport", "PredictionWriter", "Predictor", "postprocess", "predict_shard"]
