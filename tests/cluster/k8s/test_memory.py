"""The memory estimate's parts against the real things: the table's columns and types in a real Ignite cache,
the optimizer slots of a real built tf_keras model, the baseline file written by bench/tf_baseline_memory.py."""

from __future__ import annotations

import json
import math
from importlib.resources import files

import numpy as np
import pandas as pd
import pytest

from ignite_tf.cluster.k8s import memory
from ignite_tf.cluster.k8s.memory import (
    HEADROOM,
    OPTIMIZER_SLOTS,
    RowWidth,
    entry_point_model,
    estimate,
    model_footprint,
    optimizer_slots,
    parse_mib,
    row_width,
)

ENTRY = "ignite_tf.models:tabular_classifier"


def _job(*model_args: str, extra: tuple[str, ...] = ()) -> dict:
    args = ["--batch-size", "32", *extra]
    for a in model_args:
        args += ["--model-arg", a]
    return {"entry_point": ENTRY, "args": args}


def test_baseline_is_the_measured_file_with_its_provenance():
    data = json.loads(files("ignite_tf").joinpath("resources", memory.BASELINE_FILE).read_text())
    base = memory.tf_baseline()
    assert base.peak_mib == data["peak_mib"] > 300  # a TensorFlow task's cgroup charge, not a placeholder
    assert base.peak_mib == max(data["samples_mib"])
    # Each copy of a weight (weights, gradients, Adam's 2 slots) at the measured cost, never under its 4 bytes.
    assert base.param_bytes == data["param_bytes"] and base.param_bytes_optimizer == "adam"
    assert base.copy_bytes == pytest.approx(data["param_bytes"] / 4) and base.copy_bytes >= 4
    # A sync cluster's other workers, which do not save the model, measured apart: never above the chief.
    assert base.peer_param_bytes == data["peer_param_bytes"] <= base.param_bytes
    assert (base.copy_bytes_of(peer=True) == pytest.approx(data["peer_param_bytes"] / 4)
            and data["peer_param_bytes"] >= 16)
    assert base.tensorflow.startswith("2.") and base.measured[:2] == "20" and "bench/k8s/memory.py" in base.how
    # Measured in pods: a process's resident set also counts TensorFlow's shared libraries (a pod's cgroup
    # is charged for them only as the first on its node, as reclaimable page cache).
    assert data["process_peak_mib"] > base.peak_mib + 200 and "bench/tf_baseline_memory.py" in data["process_how"]
    est = estimate(_job("hidden=64"), row=RowWidth(72, 80, "given"))
    assert est.baseline_mib == base.peak_mib
    raw = est.baseline_mib + est.model_mib + est.batch_mib + est.reader_mib
    assert est.total_mib == math.ceil(raw * HEADROOM / 16) * 16 and est.quantity() == f"{est.total_mib}Mi"
    assert f"measured {base.measured}, TensorFlow {base.tensorflow}" in est.describe()


def test_estimate_of_the_measured_models_is_their_peak_with_headroom():
    """The two models the baseline was measured with (bench/k8s/memory.py: tabular_classifier with Adam, 16
    float features, batch 64): their estimates are never below the peaks recorded, and within the bench's goal
    (+25%)."""
    data = json.loads(files("ignite_tf").joinpath("resources", memory.BASELINE_FILE).read_text())
    row = RowWidth.of_columns({**{f"f{i}": "float64" for i in range(16)}, "label": "int64", "id": "int64"},
                              [f"f{i}" for i in range(16)], "label", "id", "the bench's table")
    for params, peak, peer_peak in ((1_666, max(data["samples_mib"]), max(data["samples_mib"])),
                                    (data["large_params"], data["large_mib"], data["large_peer_mib"])):
        est = estimate({"command": ["python", "x.py", "--batch-size", "64"]}, params=params, optimizer="adam",
                       row=row)
        assert peak <= est.total_mib <= 1.25 * peak, (params, peak, est.describe())
        peer = est.for_peer()
        assert peer_peak <= peer.total_mib <= 1.25 * peer_peak, (params, peer_peak, peer.describe())
        assert peer.total_mib <= est.total_mib and "a sync worker but the chief" in peer.describe()


def test_model_part_counts_weights_gradients_and_the_entry_points_optimizer():
    est = estimate(_job("hidden=64"), row=RowWidth(72, 80, "given"))
    assert est.params == (16 + 1) * 64 + 65 * 64 + 65 * 2  # tabular_classifier.parameters(hidden=64)
    assert est.batch_size == 32 and est.optimizer == "adam" and est.optimizer_slots == 2
    copy = memory.tf_baseline().copy_bytes
    assert est.model_mib == pytest.approx(est.params * copy * (2 + 2) / 2**20)
    sgd = estimate(_job("optimizer=sgd"), row=RowWidth(72, 80, "given"))
    assert sgd.optimizer == "sgd" and sgd.optimizer_slots == OPTIMIZER_SLOTS["sgd"]
    assert sgd.model_mib == pytest.approx(est.model_mib * (2 + 1) / (2 + 2) * sgd.params / est.params)
    big = estimate({"command": ["python", "x.py"]}, params=50_000_000, row=RowWidth(72, 80, "given"))
    assert big.model_mib == pytest.approx(50_000_000 * copy * 4 / 2**20)  # a script's optimizer: Adam assumed
    assert "parameters 50,000,000" in big.describe() and "adam assumed" in big.describe()
    unknown = estimate({"command": ["python", "x.py"]}, row=RowWidth(72, 80, "given"))
    assert "unknown" in unknown.describe() and unknown.model_mib == 0
    assert estimate({"command": ["python", "x.py"]}, params=10, optimizer="SGD",
                    row=RowWidth(72, 80, "given")).optimizer_slots == 1
    assert parse_mib("1Gi") == 1024 and parse_mib("512Mi") == 512


def test_input_part_holds_the_blocks_and_batches_the_reader_hands_tf_data():
    from ignite_tf.data import BLOCK_ROWS, PREFETCH_BATCHES

    assert memory.PREFETCHED_BATCHES == PREFETCH_BATCHES
    est = estimate(_job(extra=("--shuffle-buffer", "0")), row=RowWidth(100, 120, "given"))
    assert est.block_rows == BLOCK_ROWS
    assert est.batch_mib == pytest.approx((PREFETCH_BATCHES * 32 + memory.BLOCKS_HELD * BLOCK_ROWS) * 100 / 2**20)
    assert est.reader_mib == pytest.approx(memory.READER_PAGE_ROWS * memory.READER_PAGES * 120 * 2 / 2**20)
    wide = estimate(_job(extra=("--shuffle-buffer", "100000")), row=RowWidth(100, 120, "given"))
    assert wide.block_rows == 100_000 and wide.batch_mib > est.batch_mib


@pytest.mark.parametrize("optimizer", ["sgd", "rmsprop", "adam"])
def test_optimizer_slots_are_what_the_built_model_allocates(optimizer):
    """The built-in model built for real with each optimizer: its parameters and slot variables counted on
    the model equal what the estimate takes from the entry point without TensorFlow."""
    from ignite_tf.models import tabular_classifier

    args = ("n_features=5", "n_classes=3", "hidden=8", f"optimizer={optimizer}")
    model = tabular_classifier(n_features=5, n_classes=3, hidden=8, optimizer=optimizer)
    params, slots = model_footprint(model)
    told = entry_point_model(_job(*args))
    assert (told.params, told.optimizer, told.slots) == (params, optimizer, slots)


def test_momentum_slots_are_what_a_built_sgd_with_momentum_allocates():
    from ignite_tf.runtime.start import import_tf

    import_tf()
    import tf_keras

    model = tf_keras.Sequential([tf_keras.layers.InputLayer(input_shape=(4,)), tf_keras.layers.Dense(3)])
    model.compile(optimizer=tf_keras.optimizers.SGD(momentum=0.9), loss="mse")
    assert model_footprint(model) == (15, optimizer_slots("momentum"))


def test_row_width_is_read_from_the_real_table(ignite_conn):
    """A table of mixed column types: the fed row is float32 features + the label in its own type, the read
    row every column the task reads (key included) in its own type; --features narrows both."""
    from ignite_tf.etl import load
    from ignite_tf.plan.partitions import PartitionMap
    from ignite_tf.plan.shards import ShardPlan

    cache = "memory_row_width"
    rng = np.random.default_rng(0)
    frame = pd.DataFrame({"id": np.arange(200), "a": rng.normal(size=200), "b": rng.normal(size=200),
                          "c": rng.integers(0, 9, size=200), "flag": rng.integers(0, 2, size=200) == 1,
                          "label": rng.integers(0, 3, size=200)})
    schema = {"id": "int64", "a": "float64", "b": "float32", "c": "int32", "flag": "bool", "label": "int32"}
    load(ignite_conn, cache, frame, schema=schema, key="id")
    plan = ShardPlan.build(PartitionMap.discover(ignite_conn, cache), 2)

    row = row_width(plan, ignite_conn, "label")
    assert row.fed == 4 * 4 + 4  # a, b, c, flag as float32; the int32 label
    assert row.read == 8 + 8 + 4 + 4 + 1 + 4  # key BIGINT, a DOUBLE, b REAL, c INT, flag BOOLEAN, label INT
    assert "memory_row_width" in row.source and "4 feature(s)" in row.source

    narrow = row_width(plan, ignite_conn, "label", ["a"])
    assert (narrow.fed, narrow.read) == (4 + 4, 8 + 8 + 4)

    job = {"entry_point": ENTRY, "args": ["--label-column", "label", "--features", "a", "--batch-size", "16"]}
    est = estimate(job, plan, conn=ignite_conn)
    assert est.row == narrow and est.batch_size == 16

    missing = row_width(plan, ignite_conn, "no_such_label")
    assert missing.fed == memory.ASSUMED_ROW_BYTES and "not read" in missing.source
    assert "no shard plan" in row_width(None).source


def test_a_model_in_the_jobs_own_folder_is_counted(tmp_path):
    """The launcher estimates in a process that does not have the job's folder on its path (its code is
    shipped to the tasks): the entry point is read from the folder, not counted as 0 parameters."""
    (tmp_path / "team_model_in_job_dir.py").write_text(
        "def model(hidden=8):\n    pass\n\nmodel.parameters = lambda hidden=8: 1000 * hidden\n"
        "model.optimizer = 'sgd'\n")
    job = {"command": ["python", "-m", "ignite_tf.runtime", "--entry-point", "team_model_in_job_dir:model",
                       "--model-arg", "hidden=3"], "job_dir": str(tmp_path)}
    assert entry_point_model(job) == memory.ModelSize(3000, "sgd")
    assert entry_point_model({**job, "job_dir": str(tmp_path / "missing")}).params in (None, 3000)
    import sys

    assert str(tmp_path) not in sys.path


def _oomkilled_pod(name: str, limit: str):
    from kubernetes import client as k8s

    terminated = k8s.V1ContainerStateTerminated(exit_code=137, reason="OOMKilled")
    return k8s.V1Pod(
        metadata=k8s.V1ObjectMeta(name=name),
        spec=k8s.V1PodSpec(node_name="real-0", containers=[k8s.V1Container(
            name="task", resources=k8s.V1ResourceRequirements(limits={"memory": limit}))]),
        status=k8s.V1PodStatus(phase="Failed", container_statuses=[k8s.V1ContainerStatus(
            name="task", image="img:1", image_id="", ready=False, restart_count=0,
            state=k8s.V1ContainerState(terminated=terminated))]))


@pytest.mark.parametrize("resources", [{}, {"limits": {"memory": "368Mi"}}])
def test_a_task_oomkilled_at_the_estimated_limit_gets_a_larger_one_for_its_restart(resources, tmp_path):
    """The rule of ``PodBackend`` (``oom.MemoryLimits``) on an OOMKilled pod (the real kill and restart on the node:
    tests/cluster/k8s/test_oom.py): at a limit the estimate set, the next pods get ``OOM_GROWTH`` times it, once
    per attempt however many of its pods were killed; at a limit the user set, nothing changes."""
    from ignite_tf.cluster.k8s import objects
    from ignite_tf.cluster.k8s.oom import OOM_GROWTH
    from ignite_tf.cluster.k8s.pods import PodBackend
    from ignite_tf.cluster.k8s.settings import KubernetesSettings
    from ignite_tf.cluster.spec import build_spec
    from tests.runstore.test_remote_run import Recorder

    assert objects.CONTAINER == "task"
    spec = build_spec(cluster_id="oom1", cache="c", mode="sync", workers=2, run_dir=tmp_path / "run",
                      job={"command": ["python", "train.py"]})
    backend = PodBackend(spec, KubernetesSettings.parse({"placement": "none", "resources": resources}), "ns",
                         "img:1", core=Recorder())
    backend.owner = {"name": "oom1", "uid": "uid-1"}
    backend.memory.limit = backend.memory.estimate = "368Mi"
    events: list[str] = []
    backend.event = events.append
    for task, name in zip(spec.tasks, ("oom1-worker-0-0", "oom1-worker-1-0"), strict=True):  # both in one attempt
        backend.current[task.name] = name
        backend.pods[name] = _oomkilled_pod(name, "368Mi")
    seen = [backend.observe(task, starting=False) for task in spec.tasks]
    assert [o.exit_code for o in seen] == [137, 137]
    grown = f"{math.ceil(368 * OOM_GROWTH / 16) * 16}Mi"
    if resources:
        assert backend.memory.limit == "368Mi" and not events
        assert "raise kubernetes.resources.limits.memory" in seen[0].detail
        return
    assert backend.memory.limit == grown == "560Mi" and len(events) == 1 and "OOMKilled" in events[0]
    assert all("OOMKilled at its memory limit 368Mi" in o.detail and "a restart's pods get 560Mi" in o.detail
               for o in seen)
    backend.start(spec.tasks[0], 1)
    body = backend.core.created[-1][1]
    assert body["spec"]["containers"][0]["resources"]["limits"]["memory"] == "560Mi"
    assert body["spec"]["containers"][0]["resources"]["requests"]["memory"] == "560Mi"
    name = "oom1-worker-0-1"  # the restart's pod (the pods above were not made by this backend)
    backend.current[spec.tasks[0].name] = name
    backend.pods[name] = _oomkilled_pod(name, "560Mi")  # killed again: grown from the limit it had
    backend.observe(spec.tasks[0], starting=False)
    assert backend.memory.limit == f"{math.ceil(560 * OOM_GROWTH / 16) * 16}Mi" == "848Mi"


def test_a_replaced_pod_supervisor_keeps_a_limit_grown_after_an_oomkill(tmp_path):
    """A pod supervisor that replaces one (``PodBackend.adopt``) re-estimates, but the pods it adopts carry the
    limit grown after an OOMKill: its own new pods get that limit, not the estimate again."""
    from types import SimpleNamespace

    from kubernetes import client as k8s

    from ignite_tf.cluster.k8s import objects
    from ignite_tf.cluster.k8s.pods import PodBackend
    from ignite_tf.cluster.k8s.settings import KubernetesSettings
    from ignite_tf.cluster.spec import build_spec
    from tests.runstore.test_remote_run import Recorder

    spec = build_spec(cluster_id="oom2", cache="c", mode="sync", workers=1, run_dir=tmp_path / "run",
                      job={"command": ["python", "train.py"]})
    adopted = _oomkilled_pod("oom2-worker-0-1", "560Mi")
    adopted.status = k8s.V1PodStatus(phase="Running")
    adopted.metadata.labels = {objects.LABEL_TASK: "worker-0", objects.LABEL_ATTEMPT: "1"}
    adopted.metadata.annotations = {objects.ANNOTATION_CLUSTER_ATTEMPT: "1"}

    class Core(Recorder):
        def list_namespaced_pod(self, namespace, **kwargs):
            return SimpleNamespace(items=[adopted])

    backend = PodBackend(spec, KubernetesSettings.parse({"placement": "none"}), "ns", "img:1", core=Core(),
                         owner={"name": "oom2", "uid": "uid-1"})
    events: list[str] = []
    backend.event = events.append
    assert backend.adopt(SimpleNamespace(launcher={"owner_uid": "uid-1"})) == 1
    backend._create_objects()  # as prepare does, after adopt
    assert backend.memory.estimate != "560Mi" and backend.memory.limit == "560Mi"
    assert any("560Mi" in e and "kept" in e for e in events)
    backend.start(spec.tasks[0], 2)
    body = backend.core.created[-1][1]
    assert body["spec"]["containers"][0]["resources"]["limits"]["memory"] == "560Mi"


def test_a_long_multi_worker_training_counts_its_steps_growth(ignite_conn):
    """Several workers: the estimate grows with the steps a worker trains (``--epochs`` x the largest shard over
    the batch, or ``--steps-per-epoch``) at ``STEP_GROWTH_BYTES`` each, measured by bench/k8s/memory_growth.py;
    one worker, or a script without ``--epochs``, adds nothing. Real: the Ignite cache and its shard plans."""
    from ignite_tf.etl import load
    from ignite_tf.plan.partitions import PartitionMap
    from ignite_tf.plan.shards import ShardPlan

    cache = "memory_step_growth"
    load(ignite_conn, cache, pd.DataFrame({"id": np.arange(2_000), "a": np.arange(2_000) / 7.0,
                                           "label": np.arange(2_000) % 3}), key="id")
    partitions = PartitionMap.discover(ignite_conn, cache)
    two, one = ShardPlan.build(partitions, 2), ShardPlan.build(partitions, 1)
    row = RowWidth(8, 24, "given")
    job = {"entry_point": ENTRY, "args": ["--epochs", "20", "--batch-size", "64", "--label-column", "label"]}
    est = estimate(job, two, row=row)
    assert est.steps == 20 * (max(two.rows_per_worker(0)) // 64) > 0
    assert est.growth_mib == pytest.approx(est.steps * memory.STEP_GROWTH_BYTES / 2**20)
    short = estimate({**job, "args": [*job["args"][:1], "2", *job["args"][2:]]}, two, row=row)
    assert short.steps == est.steps // 10 and short.total_mib <= est.total_mib
    assert f"{est.steps:,} steps x 12 KiB" in est.describe()
    raw = est.baseline_mib + est.model_mib + est.batch_mib + est.reader_mib + est.growth_mib
    assert est.total_mib == math.ceil(raw * HEADROOM / 16) * 16
    given = estimate({**job, "args": [*job["args"], "--steps-per-epoch", "5"]}, two, row=row)
    assert given.steps == 20 * 5
    assert estimate(job, one, row=row).steps == 0
    assert estimate({"command": ["python", "train.py"]}, two, row=row).steps == 0


@pytest.mark.parametrize("mode, resources", [("sync", {}), ("async", {}), ("sync", {"limits": {"memory": "900Mi"}})])
def test_a_sync_clusters_other_workers_get_their_own_estimate(mode, resources, tmp_path):
    """The chief alone saves the model: a sync cluster's other workers get the estimate at the peers' measured
    bytes per parameter (``MemoryEstimate.for_peer``), the chief the full one. An async cluster, a limit the
    user set, and every pod after an OOMKill of any of them get one limit."""
    from ignite_tf.cluster.k8s import objects
    from ignite_tf.cluster.k8s.oom import OOM_GROWTH
    from ignite_tf.cluster.k8s.pods import PodBackend
    from ignite_tf.cluster.k8s.settings import KubernetesSettings
    from ignite_tf.cluster.spec import build_spec
    from tests.runstore.test_remote_run import Recorder

    params = 4_000_000  # large enough for the two measured costs per parameter to differ
    spec = build_spec(cluster_id="peer1", cache="c", mode=mode, workers=2, run_dir=tmp_path / "run",
                      job={"command": ["python", "train.py"]})
    backend = PodBackend(spec, KubernetesSettings.parse({"placement": "none", "resources": resources,
                                                         "model_params": params}), "ns", "img:1", core=Recorder())
    backend.owner = {"name": "peer1", "uid": "uid-1"}
    events: list[str] = []
    backend.event = events.append
    backend._create_objects()

    def limits() -> dict[str, str]:
        for task in spec.tasks:
            backend.start(task, backend.attempts.get(task.name, -1) + 1)
        made = [b for kind, b in backend.core.created if kind == "create_namespaced_pod"][-len(spec.tasks):]
        return {b["metadata"]["labels"][objects.LABEL_TASK]: b["spec"]["containers"][0]["resources"]["limits"]["memory"]
                for b in made}

    est = estimate(spec.job, None, params)
    chief, peer = est.quantity(), est.for_peer().quantity()
    assert parse_mib(peer) < parse_mib(chief)
    first = limits()
    if resources:
        assert set(first.values()) == {"900Mi"} and backend.memory.peer_limit == ""
        return
    if mode == "async":
        assert set(first.values()) == {chief}
        return
    assert first == {"worker-0": chief, "worker-1": peer}
    assert any(e.startswith(f"memory estimate a sync worker but the chief: {peer}") for e in events)
    # worker-1 OOMKilled at its own (lower) limit: from now on every pod gets at least the chief's.
    name = backend.current["worker-1"]
    backend.pods[name] = _oomkilled_pod(name, peer)
    backend.observe(spec.tasks[1], starting=False)
    grown = max(parse_mib(chief), math.ceil(parse_mib(peer) * OOM_GROWTH / 16) * 16)
    assert set(limits().values()) == {f"{grown:.0f}Mi"} and backend.memory.peer_limit == ""
