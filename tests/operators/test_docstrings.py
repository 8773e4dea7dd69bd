"""Every operator and sensor argument has exactly one ``:param name:`` line in its class docstring."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re

import pytest
from airflow.sdk import BaseOperator

import ignite_tf.operators
import ignite_tf.sensors


def _operators():
    for package in (ignite_tf.operators, ignite_tf.sensors):
        for info in pkgutil.iter_modules(package.__path__):
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            for cls in vars(module).values():
                if inspect.isclass(cls) and issubclass(cls, BaseOperator) and cls.__module__ == module.__name__:
                    yield cls


@pytest.mark.parametrize("cls", list(_operators()), ids=lambda c: c.__name__)
def test_one_param_line_per_argument(cls):
    arguments = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "kwargs")]
    documented = re.findall(r":param ([^:]+):", cls.__doc__ or "")
    assert sorted(documented) == sorted(arguments), f"{cls.__name__}: documented {documented}, takes {arguments}"
