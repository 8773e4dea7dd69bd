"""IgniteHook against the real session cluster, with connections defined as AIRFLOW_CONN_* (no DB needed)."""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path

# Airflow reads AIRFLOW_HOME when first imported; keep it (and the airflow.cfg it writes) out of ~/airflow.
os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="ignite-tf-airflow-"))

import jsonschema  # noqa: E402
import pytest  # noqa: E402
import structlog  # noqa: E402

from ignite_tf.connection import DEFAULT_PORT  # noqa: E402
from ignite_tf.errors import ConfigError, IgniteUnavailableError  # noqa: E402
from ignite_tf.hooks.ignite import IgniteHook, allowed_extras  # noqa: E402
from ignite_tf.ports import free_port  # noqa: E402

PASSWORD = "pw-Zq83-never-in-logs"


def define_conn(monkeypatch, conn_id: str, **fields) -> str:
    """Define an Airflow connection the way deployments do without a DB: AIRFLOW_CONN_<ID> as JSON."""
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "ignite", **fields}))
    return conn_id


@pytest.fixture
def test_conn(monkeypatch, ignite_conn) -> str:
    return define_conn(monkeypatch, "ignite_test", host=ignite_conn.addresses_str)


# -- against the cluster ------------------------------------------------------------------------------
def test_get_conn_put_get_round_trip(test_conn, cache_name):
    with IgniteHook(ignite_conn_id=test_conn) as hook:
        client = hook.get_conn()
        assert hook.get_conn() is client, "the client is opened once per hook"
        assert client.partition_aware
        cache = client.get_or_create_cache(cache_name)
        try:
            values = {k: f"value-{k}" for k in range(200)}
            cache.put_all(values)
            cache.put(10_000, "single")
            assert cache.get(10_000) == "single"
            assert cache.get_all(list(values)) == values
        finally:
            cache.destroy()
    assert hook._client is None, "leaving the with-block closes the client"


def test_test_connection_reports_server_nodes(test_conn, ignite_conn):
    ok, message = IgniteHook(test_conn).test_connection()
    assert ok, message
    assert "2 server node(s)" in message
    assert ignite_conn.addresses_str in message


def test_one_seed_address_reaches_every_server(monkeypatch, ignite_conn):
    """A connection naming one node (as a Kubernetes Service address would): the hook's client holds a
    connection to each server, and the connection test lists the addresses the cluster gave."""
    seed = ignite_conn.addresses[-1]
    conn_id = define_conn(monkeypatch, "ignite_one_seed", host=f"{seed[0]}:{seed[1]}")
    with IgniteHook(conn_id) as hook:
        servers = hook.discover_servers(refresh=True)
        assert {s["address"] for s in servers} == {f"{h}:{p}" for h, p in ignite_conn.addresses}
        assert len({s["consistent_id"] for s in servers}) == 2
        client = hook.get_conn()
        assert {(c.host, c.port) for c in client._nodes if c.alive} == set(ignite_conn.addresses)
    ok, message = IgniteHook(conn_id).test_connection()
    assert ok, message
    assert "thin-client addresses found: " in message
    assert all(f"{h}:{p}" in message for h, p in ignite_conn.addresses)


def test_test_connection_closed_port_is_false_and_names_the_address(monkeypatch):
    address = f"127.0.0.1:{free_port()}"
    conn_id = define_conn(monkeypatch, "ignite_closed", host=address)
    ok, message = IgniteHook(conn_id).test_connection()
    assert ok is False
    assert address in message
    with pytest.raises(IgniteUnavailableError, match=address):
        IgniteHook(conn_id).get_conn()


def test_test_connection_names_an_unreachable_address_among_live_ones(monkeypatch, ignite_conn):
    dead = f"127.0.0.1:{free_port()}"
    conn_id = define_conn(monkeypatch, "ignite_partly", host=f"{ignite_conn.addresses_str},{dead}")
    ok, message = IgniteHook(conn_id).test_connection()
    assert ok, message
    assert "2 server node(s)" in message
    assert f"not reachable: {dead}" in message


def test_test_connection_never_raises_on_a_bad_connection(monkeypatch):
    conn_id = define_conn(monkeypatch, "ignite_bad", host="h1:1", extra=json.dumps({"colour": "red"}))
    ok, message = IgniteHook(conn_id).test_connection()
    assert ok is False and "colour" in message
    ok, message = IgniteHook("ignite_not_defined_anywhere").test_connection()
    assert ok is False and "AIRFLOW_CONN_IGNITE_NOT_DEFINED_ANYWHERE" in message


def test_airflow_test_button_path(monkeypatch, ignite_conn):
    """What the API server does for "Test" in the UI: a transient env connection + Connection.test_connection."""
    from airflow.models.connection import Connection

    conn = Connection(conn_id="transient_x1", conn_type="ignite", host=ignite_conn.addresses_str,
                      extra=json.dumps({"timeout": 10}))
    monkeypatch.setenv("AIRFLOW_CONN_TRANSIENT_X1", conn.get_uri())
    ok, message = conn.test_connection()
    assert ok, message
    assert "2 server node(s)" in message


# -- parsing (no cluster) -----------------------------------------------------------------------------
def test_host_with_several_addresses(monkeypatch):
    conn_id = define_conn(monkeypatch, "ignite_hosts", host="h1:1,h2:2")
    assert IgniteHook(conn_id).get_config().addresses == (("h1", 1), ("h2", 2))


def test_addresses_extra_instead_of_host(monkeypatch):
    conn_id = define_conn(monkeypatch, "ignite_extra", extra=json.dumps({"addresses": "h1:1, h2:2"}))
    assert IgniteHook(conn_id).get_config().addresses == (("h1", 1), ("h2", 2))
    conn_id = define_conn(monkeypatch, "ignite_list", extra=json.dumps({"addresses": ["h1:1", "h2:2"]}))
    assert IgniteHook(conn_id).get_config().addresses == (("h1", 1), ("h2", 2))


def test_port_field_fills_in_addresses_without_a_port(monkeypatch):
    conn_id = define_conn(monkeypatch, "ignite_port", host="h1,h2:2", port=10900)
    assert IgniteHook(conn_id).get_config().addresses == (("h1", 10900), ("h2", 2))
    conn_id = define_conn(monkeypatch, "ignite_noport", host="h1")
    assert IgniteHook(conn_id).get_config().addresses == (("h1", DEFAULT_PORT),)


def test_extras_become_typed_config_fields(monkeypatch):
    extra = {"use_ssl": "true", "timeout": "7.5", "ssl_ca_certfile": "/ca.pem",
             "extra__ignite__ssl_certfile": "/c.pem", "ssl_keyfile": "", "ssl_keyfile_password": None}
    conn_id = define_conn(monkeypatch, "ignite_ssl", host="h1:1", login="alice", password=PASSWORD,
                          extra=json.dumps(extra))
    config = IgniteHook(conn_id).get_config()
    assert config.use_ssl is True and config.timeout == 7.5
    assert (config.ssl_ca_certfile, config.ssl_certfile, config.ssl_keyfile) == ("/ca.pem", "/c.pem", None)
    assert (config.username, config.password) == ("alice", PASSWORD)
    kwargs = config.client_kwargs()
    assert kwargs["use_ssl"] and kwargs["ssl_ca_certfile"] == "/ca.pem" and kwargs["timeout"] == 7.5


@pytest.mark.parametrize("fields, expected", [
    ({"host": "h1:1", "extra": json.dumps({"colour": "red"})}, r"'ignite_e'.*unknown extra key 'colour'.*use_ssl"),
    ({"host": "h1:1", "extra": json.dumps({"addresses": "h2:2"})}, r"'ignite_e'.*both Host.*'addresses'"),
    ({"extra": json.dumps({"use_ssl": True})}, r"'ignite_e'.*no Ignite address"),
    ({"host": "h1:port"}, r"'ignite_e'.*'h1:port'"),
    ({"host": "h1:1", "extra": json.dumps({"timeout": "soon"})}, r"'ignite_e'.*'timeout'.*'soon'"),
    ({"host": "h1:1", "extra": json.dumps({"use_ssl": "maybe"})}, r"'ignite_e'.*'use_ssl'.*'maybe'"),
    ({"host": "h1:1", "password": PASSWORD}, r"'ignite_e'.*password is set but no username"),
])
def test_bad_connection_fields_raise_config_error_naming_them(monkeypatch, fields, expected):
    conn_id = define_conn(monkeypatch, "ignite_e", **fields)
    with pytest.raises(ConfigError, match=expected) as info:
        IgniteHook(conn_id).get_config()
    assert PASSWORD not in str(info.value)


def test_allowed_extras_are_the_form_fields():
    assert set(allowed_extras()) == {"addresses", "use_ssl", "ssl_ca_certfile", "ssl_certfile", "ssl_keyfile",
                                     "ssl_keyfile_password", "ssl_ciphers", "timeout"}


# -- secrets ------------------------------------------------------------------------------------------
@pytest.fixture
def all_logs(caplog):
    """Every record at DEBUG: stdlib (caplog) and structlog (what ``hook.log`` writes to in Airflow 3)."""
    saved = structlog.get_config()
    capture = structlog.testing.LogCapture()
    structlog.configure(processors=[capture], wrapper_class=structlog.make_filtering_bound_logger(logging.DEBUG),
                        cache_logger_on_first_use=False)
    try:
        with caplog.at_level(logging.DEBUG):
            yield lambda: [r.getMessage() for r in caplog.records] + [repr(e) for e in capture.entries]
    finally:
        structlog.configure(**saved)


def test_password_is_never_logged_nor_in_repr(monkeypatch, ignite_conn, all_logs):
    # The session cluster has authentication off: it accepts (and ignores) the credentials.
    conn_id = define_conn(monkeypatch, "ignite_secret", host=ignite_conn.addresses_str, login="ignite",
                          password=PASSWORD, extra=json.dumps({"ssl_keyfile_password": PASSWORD + "-key"}))
    hook = IgniteHook(conn_id)
    config = hook.get_config()
    assert config.password == PASSWORD
    assert PASSWORD not in repr(config)
    assert PASSWORD not in json.dumps(config.redacted())

    bad_id = define_conn(monkeypatch, "ignite_secret_bad", host=f"127.0.0.1:{free_port()}", login="ignite",
                         password=PASSWORD)
    ok, message = IgniteHook(bad_id).test_connection()
    assert not ok and PASSWORD not in message

    hook.test_connection()
    with hook:
        hook.get_conn().get_cache_names()
    messages = all_logs()
    hook_messages = [m for m in messages if ignite_conn.addresses_str in m]
    assert hook_messages, f"the hook logged nothing that names the cluster; captured: {messages}"
    leaks = [m for m in messages if PASSWORD in m]
    assert not leaks, f"password in log records: {leaks}"


# -- connection form ----------------------------------------------------------------------------------
def test_ui_field_behaviour_matches_airflow_schema():
    import airflow

    behaviour = IgniteHook.get_ui_field_behaviour()
    schema = json.loads((Path(airflow.__file__).parent / "customized_form_field_behaviours.schema.json").read_text())
    jsonschema.validate(behaviour, schema)
    assert behaviour["hidden_fields"] == ["schema"]
    assert behaviour["relabeling"]["host"] == "Addresses (host:port, comma-separated)"
    assert set(behaviour["placeholders"]) - {"host", "port", "login", "password"} <= set(allowed_extras())


def test_connection_form_widgets_are_lazy():
    """Airflow 3.3 without FAB has no wtforms: the hook must fail with an ImportError Airflow tolerates."""
    try:
        import flask_appbuilder  # noqa: F401
        import wtforms  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError) as info:
            IgniteHook.get_connection_form_widgets()
        assert info.value.name in ("flask_appbuilder", "wtforms")
    else:
        widgets = IgniteHook.get_connection_form_widgets()
        assert set(widgets) == set(allowed_extras())
        assert widgets["ssl_keyfile_password"].field_class.__name__ == "PasswordField"
        assert widgets["use_ssl"].field_class.__name__ == "BooleanField"
