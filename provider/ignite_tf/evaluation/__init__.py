"""Held-out evaluation: the rows a shard plan holds out (``ignite_tf.plan.split``), read and reported."""
