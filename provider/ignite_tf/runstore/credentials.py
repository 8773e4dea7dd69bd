"""How a run store's credentials reach the processes that need them: through the environment only.

- The CLI: what the store's own client reads from the environment (for ``s3://``, s3fs and boto3 read
  ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``... : ``CREDENTIAL_NAMES``), plus fsspec
  options that are not secrets as JSON in ``IGNITE_TF_RUN_STORE_OPTIONS`` (e.g. ``{"client_kwargs":
  {"region_name": "eu-west-1"}}``).
- Airflow: an ``aws`` connection named by ``run_store_conn_id`` (the amazon provider's ``AwsBaseHook``): its
  login/password or role, and ``endpoint_url``/``region_name`` from its extra, become the same variables
  (``connection_env``).

The launcher hands these variables to its supervisor; the supervisor to each task (a local task's
environment; a pod's Secret through ``envFrom``). They are never written to ``cluster.json``, a pod spec,
``TF_CONFIG``, a log, XCom or a command line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ignite_tf.errors import ConfigError

ENV_OPTIONS = "IGNITE_TF_RUN_STORE_OPTIONS"
"""fsspec storage options (JSON, no secrets) for the run store."""

CREDENTIAL_NAMES = (
    "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3",
    "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CA_BUNDLE", "GOOGLE_APPLICATION_CREDENTIALS",
)
"""The variables object-store clients read their endpoint and credentials from (boto3/s3fs; gcsfs)."""

_SECRET_WORDS = ("secret", "password", "token", "key")


def storage_options(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The fsspec options of ``IGNITE_TF_RUN_STORE_OPTIONS`` (none when unset)."""
    raw = (os.environ if environ is None else environ).get(ENV_OPTIONS, "").strip()
    if not raw:
        return {}
    try:
        options = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{ENV_OPTIONS} is not valid JSON ({exc.msg}): give fsspec options as a JSON "
                          f"object") from None
    if not isinstance(options, dict):
        raise ConfigError(f"{ENV_OPTIONS} must be a JSON object of fsspec options")
    secret = [k for k in options if any(w in k.lower() for w in _SECRET_WORDS)]
    if secret:
        raise ConfigError(f"{ENV_OPTIONS} has {', '.join(secret)}: it is passed on in the open; give credentials "
                          f"in the environment ({', '.join(CREDENTIAL_NAMES[:3])}...) or an Airflow aws "
                          f"connection (run_store_conn_id)")
    return options


def environment_credentials(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The store's variables this process has (the CLI's way)."""
    env = os.environ if environ is None else environ
    return {k: env[k] for k in CREDENTIAL_NAMES if env.get(k)}


def connection_env(conn_id: str) -> dict[str, str]:
    """The ``aws`` connection ``conn_id`` as the variables s3fs/boto3 read (``AwsBaseHook``: its keys, a role
    it assumes, ``endpoint_url`` and ``region_name`` from its extra)."""
    from airflow.providers.amazon.aws.hooks.base_aws import AwsBaseHook

    hook = AwsBaseHook(aws_conn_id=conn_id, client_type="s3")
    try:
        creds = hook.get_credentials()
    except Exception as exc:  # noqa: BLE001 - any failure here is the same unusable setting
        raise ConfigError(f"run_store_conn_id {conn_id!r}: no credentials from this aws connection "
                          f"({type(exc).__name__}: {exc}); check its login/password or role") from None
    env = {"AWS_ACCESS_KEY_ID": creds.access_key, "AWS_SECRET_ACCESS_KEY": creds.secret_key}
    if creds.token:
        env["AWS_SESSION_TOKEN"] = creds.token
    info = hook.conn_config
    if info.endpoint_url:
        env["AWS_ENDPOINT_URL"] = info.endpoint_url
    if info.region_name:
        env["AWS_DEFAULT_REGION"] = info.region_name
    return {k: v for k, v in env.items() if v}


def credentials_env(conn_id: str | None = None, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables a run store's users get: the connection's when ``conn_id`` is given, else this process's."""
    return connection_env(conn_id) if conn_id else environment_credentials(environ)


def env_to_options(env: Mapping[str, str], url: str) -> dict[str, Any]:
    """The fsspec options of an ``s3://`` store that ``env`` (``connection_env``) gives, for this process's own
    reads and writes: kept in memory, never written down or passed on. Other schemes: none."""
    if not str(url).startswith(("s3://", "s3a://")):
        return {}
    options: dict[str, Any] = {}
    for name, key in (("AWS_ACCESS_KEY_ID", "key"), ("AWS_SECRET_ACCESS_KEY", "secret"),
                      ("AWS_SESSION_TOKEN", "token"), ("AWS_ENDPOINT_URL", "endpoint_url")):
        if env.get(name):
            options[key] = env[name]
    if env.get("AWS_DEFAULT_REGION"):
        options["client_kwargs"] = {"region_name": env["AWS_DEFAULT_REGION"]}
    return options


@contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    """``env`` in this process's environment for the block only (a library that reads its credentials there,
    such as the registry's fsspec copy), then as it was."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
