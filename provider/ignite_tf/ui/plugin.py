"""The Airflow plugin: the ignite-tf page in the API server, linked from the UI's navigation, and the extra
links of the operators. Registered through the ``airflow.plugins`` entry point and from ``plugins/``
(Airflow loads a plugin name once).
"""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from ignite_tf.ui.app import URL_PREFIX, app


class IgniteTFPlugin(AirflowPlugin):
    name = "ignite_tf"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "ignite-tf"}]
    external_views = [
        {
            "name": "TensorFlow clusters",
            "href": f"{URL_PREFIX}/",
            "destination": "nav",
            "category": "browse",
            "url_route": "ignite-tf",
        }
    ]
