"""ignite-tf: from data in Apache Ignite to a trained, validated, published TensorFlow model.

Importing this package is cheap on purpose: Airflow imports providers on every DAG parse, so nothing
here imports TensorFlow, Great Expectations or pyignite. Stage modules import what they need.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__", "get_provider_info"]


def get_provider_info() -> dict:
    """Provider metadata read by Airflow through the ``apache_airflow_provider`` entry point."""
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
        "connection-types": [
            {"hook-class-name": "ignite_tf.hooks.ignite.IgniteHook", "connection-type": "ignite"},
        ],
    }
