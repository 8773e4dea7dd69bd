"""Container images for the local Kubernetes, made without a registry or a container engine.

Two images are imported into the real node's containerd; pods use them with ``imagePullPolicy: Never``:

* the sandbox image (``pause``): the static ``pause`` program built with the Kubernetes binaries;
* the TensorFlow task image: Debian bookworm (``debootstrap``) with Python 3.11 and every package of
  ``requirements/lock.txt`` in one layer, the ignite-tf provider in a second, small one
  (``docker/worker/rootfs.sh``). Its tag is a digest of the lock and the provider's sources, so a change to
  either makes a new image; the big layer is rebuilt only when the lock changes.

Each layer is kept as a tar file in ``<k8s home>/images``; an image is a docker-archive streamed from
those files into ``ctr images import``. ``docker/worker/Dockerfile`` builds the same task image for users
who have a registry.
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
from ignite_tf_dev.k8s.layout import K8S_VERSION, Layout

PROJECT_DIR = SOURCE_TREE
LOCK = PROJECT_DIR / "requirements" / "lock.txt"
ROOTFS_SCRIPT = PROJECT_DIR / "docker" / "worker" / "rootfs.sh"
PAUSE_REPO = "localhost/ignite-tf-pause"
TASK_REPO = "localhost/ignite-tf-task"
TASK_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8",
            "PYTHONUNBUFFERED=1", "TF_USE_LEGACY_KERAS=1", "TF_CPP_MIN_LOG_LEVEL=2"]
NAMESPACE = "k8s.io"  # the CRI plugin's containerd namespace


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
            "base": layout.images / f"base-{base_key()}.tar",
            "provider": layout.images / f"provider-{provider_key()}.tar"}


def ensure_image_files(layout: Layout) -> None:
    """Make the missing layer tars (the base layer: about 10 minutes; the provider: seconds)."""
    layout.images.mkdir(parents=True, exist_ok=True)
    paths = _layer_paths(layout)
    if not paths["pause"].exists():
        root = layout.images / "pause-rootfs"
        root.mkdir(exist_ok=True)
        (root / "pause").write_bytes((layout.bin / "pause").read_bytes())
        (root / "pause").chmod(0o755)
        _tar_layer(root, paths["pause"])
        subprocess.run(["rm", "-rf", str(root)], check=False)
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
            if old != paths[what]:
                old.unlink()
                old.with_suffix(".sha256").unlink(missing_ok=True)


def _write_archive(stream, ref: str, layers: list[Path], env: list[str], cmd: list[str]) -> None:
    """A docker-archive (what ``docker save`` writes) of ``layers``, streamed to ``stream``."""
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


def images_present(layout: Layout) -> list[str]:
    return ctr(layout.containerd_sock, "-n", NAMESPACE, "images", "ls", "-q").stdout.split()


def import_images(layout: Layout) -> None:
    """Import the pause and task images into the running containerd unless they are there already."""
    ensure_image_files(layout)
    paths = _layer_paths(layout)
    wanted = {pause_image_ref(): ([paths["pause"]], ["PATH=/"], ["/pause"]),
              task_image_ref(): ([paths["base"], paths["provider"]], TASK_ENV, ["python3"])}
    present = images_present(layout)
    for ref, (layers, env, cmd) in wanted.items():
        if ref in present:
            continue
        proc = subprocess.Popen(["ctr", "-a", str(layout.containerd_sock), "-n", NAMESPACE, "images", "import",
                                 "-"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            _write_archive(proc.stdin, ref, layers, env, cmd)
        finally:
            proc.stdin.close()
        out = proc.stdout.read().decode(errors="replace")
        if proc.wait() != 0:
            raise IgniteTFError(f"`ctr images import` of {ref} failed:\n{out[-2000:]}")
    for ref in present:  # older task images: free their layers
        if ref.startswith(f"{TASK_REPO}:") and ref not in wanted:
            ctr(layout.containerd_sock, "-n", NAMESPACE, "images", "rm", "--sync", ref)
