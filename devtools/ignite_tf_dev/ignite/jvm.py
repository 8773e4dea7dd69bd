"""The JVM side of local Ignite nodes: the jars (fetched once with Maven), the java binary, its options.

The jars come from Maven Central through Maven (``docker/ignite/pom.xml``) into a cache outside the
repository (the ignite-tf home, :class:`ignite_tf.home.HomeFolder`) and are reused on the next run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from ignite_tf.errors import ConfigError, IgniteTFError
from ignite_tf.home import HomeFolder
from ignite_tf_dev import SOURCE_TREE

# docker/ignite of the source tree (pom.xml, ignite-node.xml); overridable for installed copies.
CONF_DIR = Path(os.environ.get("IGNITE_TF_IGNITE_CONF", SOURCE_TREE / "docker" / "ignite"))

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
    libs = HomeFolder.of().ignite_jars(version)
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


def keytool_binary() -> str:
    """The JDK's keytool next to :func:`java_binary` (or on PATH)."""
    beside = Path(java_binary()).resolve().parent / "keytool"
    if beside.exists():
        return str(beside)
    keytool = shutil.which("keytool")
    if keytool is None:
        raise IgniteTFError("keytool (part of the JDK) is needed for TLS certificates: install a JDK 17 "
                            "(apt-get install openjdk-17-jdk-headless)")
    return keytool
