"""Start files: what a pod reads before its command runs — the shard plan and ``code.zip`` — in a ConfigMap volume.

With an object-store run root a pod used to fetch both from the store first (``entry.fetch_run``): importing
s3fs and its HTTP stack and making a client took the pod's first process 1.5 s of a quiet 2-core machine and
3.5 s of a busy one, on the path to the first step of every start and every restart. The supervisor has both
already (the plan is its own file, ``code.zip`` one read of the store), so it puts them in one ConfigMap,
owned like everything else by the cluster's owner, and every pod mounts it read-only at ``MOUNT``: the kubelet
has the files in place before the container starts. Files too big for a ConfigMap (``LIMIT`` in all) are not
put there: the pods fetch them from the store as before. The store stays the run's record; these are copies.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

MOUNT = "/var/run/ignite-tf/start"
VOLUME = "ignite-tf-start"
PLAN = "shard_plan.json"
CODE = "code.zip"
LIMIT = 700 * 1024
"""Bytes of files in all: a ConfigMap holds at most 1 MiB, and binary data goes through the API as base64."""


def name(cluster_id: str) -> str:
    return f"{cluster_id}-start"[:253]


def manifest(cluster_id: str, labels: dict[str, str], owner_ref: dict[str, Any],
             files: dict[str, bytes]) -> dict[str, Any] | None:
    """The ConfigMap of ``files`` (``PLAN``, ``CODE``), or None when there is nothing or too much to hold."""
    if not files or sum(len(v) for v in files.values()) > LIMIT:
        return None
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name(cluster_id), "labels": labels, "ownerReferences": [owner_ref]},
            "binaryData": {k: base64.b64encode(v).decode() for k, v in files.items()}}


def files_for(spec, run_store) -> dict[str, bytes] | None:
    """The start files of ``spec``'s pods (a ``ClusterSpec`` whose run root is ``run_store``, a ``RunStore``): its
    shard plan and its shipped ``code.zip`` (this host's copy, else the store's); None when the code cannot be
    read (the pods then fetch it from the store themselves)."""
    from ignite_tf.runstore import LAYOUT

    files = {}
    if spec.shard_plan_path and Path(spec.shard_plan_path).is_file():
        files[PLAN] = Path(spec.shard_plan_path).read_bytes()
    if spec.job.get("shipped"):
        here = spec.folder.code_zip  # the launcher's copy, when it ran on this host
        shipped = here.read_bytes() if here.is_file() else run_store.read_bytes(LAYOUT.code_zip)
        if shipped is None:
            return None
        files[CODE] = shipped
    return files


def mount(pod: dict[str, Any], cluster_id: str) -> dict[str, Any]:
    """``pod`` (a manifest) with the start files' volume mounted in every container."""
    spec = pod["spec"]
    spec["volumes"] = [*spec.get("volumes", []), {"name": VOLUME, "configMap": {"name": name(cluster_id)}}]
    for container in spec["containers"]:
        container["volumeMounts"] = [*container.get("volumeMounts", []),
                                     {"name": VOLUME, "mountPath": MOUNT, "readOnly": True}]
    return pod


def local(file: str, root: str | Path = MOUNT) -> bytes | None:
    """A start file's content in this pod, None when it was not given that way."""
    try:
        return (Path(root) / file).read_bytes()
    except OSError:
        return None
