"""Development helpers: a local Apache Ignite, a local Kubernetes, the demo.

They run from a source checkout: configuration (``docker/``, ``k8s/``) and the demo's ``dags/`` are read from it.
"""

from pathlib import Path

SOURCE_TREE = Path(__file__).resolve().parents[2]
"""The checkout this package runs from (``devtools/ignite_tf_dev`` is two levels below it)."""
