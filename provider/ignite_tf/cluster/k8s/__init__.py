"""TensorFlow tasks as Kubernetes pods next to the Ignite nodes that hold their partitions
(``launcher: kubernetes``)."""
