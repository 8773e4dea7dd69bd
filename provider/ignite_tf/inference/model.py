"""The model side of inference: a published SavedModel as a function of a feature matrix, and its outputs
as predictions (a classifier's class and probability, or a regressor's value)."""

from __future__ import annotations

import os

import numpy as np

from ignite_tf.errors import ConfigError

KINDS = ("classifier", "regressor")


class Predictor:
    """A SavedModel as a function from a float matrix ``(rows, features)`` to an output array.

    Keras SavedModels (with ``keras_metadata.pb``) load with ``tf_keras.models.load_model``; any other
    SavedModel (``tf.saved_model.save``, Keras 3 ``model.export``) through its ``serving_default`` signature.

    :param path: local SavedModel folder.
    :param features: feature column names; a model with several inputs gets one column per input name.
    """

    def __init__(self, path: str, features: list[str]):
        import tensorflow as tf

        self.features = features
        if os.path.exists(os.path.join(path, "keras_metadata.pb")):
            import tf_keras

            self.keras = tf_keras.models.load_model(path, compile=False)
            self.names = list(self.keras.input_names) if len(self.keras.inputs) > 1 else [None]
            self.dtypes = [t.dtype.as_numpy_dtype for t in self.keras.inputs]
            widths = [t.shape[-1] for t in self.keras.inputs]
        else:
            self.keras = None
            loaded = tf.saved_model.load(path)
            if "serving_default" not in loaded.signatures:
                raise ConfigError(f"SavedModel {path} has no serving_default signature (signatures: "
                                  f"{list(loaded.signatures)}): export it with a serving signature")
            self._loaded, self.fn = loaded, loaded.signatures["serving_default"]
            specs = self.fn.structured_input_signature[1]
            outputs = list(self.fn.structured_outputs)
            if len(outputs) != 1:
                raise ConfigError(f"SavedModel {path} has outputs {outputs}; predict_shard scores single-output models")
            self.output = outputs[0]
            self.names = list(specs)
            self.dtypes = [specs[n].dtype.as_numpy_dtype for n in self.names]
            widths = [specs[n].shape[-1] if specs[n].shape.rank else None for n in self.names]
        if len(self.names) > 1:
            missing = sorted(set(self.names) - set(features))
            if missing:
                raise ConfigError(f"the model takes inputs {self.names}; features {features} lack {missing}")
        elif widths[0] is not None and widths[0] != len(features):
            raise ConfigError(f"the model takes {widths[0]} features per row but {len(features)} were given "
                              f"({features}): pass features= in the order the model was trained with")

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if len(self.names) > 1:
            idx = {f: i for i, f in enumerate(self.features)}
            inputs = {n: x[:, idx[n]:idx[n] + 1].astype(d) for n, d in zip(self.names, self.dtypes, strict=True)}
        else:
            inputs = x.astype(self.dtypes[0], copy=False)
        if self.keras is not None:
            return np.asarray(self.keras.predict_on_batch(inputs))
        if not isinstance(inputs, dict):
            inputs = {self.names[0]: inputs}
        return self.fn(**inputs)[self.output].numpy()


def postprocess(out: np.ndarray, kind: str | None) -> tuple[str, np.ndarray, np.ndarray | None]:
    """``(kind, prediction, score)`` from the model's output for a batch.

    A classifier's row that is not already a probability distribution (values >= 0 summing to 1) is taken
    as logits and soft-maxed, so ``score`` is always a probability; one sigmoid output is a binary classifier.
    Default kind: classifier for two or more outputs per row, regressor for one.
    """
    out = np.asarray(out, dtype=np.float64)
    out = out.reshape(len(out), -1)
    width = out.shape[1]
    kind = kind or ("classifier" if width > 1 else "regressor")
    if kind == "regressor":
        if width != 1:
            raise ConfigError(f"a regressor must give one value per row; this model gives {width}: "
                              f"pass kind='classifier' if it outputs class scores")
        return kind, out[:, 0].astype(np.float32), None
    if width == 1:
        p = out[:, 0]
        p = np.where((p >= 0) & (p <= 1), p, 1 / (1 + np.exp(-p)))
        pred = (p >= 0.5).astype(np.int32)
        return kind, pred, np.where(pred == 1, p, 1 - p).astype(np.float32)
    is_prob = (out >= 0).all(axis=1) & (np.abs(out.sum(axis=1) - 1) < 1e-3)
    shifted = np.exp(out - out.max(axis=1, keepdims=True))
    probs = np.where(is_prob[:, None], out, shifted / shifted.sum(axis=1, keepdims=True))
    return kind, probs.argmax(axis=1).astype(np.int32), probs.max(axis=1).astype(np.float32)
