"""The Kubernetes client of the pod supervisor and of the launcher, made from the Airflow connection without
importing Airflow.

The launcher resolves the ``kubernetes`` connection with Airflow's ``KubernetesHook`` and hands it to the
supervisor as an ``AIRFLOW_CONN_<ID>`` variable in Airflow's JSON form (``launcher.connection_env``). Importing
the hook costs the supervisor Airflow's configuration, its task SDK and ``kubernetes_asyncio`` — 4 s of a
quiet 2-core machine and 16 s of a busy one, before its first pod could be created (the launcher's start too).
``core_v1`` reads that variable the way the hook reads the connection (``in_cluster``, ``kube_config_path``,
``kube_config``, ``cluster_context``, ``disable_verify_ssl``, ``disable_tcp_keepalive``, also with the old
``extra__kubernetes__`` prefix) and builds the same client with the ``kubernetes`` package alone. A connection
it cannot read that way (no such variable: one in Airflow's database or a secrets backend; a URI) goes through
the hook as before.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
from typing import Any

PREFIX = "extra__kubernetes__"
# Airflow's [kubernetes_executor] tcp_keep_idle / tcp_keep_intvl / tcp_keep_cnt defaults, which the hook applies.
KEEPALIVE = ((socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1),
             *((socket.IPPROTO_TCP, getattr(socket, name), value)
               for name, value in (("TCP_KEEPIDLE", 120), ("TCP_KEEPINTVL", 30), ("TCP_KEEPCNT", 6))
               if hasattr(socket, name)))


def connection_extras(conn_id: str, environ=None) -> dict[str, Any] | None:
    """The connection's extras from its ``AIRFLOW_CONN_<ID>`` variable in JSON form; None when there is no
    such variable or it is not JSON (the hook must resolve it)."""
    env = os.environ if environ is None else environ
    text = env.get(f"AIRFLOW_CONN_{conn_id.upper()}", "").strip()
    if not text.startswith("{"):
        return None
    try:
        conn = json.loads(text)
        extra = conn.get("extra") or {}
        if isinstance(extra, str):
            extra = json.loads(extra) if extra.strip() else {}
    except (ValueError, AttributeError):
        return None
    if not isinstance(extra, dict):
        return None
    return {k.removeprefix(PREFIX): v for k, v in extra.items()}


def _flag(value) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes", "on")


def core_v1(conn_id: str, environ=None):
    """A ``CoreV1Api`` for the connection ``conn_id``: from its variable without Airflow where it can be read
    so, else from ``KubernetesHook``."""
    extras = connection_extras(conn_id, environ)
    if extras is None:
        from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

        return KubernetesHook(conn_id=conn_id).core_v1_client
    from kubernetes import client, config

    configuration = client.Configuration()
    context = extras.get("cluster_context") or None
    kube_config = extras.get("kube_config") or None
    if _flag(extras.get("in_cluster")):
        config.load_incluster_config(client_configuration=configuration)
    elif extras.get("kube_config_path"):
        config.load_kube_config(config_file=extras["kube_config_path"], context=context,
                                client_configuration=configuration)
    elif kube_config is not None:
        with tempfile.NamedTemporaryFile("w", suffix=".kubeconfig") as f:
            f.write(kube_config if isinstance(kube_config, str) else json.dumps(kube_config))
            f.flush()
            config.load_kube_config(config_file=f.name, context=context, client_configuration=configuration)
    else:  # as the hook's default: the kubeconfig of KUBECONFIG (or ~/.kube/config), else in-cluster
        try:
            config.load_kube_config(context=context, client_configuration=configuration)
        except config.ConfigException:
            config.load_incluster_config(client_configuration=configuration)
    if _flag(extras.get("disable_verify_ssl")):
        configuration.verify_ssl = False
    if not _flag(extras.get("disable_tcp_keepalive")):
        configuration.socket_options = list(KEEPALIVE)
    return client.CoreV1Api(client.ApiClient(configuration))


def error_message(exc: Exception) -> str:
    """What a failed API call says in a line: the apiserver's message (an ``ApiException``'s body), else the
    exception's first line."""
    body = getattr(exc, "body", None)
    if body:
        try:
            return json.loads(body).get("message", str(exc))
        except (ValueError, AttributeError):
            pass
    return str(exc).splitlines()[0] if str(exc) else repr(exc)


def api_exception() -> type[Exception]:
    """The Kubernetes client's ``ApiException``, imported when first needed (the package's import is a second of
    the pod supervisor's start)."""
    from kubernetes.client.exceptions import ApiException

    return ApiException
