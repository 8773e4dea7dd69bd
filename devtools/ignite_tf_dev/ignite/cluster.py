"""Real Apache Ignite 2.x server nodes as local JVM processes (``make ignite-up``, the test fixtures).

A cluster owns a state folder (``cluster.json`` with its pids and ports, node logs, work folders) and a block
of 30 ports from its port base P: thin client P..P+9 (node i on P+i), discovery P+10..P+19, communication
P+20..P+29. Two clusters with different state folders and port blocks never touch each other: ``down`` stops
the pids recorded in its own state folder only, and ``up`` refuses a block with a port in use, since a
foreign node inside the discovery range would merge the two clusters. The JVM side (jars, java, options) is
in :mod:`ignite_tf_dev.ignite.jvm`, ports and pids in :mod:`ignite_tf.cluster.procs`.

Optionally, as a secured production cluster would run:

- ``auth``: authentication on. Ignite 2.x needs native persistence for it, so the data region is persisted
  under the state folder's ``work/``; the cluster is activated once every node takes a login, then the
  password of user ``ignite`` is changed from Ignite's default to the one given (through SQL, so it is never
  on a command line). The readiness check logs in; a refused login fails at once, naming the user.
- ``tls``: the thin-client port speaks TLS only, with a certificate made for this cluster in ``tls/``
  (:mod:`ignite_tf_dev.ignite.tls`); clients verify it (``ssl_ca_certfile``).

``connection.json`` in the state folder (mode 600: it holds the password) is a connection file for
``ignite-tf -c``. ``down`` removes it with the work folders (persistence files) and certificates.

    python -m ignite_tf_dev.ignite up -n 2 [--port 10800] [--state-dir DIR] [--auth] [--tls]
    python -m ignite_tf_dev.ignite status [--state-dir DIR]
    python -m ignite_tf_dev.ignite down [--state-dir DIR]
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from ignite_tf.cluster.procs import (
    MAX_NODES,
    PORT_RANGES,
    die_with_parent,
    free_port_bases,
    kill_and_wait,
    pid_alive,
    tail_of,
)
from ignite_tf.errors import AuthenticationFailedError, ConfigError, IgniteTFError
from ignite_tf.ports import port_free
from ignite_tf_dev.ignite.jvm import (
    CONF_DIR,
    JAVA17_OPTS,
    ensure_jars,
    java_binary,
    keytool_binary,
)
from ignite_tf_dev.ignite.tls import TlsFiles, make_certificates

DEFAULT_PORT = 10800
# Ignite creates this user, with this password, when an authenticated cluster is first activated.
IGNITE_USER = "ignite"
IGNITE_DEFAULT_PASSWORD = "ignite"
STATE_FILE = "cluster.json"
AUTH_SETTLE_S = 60  # how long the nodes `up` starts may refuse every login before it counts
CONNECTION_FILE = "connection.json"
_SECURE_PARTS = ("work", "tls", CONNECTION_FILE)  # what `down` removes besides the nodes


@dataclass
class Node:
    index: int
    instance: str
    client_port: int
    disco_port: int
    comm_port: int
    log: str
    pid: int = 0

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.client_port}"


@dataclass
class LocalIgniteCluster:
    """N Ignite server nodes on localhost, tracked by pid in ``state_dir/cluster.json``.

    :param state_dir: where the state file, node logs, work folders and certificates go.
    :param client_port: the port base: thin-client port of node 0 (node i listens on ``client_port + i``).
    :param disco_port: discovery port of node 0 (default ``client_port + 10``; the cluster searches 10 ports).
    :param comm_port: communication port of node 0 (default ``client_port + 20``).
    :param heap_mb: JVM heap of each node.
    :param region_mb: data region of each node (persisted when ``auth``).
    :param die_with_parent: nodes get SIGKILL when the process that started them dies (tests).
    :param auth: authentication on (and native persistence, which Ignite 2.x needs for it).
    :param tls: TLS on the thin-client port, with a certificate made for this cluster.
    :param password: password of user ``ignite`` when ``auth`` (default: Ignite's own, ``ignite``).
    """

    state_dir: Path
    client_port: int = DEFAULT_PORT
    disco_port: int | None = None
    comm_port: int | None = None
    heap_mb: int = 512
    region_mb: int = 512
    die_with_parent: bool = False
    auth: bool = False
    tls: bool = False
    password: str | None = field(default=None, repr=False)
    nodes: list[Node] = field(default_factory=list)

    def __post_init__(self):
        self.state_dir = Path(self.state_dir)
        self.disco_port = self.disco_port or self.client_port + MAX_NODES
        self.comm_port = self.comm_port or self.client_port + 2 * MAX_NODES
        if self.password and not self.auth:
            raise ConfigError("a password is only used with auth=True (authentication on)")
        self._procs: dict[int, subprocess.Popen] = {}
        self._refused_since: float | None = None  # when a starting node first refused both logins
        state = self.state_dir / STATE_FILE
        if state.exists():
            data = json.loads(state.read_text())
            self.nodes = [Node(**n) for n in data.get("nodes", [])]

    @classmethod
    def from_state(cls, state_dir) -> LocalIgniteCluster:
        """The cluster recorded in ``state_dir`` (ports, security, nodes), as ``up`` left it."""
        state_dir = Path(state_dir)
        try:
            data = json.loads((state_dir / STATE_FILE).read_text())
        except FileNotFoundError:
            return cls(state_dir)
        settings = {k: data[k] for k in ("client_port", "disco_port", "comm_port", "auth", "tls") if k in data}
        cluster = cls(state_dir, **settings)
        if cluster.auth and (state_dir / CONNECTION_FILE).exists():
            cluster.password = json.loads((state_dir / CONNECTION_FILE).read_text()).get("password")
        return cluster

    @classmethod
    def on_free_ports(cls, state_dir, purpose: str = "tests", **kwargs) -> LocalIgniteCluster:
        """A cluster on a free block of ports from ``PORT_RANGES[purpose]``."""
        client_port, disco_port, comm_port = free_port_bases(*PORT_RANGES[purpose])
        return cls(state_dir, client_port=client_port, disco_port=disco_port, comm_port=comm_port, **kwargs)

    # -- state ---------------------------------------------------------------------------------------
    def _save(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_dir / f"{STATE_FILE}.tmp"
        tmp.write_text(json.dumps({
            "client_port": self.client_port, "disco_port": self.disco_port, "comm_port": self.comm_port,
            "auth": self.auth, "tls": self.tls, "nodes": [asdict(n) for n in self.nodes],
        }, indent=2))
        tmp.replace(self.state_dir / STATE_FILE)

    @property
    def tls_files(self) -> TlsFiles:
        return TlsFiles(self.state_dir / "tls")

    @property
    def addresses(self) -> list[str]:
        return [n.address for n in self.nodes if pid_alive(n.pid)]

    def connection(self, nodes: list[Node] | None = None, timeout: float = 30.0):
        """An IgniteConnectionConfig to every live node (or to ``nodes``), with this cluster's login and TLS."""
        from ignite_tf.connection import IgniteConnectionConfig

        nodes = self.live_nodes() if nodes is None else nodes
        security: dict = {}
        if self.auth:
            security.update(username=IGNITE_USER, password=self.password or IGNITE_DEFAULT_PASSWORD)
        if self.tls:
            security.update(use_ssl=True, ssl_ca_certfile=str(self.tls_files.ca_certfile))
        return IgniteConnectionConfig(addresses=tuple(("127.0.0.1", n.client_port) for n in nodes),
                                      timeout=timeout, **security)

    def live_nodes(self) -> list[Node]:
        return [n for n in self.nodes if pid_alive(n.pid)]

    def _write_connection_file(self) -> Path:
        path = self.state_dir / CONNECTION_FILE
        conn = self.connection(self.nodes)
        data = {**{k: v for k, v in asdict(conn).items() if v not in (None, False)}, "addresses": conn.addresses_str}
        path.unlink(missing_ok=True)
        path.touch(mode=0o600)
        path.write_text(json.dumps(data, indent=2))
        return path

    # -- start ---------------------------------------------------------------------------------------
    def _command(self, node: Node, libs: Path) -> list[str]:
        disco_range = f"127.0.0.1:{self.disco_port}..{self.disco_port + MAX_NODES - 1}"
        props = {
            "ignitetf.instance": node.instance,
            "ignitetf.clientPort": node.client_port,
            "ignitetf.discoPort": node.disco_port,
            "ignitetf.discoRange": disco_range,
            "ignitetf.commPort": node.comm_port,
            "ignitetf.regionMb": self.region_mb,
            "ignitetf.workDir": str(self.state_dir / "work" / node.instance),
            "ignitetf.auth": str(self.auth).lower(),
            **({"ignitetf.tlsDir": str(self.tls_files.folder)} if self.tls else {}),
            "IGNITE_HOME": str(self.state_dir),  # else Ignite writes ./ignite/work into the caller's cwd
            "IGNITE_QUIET": "true",
            "IGNITE_UPDATE_NOTIFIER": "false",
            "IGNITE_NO_ASCII": "true",
            "IGNITE_PERFORMANCE_SUGGESTIONS_DISABLED": "true",
            "java.net.preferIPv4Stack": "true",
        }
        return [
            java_binary(), f"-Xms{self.heap_mb}m", f"-Xmx{self.heap_mb}m", "-XX:+UseG1GC",
            "-XX:+ExitOnOutOfMemoryError", *JAVA17_OPTS,
            *[f"-D{k}={v}" for k, v in props.items()],
            "-cp", f"{libs}/*", "org.apache.ignite.startup.cmdline.CommandLineStartup",
            str(CONF_DIR / "ignite-node.xml"),
        ]

    def _spawn(self, index: int) -> Node:
        if index >= MAX_NODES:
            raise ConfigError(f"at most {MAX_NODES} local nodes (asked for node {index})")
        libs = ensure_jars()
        node = Node(
            index=index, instance=f"node-{index}",
            client_port=self.client_port + index, disco_port=self.disco_port + index,
            comm_port=self.comm_port + index,
            log=str(self.state_dir / "logs" / f"node-{index}.log"),
        )
        for port in (node.client_port, node.disco_port, node.comm_port):
            if not port_free(port):
                raise IgniteTFError(
                    f"port {port} for Ignite {node.instance} is in use: stop what holds it "
                    f"(make ignite-down STATE_DIR=...) or choose another port base (PORT=...)")
        Path(node.log).parent.mkdir(parents=True, exist_ok=True)
        preexec = die_with_parent if self.die_with_parent else None
        with open(node.log, "ab") as log:
            proc = subprocess.Popen(
                self._command(node, libs), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, preexec_fn=preexec, cwd=self.state_dir,
            )
        node.pid = proc.pid
        self._procs[proc.pid] = proc
        self.nodes = [n for n in self.nodes if n.index != index] + [node]
        self.nodes.sort(key=lambda n: n.index)
        self._save()
        return node

    def _check_discovery_range(self) -> None:
        """A node of another cluster inside this one's discovery range would join it: refuse such a block."""
        taken = [p for p in range(self.disco_port, self.disco_port + MAX_NODES) if not port_free(p)]
        if taken:
            raise IgniteTFError(
                f"discovery port(s) {taken} of the block {self.client_port}..{self.client_port + 3 * MAX_NODES - 1} "
                f"are in use (another Ignite cluster?): choose a port base at least {3 * MAX_NODES} ports away")

    def up(self, n: int = 2, timeout: float = 180) -> list[Node]:
        """Start ``n`` server nodes and return once the topology holds all of them (activated, with auth)."""
        if n < 1:
            raise ConfigError(f"N must be at least 1 (got {n})")
        if self.live_nodes():
            raise IgniteTFError(
                f"a local Ignite cluster is already running from {self.state_dir} "
                f"(pids {[x.pid for x in self.live_nodes()]}): run `make ignite-down` first")
        self._check_discovery_range()
        self._remove_files()  # persistence or certificates left by a cluster that was not stopped by `down`
        if self.tls:
            make_certificates(self.tls_files.folder, keytool_binary())
        self.nodes = []
        try:
            for i in range(n):
                self._spawn(i)
            self.wait_for_topology(n, timeout)
        except BaseException:
            self.down()
            raise
        self._write_connection_file()
        return self.nodes

    def add_node(self, timeout: float = 120) -> Node:
        """Start one more server node and wait until it has joined (not with ``auth``: see
        docs/development/local-ignite.md)."""
        if self.auth:
            raise ConfigError("a persisted (auth) local cluster has a fixed baseline: start it with all its nodes")
        index = max((x.index for x in self.nodes), default=-1) + 1
        node = self._spawn(index)
        self.wait_for_topology(len(self.live_nodes()), timeout)
        return node

    def stop_node(self, index: int, sig: int = signal.SIGKILL, wait: float = 30) -> None:
        """Stop one node: SIGKILL simulates a crash, SIGTERM a graceful leave."""
        node = next(x for x in self.nodes if x.index == index)
        kill_and_wait(node.pid, sig, wait, self._procs.get(node.pid))

    # -- wait ----------------------------------------------------------------------------------------
    def _login(self, node: Node, password: str | None = None):
        """A connected thin client to one node, or None while the node cannot be reached yet.

        :raises AuthenticationFailedError: the node refused the login (never worth waiting for).
        """
        conn = self.connection([node], timeout=5)
        if password is not None:
            conn = replace(conn, password=password)
        try:
            return conn.client(partition_aware=False)
        except AuthenticationFailedError:
            raise
        except IgniteTFError:  # node still starting
            return None

    def server_count(self, node: Node | None = None) -> int:
        """Server nodes in the topology as seen through one node's thin client (default: the first live one)."""
        from ignite_tf.connection import SERVER_NODES_SQL

        for candidate in [node] if node else self.live_nodes():
            client = self._login(candidate)
            if client is None:
                continue
            try:
                with client.sql(SERVER_NODES_SQL) as cur:
                    return int(next(iter(cur))[0])
            except Exception:  # noqa: BLE001 - SQL not ready yet on a starting node; try the next one
                continue
            finally:
                client.close()
        return 0

    def _activate(self, n: int) -> bool:
        """Activate an authenticated cluster once all ``n`` nodes take a login; then set the password."""
        live = self.live_nodes()
        wanted = self.password or IGNITE_DEFAULT_PASSWORD
        # Before the first activation, and until the password is changed, Ignite's default login works.
        for password in dict.fromkeys((IGNITE_DEFAULT_PASSWORD, wanted)):
            try:
                clients = [self._login(x, password) for x in live]
            except AuthenticationFailedError:
                if password != wanted:
                    continue
                # A node that has just joined can refuse both logins until it has the cluster's users
                # (seen once in CI); only a refusal that lasts is a wrong password. Nodes this object did not
                # start (a readiness check of a running cluster) were waited for by their `up`: at once.
                if not any(x.pid in self._procs for x in live):
                    raise
                self._refused_since = self._refused_since or time.monotonic()
                if time.monotonic() - self._refused_since > AUTH_SETTLE_S:
                    raise
                return False
            if len(live) < n or any(c is None for c in clients):
                for c in clients:
                    if c is not None:
                        c.close()
                return False
            try:
                _activate_and_set_password(clients[0], wanted if password != wanted else None)
            except OSError:
                # Activating a persisted cluster can outlast the 5 s login timeout on a busy machine (seen at
                # load 27): it goes on in the nodes, and the next round checks both steps again.
                return False
            finally:
                for c in clients:
                    c.close()
            return True
        return False

    def wait_for_topology(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        active = not self.auth
        while True:
            dead = [x for x in self.nodes if not pid_alive(x.pid)]
            if dead and len(self.live_nodes()) < n:
                tail = tail_of(dead[0].log)
                raise IgniteTFError(f"Ignite {dead[0].instance} exited during start-up; log {dead[0].log}:\n{tail}")
            active = active or self._activate(n)
            # Every node must serve SQL and see the whole topology (a node answers its thin-client port
            # before its SYS schema is ready).
            if active and all(self.server_count(x) >= n for x in self.live_nodes()):
                return
            if time.monotonic() > deadline:
                raise IgniteTFError(
                    f"the Ignite topology did not reach {n} server nodes in {timeout:.0f}s; "
                    f"logs: {', '.join(x.log for x in self.nodes)}")
            time.sleep(0.5)

    # -- stop ----------------------------------------------------------------------------------------
    def down(self, wait: float = 30) -> list[int]:
        """Stop every node by pid (SIGTERM, then SIGKILL after ``wait`` s), then remove the work folders
        (persistence), certificates and connection file. Returns the stopped pids."""
        stopped = []
        for node in self.nodes:
            if pid_alive(node.pid):
                kill_and_wait(node.pid, signal.SIGTERM, wait, self._procs.get(node.pid))
                stopped.append(node.pid)
        for proc in self._procs.values():
            proc.poll()
        self.nodes = []
        self._save()
        self._remove_files()
        return stopped

    def _remove_files(self) -> None:
        for name in _SECURE_PARTS:
            path = self.state_dir / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)

    def status(self) -> list[dict]:
        return [{**asdict(n), "alive": pid_alive(n.pid)} for n in self.nodes]


def _activate_and_set_password(client, password: str | None) -> None:
    """Activate the cluster (its baseline: the nodes up now) and give user ``ignite`` a new password."""
    from pyignite.datatypes.cluster_state import ClusterState

    cluster = client.get_cluster()
    if cluster.get_state() != ClusterState.ACTIVE:
        cluster.set_state(ClusterState.ACTIVE)
    if password is not None:
        quoted = password.replace("'", "''")
        client.sql(f"ALTER USER \"{IGNITE_USER}\" WITH PASSWORD '{quoted}'").close()

