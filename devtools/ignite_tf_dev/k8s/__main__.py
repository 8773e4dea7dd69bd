"""``python -m ignite_tf_dev.k8s build|up|status|down``: the local Kubernetes (see :mod:`ignite_tf_dev.k8s.cluster`)."""

import sys

from ignite_tf_dev.k8s.cluster import main

sys.exit(main())
