"""ignite-tf: from data in Apache Ignite to a trained, validated, published TensorFlow model.

Importing this package is cheap on purpose: Airflow imports providers on every DAG parse, so nothing
here imports TensorFlow, Great Expectations or pyignite. Stage modules import what they need.
"""

from __future__ import annotations

__version__ = "0.2.0"

__all__ = ["__version__", "get_provider_info"]


def get_provider_info() -> dict:
    """Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""

    def text(label: str, description: str, *, secret: bool = False) -> dict:
        schema = {"type": ["string", "null"], **({"format": "password"} if secret else {})}
        return {"label": label, "description": description, "schema": schema}

    # The extras an ``ignite`` connection accepts; IgniteHook rejects any other key, so the form and
    # the hook cannot drift apart.
    ignite_conn_fields = {
        "addresses": text(
            "Addresses", "host:port[,host:port...] of the thin-client endpoints; use either this or Host"),
        "use_ssl": {"label": "Use SSL/TLS", "description": "TLS to the thin-client port",
                    "schema": {"type": ["boolean", "null"]}},
        "ssl_ca_certfile": text("SSL CA certificate file", "path of the CA bundle that signed the server"),
        "ssl_certfile": text("SSL client certificate file", "path of the client certificate (PEM)"),
        "ssl_keyfile": text("SSL client key file", "path of the client private key (PEM)"),
        "ssl_keyfile_password": text("SSL key file password", "password of the client key", secret=True),
        "ssl_ciphers": text("SSL ciphers", "OpenSSL cipher list; empty for the default"),
        "timeout": {"label": "Timeout (s)", "description": "socket timeout in seconds",
                    "schema": {"type": ["number", "null"], "minimum": 0}},
    }
    return {
        "package-name": "airflow-provider-ignite-tf",
        "name": "Apache Ignite + TensorFlow",
        "description": "Train TensorFlow models next to data in Apache Ignite, from Airflow.",
        "versions": [__version__],
        "integrations": [
            {
                "integration-name": "Apache Ignite",
                "external-doc-url": "https://ignite.apache.org/",
                "tags": ["software"],
            }
        ],
        "hooks": [
            {"integration-name": "Apache Ignite", "python-modules": ["ignite_tf.hooks.ignite"]},
        ],
        "operators": [
            {
                "integration-name": "Apache Ignite",
                "python-modules": [
                    "ignite_tf.operators.ignite",
                    "ignite_tf.operators.shards",
                    "ignite_tf.operators.validation",
                    "ignite_tf.operators.tensorflow",
                    "ignite_tf.operators.publish",
                    "ignite_tf.operators.inference",
                ],
            }
        ],
        "sensors": [
            {"integration-name": "Apache Ignite", "python-modules": ["ignite_tf.sensors.tf_cluster"]},
        ],
        "triggers": [
            {"integration-name": "Apache Ignite", "python-modules": ["ignite_tf.triggers.tf_cluster"]},
        ],
        "extra-links": [
            "ignite_tf.operators.links.ClusterPageLink",
            "ignite_tf.operators.links.TensorBoardLink",
            "ignite_tf.operators.links.RegistryVersionLink",
        ],
        # Airflow >= 3.2 reads the connection form from here without importing the hook (the hook's
        # get_connection_form_widgets/get_ui_field_behaviour are only the fallback for older UIs).
        "connection-types": [
            {
                "hook-class-name": "ignite_tf.hooks.ignite.IgniteHook",
                "hook-name": "Apache Ignite",
                "connection-type": "ignite",
                "conn-fields": ignite_conn_fields,
                "ui-field-behaviour": {
                    "hidden-fields": ["schema"],
                    "relabeling": {
                        "host": "Addresses (host:port, comma-separated)",
                        "port": "Default port (for addresses without one)",
                        "login": "Username",
                    },
                    "placeholders": {
                        "host": "ignite-0:10800,ignite-1:10800",
                        "port": "10800",
                        "login": "only when Ignite authentication is on",
                        "password": "only when Ignite authentication is on",
                        "addresses": "instead of Host: host:port,host:port",
                        "ssl_ca_certfile": "/etc/ignite/tls/ca.pem",
                        "ssl_certfile": "/etc/ignite/tls/client.pem",
                        "ssl_keyfile": "/etc/ignite/tls/client.key",
                        "timeout": "30",
                    },
                },
            },
        ],
    }

