"""Helpers for cluster tests: find what a cluster left running (processes, listening ports, Kubernetes objects)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import psutil

from ignite_tf.ports import listening
from tests.support.polling import wait_for

JOBS = Path(__file__).resolve().parents[1] / "jobs"
PORTJOB = [sys.executable, str(JOBS / "portjob.py")]


def cluster_processes(cluster_id: str, run_dir: str | Path | None = None) -> list[psutil.Process]:
    """Live processes of a cluster: its tasks carry IGNITE_TF_CLUSTER_ID, its supervisor the spec path."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            cmdline = " ".join(proc.info["cmdline"] or [])
            if run_dir and str(run_dir) in cmdline:
                found.append(proc)
                continue
            if proc.environ().get("IGNITE_TF_CLUSTER_ID") == cluster_id:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def spec_ports(run_dir: str | Path) -> list[int]:
    spec = json.loads((Path(run_dir) / "cluster.json").read_text())
    return [t["port"] for t in spec["tasks"]]


def assert_nothing_left(cluster_id: str, run_dir: str | Path | None = None, *, k8s: tuple | None = None,
                        timeout: float | None = None) -> None:
    """Nothing of the cluster remains (waits up to ``timeout``): no process and no listening port of its tasks
    (15 s), or for a cluster on Kubernetes (``k8s=(core_v1_api, namespace)``) no object of it (90 s)."""
    if k8s is not None:
        from ignite_tf.cluster.k8s import objects

        core, ns = k8s
        wait_for(lambda: not objects.leftovers(core, ns, cluster_id), timeout or 90,
                 f"every object of {cluster_id} to be deleted", poll=0.5)
        # A supervisor on this host (``supervisor: process``) ends too, not only its pods.
        wait_for(lambda: not _host_processes_naming(cluster_id), timeout or 90,
                 f"the host processes of {cluster_id} to end", poll=0.5)
        return
    deadline = time.monotonic() + (timeout or 15.0)
    while True:
        procs = cluster_processes(cluster_id, run_dir)
        ports = [p for p in spec_ports(run_dir) if listening(p)]
        if not procs and not ports:
            return
        if time.monotonic() > deadline:
            desc = [(p.pid, " ".join(p.cmdline())[:120]) for p in procs if p.is_running()]
            raise AssertionError(f"cluster {cluster_id} left processes {desc} and listening ports {ports}")
        time.sleep(0.2)


def _host_processes_naming(cluster_id: str) -> list[tuple[int, str]]:
    """This host's live processes whose command line names ``cluster_id`` (a Kubernetes cluster's supervisor
    process: its spec path holds the id)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        cmdline = " ".join(proc.info["cmdline"] or [])
        if cluster_id in cmdline:
            found.append((proc.pid, cmdline[:160]))
    return found
