"""A task OOMKilled at its estimated memory limit, on the real node (issue 24: a restored attempt outgrew the
estimate at its final save, and the restart at the same limit could be killed at the same point again).

Real: the control plane, the kubelet and the kernel's cgroup OOM killer on the real node, the task image, the
Ignite pods (the launcher plans over a small cache there and estimates from its row width), the object-store
run root, the supervisor pod. Nothing is simulated; the task is a script that holds a fixed block of memory
instead of TensorFlow (the estimate's TensorFlow part is checked by bench/k8s/memory.py), so that what the
kernel kills is decided by the limit alone, in seconds.
"""

from __future__ import annotations

import uuid

import pandas as pd
import pytest
from ignite_tf_dev.k8s import addons as local_k8s_addons
from ignite_tf_dev.k8s import cluster as local_k8s

from ignite_tf.cluster.api import make_launcher, start_cluster
from ignite_tf.cluster.k8s import objects
from ignite_tf.cluster.k8s.memory import estimate, parse_mib
from ignite_tf.cluster.k8s.oom import OOM_GROWTH
from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.runstore import RunStore
from ignite_tf.state import Status
from tests.support.clusters import assert_nothing_left
from tests.support.k8s_launch import use_local_k8s, wait_final
from tests.support.polling import wait_for

pytestmark = pytest.mark.timeout(600)

HOLD = '''
import sys

import numpy as np

block = np.ones(int(sys.argv[1]) << 20, dtype=np.uint8)  # every page touched: charged to the container
print(f"holding {block.nbytes >> 20} MiB", flush=True)
'''


def test_oomkilled_at_the_estimated_limit_restarts_with_a_larger_limit(k8s_cluster, k8s_ignite, k8s_namespace,
                                                                       monkeypatch, tmp_path):
    """A task that needs 15% more than its estimate is OOMKilled at it (the limit the estimate set); the
    restart's pod gets ``OOM_GROWTH`` times that limit and the cluster succeeds, the failure naming both."""
    from ignite_tf.etl import load
    from ignite_tf.plan.partitions import PartitionMap
    from ignite_tf.plan.shards import ShardPlan

    core, ns = k8s_cluster.core, k8s_namespace
    conn = IgniteConnectionConfig(addresses=list(k8s_ignite))
    run_root = f"s3://{local_k8s_addons.BUCKET}/oom-{uuid.uuid4().hex[:8]}"
    for key, value in {**local_k8s_addons.exports(k8s_cluster.layout), "IGNITE_TF_ADDRESSES": ",".join(k8s_ignite),
                       "IGNITE_TF_RUN_ROOT": run_root}.items():
        monkeypatch.setenv(key, value)
    use_local_k8s(monkeypatch, k8s_cluster)
    cache = "oom_restart"
    load(conn, cache, pd.DataFrame({"id": range(64), "x": [float(i) for i in range(64)],
                                    "label": [i % 2 for i in range(64)]}), key="id")
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    (job_dir / "hold.py").write_text(HOLD)
    plan = ShardPlan.build(PartitionMap.discover(conn, cache), 1)
    limit = estimate({"command": ["python", "hold.py"]}, plan, conn=conn).total_mib
    grown = parse_mib(f"{int(-(-limit * OOM_GROWTH // 16) * 16)}Mi")
    held = int(limit * 1.15)  # over the estimate, well under the grown limit (numpy and Python: about 30 MiB)
    assert held + 60 < grown
    settings = {"namespace": ns, "node_selector": {local_k8s.HOST_LABEL: "real-0"},
                "ignite_selector": local_k8s_addons.IGNITE_SELECTOR,
                "ignite_namespace": local_k8s_addons.IGNITE_NAMESPACE}
    launcher = make_launcher(conn, kind="kubernetes", kubernetes=settings)
    cid = f"oom-{uuid.uuid4().hex[:6]}"
    limits: dict[str, str] = {}

    def pod_limits():  # the limit of each attempt's pod, read while the pods exist
        for pod in core.list_namespaced_pod(ns, label_selector=f"{objects.LABEL_CLUSTER}={cid}").items:
            if pod.metadata.labels.get(objects.LABEL_TASK) == "worker-0":
                limits[pod.metadata.labels[objects.LABEL_ATTEMPT]] = pod.spec.containers[0].resources.limits["memory"]
        return launcher.status(cid).status.final or None

    try:
        start_cluster(cache, {"command": ["python", "hold.py", str(held)], "job_dir": str(job_dir)}, conn=conn,
                      mode="sync", workers=1, max_restarts=2, cluster_id=cid, run_root=run_root, launcher=launcher,
                      startup_deadline_s=300)
        wait_for(pod_limits, 300, f"cluster {cid} to end", poll=0.3)
        final = wait_final(launcher, cid)
        out = launcher.output(cid)[0]  # from the run store, before this test's prefix goes
    finally:
        launcher.stop(cid)
        try:
            RunStore(run_root).remove_dir("")
        except Exception:  # noqa: BLE001 - best effort; the bucket goes with the cluster
            pass
    assert final.status is Status.SUCCEEDED and final.restarts == 1, (final.reason, out[-3000:])
    detail = final.failures[0]["detail"]
    assert f"OOMKilled at its memory limit {limit}Mi" in detail and f"a restart's pods get {grown:.0f}Mi" in detail
    assert f"memory estimate per task: {limit}Mi" in out and f"holding {held} MiB" in out
    assert {parse_mib(v) for v in limits.values()} == {limit, grown} and parse_mib(limits["0"]) == limit, limits
    assert_nothing_left(cid, k8s=(core, ns))
