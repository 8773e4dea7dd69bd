"""A local S3-compatible object store for development and tests: s3proxy (Apache-2.0) from Maven Central.

s3proxy serves the S3 API over a folder (its ``filesystem`` backend: a bucket is a directory). It runs as
an ordinary JVM, needs no root, and is started and stopped by pid like the local Ignite nodes::

    python -m ignite_tf_dev.objstore up STATE_DIR [--host 0.0.0.0] [--port N] [--bucket ignite-tf]
    python -m ignite_tf_dev.objstore down STATE_DIR [--wipe]

``up`` prints the ``export`` lines that boto3, s3fs and fsspec read (``AWS_ENDPOINT_URL``,
``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``). In Python::

    store = start(state_dir, buckets=["ignite-tf"])   # ObjectStore(endpoint, key, secret, ...)
    ...  store.env() / store.storage_options()
    stop(state_dir, wipe=True)

Gotchas of s3proxy met here (see ``../shared/objstore-recipe``): botocore >= 1.36 sends checksum headers that
s3proxy rejects unless ``s3proxy.ignore-unknown-headers`` is set (done below); s3proxy says every bucket
exists, so buckets are made as directories before the start (``buckets=``) or with ``create_bucket``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ignite_tf.cluster.procs import kill_and_wait, pid_alive
from ignite_tf.errors import IgniteTFError
from ignite_tf.ports import free_port, listening

S3PROXY_VERSION = "2.6.0"
ARTIFACT = f"org.gaul:s3proxy:{S3PROXY_VERSION}:jar:jar-with-dependencies"
JAR = (Path.home() / ".m2" / "repository" / "org" / "gaul" / "s3proxy" / S3PROXY_VERSION
       / f"s3proxy-{S3PROXY_VERSION}-jar-with-dependencies.jar")
DEFAULT_KEY = "ignite-tf-dev"
DEFAULT_SECRET = "ignite-tf-dev-secret"
REGION = "us-east-1"
JAVA_OPTS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"]  # ~220 MB RSS after 50 MB of traffic
START_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class ObjectStore:
    """A running store: where it listens and the credentials it accepts (development values, not secrets)."""

    endpoint: str  # http://HOST:PORT, as clients reach it
    key: str
    secret: str
    pid: int
    state_dir: str

    def env(self) -> dict[str, str]:
        """The variables boto3, botocore, s3fs and fsspec read (``AWS_ENDPOINT_URL`` needs botocore >= 1.34)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ACCESS_KEY_ID": self.key,
                "AWS_SECRET_ACCESS_KEY": self.secret, "AWS_DEFAULT_REGION": REGION}

    def storage_options(self) -> dict:
        """fsspec/s3fs options for this store, for callers that do not read the environment."""
        return {"key": self.key, "secret": self.secret, "client_kwargs": {"endpoint_url": self.endpoint}}

    def bucket_dir(self, bucket: str) -> Path:
        """The bucket's folder on this host (the filesystem backend)."""
        return Path(self.state_dir) / "data" / bucket


def ensure_jar() -> Path:
    """The runnable s3proxy jar, fetched from Maven Central once (41 MB, into ``~/.m2``)."""
    if JAR.exists():
        return JAR
    if shutil.which("mvn") is None:
        raise IgniteTFError("Maven (mvn) is needed to fetch s3proxy: install it (apt-get install maven)")
    proc = subprocess.run(["mvn", "-q", "-B", "dependency:get", f"-Dartifact={ARTIFACT}", "-Dtransitive=false"],
                          capture_output=True, text=True)
    if proc.returncode != 0 or not JAR.exists():
        raise IgniteTFError(f"mvn could not fetch {ARTIFACT} (exit {proc.returncode}):\n{proc.stdout[-2000:]}")
    return JAR


def _files(state_dir: Path) -> dict[str, Path]:
    return {n: state_dir / n for n in ("s3proxy.conf", "s3proxy.pid", "s3proxy.log", "store.json")}


def running(state_dir: str | Path) -> ObjectStore | None:
    """The store started in ``state_dir`` if it still runs."""
    f = _files(Path(state_dir))
    try:
        store = ObjectStore(**json.loads(f["store.json"].read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return store if pid_alive(store.pid) else None


def start(state_dir: str | Path, *, host: str = "127.0.0.1", port: int | None = None,
          advertise: str | None = None, buckets: tuple[str, ...] | list[str] = (), key: str = DEFAULT_KEY,
          secret: str = DEFAULT_SECRET) -> ObjectStore:
    """Start s3proxy serving ``state_dir/data`` on ``host:port`` (a free port by default); return when it listens.

    ``advertise``: the host name or address clients use (default ``host``; give the node's address when
    binding 0.0.0.0 so that pods reach it). An already running store in ``state_dir`` is returned as it is.
    """
    state = Path(state_dir).absolute()
    live = running(state)
    if live is not None:
        return live
    jar = ensure_jar()
    state.mkdir(parents=True, exist_ok=True)
    data = state / "data"
    for b in buckets:
        if len(b) < 3:
            raise IgniteTFError(f"bucket name {b!r} is too short: S3 bucket names have 3 to 63 characters")
        (data / b).mkdir(parents=True, exist_ok=True)  # a bucket is a directory of the filesystem backend
    port = port or free_port()
    f = _files(state)
    f["s3proxy.conf"].write_text("\n".join([
        f"s3proxy.endpoint=http://{host}:{port}",
        "s3proxy.authorization=aws-v2-or-v4",
        f"s3proxy.identity={key}",
        f"s3proxy.credential={secret}",
        "s3proxy.ignore-unknown-headers=true",  # botocore's x-amz-checksum-* headers
        "jclouds.provider=filesystem",
        f"jclouds.filesystem.basedir={data}",
        ""]))
    java = shutil.which("java") or "java"
    with open(f["s3proxy.log"], "ab") as log:
        proc = subprocess.Popen([java, *JAVA_OPTS, "-jar", str(jar), "--properties", str(f["s3proxy.conf"])],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    f["s3proxy.pid"].write_text(str(proc.pid))
    probe = "127.0.0.1" if host == "0.0.0.0" else host
    deadline = time.monotonic() + START_TIMEOUT_S
    while not listening(port, probe):  # Jetty opens the port as its last start step
        if proc.poll() is not None or time.monotonic() > deadline:
            kill_and_wait(proc.pid, signal.SIGTERM, 5)
            f["s3proxy.pid"].unlink(missing_ok=True)
            tail = f["s3proxy.log"].read_text(errors="replace")[-2000:]
            raise IgniteTFError(f"s3proxy did not start listening on {host}:{port} "
                                f"(log {f['s3proxy.log']}):\n{tail}")
        time.sleep(0.1)
    store = ObjectStore(f"http://{advertise or probe}:{port}", key, secret, proc.pid, str(state))
    f["store.json"].write_text(json.dumps(asdict(store)))
    return store


def stop(state_dir: str | Path, *, wipe: bool = False) -> bool:
    """Stop the store of ``state_dir`` (SIGTERM, SIGKILL after 10 s); ``wipe`` deletes its data. Idempotent;
    True when a process was stopped."""
    state = Path(state_dir)
    f = _files(state)
    stopped = False
    try:
        pid = int(f["s3proxy.pid"].read_text())
    except (OSError, ValueError):
        pid = 0
    if pid and pid_alive(pid):
        kill_and_wait(pid, signal.SIGTERM, 10)
        stopped = True
    for name in ("s3proxy.pid", "store.json"):
        f[name].unlink(missing_ok=True)
    if wipe:
        shutil.rmtree(state / "data", ignore_errors=True)
    return stopped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ignite_tf_dev.objstore",
                                     description="A local S3-compatible object store (s3proxy).")
    sub = parser.add_subparsers(dest="command", required=True)
    p_up = sub.add_parser("up", help="start it; prints the export lines for boto3/s3fs")
    p_up.add_argument("state_dir")
    p_up.add_argument("--host", default="127.0.0.1")
    p_up.add_argument("--port", type=int)
    p_up.add_argument("--advertise", help="the address clients use (default: --host)")
    p_up.add_argument("--bucket", action="append", default=[], help="a bucket to create (repeatable)")
    p_down = sub.add_parser("down", help="stop it")
    p_down.add_argument("state_dir")
    p_down.add_argument("--wipe", action="store_true", help="delete the stored data too")
    args = parser.parse_args(argv)
    try:
        if args.command == "up":
            store = start(args.state_dir, host=args.host, port=args.port, advertise=args.advertise,
                          buckets=args.bucket)
            for k, v in store.env().items():
                print(f"export {k}={v}")
        else:
            print("stopped" if stop(args.state_dir, wipe=args.wipe) else "nothing was running")
    except IgniteTFError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
