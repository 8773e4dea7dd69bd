"""Benches cannot rot: each script in bench/ runs once in its smoke mode (``--smoke``: tiny data, one repetition,
one epoch; see bench/harness.py) against the session Ignite cluster, exits 0 and prints its table and its JSON
object. The table's header and the JSON's keys are checked, never the numbers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"

# bench script -> (lines its table holds, keys of its JSON object)
BENCHES = {
    "ingest.py": (["| path | rows timed | rows/s |"],
                  {"rows", "scan_default_rows_s", "scan_paged_rows_s", "reader_rows_s", "memory_rows_s",
                   "reader_vs_paged", "reader_vs_memory", "rss_small_mb", "rss_large_mb",
                   "reader_fingerprint_rows_s", "fingerprint_cost", "load_average"}),
    "validate.py": (["| measurement | seconds | rows/s |"],
                    {"rows", "validate_rows_s", "read_rows_s", "validation_overhead"}),
    "end.py": (["| phase | median s | runs |", "| after_last_epoch_s |"],
               {"startup_s", "epochs_s", "after_last_epoch_s", "_runs"}),
    "startup.py": (["| sync workers | first step (s) | runs | / tf_import_s |",
                    "| fed from | steps/s (best) | steps/s (median) | runs | rows/s (best) |"],
                   {"tf_import_s", "tf_import_cold_s", "first_step_s", "bare_first_step_s", "steps_s_ignite",
                    "steps_s_memory", "input_ratio", "input_ratio_median"}),
    "e2e.py": (["| DAG stage | seconds | share of dag_s |", "| run | wall s | / direct_s | TF cluster lifetime s |",
                "| cluster lifetime (median s) |"],
               {"dag_s", "direct_s", "overhead_ratio", "stages", "after_last_epoch_s", "phases"}),
    "k8s/startup.py": (["| round | launcher (2 sync workers) | start_cluster returned (s) |"],
                       {"runs", "kubernetes_vs_local", "goal"}),
    "tf_baseline_memory.py": (["| sample | parameters | peak (MiB) | measured by | seconds |"],
                              {"peak_mib", "param_bytes", "measured", "tensorflow", "how", "samples_mib", "samples"}),
    "k8s/memory.py": (["| launcher | model | parameters | task | estimate (MiB) | peak (MiB) |"], {"runs", "goal"}),
    "k8s/memory_growth.py": (["| figure | first | last | growth |"], {"growth", "samples", "status", "epoch_s"}),
    "run_root.py": (["| run root | epoch (median s) |"],
                    {"rows", "epochs", "runs", "folder_epoch_s", "s3_epoch_s", "s3_vs_folder"}),
    "k8s/deployed.py": (["| measurement | value | goal |", "| first step, Kubernetes / local (medians; each round) |"],
                        {"startup", "input", "resume", "locality", "goals"}),
}
# Not benches: what they import or launch (run by the benches above).
HELPERS = {"harness.py", "startup_input.py", "startup_model.py", "startup_bare.py", "k8s/common.py",
           "memory_model.py", "k8s/input_task.py"}
# Benches that need the local Kubernetes (run below, marked k8s); k8s/memory.py's local part runs without it.
K8S = {"k8s/startup.py", "k8s/deployed.py"}
LOCAL_ARGS = {"k8s/memory.py": ("--local-only",), "k8s/memory_growth.py": ("--launcher", "local")}


def test_every_script_in_bench_is_smoke_tested_or_a_helper():
    assert {p.relative_to(BENCH).as_posix() for p in BENCH.rglob("*.py")} == set(BENCHES) | HELPERS


def run_smoke(script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(BENCH / script), "--smoke", *args], capture_output=True, text=True,
                          timeout=840)


def assert_table_and_json(script: str, done: subprocess.CompletedProcess) -> dict:
    assert done.returncode == 0, f"{script} --smoke exited {done.returncode}:\n{done.stderr[-6000:]}"
    lines, keys = BENCHES[script]
    for line in lines:
        assert line in done.stdout, f"{script}: no {line!r} in its table:\n{done.stdout}"
    data = json.loads(done.stdout.strip().splitlines()[-1])
    assert keys <= set(data), f"{script}: its JSON lacks {sorted(keys - set(data))}: {sorted(data)}"
    return data


@pytest.mark.timeout(900)
@pytest.mark.parametrize("script", sorted(set(BENCHES) - K8S))
def test_bench_smoke(script, ignite_conn):
    data = assert_table_and_json(script, run_smoke(script, "--ignite", ignite_conn.addresses_str,
                                                   *LOCAL_ARGS.get(script, ())))
    if script == "k8s/memory.py":
        assert {(r["launcher"], r["model"]) for r in data["runs"]} == {("local", "small"), ("local", "large")}
    if script == "run_root.py":
        assert data["runs"]["s3"][0]["files_in_store"] > 0  # the run really lived in the object store


@pytest.mark.timeout(900)
def test_k8s_startup_bench_smoke(ignite_conn, k8s_cluster, k8s_namespace):
    """On the session's local Kubernetes (``--kubeconfig``: the bench starts and stops none) in a namespace of
    its own, with the session Ignite cluster (its tasks use the host network, as the bench's own nodes would)."""
    done = run_smoke("k8s/startup.py", "--ignite", ignite_conn.addresses_str, "--kubeconfig", k8s_cluster.kubeconfig,
                     "--namespace", k8s_namespace, "--host-network")
    data = assert_table_and_json("k8s/startup.py", done)
    assert [r["launcher"] for r in data["runs"]] == ["local", "kubernetes"]


@pytest.mark.timeout(900)
def test_k8s_memory_bench_smoke(ignite_conn, k8s_cluster, k8s_namespace):
    """Two model sizes in real pods on the real node: each container's peak read from its cgroup on the node
    (nothing simulated; the session's Ignite nodes on 127.0.0.1, so the tasks use the host network). The pods
    only: the local part is test_bench_smoke[k8s/memory.py]'s."""
    done = run_smoke("k8s/memory.py", "--ignite", ignite_conn.addresses_str, "--kubeconfig", k8s_cluster.kubeconfig,
                     "--namespace", k8s_namespace, "--host-network", "--pods-only")
    data = assert_table_and_json("k8s/memory.py", done)
    pods = data["runs"]
    assert ([r["launcher"] for r in pods] == ["kubernetes"] * len(pods)
            and {r["model"] for r in pods} == {"small", "large"})
    assert all(r["peak_mib"] and r["pod_limit"] for r in pods), pods


@pytest.mark.timeout(900)
def test_k8s_deployed_bench_smoke(ignite_conn, k8s_cluster, k8s_namespace):
    """Start-up, input, a deleted worker pod and locality on the real node (the session's Ignite nodes on
    127.0.0.1, so the tasks use the host network; the pod deletion is a real one). The resume part runs once,
    with ``--standby on``: with the host network the standby pods are not used, so "off" would be the same
    cold restart again (about 40 s) — the warm hand-over itself is in tests/cluster/k8s/test_training.py."""
    done = run_smoke("k8s/deployed.py", "--ignite", ignite_conn.addresses_str, "--kubeconfig",
                     k8s_cluster.kubeconfig, "--namespace", k8s_namespace, "--host-network", "--standby", "on")
    data = assert_table_and_json("k8s/deployed.py", done)
    assert set(data["resume"]) == {"standby on"}, data["resume"]
    for run in data["resume"].values():
        assert run["status"] == "succeeded" and run["next_epoch_s"] is not None, run


@pytest.mark.timeout(600)
def test_k8s_deployed_bench_killed_leaves_nothing(ignite_conn, k8s_cluster, k8s_namespace):
    """SIGTERM (what a timeout sends) to bench/k8s/deployed.py once its cluster's pods run: the bench stops the
    cluster and ends, and nothing of it is left — no object of the cluster, its state final, the bench's table
    dropped. Real: the bench process, its pods on the real node, the control plane (the session's Ignite nodes
    on 127.0.0.1, so the tasks use the host network). Simulated: nothing; 60 epochs so that the cluster still
    trains when the signal comes."""
    import signal

    from ignite_tf.cluster.api import make_launcher
    from ignite_tf.cluster.k8s import objects
    from ignite_tf.state import Status
    from tests.support.polling import wait_for

    core, ns = k8s_cluster.core, k8s_namespace
    proc = subprocess.Popen([sys.executable, str(BENCH / "k8s/deployed.py"), "--parts", "resume", "--standby", "off",
                             "--rows", "2000", "--epochs", "60", "--ignite", ignite_conn.addresses_str,
                             "--kubeconfig", k8s_cluster.kubeconfig, "--namespace", ns, "--host-network"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        def training():
            if proc.poll() is not None:
                return "ended"
            pods = core.list_namespaced_pod(ns, label_selector=objects.LABEL_TASK).items
            return next((p.metadata.labels[objects.LABEL_CLUSTER] for p in pods if p.status.phase == "Running"
                         and p.metadata.labels.get(objects.LABEL_CLUSTER, "").endswith(f"-{proc.pid}")), None)

        cluster_id = wait_for(training, 300, "the bench's task pods Running", poll=0.5)
        assert cluster_id != "ended", proc.communicate()[0][-4000:]
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 128 + signal.SIGTERM, out[-4000:]
    assert not objects.leftovers(core, ns, cluster_id), out[-4000:]  # already gone when the bench ended
    state = make_launcher(ignite_conn).status(cluster_id)
    assert state.status is Status.STOPPED, (state.status, state.reason)  # stopped, not trained to its end
    client = ignite_conn.client()
    try:
        assert not [c for c in client.get_cache_names() if "k8s_deployed_bench" in c.lower()]
    finally:
        client.close()
