"""The one default of each training setting, shared by the YAML schema, the operators, the CLI and the core.

A setting has one name everywhere (``label_column``, ``max_restarts``, ``startup_deadline_s``,
``poll_interval``...) and its default is defined here once; the pipeline schema repeats the values as JSON
``default`` keywords for editors, and ``tests/test_settings.py`` checks that every place agrees. The
restart policy, the progress watchdog and the grace period keep theirs in ``Supervision``
(``ignite_tf.cluster.supervision.settings``), which takes the two below from here.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from ignite_tf.home import DEFAULT_HOME, HomeFolder

# Restarts of a failed task before the cluster fails: enough for a lost node or an OOM kill, few enough that
# a job that fails for its own reasons ends quickly.
DEFAULT_MAX_RESTARTS = 2
# Seconds for every task of a cluster to listen on its port: TensorFlow's import and server start on a busy
# 2-core machine take well over a minute.
DEFAULT_STARTUP_DEADLINE_S = 180.0
# Seconds between polls of a cluster's state by the operator, the trigger and the sensor.
DEFAULT_POLL_INTERVAL = 5.0
# Seconds a call to Ignite, the state store, Kubernetes or the object store may keep failing transiently (tried
# again with backoff) before the outage is named and the caller gives up: an API server upgrade or an Ignite node
# restart takes a minute or two.
DEFAULT_OUTAGE_BUDGET_S = 180.0
# The column the model predicts.
DEFAULT_LABEL_COLUMN = "label"
DEFAULT_EPOCHS = 5
DEFAULT_BATCH_SIZE = 64
# Rows a worker's input shuffles among (the reader permutes blocks of this many rows).
DEFAULT_SHUFFLE_BUFFER = 10_000
# The model registry's root when none is given (the YAML spec, example DAGs): see default_registry_root.
ENV_REGISTRY_ROOT = "IGNITE_TF_REGISTRY"


def default_registry_root(environ: Mapping[str, str] | None = None) -> str:
    """The model registry's root when none is given: ``$IGNITE_TF_REGISTRY``, else ``registry`` in the
    ignite-tf home (:class:`ignite_tf.home.HomeFolder`)."""
    env = os.environ if environ is None else environ
    return env.get(ENV_REGISTRY_ROOT) or str(HomeFolder.of(env).registry)


def __getattr__(name: str):
    if name == "DEFAULT_REGISTRY_ROOT":
        from ignite_tf.public_api import warn_deprecated

        warn_deprecated(f"{__name__}.{name}")
        return f"{DEFAULT_HOME}/registry"
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
