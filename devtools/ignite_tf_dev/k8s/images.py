"""Container images for the local Kubernetes, made without a registry or a container engine.

These images are imported into the real node's containerd; pods use them with ``imagePullPolicy: Never``:

* the sandbox image (``pause``): the static ``pause`` program built with the Kubernetes binaries;
* the DNS add-on (``coredns``): the static CoreDNS binary built with them, one layer like pause;
* the TensorFlow task image: Debian bookworm (``debootstrap``) with Python 3.11 and every package of
  ``requirements/lock.txt`` in one layer, the ignite-tf provider in a second, small one
  (``docker/worker/rootfs.sh``). Its tag is a digest of the lock and the provider's sources, so a change to
  either makes a new image; the big layer is rebuilt only when the lock changes;
* the Ignite image: the task image's Debian layer (containerd stores it once for both), this host's
  OpenJDK 17 in a second layer, the Ignite jars (``docker/ignite/pom.xml`` plus ignite-kubernetes for the
  Kubernetes IP finder) and its start script in a third. ``docker/k8s/ignite.yaml`` runs it.

Each layer is kept as a tar file in ``<k8s home>/images``; an image is a docker-archive (what ``docker save``
writes) streamed from those files into ``ctr images import``. ``write_image_archive`` writes the same archive
to a file (``make image``), which ``docker load`` or ``skopeo copy docker-archive:...`` takes to a registry.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from ignite_tf.errors import IgniteTFError
from ignite_tf_dev import SOURCE_TREE
from ignite_tf_dev.k8s.host import ctr, tail
from ignite_tf_dev.k8s.layout import COREDNS_VERSION, K8S_VERSION, Layout

PROJECT_DIR = SOURCE_TREE
LOCK = PROJECT_DIR / "requirements" / "lock.txt"
ROOTFS_SCRIPT = PROJECT_DIR / "docker" / "worker" / "rootfs.sh"
PAUSE_REPO = "localhost/ignite-tf-pause"
TASK_REPO = "localhost/ignite-tf-task"
TASK_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
            "PYTHONUNBUFFERED=1", "TF_USE_LEGACY_KERAS=1", "TF_CPP_MIN_LOG_LEVEL=2"]
NAMESPACE = "k8s.io"  # the CRI plugin's containerd namespace
COREDNS_REPO = "localhost/ignite-tf-coredns"
IGNITE_REPO = "localhost/ignite-tf-ignite"
JAVA_HOME = Path("/usr/lib/jvm/java-17-openjdk-amd64")  # Debian's openjdk-17 on this host, copied into a layer
IGNITE_HOME = "/opt/ignite"
# What the Kubernetes IP finder (TcpDiscoveryKubernetesIpFinder) needs beside docker/ignite/pom.xml's jars.
IGNITE_KUBERNETES_ARTIFACTS = ("org.apache.ignite:ignite-kubernetes:{ignite}",
                               "com.fasterxml.jackson.core:jackson-core:2.14.0",
                               "com.fasterxml.jackson.core:jackson-databind:2.14.0",
                               "com.fasterxml.jackson.core:jackson-annotations:2.14.0")
IGNITE_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
              f"JAVA_HOME={JAVA_HOME}", f"IGNITE_HOME={IGNITE_HOME}"]


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in sorted(paths):
        h.update(str(p.relative_to(PROJECT_DIR)).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:12]


def base_key() -> str:
    """Digest of what the big layer is made from: the lock and the rootfs script."""
    return _digest([LOCK, ROOTFS_SCRIPT])


def provider_key() -> str:
    src = PROJECT_DIR / "provider" / "ignite_tf"
    files = [p for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
    return _digest([*files, PROJECT_DIR / "pyproject.toml"])


def pause_image_ref() -> str:
    return f"{PAUSE_REPO}:{K8S_VERSION}"


def task_image_ref() -> str:
    """The task image's name in containerd (``imagePullPolicy: Never``)."""
    return f"{TASK_REPO}:{base_key()}-{provider_key()}"


def coredns_image_ref() -> str:
    return f"{COREDNS_REPO}:{COREDNS_VERSION}"


def _java_release() -> bytes:
    release = JAVA_HOME / "release"
    if not release.exists():
        raise IgniteTFError(f"the Ignite image copies this host's OpenJDK 17 from {JAVA_HOME}, which is missing: "
                            f"apt-get install openjdk-17-jre-headless")
    return release.read_bytes()


def jre_key() -> str:
    return hashlib.sha256(_java_release()).hexdigest()[:12]


def _ignite_start_script() -> str:
    """The Ignite image's entry point: like apacheignite/ignite's, it reads CONFIG_URI and JVM_OPTS."""
    from ignite_tf_dev.ignite.jvm import JAVA17_OPTS

    return ("#!/bin/sh\n# Start one Ignite server node (the Ignite image's entry point; made by "
            "ignite_tf_dev.k8s.images).\n"
            f'exec "$JAVA_HOME/bin/java" $JVM_OPTS {" ".join(JAVA17_OPTS)} -DIGNITE_QUIET=true '
            '-DIGNITE_NO_ASCII=true -DIGNITE_UPDATE_NOTIFIER=false -cp "$IGNITE_HOME/libs/*" '
            'org.apache.ignite.startup.cmdline.CommandLineStartup "${CONFIG_URI:?set CONFIG_URI to the node '
            'configuration}"\n')


def ignite_key() -> str:
    from ignite_tf_dev.ignite.jvm import ignite_version

    return hashlib.sha256(repr((ignite_version(), IGNITE_KUBERNETES_ARTIFACTS,
                                _ignite_start_script())).encode()).hexdigest()[:12]


def ignite_image_ref() -> str:
    from ignite_tf_dev.ignite.jvm import ignite_version

    return f"{IGNITE_REPO}:{ignite_version()}-{jre_key()}-{ignite_key()}"


def _tar_layer(rootfs: Path, out: Path) -> None:
    """``rootfs`` as an uncompressed layer tar, then ``out.sha256`` (the layer's diff id)."""
    tmp = out.with_suffix(".tmp")
    names = sorted(p.name for p in rootfs.iterdir())
    proc = subprocess.run(["nice", "-n", "15", "tar", "-C", str(rootfs), "--numeric-owner", "-cf", str(tmp),
                           *names], capture_output=True, text=True)
    if proc.returncode != 0:
        raise IgniteTFError(f"packing {rootfs} failed: {proc.stderr[-1000:]}")
    h = hashlib.sha256()
    with open(tmp, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    tmp.replace(out)
    out.with_suffix(".sha256").write_text(h.hexdigest())


def _run_rootfs(layout: Layout, what: str, dest: Path, src: Path) -> None:
    log = layout.images / "build.log"
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    with open(log, "ab") as out:
        proc = subprocess.run([str(ROOTFS_SCRIPT), what, str(dest), str(src)], stdout=out,
                              stderr=subprocess.STDOUT, env={**os.environ, "UV": uv})
    if proc.returncode != 0:
        raise IgniteTFError(f"building the task image's {what} layer failed (exit {proc.returncode}); "
                            f"log {log}:\n{tail(log)}")


def _layer_paths(layout: Layout) -> dict[str, Path]:
    return {"pause": layout.images / f"pause-{K8S_VERSION}.tar",
            "coredns": layout.images / f"coredns-{COREDNS_VERSION}.tar",
            "base": layout.images / f"base-{base_key()}.tar",
            "provider": layout.images / f"provider-{provider_key()}.tar",
            "jre": layout.images / f"jre-{jre_key()}.tar",
            "ignite": layout.images / f"ignite-{ignite_key()}.tar"}


def _one_binary_layer(layout: Layout, name: str, dest: Path) -> None:
    root = layout.images / f"{name}-rootfs"
    root.mkdir(exist_ok=True)
    (root / name).write_bytes((layout.bin / name).read_bytes())
    (root / name).chmod(0o755)
    _tar_layer(root, dest)
    subprocess.run(["rm", "-rf", str(root)], check=False)


def _jre_layer(root: Path, dest: Path) -> None:
    """This host's OpenJDK 17 (without what only a compiler or a desktop needs) and its /etc files."""
    _java_release()
    shutil.rmtree(root, ignore_errors=True)
    jdk = root / str(JAVA_HOME).lstrip("/")
    jdk.parent.mkdir(parents=True)
    shutil.copytree(JAVA_HOME, jdk, symlinks=True, ignore=shutil.ignore_patterns("jmods", "include", "docs",
                                                                                  "man", "src.zip"))
    # Debian links the JDK's conf files and cacerts into /etc: take those along.
    shutil.copytree("/etc/java-17-openjdk", root / "etc" / "java-17-openjdk", symlinks=False)
    cacerts = Path("/etc/ssl/certs/java/cacerts")
    if cacerts.exists():
        (root / "etc/ssl/certs/java").mkdir(parents=True)
        shutil.copyfile(cacerts, root / "etc/ssl/certs/java/cacerts")
    _tar_layer(root, dest)
    shutil.rmtree(root, ignore_errors=True)


def ignite_kubernetes_jars(dest: Path) -> list[Path]:
    """ignite-kubernetes and its Jackson jars, fetched from Maven Central once (into ``~/.m2``)."""
    from ignite_tf_dev.ignite.jvm import ignite_version

    dest.mkdir(parents=True, exist_ok=True)
    for artifact in IGNITE_KUBERNETES_ARTIFACTS:
        artifact = artifact.format(ignite=ignite_version())
        proc = subprocess.run(["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={artifact}",
                               f"-DoutputDirectory={dest}"], capture_output=True, text=True, cwd=dest)
        if proc.returncode != 0:
            raise IgniteTFError(f"mvn could not fetch {artifact} (exit {proc.returncode}):\n{proc.stdout[-2000:]}")
    return sorted(dest.glob("*.jar"))


def _ignite_layer(root: Path, dest: Path) -> None:
    """/opt/ignite: the jars of docker/ignite/pom.xml, the Kubernetes IP finder's, and the start script."""
    from ignite_tf_dev.ignite.jvm import ensure_jars

    shutil.rmtree(root, ignore_errors=True)
    home = root / IGNITE_HOME.lstrip("/")
    libs = home / "libs"
    libs.mkdir(parents=True)
    for jar in [*ensure_jars(quiet=True).glob("*.jar"), *ignite_kubernetes_jars(root.with_suffix(".jars"))]:
        shutil.copyfile(jar, libs / jar.name)
    shutil.rmtree(root.with_suffix(".jars"), ignore_errors=True)
    (home / "run.sh").write_text(_ignite_start_script())
    (home / "run.sh").chmod(0o755)
    _tar_layer(root, dest)
    shutil.rmtree(root, ignore_errors=True)


def ensure_image_files(layout: Layout, task_only: bool = False, prune: bool = True) -> None:
    """Make the missing layer tars (the base layer: about 10 minutes; the others: seconds). ``task_only``:
    the task image's two layers only (they need no Kubernetes binaries)."""
    layout.images.mkdir(parents=True, exist_ok=True)
    paths = _layer_paths(layout)
    for name in () if task_only else ("pause", "coredns"):
        if not paths[name].exists():
            _one_binary_layer(layout, name, paths[name])
    for name, make in () if task_only else (("jre", _jre_layer), ("ignite", _ignite_layer)):
        if not paths[name].exists():
            make(paths[name].with_suffix(".rootfs"), paths[name])
            for old in layout.images.glob(f"{name}-*.tar"):
                if prune and old != paths[name]:
                    old.unlink()
                    old.with_suffix(".sha256").unlink(missing_ok=True)
    for what, src in (("base", LOCK), ("provider", PROJECT_DIR)):
        if paths[what].exists():
            continue
        if what == "base":
            print(f"building the task image's base layer (Debian bookworm, Python 3.11, {LOCK.name}) into "
                  f"{paths[what]} (about 10 minutes)", flush=True)
        rootfs = paths[what].with_suffix(".rootfs")
        if what == "provider":  # setuptools packs whatever an earlier build left in build/lib (moved modules too)
            shutil.rmtree(PROJECT_DIR / "build", ignore_errors=True)
        _run_rootfs(layout, what, rootfs, src)
        _tar_layer(rootfs, paths[what])
        subprocess.run(["rm", "-rf", "--one-file-system", str(rootfs)], check=False)
        for old in layout.images.glob(f"{what}-*.tar"):  # layers of an older lock or provider
            if prune and old != paths[what]:
                old.unlink()
                old.with_suffix(".sha256").unlink(missing_ok=True)


def write_archive(stream, ref: str, layers: list[Path], env: list[str], cmd: list[str]) -> None:
    """A docker-archive (what ``docker save`` writes) of ``layers``, streamed to ``stream``.

    Each layer is an uncompressed tar with its sha256 (the diff id) in ``<layer>.sha256``; the config names
    them in order, and its file name is its own sha256 (the image id)."""
    diff_ids = [f"sha256:{p.with_suffix('.sha256').read_text().strip()}" for p in layers]
    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Env": env, "Cmd": cmd, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{"created_by": "ignite_tf_dev.k8s.images"} for _ in layers],
    }).encode()
    config_name = hashlib.sha256(config).hexdigest() + ".json"
    layer_names = [f"{d.split(':')[1]}/layer.tar" for d in diff_ids]
    manifest = json.dumps([{"Config": config_name, "RepoTags": [ref], "Layers": layer_names}]).encode()
    with tarfile.open(fileobj=stream, mode="w|") as archive:
        info = tarfile.TarInfo(config_name)
        info.size = len(config)
        archive.addfile(info, io.BytesIO(config))
        for name, path in zip(layer_names, layers, strict=True):
            info = tarfile.TarInfo(name)
            info.size = path.stat().st_size
            with open(path, "rb") as f:
                archive.addfile(info, f)
        info = tarfile.TarInfo("manifest.json")
        info.size = len(manifest)
        archive.addfile(info, io.BytesIO(manifest))


def image_layers(layout: Layout) -> dict[str, tuple[list[Path], list[str], list[str]]]:
    """Each image's name -> its layer files, environment and command."""
    paths = _layer_paths(layout)
    return {pause_image_ref(): ([paths["pause"]], ["PATH=/"], ["/pause"]),
            coredns_image_ref(): ([paths["coredns"]], ["PATH=/"], ["/coredns"]),
            task_image_ref(): ([paths["base"], paths["provider"]], TASK_ENV, ["python3"]),
            ignite_image_ref(): ([paths["base"], paths["jre"], paths["ignite"]], IGNITE_ENV,
                                 [f"{IGNITE_HOME}/run.sh"])}


def write_image_archive(dest: Path, ref: str | None = None, layout: Layout | None = None) -> Path:
    """The task image as a docker-archive file (``make image``): ``docker load -i`` or
    ``skopeo copy docker-archive:FILE docker://REGISTRY/ignite-tf-task:TAG`` takes it to a registry."""
    layout = layout or Layout()
    ensure_image_files(layout, task_only=True)
    layers, env, cmd = image_layers(layout)[task_image_ref()]
    ref = ref or task_image_ref().removeprefix("localhost/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    with open(tmp, "wb") as f:
        write_archive(f, ref, layers, env, cmd)
    tmp.replace(dest)
    return dest


def images_present(layout: Layout) -> list[str]:
    return ctr(layout.containerd_sock, "-n", NAMESPACE, "images", "ls", "-q").stdout.split()


def import_images(layout: Layout, prune: bool = True) -> None:
    """Import the images into the running containerd unless they are there already (an Ignite image of
    another JRE or jars, and older task images, are removed unless ``prune`` is False: a running cluster
    shared by checkouts of other sources keeps theirs)."""
    ensure_image_files(layout, prune=prune)
    wanted = image_layers(layout)
    present = images_present(layout)
    for ref, (layers, env, cmd) in wanted.items():
        if ref in present:
            continue
        proc = subprocess.Popen(["ctr", "-a", str(layout.containerd_sock), "-n", NAMESPACE, "images", "import",
                                 "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            write_archive(proc.stdin, ref, layers, env, cmd)
        finally:
            proc.stdin.close()
        out = proc.stdout.read().decode(errors="replace")
        if proc.wait() != 0:
            raise IgniteTFError(f"`ctr images import` of {ref} failed:\n{out[-2000:]}")
    for ref in present if prune else []:  # older task images: free their layers
        if ref.startswith((f"{TASK_REPO}:", f"{IGNITE_REPO}:")) and ref not in wanted:
            ctr(layout.containerd_sock, "-n", NAMESPACE, "images", "rm", "--sync", ref)
