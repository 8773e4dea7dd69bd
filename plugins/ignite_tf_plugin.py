"""Airflow UI plugin registration for ignite-tf (``make airflow`` loads this folder).

The plugin itself lives in the provider (``ignite_tf.ui.plugin``), also registered through the
``airflow.plugins`` entry point; Airflow loads a plugin name once, so both ways can be on together.
It serves the "TensorFlow clusters" page at /ignite-tf/ in the API server and links it from the navigation.
"""

from __future__ import annotations

from ignite_tf.ui.plugin import IgniteTFPlugin

__all__ = ["IgniteTFPlugin"]
