"""Where a local Kubernetes lives: versions, its folder in the ignite-tf home and one cluster's file layout.

Shared by :mod:`ignite_tf_dev.k8s.cluster` (start and stop) and :mod:`ignite_tf_dev.k8s.images` (image builds).
"""

from __future__ import annotations

import os
from pathlib import Path

from ignite_tf.home import HomeFolder
from ignite_tf_dev import SOURCE_TREE

K8S_VERSION = "v1.33.13"  # v1.31/v1.32 cannot be built from the module proxy (403 on staging modules)
KWOK_VERSION = "v0.8.0"
COREDNS_VERSION = "v1.15.0"  # the cluster's DNS add-on, from the Go module proxy
K8S_HOME = Path(os.environ.get("IGNITE_TF_K8S_HOME", HomeFolder.of().kubernetes(K8S_VERSION)))
# k8s/ of the source tree (build script, PKI script, configuration templates).
CONF_DIR = Path(os.environ.get("IGNITE_TF_K8S_CONF", SOURCE_TREE / "k8s"))
BINARIES = ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubelet", "kube-proxy", "kubectl",
            "kwok", "coredns", "pause")

class Layout:
    """Where everything of one cluster lives: ``bin`` and ``images`` are kept, ``run`` is wiped by down."""

    def __init__(self, home: Path = K8S_HOME):
        self.home = Path(home)
        self.bin = self.home / "bin"
        self.images = self.home / "images"
        self.pki = self.home / "pki"
        self.run = self.home / "run"
        self.logs = self.run / "logs"
        self.pids = self.run / "pids"
        self.kubeconfig = self.pki / "admin.kubeconfig"
        self.containerd_sock = self.run / "containerd.sock"
        self.host_state = self.home / "host-state.json"
        self.objstore = self.run / "objstore"  # the object store's state and data (wiped by down)

    def pid_of(self, name: str) -> int:
        try:
            return int((self.pids / f"{name}.pid").read_text())
        except (OSError, ValueError):
            return 0

    def built(self) -> bool:
        return all((self.bin / b).exists() for b in BINARIES) and (self.home / "kwok-stages").is_dir()
