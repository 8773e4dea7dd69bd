"""The pod supervisor's Kubernetes client from the launcher's connection variable, without Airflow.

Real: the ``kubernetes`` package's configuration loading from a kubeconfig file on disk; nothing talks to a
cluster (the live supervisor uses this client in every test of ``test_launcher.py``).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys

import pytest

from ignite_tf.cluster.k8s.client import connection_extras, core_v1

KUBECONFIG = {
    "apiVersion": "v1", "kind": "Config", "current-context": "one",
    "clusters": [{"name": "one", "cluster": {"server": "https://10.9.8.7:6443", "insecure-skip-tls-verify": True}},
                 {"name": "two", "cluster": {"server": "https://10.9.8.8:6443", "insecure-skip-tls-verify": True}}],
    "users": [{"name": "u", "user": {"token": "not-a-real-token"}}],
    "contexts": [{"name": "one", "context": {"cluster": "one", "user": "u"}},
                 {"name": "two", "context": {"cluster": "two", "user": "u"}}],
}


@pytest.fixture
def kubeconfig(tmp_path):
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps(KUBECONFIG))
    return str(path)


def conn_env(**extra) -> dict[str, str]:
    return {"AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps({"conn_type": "kubernetes", "extra": extra})}


def test_extras_are_read_from_the_json_variable_with_or_without_the_old_prefix():
    assert connection_extras("kubernetes_default", conn_env(in_cluster=True)) == {"in_cluster": True}
    assert connection_extras("kubernetes_default", conn_env(extra__kubernetes__cluster_context="two")) == {
        "cluster_context": "two"}
    as_text = {"AIRFLOW_CONN_K8S": json.dumps({"conn_type": "kubernetes", "extra": json.dumps({"namespace": "x"})})}
    assert connection_extras("k8s", as_text) == {"namespace": "x"}


def test_a_connection_it_cannot_read_is_left_to_the_hook():
    assert connection_extras("kubernetes_default", {}) is None  # in Airflow's database or a secrets backend
    assert connection_extras("kubernetes_default", {"AIRFLOW_CONN_KUBERNETES_DEFAULT": "kubernetes://?in_cluster=1"}) \
        is None
    assert connection_extras("kubernetes_default", {"AIRFLOW_CONN_KUBERNETES_DEFAULT": "{not json"}) is None


def test_the_client_follows_the_connection_like_the_hook(kubeconfig):
    api = core_v1("kubernetes_default", conn_env(kube_config_path=kubeconfig))
    config = api.api_client.configuration
    assert config.host == "https://10.9.8.7:6443"
    assert (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1) in config.socket_options
    other = core_v1("kubernetes_default", conn_env(kube_config_path=kubeconfig, cluster_context="two",
                                                   disable_tcp_keepalive=True, disable_verify_ssl="true"))
    assert other.api_client.configuration.host == "https://10.9.8.8:6443"
    assert not other.api_client.configuration.socket_options
    assert other.api_client.configuration.verify_ssl is False
    inline = core_v1("kubernetes_default", conn_env(kube_config=json.dumps(KUBECONFIG), cluster_context="two"))
    assert inline.api_client.configuration.host == "https://10.9.8.8:6443"


def test_the_pod_supervisor_does_not_import_airflow(kubeconfig):
    """What the client is for: the supervisor's first pod waited for Airflow's import (4-16 s here)."""
    code = ("import json, os, sys\n"
            "from ignite_tf.cluster.k8s import pods\n"
            f"os.environ.update({conn_env(kube_config_path=kubeconfig)!r})\n"
            "backend = pods.PodBackend.__new__(pods.PodBackend)\n"
            "backend.settings = pods.KubernetesSettings.parse({})\n"
            "print(backend.core.api_client.configuration.host, 'airflow' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["https://10.9.8.7:6443", "False"]
