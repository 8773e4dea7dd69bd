"""How to reach an Ignite cluster, without Airflow: addresses, credentials, SSL.

``IgniteConnectionConfig`` is what every core (ETL load, partition discovery, the reader, the CLI and the
worker runtime) takes. The Airflow ``IgniteHook`` builds one from an Airflow connection; the CLI builds
one from a connection file; worker processes build one from environment variables set by the launcher
(secrets travel in the environment, never on a command line or in TF_CONFIG).
"""

from __future__ import annotations

import json
import logging
import os
import ssl
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ignite_tf.errors import AuthenticationFailedError, ConfigError, IgniteUnavailableError

DEFAULT_CONN_ID = "ignite_default"
"""The Airflow connection the hook, operators, sensor, trigger, YAML spec and UI page use when none is named."""
# The thin-client query that counts server nodes (the hook's connection test, the local cluster's readiness).
SERVER_NODES_SQL = "SELECT COUNT(*) FROM SYS.NODES WHERE IS_CLIENT = FALSE"

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 10800
DEFAULT_ADDRESS = f"{DEFAULT_HOST}:{DEFAULT_PORT}"
"""Where a client connects when nothing says otherwise: the thin client's own default, like Ignite's tools."""
ENV_PREFIX = "IGNITE_TF_"
ENV_ADDRESSES = ENV_PREFIX + "ADDRESSES"
log = logging.getLogger(__name__)
_SSL_KEYS = ("ssl_ca_certfile", "ssl_certfile", "ssl_keyfile", "ssl_keyfile_password", "ssl_ciphers")


class _Reasons(logging.Handler):
    """Keeps the first message of each kind that pyignite logs about a failed connection."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        exc = record.exc_info[1] if record.exc_info else None
        text = f"{type(exc).__name__}: {exc}" if exc is not None else record.getMessage()
        if text not in self.reasons:
            self.reasons.append(text)


@contextmanager
def quiet_pyignite():
    """Silence pyignite's traceback per refused connection; callers report unreachable nodes themselves.

    Yields the list of reasons pyignite gave (refused, TLS handshake or certificate failures...).
    """
    logger = logging.getLogger("pyignite.connection")
    level, propagate = logger.level, logger.propagate
    handler = _Reasons()
    logger.addHandler(handler)
    logger.setLevel(logging.ERROR)
    logger.propagate = False
    try:
        yield handler.reasons
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
        logger.propagate = propagate


def sql(client, query: str, args: list | tuple | None = None, *, names: bool = False) -> list[list]:
    """The rows of one SQL query on a pyignite ``client``, as lists, the cursor closed.

    :param args: the query's ``?`` arguments.
    :param names: the first row is the column names.
    """
    with client.sql(query, query_args=list(args) if args else None, include_field_names=names) as cursor:
        return [list(row) for row in cursor]


def parse_addresses(value: str | list | tuple, *, source: str = "addresses") -> tuple[tuple[str, int], ...]:
    """``"h1:10800,h2:10801"`` (or a list of such strings or (host, port) pairs) -> ((host, port), ...)."""
    items = value.replace(";", ",").split(",") if isinstance(value, str) else list(value)
    out: list[tuple[str, int]] = []
    for item in items:
        if isinstance(item, (tuple, list)) and len(item) == 2:
            host, port = str(item[0]), item[1]
        else:
            text = str(item).strip()
            if not text:
                continue
            host, _, port = text.rpartition(":") if ":" in text else (text, "", DEFAULT_PORT)
        try:
            port = int(port)
        except (TypeError, ValueError):
            raise ConfigError(f"{source}: port of {item!r} is not a number (expected host:port)") from None
        if not host or not 0 < port < 65536:
            raise ConfigError(f"{source}: {item!r} is not a valid host:port")
        out.append((host, port))
    if not out:
        raise ConfigError(f"{source}: no Ignite address given (expected host:port[,host:port...])")
    return tuple(out)


@dataclass(frozen=True)
class IgniteConnectionConfig:
    """Where the Ignite thin-client endpoints are and how to log in.

    :param addresses: thin-client endpoints, one per server node (the client picks the node that owns a key).
    :param username: Ignite user, when authentication is on.
    :param password: never logged, never in ``repr``, handed to child processes only through the environment.
    :param use_ssl: TLS to the thin-client port.
    :param timeout: socket timeout in seconds.
    """

    addresses: tuple[tuple[str, int], ...]
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    use_ssl: bool = False
    ssl_ca_certfile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_keyfile_password: str | None = field(default=None, repr=False)
    ssl_ciphers: str | None = None
    timeout: float = 30.0

    def __post_init__(self):
        object.__setattr__(self, "addresses", parse_addresses(self.addresses))
        if self.password and not self.username:
            raise ConfigError("a password is set but no username: set both, or neither")

    # -- constructors ----------------------------------------------------------------------------------
    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "connection") -> IgniteConnectionConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known - {"host", "port"})
        if unknown:
            raise ConfigError(f"{source}: unknown key(s) {unknown}; allowed: {sorted(known)}")
        data = dict(data)
        if "addresses" not in data:
            if "host" not in data:
                raise ConfigError(f"{source}: give 'addresses' (host:port,...) or 'host' and 'port'")
            data["addresses"] = f"{data.pop('host')}:{data.pop('port', DEFAULT_PORT)}"
        data.pop("host", None)
        data.pop("port", None)
        data["addresses"] = parse_addresses(data["addresses"], source=f"{source}: addresses")
        return cls(**data)

    @classmethod
    def from_file(cls, path: str | Path) -> IgniteConnectionConfig:
        """A JSON or YAML file with the fields of this class (``ignite-tf -c FILE``)."""
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"connection file {path}: {exc.strerror}") from None
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ConfigError(f"connection file {path}: line {exc.lineno}: {exc.msg}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"connection file {path}: expected a mapping of connection fields")
        return cls.from_dict(data, source=f"connection file {path}")

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> IgniteConnectionConfig | None:
        """What the launcher hands to worker processes (``IGNITE_TF_ADDRESSES``, ``IGNITE_TF_PASSWORD``...)."""
        env = os.environ if environ is None else environ
        if not env.get(ENV_ADDRESSES):
            return None
        data: dict[str, Any] = {"addresses": env[ENV_ADDRESSES]}
        for name in ("username", "password", *_SSL_KEYS):
            if env.get(ENV_PREFIX + name.upper()):
                data[name] = env[ENV_PREFIX + name.upper()]
        data["use_ssl"] = env.get(ENV_PREFIX + "USE_SSL", "").lower() in ("1", "true", "yes")
        return cls(**data)

    @classmethod
    def default(cls) -> IgniteConnectionConfig:
        """A local node on the thin client's default port, no login (``DEFAULT_ADDRESS``)."""
        return cls(addresses=DEFAULT_ADDRESS)

    @staticmethod
    def env_names() -> tuple[str, ...]:
        """Every variable ``to_env`` may write (a caller replacing a connection clears them all first)."""
        return tuple(ENV_PREFIX + name.upper() for name in ("addresses", "use_ssl", "username", "password", *_SSL_KEYS))

    # -- outputs ---------------------------------------------------------------------------------------
    def to_env(self) -> dict[str, str]:
        """Environment variables that ``from_env`` reads back (contains the password: environment only)."""
        env = {ENV_ADDRESSES: self.addresses_str, ENV_PREFIX + "USE_SSL": str(self.use_ssl).lower()}
        for name in ("username", "password", *_SSL_KEYS):
            value = getattr(self, name)
            if value:
                env[ENV_PREFIX + name.upper()] = str(value)
        return env

    def redacted(self) -> dict[str, Any]:
        """A JSON-able description safe for logs and XCom."""
        out = asdict(self)
        out["addresses"] = self.addresses_str
        for secret in ("password", "ssl_keyfile_password"):
            if out.get(secret):
                out[secret] = "***"
        return out

    @property
    def addresses_str(self) -> str:
        return ",".join(f"{h}:{p}" for h, p in self.addresses)

    def client_kwargs(self, partition_aware: bool = True) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"partition_aware": partition_aware, "timeout": self.timeout}
        if self.username:
            kwargs["username"] = self.username
            kwargs["password"] = self.password
        if self.use_ssl:
            kwargs["use_ssl"] = True
            for key in _SSL_KEYS:
                if getattr(self, key):
                    kwargs[key] = getattr(self, key)
            if self.ssl_ca_certfile:
                # pyignite ignores the server's certificate unless told otherwise, even with a CA file.
                kwargs["ssl_cert_reqs"] = ssl.CERT_REQUIRED
        return kwargs

    def client(self, partition_aware: bool = True):
        """A connected pyignite ``Client``; partition-aware by default (key operations go to the owner)."""
        from pyignite import Client
        from pyignite.exceptions import AuthenticationError, ReconnectError

        client = Client(**self.client_kwargs(partition_aware))
        try:
            with quiet_pyignite() as reasons:
                client.connect(list(self.addresses))
        except AuthenticationError as exc:
            client.close()
            who = f"user {self.username!r}" if self.username else "a client without a username"
            raise AuthenticationFailedError(
                f"Ignite at {self.addresses_str} refused the login of {who} ({exc}): set the connection's "
                f"username and password (an Airflow connection's Login and Password, the username and password "
                f"of a -c file, or IGNITE_TF_USERNAME and IGNITE_TF_PASSWORD) to a user of this cluster") from None
        except (ReconnectError, OSError) as exc:
            client.close()
            why = "; ".join(reasons[:2]) or exc.__class__.__name__
            hint = "start the cluster (make ignite-up) or fix the connection's addresses"
            if any(word in r for r in reasons for word in ("SSL", "EOF", "reset", "broken")):
                hint += ", or its TLS settings (use_ssl, ssl_ca_certfile) to match the cluster's"
            raise IgniteUnavailableError(f"no Ignite node reachable at {self.addresses_str} ({why}): {hint}") from None
        # A client that is not partition-aware opens one connection, to the first node that answers: only the
        # nodes before that one were found down.
        tried = client._nodes if partition_aware else client._nodes[:client._current_node]
        down = [f"{c.host}:{c.port}" for c in tried if not c.alive]
        if down:
            log.warning("Ignite node(s) %s not reachable; using %d other node(s)", ", ".join(down),
                        len(self.addresses) - len(down))
        return client
