"""From the source tree, the Kubernetes launcher's default task image is the local Kubernetes' image: the dev
tooling offers it through the ``ignite_tf.task_image`` entry point (devtools/pyproject.toml). Without the entry
point (an installed wheel) there is no default: tests/test_wheel.py checks that error in a fresh venv."""

from __future__ import annotations

from ignite_tf_dev.k8s.images import task_image_ref

from ignite_tf.cluster.k8s.launcher import default_image


def test_the_source_trees_default_image_is_the_local_kubernetes_task_image():
    assert default_image() == task_image_ref()
