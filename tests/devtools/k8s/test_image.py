"""The task image as a file (``make image``): a docker-archive of the very layers the local Kubernetes runs.

Real: the archive written by ``ignite_tf_dev.k8s.images.write_image_archive`` from the built layers, read back
member by member, and imported by the real node's containerd (``ctr images import``, what ``docker load``
does with the same file). Nothing is simulated. Marked k8s: it needs the local Kubernetes' image build.
"""

from __future__ import annotations

import hashlib
import json
import tarfile

import pytest
from ignite_tf_dev.k8s import host as local_k8s_host
from ignite_tf_dev.k8s import images

pytestmark = pytest.mark.timeout(1800)


def _sha256(f) -> str:
    h = hashlib.sha256()
    while chunk := f.read(1 << 20):
        h.update(chunk)
    return h.hexdigest()


def test_make_image_writes_a_loadable_docker_archive(k8s_cluster, tmp_path):
    """The manifest names the config by its digest and the layers in order; each layer's sha256 is the diff id
    the config lists; the config carries the task image's environment; containerd imports the file under the
    name inside and finds the same image id as the one it runs."""
    tag = "example.org/team/ignite-tf-task:archive-test"
    out = images.write_image_archive(tmp_path / "task.tar", tag, k8s_cluster.layout)
    with tarfile.open(out) as archive:
        (manifest,) = json.load(archive.extractfile("manifest.json"))
        assert manifest["RepoTags"] == [tag]
        raw = archive.extractfile(manifest["Config"]).read()
        assert manifest["Config"] == hashlib.sha256(raw).hexdigest() + ".json"
        config = json.loads(raw)
        assert config["os"] == "linux" and config["architecture"] == "amd64"
        assert "TF_USE_LEGACY_KERAS=1" in config["config"]["Env"] and config["config"]["Cmd"] == ["python3"]
        diff_ids = config["rootfs"]["diff_ids"]
        assert len(diff_ids) == len(manifest["Layers"]) == 2  # the locked packages, then the provider
        for name, diff_id in zip(manifest["Layers"], diff_ids, strict=True):
            assert f"sha256:{_sha256(archive.extractfile(name))}" == diff_id
        provider = tarfile.open(fileobj=archive.extractfile(manifest["Layers"][1]))
        assert any(n.endswith("dist-packages/ignite_tf/__init__.py") for n in provider.getnames())

    sock = k8s_cluster.layout.containerd_sock
    ref = tag
    with open(out, "rb") as f:
        proc = local_k8s_host.ctr(sock, "-n", images.NAMESPACE, "images", "import", "-", stdin=f)
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        listed = local_k8s_host.ctr(sock, "-n", images.NAMESPACE, "images", "ls").stdout
        ids = {line.split()[0]: line.split()[2] for line in listed.splitlines()[1:]}
        assert ref in ids and ids[ref] == ids[images.task_image_ref()]
    finally:
        local_k8s_host.ctr(sock, "-n", images.NAMESPACE, "images", "rm", ref)
