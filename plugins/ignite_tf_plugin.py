"""Airflow UI plugin registration for ignite-tf.

The provider (operators, hooks, triggers, the ``ignite`` connection form) registers itself through the
``apache_airflow_provider`` entry point; this plugin adds the global links an operator of the platform uses.
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin


class IgniteTFPlugin(AirflowPlugin):
    name = "ignite_tf"
    external_views = [
        {
            "name": "ignite-tf documentation",
            "href": "https://ignite.apache.org/docs/latest/",
            "destination": "nav",
            "category": "browse",
            "url_route": "ignite_tf_docs",
        }
    ]
