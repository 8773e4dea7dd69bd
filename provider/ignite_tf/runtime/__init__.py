"""The TensorFlow task runtime: ``python -m ignite_tf.runtime`` runs one task of a cluster."""
