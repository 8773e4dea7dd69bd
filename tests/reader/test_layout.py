"""feature_columns: the one rule for which columns a model reads (training, the runtime, batch inference)."""

from __future__ import annotations

import numpy as np
import pytest

from ignite_tf.errors import ConfigError
from ignite_tf.reader.layout import feature_columns

SCHEMA = {"id": np.dtype("int64"), "a": np.dtype("float32"), "name": np.dtype(object), "b": np.dtype("int32"),
          "label": np.dtype("int64")}


def test_default_features_are_every_column_but_the_key_and_the_label():
    assert feature_columns(SCHEMA, "c", key="id", label="label") == ["a", "name", "b"]
    assert feature_columns(SCHEMA, "c", key="id", label="label", include_key=True) == ["id", "a", "name", "b"]
    assert feature_columns(SCHEMA, "c", key="id", label="label", numeric=True) == ["a", "b"]


def test_named_features_are_lower_cased_and_checked():
    assert feature_columns(SCHEMA, "c", key="id", features=["B", "a"]) == ["b", "a"]
    with pytest.raises(ConfigError, match=r"feature\(s\) \['nope'\] not in cache 'c'"):
        feature_columns(SCHEMA, "c", key="id", features=["a", "nope"])
    with pytest.raises(ConfigError, match=r"\(none\)"):
        feature_columns({"id": np.dtype("int64")}, "c", key="id")
