"""The task pods' manifests and what the pod backend reads back, without a cluster (pure functions): a task pod's
command, its view of the spec, its environment, its deadline and start files (``objects``); its exit status and
why it is not up (``objects``); a replaced supervisor's pods as the next one adopts them (``adoption``); the
memory limits and their growth after an OOMKill (``oom``); the node each worker is wanted on (``placement``).
The same on the local Kubernetes: tests/cluster/k8s/test_launcher.py, test_supervisor_pod.py, test_oom.py."""

from __future__ import annotations

import sys
from types import SimpleNamespace as NS

import pytest

from ignite_tf.cluster.k8s import adoption, objects, oom, startfiles
from ignite_tf.cluster.k8s.placement import WorkerPlacement
from ignite_tf.cluster.k8s.settings import KubernetesSettings
from ignite_tf.cluster.spec import build_spec
from ignite_tf.contract import ENV_ATTEMPT, ENV_JOB_DIR, ENV_RUN_STORE_NO_BACKUP, ENV_RUN_STORE_PROGRESS

SETTINGS = KubernetesSettings.parse({"placement": "none"})


def _spec(run_store: str = "", job_dir: str | None = None, workers: int = 2):
    job = {"entry_point": "ignite_tf.models:tabular_classifier", "args": []}
    if job_dir:
        job["job_dir"] = job_dir
    return build_spec(cluster_id="tf-m1", cache="c", mode="sync", workers=workers, run_dir="/runs/tf-m1",
                      job=job, run_store=run_store, shard_plan_path="/runs/tf-m1/shard_plan.json")


def _manifest(spec, task, **kwargs):
    return objects.pod_manifest(spec, task, 3, namespace="ns", settings=SETTINGS, image="reg/task:1",
                                owner={"metadata": {"name": "tf-m1", "uid": "u1"}},
                                argv=objects.pod_command(spec, task), cwd="/w", env={"A": "1"}, node=None,
                                memory="512Mi", **kwargs)


def test_a_task_pod_runs_the_images_python_under_the_pods_first_process():
    spec = _spec()
    argv = objects.pod_command(spec, spec.chief)
    assert argv[0] == "python" and sys.executable not in argv
    container = _manifest(spec, spec.chief)["spec"]["containers"][0]
    assert container["command"][:4] == ["python", "-m", "ignite_tf.cluster.k8s.entry", "/w"]
    assert container["command"][5:] == argv


def test_a_pod_sees_an_object_store_run_in_its_own_staging_folder():
    """With a folder as run root a pod sees the launcher's paths (the run volume); with an object store its own
    staging folder, the job folder as shipped in code.zip there."""
    plain = _spec(job_dir="/home/me/job")
    assert objects.pod_view(plain) is plain
    remote = _spec(run_store="s3://bucket/runs/tf-m1", job_dir="/home/me/job")
    seen = objects.pod_view(remote)
    assert seen.run_dir == f"{objects.POD_RUN_DIR}/tf-m1"
    assert seen.shard_plan_path.startswith(seen.run_dir) and seen.job["job_dir"].startswith(seen.run_dir)
    assert remote.run_dir == "/runs/tf-m1" and remote.job["job_dir"] == "/home/me/job"  # not changed


@pytest.mark.parametrize("run_store, no_backup", [("", False), ("s3://b/r", False), ("s3://b/r", True)])
def test_a_task_pods_environment(run_store, no_backup):
    """The task's own variables, the state store's, the job folder; progress to the store and the backup's
    absence only for an object-store run root."""
    spec = objects.pod_view(_spec(run_store=run_store, job_dir="/home/me/job"))
    env = objects.task_env(spec, spec.chief, 2, {"IGNITE_TF_STATE_STORE": "ignite"}, no_backup)
    assert env[ENV_ATTEMPT] == "2" and env["IGNITE_TF_STATE_STORE"] == "ignite"
    assert env[ENV_JOB_DIR] == spec.job["job_dir"]
    assert (ENV_RUN_STORE_PROGRESS in env) == bool(run_store)
    assert (env.get(ENV_RUN_STORE_NO_BACKUP) == "1") == no_backup


def test_a_pod_ends_by_itself_after_the_runtime_limit_and_mounts_the_start_files():
    spec = _spec()
    assert objects.active_deadline(spec, None) is None
    left = objects.active_deadline(spec, 100.0)
    assert left == int(100 + spec.supervision.grace_period_s + objects.DEADLINE_MARGIN_S)
    assert objects.active_deadline(spec, -1e6) == 1
    plain = _manifest(spec, spec.chief)
    assert "activeDeadlineSeconds" not in plain["spec"]
    assert all(v["name"] != startfiles.VOLUME for v in plain["spec"]["volumes"])
    body = _manifest(spec, spec.chief, deadline=left, start_files=True)
    assert body["spec"]["activeDeadlineSeconds"] == left
    assert {"name": startfiles.VOLUME, "configMap": {"name": startfiles.name("tf-m1")}} in body["spec"]["volumes"]
    assert any(m["mountPath"] == startfiles.MOUNT for m in body["spec"]["containers"][0]["volumeMounts"])


def _pod(name="p", *, terminated=None, waiting=None, phase="Running", deleting=False, conditions=(),
         labels=None, annotations=None, owners=(), limit=None):
    state = NS(terminated=terminated, waiting=waiting, running=None)
    resources = NS(limits={"memory": limit} if limit else None)
    return NS(metadata=NS(name=name, deletion_timestamp="now" if deleting else None, labels=labels or {},
                          annotations=annotations, owner_references=[NS(uid=u) for u in owners]),
              status=NS(phase=phase, conditions=list(conditions), reason=None, message=None,
                        container_statuses=[NS(name=objects.CONTAINER, state=state)]),
              spec=NS(node_name="n1", containers=[NS(name=objects.CONTAINER, resources=resources)]))


def test_a_pods_exit_status_and_why_it_is_not_up():
    task = _spec().chief
    assert objects.exit_code(_pod(terminated=NS(exit_code=3, reason="Error")), False) == 3
    assert objects.exit_code(_pod(), False) is None
    assert objects.exit_code(_pod(deleting=True), False) == objects.LOST  # deleted behind our back
    assert objects.exit_code(_pod(deleting=True), True) is None  # ours: its end is not a loss
    assert objects.exit_code(_pod(phase="Failed"), True) == objects.LOST  # evicted, node lost
    assert objects.exit_code(_pod(phase="Succeeded"), False) == 0
    assert objects.waiting_reason(None, task) == "no pod"
    pending = _pod(phase="Pending", conditions=[NS(type="PodScheduled", status="False", reason="Unschedulable",
                                                   message="0/1 nodes")])
    assert objects.waiting_reason(pending, task) == "Pending, not scheduled: Unschedulable: 0/1 nodes"
    pulling = _pod(phase="Pending", waiting=NS(reason="ImagePullBackOff", message=None))
    assert objects.waiting_reason(pulling, task) == "ImagePullBackOff"
    assert objects.waiting_reason(_pod(), task) == f"Running, not listening on port {task.port} yet"


def test_a_replaced_supervisors_pods_as_the_next_one_adopts_them():
    """Each task's newest pod, the newest cluster attempt among them, the log copied so far; pods of another
    root, or being deleted, are not the launcher's for this one."""
    def pod(task, n, attempt):
        return _pod(f"tf-m1-{task}-{n}", labels={objects.LABEL_TASK: task, objects.LABEL_ATTEMPT: str(n)},
                    annotations={objects.ANNOTATION_CLUSTER_ATTEMPT: str(attempt)})

    found = adoption.adopted([pod("worker-0", 2, 1), pod("worker-0", 1, 0), pod("worker-1", 0, 0), _pod("x")])
    assert found.current == {"worker-0": "tf-m1-worker-0-2", "worker-1": "tf-m1-worker-1-0"}
    assert found.attempts == {"worker-0": 2, "worker-1": 0} and found.attempt == 1
    previous = NS(launcher={"owner_uid": "u1", adoption.FOLLOWED_KEY: {"tf-m1-worker-0-2": "120"}})
    assert adoption.ours(previous, "u1") and not adoption.ours(previous, "u2")
    assert not adoption.ours(NS(launcher=None), "u1")
    assert adoption.followed(previous) == {"tf-m1-worker-0-2": 120}
    made = _pod(owners=["u1"], annotations={objects.ANNOTATION_CLUSTER_ATTEMPT: "0"})
    assert adoption.made_by_launcher(made, "u1", 0)
    assert not adoption.made_by_launcher(made, "u1", 1) and not adoption.made_by_launcher(made, "u2", 0)
    assert not adoption.made_by_launcher(_pod(owners=["u1"], deleting=True,
                                              annotations={objects.ANNOTATION_CLUSTER_ATTEMPT: "0"}), "u1", 0)


def test_memory_limits_grow_after_an_oomkill_and_are_kept_by_the_next_supervisor():
    spec = _spec()
    limits = oom.MemoryLimits(SETTINGS)
    limits.limit = limits.estimate = "368Mi"
    assert oom.grown(368) == 560 and oom.describe_limit(_pod(limit="368Mi")) == "368Mi (368 MiB)"
    assert oom.describe_limit(_pod()) == "(none)"
    killed = _pod("a", terminated=NS(exit_code=137, reason="OOMKilled"), limit="368Mi")
    assert limits.after_oom(_pod("b", terminated=NS(exit_code=1, reason="Error"), limit="368Mi")) is None
    assert "560Mi" in limits.after_oom(killed) and limits.limit == "560Mi"
    assert limits.after_oom(killed) is None  # counted once
    assert "a restart's pods get 560Mi" in limits.oom_detail("pod a on n1", killed)
    assert limits.for_task(spec.tasks[1]) == "560Mi"
    chief = _pod("c", labels={objects.LABEL_TASK: spec.chief.name}, limit="900Mi")
    peer = _pod("d", labels={objects.LABEL_TASK: spec.tasks[1].name}, limit="560Mi")
    later = oom.MemoryLimits(SETTINGS)
    later.adopt([chief, peer], spec.chief.name)
    assert (later.adopted, later.adopted_peer) == ("900Mi", "560Mi")
    given = oom.MemoryLimits(KubernetesSettings.parse({"resources": {"limits": {"memory": "368Mi"}}}))
    assert given.after_oom(killed) is None  # the user's limit is theirs to change


def test_each_worker_is_wanted_next_to_its_ignite_node():
    place = WorkerPlacement(SETTINGS, {"ignite-0": "node-a"})
    assert place.done and place.node_for(0) is None
    place.wanted = ["node-a", None]
    assert (place.node_for(0), place.node_for(1), place.node_for(5)) == ("node-a", None, None)
    required = WorkerPlacement(KubernetesSettings.parse({"placement": "required"}))
    assert not required.done and required.hosts is None
