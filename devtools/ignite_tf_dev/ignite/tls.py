"""Certificates for TLS on the thin-client port of local Ignite nodes, made with the JDK's ``keytool``.

Every node of a local cluster presents one self-signed certificate (``CN=localhost``, SAN ``127.0.0.1``
and ``localhost``), made fresh for each cluster: clients pin it as their CA (``ssl_ca_certfile``), the way a
private deployment distributes its own CA. The nodes read ``node.p12`` (PKCS12: key and certificate) and its
password from ``node.p12.pass``. The keystore password is random, travels to keytool through its environment
(``-storepass:env``) and to the JVM through the password file (mode 600), never on a command line. Two
keytool runs: each starts a JVM, which takes seconds on a busy machine.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ignite_tf.errors import IgniteTFError

CA_CERT = "ca.pem"
KEYSTORE = "node.p12"
KEYSTORE_PASSWORD_FILE = "node.p12.pass"
_PASSWORD_ENV = "IGNITE_TF_KEYSTORE_PASSWORD"
_VALID_DAYS = "30"


@dataclass(frozen=True)
class TlsFiles:
    """The certificate folder of a local cluster (``ignitetf.tlsDir`` of docker/ignite/ignite-node.xml)."""

    folder: Path

    @property
    def ca_certfile(self) -> Path:
        """The nodes' certificate in PEM: clients trust it as their CA."""
        return self.folder / CA_CERT

    @property
    def keystore(self) -> Path:
        return self.folder / KEYSTORE

    def complete(self) -> bool:
        return all((self.folder / name).exists() for name in (CA_CERT, KEYSTORE, KEYSTORE_PASSWORD_FILE))


def make_certificates(folder: str | Path, keytool: str) -> TlsFiles:
    """Create the nodes' key, self-signed certificate and keystore in ``folder`` (replacing what was there).

    :param keytool: path of the JDK's keytool.
    """
    files = TlsFiles(Path(folder))
    shutil.rmtree(files.folder, ignore_errors=True)
    files.folder.mkdir(parents=True, mode=0o700)
    password = secrets.token_urlsafe(24)
    pass_file = files.folder / KEYSTORE_PASSWORD_FILE
    pass_file.touch(mode=0o600)
    pass_file.write_text(password)
    env = {**os.environ, _PASSWORD_ENV: password}
    def keytool_run(*args: str | Path) -> None:
        cmd = [keytool, *map(str, args), "-storetype", "PKCS12", "-storepass:env", _PASSWORD_ENV]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if proc.returncode != 0:
            raise IgniteTFError(f"keytool {args[0]} failed (exit {proc.returncode}) while making TLS certificates "
                                f"in {files.folder}: {(proc.stderr or proc.stdout).strip()[-1000:]}")

    keytool_run("-genkeypair", "-keystore", files.keystore, "-alias", "node", "-dname", "CN=localhost",
                "-keyalg", "EC", "-groupname", "secp256r1", "-validity", _VALID_DAYS,
                "-ext", "san=ip:127.0.0.1,dns:localhost", "-ext", "eku=serverAuth")
    keytool_run("-exportcert", "-keystore", files.keystore, "-alias", "node", "-rfc", "-file", files.ca_certfile)
    return files
