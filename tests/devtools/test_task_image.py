"""The Kubernetes launcher's default task image comes from an ``ignite_tf.task_image`` entry point.

From the source tree the dev tooling registers one (devtools/pyproject.toml): the local Kubernetes' image. The
other cases replace the installed entry points with made-up ones (``importlib.metadata.entry_points`` patched);
the real case without any (an installed wheel) is tests/test_wheel.py's.
"""

from __future__ import annotations

import importlib.metadata

import pytest
from ignite_tf_dev.k8s.images import task_image_ref

from ignite_tf.cluster.k8s.launcher import TASK_IMAGE_GROUP, default_image
from ignite_tf.errors import ConfigError


def test_the_source_trees_default_image_is_the_local_kubernetes_task_image():
    assert default_image() == task_image_ref()


def offering(monkeypatch, *values: str) -> None:
    points = [importlib.metadata.EntryPoint(f"p{i}", v, TASK_IMAGE_GROUP) for i, v in enumerate(values)]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group: points if group == TASK_IMAGE_GROUP else [])


@pytest.mark.parametrize(("values", "says"), [
    ((), "there is no default task image: write the task image with `make image`"),
    (("ignite_tf_dev.k8s.images:task_image_ref", "os.path:sep"), "2 packages offer a default task image"),
    (("ignite_tf_dev.k8s.images:no_such_function",), "failed (AttributeError"),
])
def test_without_one_default_the_error_names_kubernetes_image(monkeypatch, values, says):
    offering(monkeypatch, *values)
    with pytest.raises(ConfigError, match="kubernetes.image") as raised:
        default_image()
    assert says in str(raised.value)
