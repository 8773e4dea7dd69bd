"""Built-in model entry points, part of the provider: ``entry_point: ignite_tf.models:tabular_classifier`` in a
pipeline spec, ``entry_point=`` of the operators, ``python -m ignite_tf.runtime --entry-point ...`` (a public name).

An entry point is a function that returns a COMPILED tf_keras model. The runtime calls it inside the
distribution strategy's scope and passes the keyword arguments it accepts among ``learning_rate``,
``n_features`` (the number of feature columns read), ``n_classes`` (for an integer label: its largest value
+ 1, from the data) and the model arguments (``--model-arg``, YAML ``training.model_args``), which win.
"""

from __future__ import annotations

from ignite_tf.errors import ConfigError


def tabular_classifier(n_features: int = 16, n_classes: int | None = None, learning_rate: float = 0.01,
                       hidden: int = 32, optimizer: str = "adam"):
    """A small MLP for tabular data: sparse categorical cross-entropy, accuracy.

    :param n_features: width of the input (feature columns).
    :param n_classes: label values ``0 .. n_classes-1``; the runtime passes it from the label column.
    :param learning_rate: the optimizer's learning rate.
    :param hidden: units of each of the two hidden layers.
    :param optimizer: a tf_keras optimizer's name (``adam``, ``sgd``, ``rmsprop``...); the Kubernetes memory
        estimate counts its slots.
    """
    if n_classes is None or int(n_classes) < 2:
        raise ConfigError(f"tabular_classifier needs n_classes >= 2 (got {n_classes}): the runtime passes it from "
                          f"an integer label column; else give it as a model argument (n_classes=...)")
    from ignite_tf.runtime.start import import_tf

    import_tf()
    import tf_keras

    model = tf_keras.Sequential([
        tf_keras.layers.InputLayer(input_shape=(int(n_features),)),
        tf_keras.layers.Dense(int(hidden), activation="relu"),
        tf_keras.layers.Dense(int(hidden), activation="relu"),
        tf_keras.layers.Dense(int(n_classes), activation="softmax"),
    ])
    # A config without is_legacy_optimizer=False would deserialize to tf_keras's legacy optimizer.
    model.compile(optimizer=tf_keras.optimizers.get({"class_name": optimizer, "config": {
                      "learning_rate": float(learning_rate), "is_legacy_optimizer": False}}),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def _tabular_parameters(n_features: int = 16, n_classes: int = 2, hidden: int = 32, **_) -> int:
    """``tabular_classifier``'s parameter count, without TensorFlow (for the memory estimate)."""
    n_features, n_classes, hidden = int(n_features), int(n_classes or 2), int(hidden)
    return (n_features + 1) * hidden + (hidden + 1) * hidden + (hidden + 1) * n_classes


tabular_classifier.parameters = _tabular_parameters
