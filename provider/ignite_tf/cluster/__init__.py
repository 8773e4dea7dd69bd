"""The TensorFlow cluster: spec (who runs where), launchers and the supervisor. What is running is recorded in
the state store, :mod:`ignite_tf.state`."""
