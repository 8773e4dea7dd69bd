"""Fixtures for tests on the local Kubernetes (``ignite_tf_dev.k8s.cluster``): one cluster per session, one
namespace per test. Imported by tests/conftest.py.

The session fixture builds the binaries and images the first time (about 30 minutes on 2 cores; then
seconds), starts etcd, the control plane, 3 simulated nodes, the real node, cluster DNS and the object store,
and at the end stops everything and checks that no process of it is left and that the host's settings are as
before. A cluster that was already running before the session (``make k8s-up``) is used and left running.
Ignite's pods (``docker/k8s/ignite.yaml``) start only for the tests that ask for them (``k8s_ignite``).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from ignite_tf_dev.k8s import addons as local_k8s_addons
from ignite_tf_dev.k8s import cluster as local_k8s
from ignite_tf_dev.k8s import host as local_k8s_host

from tests.support.polling import wait_for


@dataclass
class LocalK8s:
    layout: local_k8s.Layout
    kubeconfig: str
    api: object  # kubernetes.client.ApiClient

    @property
    def core(self):
        from kubernetes import client

        return client.CoreV1Api(self.api)

    @property
    def batch(self):
        from kubernetes import client

        return client.BatchV1Api(self.api)




@pytest.fixture(scope="session")
def k8s_cluster():
    layout = local_k8s.Layout()
    preexisting = len(local_k8s.running(layout)) == len(local_k8s.COMPONENTS)
    if not preexisting:
        # What an earlier run that was killed left (processes, host settings changed by its kubelet) is undone
        # first, so the host is compared with how it was before any cluster, not with that run's leftovers.
        local_k8s.down(layout)
    before = None if preexisting else local_k8s_host.snapshot()
    kubeconfig = local_k8s.up(3, layout)
    if preexisting:  # started from another checkout: this one's task image (its provider layer) may be missing
        from ignite_tf_dev.k8s import images

        images.import_images(layout, prune=False)
    cluster = LocalK8s(layout, str(kubeconfig), local_k8s.api_client(layout))
    yield cluster
    try:
        namespaces_deleted(cluster.core, _DELETING)
    finally:
        cluster.api.close()
    if preexisting:
        return
    local_k8s.down(layout)
    left = local_k8s_host.leftover_processes(layout.home)
    assert not left, f"processes of the local Kubernetes left after the session: {left}"
    diffs = local_k8s_host.differences(before)
    assert not diffs, f"host settings not restored after the session: {diffs}"
    assert not local_k8s_host.mounts_under(layout.home), "mounts left under the cluster's folder"
    assert not local_k8s_host.link_exists(local_k8s.BRIDGE), f"bridge {local_k8s.BRIDGE} left behind"


@pytest.fixture(scope="session")
def k8s_ignite(k8s_cluster) -> list[str]:
    """Ignite's 2 pods (ignite.yaml with the local overlay) in namespace ``ignite``: their thin-client
    addresses ``POD_IP:10800``, reachable from this host. Started once (about 30 s), left to the cluster's end."""
    return local_k8s_addons.deploy_ignite(k8s_cluster.layout)


@pytest.fixture
def k8s_namespace(k8s_cluster):
    """A fresh namespace, deleted (and waited for) after the test. Its pods are deleted first without a grace
    period: the namespace controller would delete them with theirs (30 s) and look again only after it."""
    from kubernetes.client.exceptions import ApiException

    core = k8s_cluster.core
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})

    def has_default_sa():
        try:
            return core.read_namespaced_service_account("default", name)
        except ApiException:
            return None

    wait_for(has_default_sa, 60, f"the default service account in {name}")
    yield name
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    core.delete_namespace(name)
    # The namespace controller's deletion (about 5 s) goes on while the next tests run; the session's end waits
    # for every namespace deleted so and fails on one that stays (its pods, gone at once above, held no node).
    _DELETING.append(name)


_DELETING: list[str] = []  # the namespaces whose deletion the session's end waits for


def namespaces_deleted(core, names: list[str], timeout: float = 180) -> None:
    """Wait until every namespace of ``names`` is gone; fail naming those that are not."""
    from kubernetes.client.exceptions import ApiException

    def left() -> list[str]:
        out = []
        for name in names:
            try:
                core.read_namespace(name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
                continue
            out.append(name)
        return out

    wait_for(lambda: not left(), timeout, "the tests' namespaces to be deleted", seen=lambda: str(left()))
