"""Real Apache Ignite 2.x server nodes as local JVM processes (``make ignite-up``, the test fixtures).

The jars come from Maven Central through Maven (``docker/ignite/pom.xml``) into a cache outside the
repository (``$IGNITE_TF_HOME``, default ``~/.cache/ignite-tf``) and are reused on the next run. Each node
gets its own thin-client, discovery and communication port, a small heap and the JVM options Java 17
needs; the cluster's pids and ports are kept in a state file so another process can stop it by pid.
Ports and pids are handled in :mod:`ignite_tf.local_procs`.

    python -m ignite_tf.local_ignite up -n 2      # returns when the topology has 2 server nodes
    python -m ignite_tf.local_ignite status
    python -m ignite_tf.local_ignite down
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ignite_tf.errors import ConfigError, IgniteTFError
from ignite_tf.local_procs import (
    MAX_NODES,
    PORT_RANGES,
    _die_with_parent,
    _kill_and_wait,
    _tail,
    free_port_bases,
    pid_alive,
    port_free,
)

IGNITE_HOME = Path(os.environ.get("IGNITE_TF_HOME", Path.home() / ".cache" / "ignite-tf"))
# docker/ignite of the source tree (pom.xml, ignite-node.xml); overridable for installed copies.
CONF_DIR = Path(os.environ.get("IGNITE_TF_IGNITE_CONF", Path(__file__).resolve().parents[2] / "docker" / "ignite"))

# Ignite 2.x on Java 17 needs these packages opened (the list Ignite's own ignite.sh passes).
JAVA17_OPTS = [
    f"--add-opens={m}=ALL-UNNAMED"
    for m in (
        "java.base/jdk.internal.access",
        "java.base/jdk.internal.misc",
        "java.base/sun.nio.ch",
        "java.base/sun.util.calendar",
        "java.management/com.sun.jmx.mbeanserver",
        "jdk.internal.jvmstat/sun.jvmstat.monitor",
        "java.base/sun.reflect.generics.reflectiveObjects",
        "jdk.management/com.sun.management.internal",
        "java.base/java.io",
        "java.base/java.nio",
        "java.base/java.net",
        "java.base/java.util",
        "java.base/java.util.concurrent",
        "java.base/java.util.concurrent.locks",
        "java.base/java.util.concurrent.atomic",
        "java.base/java.lang",
        "java.base/java.lang.invoke",
        "java.base/java.math",
        "java.sql/java.sql",
        "java.base/java.lang.reflect",
        "java.base/java.time",
        "java.base/java.text",
        "java.management/sun.management",
        "java.desktop/java.awt.font",
    )
]


def ignite_version() -> str:
    """The Ignite version pinned in docker/ignite/pom.xml."""
    text = (CONF_DIR / "pom.xml").read_text()
    match = re.search(r"<ignite.version>([^<]+)</ignite.version>", text)
    if not match:
        raise ConfigError(f"{CONF_DIR / 'pom.xml'}: no <ignite.version> property")
    return match.group(1)


def ensure_jars(quiet: bool = False) -> Path:
    """Return the folder of Ignite jars, fetching them with Maven the first time."""
    version = ignite_version()
    libs = IGNITE_HOME / f"ignite-{version}" / "libs"
    if (libs / ".complete").exists():
        return libs
    if shutil.which("mvn") is None:
        raise IgniteTFError("Maven (mvn) is needed to fetch the Ignite jars: install it (apt-get install maven)")
    tmp = libs.with_name(f"libs.tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    if not quiet:
        print(f"fetching Apache Ignite {version} jars from Maven Central into {libs} ...", flush=True)
    cmd = ["mvn", "-q", "-B", "-f", str(CONF_DIR / "pom.xml"), "dependency:copy-dependencies",
           f"-DoutputDirectory={tmp}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise IgniteTFError(f"mvn could not fetch the Ignite jars (exit {proc.returncode}):\n{proc.stdout[-2000:]}")
    (tmp / ".complete").write_text(version)
    # Rename so that a half-done download is never taken for a complete one.
    libs.parent.mkdir(parents=True, exist_ok=True)
    if libs.exists() and not (libs / ".complete").exists():
        shutil.rmtree(libs, ignore_errors=True)  # left by an interrupted run
    try:
        tmp.rename(libs)
    except OSError:  # another process got there first
        shutil.rmtree(tmp, ignore_errors=True)
    return libs


def java_binary() -> str:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    java = shutil.which("java")
    if java is None:
        raise IgniteTFError("java is not on PATH: install a JDK 11 or 17 (apt-get install openjdk-17-jre-headless)")
    return java


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

    :param state_dir: where the state file, node logs and work directories go.
    :param client_port: thin-client port of node 0; node i listens on ``client_port + i``.
    :param disco_port: discovery port of node 0 (the cluster uses ``disco_port .. disco_port + 9``).
    :param comm_port: communication port of node 0.
    :param heap_mb: JVM heap of each node.
    :param region_mb: off-heap data region of each node.
    :param die_with_parent: nodes get SIGKILL when the process that started them dies (tests).
    """

    state_dir: Path
    client_port: int = 10800
    disco_port: int = 47500
    comm_port: int = 47100
    heap_mb: int = 512
    region_mb: int = 512
    die_with_parent: bool = False
    nodes: list[Node] = field(default_factory=list)

    def __post_init__(self):
        self.state_dir = Path(self.state_dir)
        self._procs: dict[int, subprocess.Popen] = {}
        state = self.state_dir / "cluster.json"
        if state.exists():
            data = json.loads(state.read_text())
            self.nodes = [Node(**n) for n in data.get("nodes", [])]

    # -- state ---------------------------------------------------------------------------------------
    def _save(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_dir / "cluster.json.tmp"
        tmp.write_text(json.dumps({
            "client_port": self.client_port, "disco_port": self.disco_port, "comm_port": self.comm_port,
            "nodes": [asdict(n) for n in self.nodes],
        }, indent=2))
        tmp.replace(self.state_dir / "cluster.json")

    @classmethod
    def on_free_ports(cls, state_dir, purpose: str = "tests", **kwargs) -> LocalIgniteCluster:
        """A cluster on a free block of ports from ``PORT_RANGES[purpose]``."""
        client_port, disco_port, comm_port = free_port_bases(*PORT_RANGES[purpose])
        return cls(state_dir, client_port=client_port, disco_port=disco_port, comm_port=comm_port, **kwargs)

    @property
    def addresses(self) -> list[str]:
        return [n.address for n in self.nodes if pid_alive(n.pid)]

    def connection(self):
        """An IgniteConnectionConfig to every live node."""
        from ignite_tf.connection import IgniteConnectionConfig

        return IgniteConnectionConfig(addresses=tuple(("127.0.0.1", n.client_port) for n in self.live_nodes()))

    def live_nodes(self) -> list[Node]:
        return [n for n in self.nodes if pid_alive(n.pid)]

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
                    f"(make ignite-down) or choose other ports")
        Path(node.log).parent.mkdir(parents=True, exist_ok=True)
        preexec = _die_with_parent if self.die_with_parent else None
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

    def up(self, n: int = 2, timeout: float = 180) -> list[Node]:
        """Start ``n`` server nodes and return once the topology holds all of them."""
        if n < 1:
            raise ConfigError(f"N must be at least 1 (got {n})")
        if self.live_nodes():
            raise IgniteTFError(
                f"a local Ignite cluster is already running from {self.state_dir} "
                f"(pids {[x.pid for x in self.live_nodes()]}): run `make ignite-down` first")
        self.nodes = []
        for i in range(n):
            self._spawn(i)
        try:
            self.wait_for_topology(n, timeout)
        except BaseException:
            self.down()
            raise
        return self.nodes

    def add_node(self, timeout: float = 120) -> Node:
        """Start one more server node and wait until it has joined."""
        index = max((x.index for x in self.nodes), default=-1) + 1
        node = self._spawn(index)
        self.wait_for_topology(len(self.live_nodes()), timeout)
        return node

    def stop_node(self, index: int, sig: int = signal.SIGKILL, wait: float = 30) -> None:
        """Stop one node: SIGKILL simulates a crash, SIGTERM a graceful leave."""
        node = next(x for x in self.nodes if x.index == index)
        _kill_and_wait(node.pid, sig, wait, self._procs.get(node.pid))

    # -- wait ----------------------------------------------------------------------------------------
    def server_count(self, node: Node | None = None) -> int:
        """Server nodes in the topology as seen through one node's thin client (default: the first live one)."""
        from pyignite import Client

        from ignite_tf.connection import quiet_pyignite

        for candidate in [node] if node else self.live_nodes():
            client = Client(timeout=5)
            try:
                with quiet_pyignite():
                    client.connect("127.0.0.1", candidate.client_port)
                with client.sql("SELECT COUNT(*) FROM SYS.NODES WHERE IS_CLIENT = FALSE") as cur:
                    return int(next(iter(cur))[0])
            except Exception:  # noqa: BLE001 - node still starting; try the next one
                continue
            finally:
                client.close()
        return 0

    def wait_for_topology(self, n: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            dead = [x for x in self.nodes if not pid_alive(x.pid)]
            if dead and len(self.live_nodes()) < n:
                tail = _tail(dead[0].log)
                raise IgniteTFError(f"Ignite {dead[0].instance} exited during start-up; log {dead[0].log}:\n{tail}")
            # Every node must serve SQL and see the whole topology (a node answers its thin-client port
            # before its SYS schema is ready).
            if all(self.server_count(x) >= n for x in self.live_nodes()):
                return
            if time.monotonic() > deadline:
                raise IgniteTFError(
                    f"the Ignite topology did not reach {n} server nodes in {timeout:.0f}s; "
                    f"logs: {', '.join(x.log for x in self.nodes)}")
            time.sleep(0.5)

    # -- stop ----------------------------------------------------------------------------------------
    def down(self, wait: float = 30) -> list[int]:
        """Stop every node by pid (SIGTERM, then SIGKILL after ``wait`` s). Returns the stopped pids."""
        stopped = []
        for node in self.nodes:
            if pid_alive(node.pid):
                _kill_and_wait(node.pid, signal.SIGTERM, wait, self._procs.get(node.pid))
                stopped.append(node.pid)
        for proc in self._procs.values():
            proc.poll()
        self.nodes = []
        self._save()
        return stopped

    def status(self) -> list[dict]:
        return [{**asdict(n), "alive": pid_alive(n.pid)} for n in self.nodes]


def default_state_dir() -> Path:
    return Path(os.environ.get("IGNITE_TF_STATE_DIR", IGNITE_HOME / "local-cluster"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ignite_tf.local_ignite",
                                     description="Run Apache Ignite server nodes on localhost.")
    parser.add_argument("--state-dir", type=Path, default=default_state_dir())
    parser.add_argument("--client-port", type=int, default=10800)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start N nodes and wait for the topology")
    up.add_argument("-n", "--nodes", type=int, default=2)
    up.add_argument("--heap-mb", type=int, default=512)
    sub.add_parser("down", help="stop every node of the cluster, by pid")
    sub.add_parser("status", help="print the nodes, their ports, pids and logs")
    sub.add_parser("fetch", help="only fetch the Ignite jars")
    args = parser.parse_args(argv)

    cluster = LocalIgniteCluster(args.state_dir, client_port=args.client_port)
    try:
        if args.command == "fetch":
            print(ensure_jars())
        elif args.command == "up":
            cluster.heap_mb = args.heap_mb
            started = time.monotonic()
            cluster.up(args.nodes)
            print(f"Ignite {ignite_version()}: {args.nodes} server node(s) up in {time.monotonic() - started:.1f}s")
            for n in cluster.nodes:
                print(f"  {n.instance}  pid {n.pid}  thin client {n.address}  log {n.log}")
        elif args.command == "down":
            pids = cluster.down()
            print(f"stopped {len(pids)} Ignite node(s)" + (f": pids {pids}" if pids else ""))
        else:
            rows = cluster.status()
            if not rows:
                print(f"no local Ignite cluster recorded in {args.state_dir}")
            for r in rows:
                state = "up" if r["alive"] else "DOWN"
                print(f"  {r['instance']}  {state:4}  pid {r['pid']}  thin client 127.0.0.1:{r['client_port']}  "
                      f"log {r['log']}")
            if rows:
                print(f"server nodes in topology: {cluster.server_count()}")
    except IgniteTFError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
