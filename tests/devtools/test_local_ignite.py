"""``make ignite-up/ignite-status/ignite-down`` with a port base and a state folder: two local clusters on one
machine, each stopped only by its own ``down``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ignite_tf_dev.ignite.cluster import LocalIgniteCluster, pid_alive

from ignite_tf.cluster.procs import PORT_RANGES, free_port_bases
from ignite_tf.errors import IgniteTFError

REPO = Path(__file__).resolve().parents[2]


def make(target: str, **variables) -> subprocess.CompletedProcess:
    args = ["make", "-s", "--no-print-directory", "-C", str(REPO), target, *[f"{k}={v}" for k, v in variables.items()]]
    return subprocess.run(args, capture_output=True, text=True, timeout=600)


def serves(cluster: LocalIgniteCluster, key: str) -> bool:
    """A write and a read through the thin client of every live node."""
    client = cluster.connection().client()
    try:
        cache = client.get_or_create_cache("ignite_tf_two_clusters")
        cache.put(key, key.upper())
        return cache.get(key) == key.upper()
    finally:
        client.close()


@pytest.mark.timeout(1200)
def test_two_clusters_on_one_machine_stop_only_their_own_nodes(tmp_path, own_ignite):
    state_a, state_b = own_ignite.adopt(tmp_path / "a"), own_ignite.adopt(tmp_path / "b")
    port_a = free_port_bases(*PORT_RANGES["private"])[0]
    up_a = make("ignite-up", N=1, PORT=port_a, STATE_DIR=state_a)
    assert up_a.returncode == 0, up_a.stderr
    port_b = free_port_bases(*PORT_RANGES["private"])[0]  # A's block is taken now: another one
    up_b = make("ignite-up", N=1, PORT=port_b, STATE_DIR=state_b)
    assert up_b.returncode == 0, up_b.stderr
    a, b = LocalIgniteCluster.from_state(state_a), LocalIgniteCluster.from_state(state_b)
    assert [n.client_port for n in a.nodes] == [port_a] and [n.client_port for n in b.nodes] == [port_b]
    assert f"thin client 127.0.0.1:{port_b}" in up_b.stdout
    # Each node sees a topology of one: the clusters did not merge.
    assert a.server_count() == 1 and b.server_count() == 1

    # A block whose discovery range holds B's node would merge with B: refused before any node starts.
    overlapping = LocalIgniteCluster(own_ignite.adopt(tmp_path / "c"), client_port=port_b - 5)
    with pytest.raises(IgniteTFError, match="discovery port"):
        overlapping.up(1)
    assert not overlapping.nodes

    down_a = make("ignite-down", STATE_DIR=state_a)
    assert down_a.returncode == 0 and "stopped 1 Ignite node(s)" in down_a.stdout, down_a.stderr
    assert not pid_alive(a.nodes[0].pid)
    assert pid_alive(b.nodes[0].pid) and serves(b, "after-a-down")
    status_b = make("ignite-status", STATE_DIR=state_b)
    assert " up " in status_b.stdout and "server nodes in topology: 1" in status_b.stdout, status_b.stdout
    status_a = make("ignite-status", STATE_DIR=state_a)
    assert f"no local Ignite cluster recorded in {state_a}" in status_a.stdout

    down_b = make("ignite-down", STATE_DIR=state_b)
    assert down_b.returncode == 0 and not pid_alive(b.nodes[0].pid)
    assert not (state_a / "work").exists() and not (state_b / "work").exists()
