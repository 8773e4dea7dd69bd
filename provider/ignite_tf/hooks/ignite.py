"""Airflow hook for the ``ignite`` connection type: an Airflow connection -> IgniteConnectionConfig -> client.

The connection holds ``host`` (``h1:10800,h2:10800``; the ``port`` field fills in entries without one),
``login``/``password`` and the extras listed under ``conn-fields`` in :func:`ignite_tf.get_provider_info`
(``addresses`` instead of host, ``use_ssl``, ``ssl_*`` files, ``timeout``). Everything past the hook works on
:class:`~ignite_tf.connection.IgniteConnectionConfig`, so the stage cores never see Airflow.

The addresses are seeds: one (a Kubernetes Service, say) is enough. The client connects to every server the
cluster lists (:mod:`ignite_tf.reader.servers`), so key operations and scans reach each key's primary node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ignite_tf.connection import DEFAULT_CONN_ID, DEFAULT_PORT, SERVER_NODES_SQL, IgniteConnectionConfig
from ignite_tf.errors import ConfigError

try:
    from airflow.sdk import BaseHook
except ImportError:  # Airflow 2.x
    from airflow.hooks.base import BaseHook
try:
    from airflow.sdk.exceptions import AirflowNotFoundException
except ImportError:  # Airflow < 3.1 raises the core class
    from airflow.exceptions import AirflowNotFoundException

if TYPE_CHECKING:
    from pyignite import Client

# Older Airflow UIs stored custom fields as ``extra__<conn_type>__<name>``.
_PREFIX = "extra__ignite__"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _connection_spec() -> dict[str, Any]:
    """The ``ignite`` entry of the provider info: the single source of the form and the allowed extras."""
    from ignite_tf import get_provider_info

    return next(c for c in get_provider_info()["connection-types"] if c["connection-type"] == "ignite")


def allowed_extras() -> tuple[str, ...]:
    """Extra keys an ``ignite`` connection may hold."""
    return tuple(_connection_spec()["conn-fields"])


class IgniteHook(BaseHook):
    """Connects to an Apache Ignite 2.x cluster through its thin-client protocol (pyignite).

    :param ignite_conn_id: id of an Airflow connection of type ``ignite``.
    :param logger_name: name of the logger the hook writes to (Airflow's default when ``None``).
    """

    conn_name_attr = "ignite_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    conn_type = "ignite"
    hook_name = "Apache Ignite"

    def __init__(self, ignite_conn_id: str = default_conn_name, logger_name: str | None = None) -> None:
        super().__init__(logger_name=logger_name)
        self.ignite_conn_id = ignite_conn_id
        self._config: IgniteConnectionConfig | None = None
        self._client: Client | None = None

    # -- configuration ---------------------------------------------------------------------------------
    def get_config(self) -> IgniteConnectionConfig:
        """The connection as an :class:`IgniteConnectionConfig` (read once, then cached on the hook).

        :raises ConfigError: the connection is missing, has an unknown extra, or a malformed field.
        """
        if self._config is None:
            try:
                conn = self.get_connection(self.ignite_conn_id)
            except AirflowNotFoundException:
                raise ConfigError(
                    f"Airflow connection {self.ignite_conn_id!r} is not defined: add it (Admin > Connections, "
                    f"`airflow connections add`, or AIRFLOW_CONN_{self.ignite_conn_id.upper()})") from None
            self._config = self.config_from_connection(conn)
        return self._config

    @classmethod
    def config_from_connection(cls, conn: Any) -> IgniteConnectionConfig:
        """Build the config from an Airflow ``Connection`` (anything with host/port/login/password/extra).

        :param conn: the Airflow connection; its ``conn_id`` names it in error messages.
        :raises ConfigError: naming the connection id and the offending field.
        """
        where = f"Airflow connection {conn.conn_id!r}"
        try:
            extra = conn.extra_dejson or {}
        except Exception as exc:  # Airflow raises various types for unparsable extras
            raise ConfigError(f"{where}: extra is not a JSON object ({exc})") from None
        allowed = allowed_extras()
        values: dict[str, Any] = {}
        for key, value in extra.items():
            name = key[len(_PREFIX):] if key.startswith(_PREFIX) else key
            if name not in allowed:
                raise ConfigError(
                    f"{where}: unknown extra key {key!r}; allowed extras: {', '.join(allowed)} "
                    f"(host, port, login and password go in the connection's own fields)")
            # The UI stores untouched optional fields as null or "".
            if value is not None and value != "":
                values[name] = value

        if conn.host and values.get("addresses"):
            raise ConfigError(
                f"{where}: both Host ({conn.host!r}) and the 'addresses' extra ({values['addresses']!r}) are "
                f"set; keep one of them")
        raw = conn.host or values.pop("addresses", None)
        values.pop("addresses", None)
        if not raw:
            raise ConfigError(f"{where}: no Ignite address; set Host to host:port[,host:port...] "
                              f"or the 'addresses' extra")
        kwargs: dict[str, Any] = {
            "addresses": _with_default_port(raw, conn.port or DEFAULT_PORT),
            "username": conn.login or None,
            "password": conn.password or None,
        }
        if "use_ssl" in values:
            kwargs["use_ssl"] = _as_bool(values.pop("use_ssl"), f"{where}: extra 'use_ssl'")
        if "timeout" in values:
            kwargs["timeout"] = _as_timeout(values.pop("timeout"), f"{where}: extra 'timeout'")
        kwargs.update({k: str(v) for k, v in values.items()})
        try:
            return IgniteConnectionConfig(**kwargs)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    # -- client ----------------------------------------------------------------------------------------
    def get_conn(self) -> Client:
        """A connected, partition-aware pyignite ``Client`` holding a connection to every server node found
        from the configured addresses (seeds), shared by later calls until :meth:`close`.

        :raises IgniteUnavailableError: no node answered at the configured addresses.
        """
        from ignite_tf.reader.servers import connect

        if self._client is None:
            config = self.get_config()
            self.log.info("Connecting to Apache Ignite (connection %s): %s", self.ignite_conn_id,
                          config.redacted())
            self._client = connect(config)[0]
        return self._client

    def discover_servers(self, refresh: bool = False) -> list[dict[str, Any]]:
        """Every server node of the cluster, as the cluster lists it: node id, consistent id, the thin-client
        address this process reaches it at (None when none answered), and every address it lists."""
        from ignite_tf.reader.servers import discover

        return [{"node_id": s.node_id, "consistent_id": s.consistent_id,
                 "address": f"{s.host}:{s.port}" if s.address else None, "addresses": list(s.addresses)}
                for s in discover(self.get_config(), refresh=refresh)]

    def close(self) -> None:
        """Close the client opened by :meth:`get_conn`, if any."""
        if self._client is not None:
            client, self._client = self._client, None
            client.close()

    def __enter__(self) -> IgniteHook:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def test_connection(self) -> tuple[bool, str]:
        """Connect with a fresh client and run a query on the cluster; never raises.

        :return: ``(True, "... N server node(s) ...")`` or ``(False, what went wrong)``.
        """
        try:
            config = self.get_config()
        except Exception as exc:  # the UI shows the message; never a traceback
            return False, str(exc)
        self.log.info("Testing Apache Ignite connection %s: %s", self.ignite_conn_id, config.redacted())
        from ignite_tf.reader.servers import server_nodes

        try:
            client = config.client()
        except Exception as exc:
            return False, str(exc)
        try:
            with client.sql(SERVER_NODES_SQL) as cursor:
                servers = next(iter(cursor))[0]
            unreachable = [f"{n.host}:{n.port}" for n in getattr(client, "_nodes", []) if not n.alive]
            try:
                found = server_nodes(client)
            except Exception:  # noqa: BLE001 - the system views refused to this user: no addresses to show
                found = []
        except Exception as exc:
            return False, (f"connected to {config.addresses_str} but the query {SERVER_NODES_SQL!r} failed "
                           f"({exc.__class__.__name__}: {exc})")
        finally:
            client.close()
        message = f"Connected to Apache Ignite at {config.addresses_str}: {servers} server node(s) in the cluster"
        if unreachable:
            message += f"; not reachable: {', '.join(unreachable)}"
        reached = [f"{s.consistent_id} {s.host}:{s.port}" for s in found if s.address]
        message += f"; thin-client addresses found: {', '.join(reached) or 'none'}"
        missing = [s.consistent_id for s in found if not s.address]
        if missing:
            message += (f"; no listed address of {', '.join(missing)} answered from here (their scans go through "
                        f"another node)")
        return True, message

    # -- connection form (Airflow < 3.2; newer UIs read conn-fields from the provider info) -------------
    @classmethod
    def get_connection_form_widgets(cls) -> dict[str, Any]:
        """Form fields for the extras, built from the provider info's ``conn-fields``."""
        from flask_appbuilder.fieldwidgets import BS3PasswordFieldWidget, BS3TextFieldWidget
        from wtforms import BooleanField, PasswordField, StringField

        widgets: dict[str, Any] = {}
        for name, spec in _connection_spec()["conn-fields"].items():
            schema, label = spec["schema"], spec["label"]
            if "boolean" in schema["type"]:
                widgets[name] = BooleanField(label, description=spec.get("description"))
            elif schema.get("format") == "password":
                widgets[name] = PasswordField(label, widget=BS3PasswordFieldWidget(),
                                              description=spec.get("description"))
            else:
                widgets[name] = StringField(label, widget=BS3TextFieldWidget(),
                                            description=spec.get("description"))
        return widgets

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        """Hidden, relabelled and placeholder fields of the connection form."""
        behaviour = _connection_spec()["ui-field-behaviour"]
        return {
            "hidden_fields": list(behaviour.get("hidden-fields", [])),
            "relabeling": dict(behaviour.get("relabeling", {})),
            "placeholders": dict(behaviour.get("placeholders", {})),
        }


def _with_default_port(raw: str | list, port: int) -> list:
    """Give ``port`` to every address written without one (``h1,h2:10801`` -> ``h1:port,h2:10801``)."""
    out = []
    for item in raw.replace(";", ",").split(",") if isinstance(raw, str) else raw:
        if isinstance(item, str):
            item = item.strip()
            if item and ":" not in item:
                item = f"{item}:{port}"
        out.append(item)
    return out


def _as_bool(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise ConfigError(f"{where}: {value!r} is not a boolean (use true or false)")


def _as_timeout(value: Any, where: str) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = -1.0
    if not seconds > 0:
        raise ConfigError(f"{where}: {value!r} is not a positive number of seconds")
    return seconds
