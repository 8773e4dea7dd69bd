"""Start a TensorFlow cluster over a cache: discovery, shard plan, spec, launch. Shared by the CLI and Airflow."""

from __future__ import annotations

import shutil
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from ignite_tf.cluster.environment import parse_env, pass_through
from ignite_tf.cluster.job import TrainingJob
from ignite_tf.cluster.launcher import Launcher, LauncherKind, LocalLauncher
from ignite_tf.cluster.spec import build_spec, check_cluster_id, new_cluster_id
from ignite_tf.cluster.supervision import RestartPolicy, Supervision
from ignite_tf.contract import Mode
from ignite_tf.errors import ConfigError
from ignite_tf.runstore import LAYOUT, RunStore, is_remote
from ignite_tf.runstore import code as shipping
from ignite_tf.runstore.layout import RunFolder, default_run_root, staging_dir
from ignite_tf.state import ClusterState, StateStore, Status, open_store

__all__ = ["RunFolder", "default_run_root", "make_launcher", "prepare_job_dir", "start_cluster"]


def make_launcher(conn=None, store: StateStore | None = None, kind: LauncherKind | str = LauncherKind.LOCAL,
                  kubernetes: dict[str, Any] | None = None, run_store_conn_id: str | None = None) -> Launcher:
    """The launcher of ``kind``: ``local`` (processes on this machine) or ``kubernetes`` (pods; settings in
    ``kubernetes``, see ``ignite_tf.cluster.k8s.settings.KubernetesSettings``). ``run_store_conn_id``: the
    Airflow ``aws`` connection of an object-store run root (default: the environment's credentials)."""
    kind = LauncherKind.parse(kind)
    if kind is LauncherKind.LOCAL and kubernetes:
        raise ConfigError("kubernetes settings given with the local launcher: use launcher 'kubernetes'")
    store = store or open_store(conn)
    if kind is LauncherKind.KUBERNETES:
        from ignite_tf.cluster.k8s.launcher import KubernetesLauncher

        return KubernetesLauncher(store, conn, kubernetes, on_lost=release_remote, run_store_conn_id=run_store_conn_id)
    return LocalLauncher(store, conn, on_lost=release_remote, run_store_conn_id=run_store_conn_id)


def release_remote(state: ClusterState) -> None:
    """Tasks that do not die with a lost supervisor (pods) are deleted by whoever stops the cluster."""
    if (state.launcher or {}).get("kind") == LauncherKind.KUBERNETES:
        from ignite_tf.cluster.k8s.launcher import release

        release(state)


def run_location_root(run_location: str, cluster_id: str) -> str:
    """The run root of a run location (``<root>/<cluster_id>``, a folder or an object-store URL)."""
    location = str(run_location).rstrip("/")
    if location.rsplit("/", 1)[-1] != cluster_id:
        raise ConfigError(f"run location {run_location} of cluster {cluster_id} is not <run root>/{cluster_id}")
    return location[: -len(cluster_id) - 1] or "/"


def prepare_job_dir(job_dir: str | Path, run_dir: Path) -> str:
    """A folder is used in place; a zip is unpacked into the run folder's ``job/``."""
    path = Path(job_dir).expanduser().resolve()
    if path.is_dir():
        return str(path)
    if path.is_file() and zipfile.is_zipfile(path):
        target = RunFolder(run_dir).job
        shutil.rmtree(target, ignore_errors=True)
        with zipfile.ZipFile(path) as zf:
            for member in zf.namelist():
                dest = (target / member).resolve()
                if not str(dest).startswith(str(target.resolve())):
                    raise ConfigError(f"JOB_DIR {job_dir}: zip member {member!r} escapes the job directory")
            zf.extractall(target)
        return str(target)
    raise ConfigError(f"JOB_DIR {job_dir} is neither a folder nor a zip file")


def start_cluster(cache: str, job: TrainingJob | Mapping[str, Any], *, conn, mode: str | Mode | None = None,
                  workers: int | None = None, ps: int | None = None, cluster_id: str | None = None,
                  run_root: str | Path | None = None, reshuffle: str | None = None, seed: int = 0,
                  evaluation: float | None = None, evaluation_seed: int = 0,
                  launcher: Launcher | None = None, env: Iterable[str] | Mapping[str, str] | None = None,
                  plan=None, labels: Mapping[str, Any] | None = None, supervision: Supervision | None = None,
                  max_restarts: int | None = None, startup_deadline_s: float | None = None,
                  grace_period_s: float | None = None, restart_policy: RestartPolicy | str | None = None,
                  progress_timeout_s: float | None = None,
                  py_modules: Iterable[str | Path] | None = None) -> ClusterState:
    """Plan shards over ``cache`` and launch a TF cluster running ``job``; returns its recorded state.

    :param job: what to train, a :class:`ignite_tf.cluster.job.TrainingJob`; or a job dict,
        ``{"entry_point": "module:function", "args": [...]}`` or ``{"command": [...], "job_dir": ...}``, read by
        ``TrainingJob.from_job``.
    :param mode: ``mode``, ``workers``, ``ps`` and ``py_modules`` change one field of the job each (None or
        empty: the job's; a job dict's are sync, one worker per Ignite server node, one ps, none; ``workers=0``
        is None).
    :param workers: default one per Ignite server node (a worker next to each node's data).
    :param cluster_id: a stable id names one training: a running cluster with that id is returned (re-attach),
        so is one that succeeded (its result reused, nothing trained again); one that failed, was stopped or
        lost its supervisor is resumed from its run's checkpoints, in the same run location. A claim in the
        state store makes sure that two launches of one id start one supervisor.
    :param plan: a ShardPlan made earlier (e.g. by an upstream Airflow task); else planned here.
    :param evaluation: share of the rows held out for evaluation when planned here (``ShardPlan.build``), with
        ``evaluation_seed``; the chief evaluates the model on them after training.
    :param supervision: restarts, restart policy, start-up deadline, progress watchdog and grace period
        (``ignite_tf.cluster.supervision.Supervision``; default its defaults). ``max_restarts``,
        ``startup_deadline_s``, ``grace_period_s``, ``restart_policy`` and ``progress_timeout_s`` change one
        setting of it each (None: unchanged).
    :param labels: who started it (``dag_id``, ``run_id``, ``task_id``...), kept in the cluster state.
    :param env: ``["NAME", "NAME=VALUE", ...]``: variables for every task besides the allowlisted ones
        (``NAME`` passes this process's value through the environment; see ``environment.py``).
    :param run_root: a folder, or an object-store URL (``s3://bucket/runs``): the run then lives there, its
        files written in a local staging folder first (``ignite_tf.runstore``).
    :param py_modules: folders or ``.py`` files shipped to every task beside the entry point's own module
        (``ignite_tf.runstore.code``).
    """
    supervision = Supervision.build(supervision, max_restarts=max_restarts, startup_deadline_s=startup_deadline_s,
                                    grace_period_s=grace_period_s, restart_policy=restart_policy,
                                    progress_timeout_s=progress_timeout_s)
    job = TrainingJob.from_job(job, mode=mode, workers=workers or None, ps=ps,
                               py_modules=tuple(str(m) for m in py_modules) if py_modules else None)
    if conn is None:
        raise ConfigError("no Ignite connection: pass -c FILE (or an Airflow connection id) or set IGNITE_TF_ADDRESSES")
    cluster_id = check_cluster_id(cluster_id) if cluster_id else new_cluster_id()
    pass_through(parse_env(env)[1])  # a named variable that is not set fails before anything starts
    if job.job_dir is not None and not Path(job.job_dir).exists():
        raise ConfigError(f"JOB_DIR {job.job_dir} does not exist")
    launcher = launcher or make_launcher(conn)
    existing = launcher.find(cluster_id)
    if existing is not None and (launcher.is_alive(existing) or existing.status is Status.SUCCEEDED):
        return existing  # re-attach to it, or reuse its result: one training per cluster id
    won = launcher.claim(cluster_id, existing)
    if won is not None:
        return won  # another launch started it meanwhile
    with launcher.released_on_error(cluster_id):
        if existing is not None and not existing.status.final:
            existing = launcher.release_lost(existing)  # by the launch that won the claim only
        return _start_claimed(launcher, existing, cluster_id, cache, job, conn=conn, run_root=run_root, plan=plan,
                              env=env, labels=labels, supervision=supervision, reshuffle=reshuffle, seed=seed,
                              evaluation=evaluation, evaluation_seed=evaluation_seed)


def _start_claimed(launcher, existing, cluster_id, cache, job, *, conn, run_root, plan, env, labels, supervision,
                   reshuffle, seed, evaluation, evaluation_seed) -> ClusterState:
    """``start_cluster`` once its launch holds the claim: the run folder, the shipped code, the plan, the launch."""
    from ignite_tf.plan.partitions import PartitionMap
    from ignite_tf.plan.shards import ShardPlan, next_to_nodes

    # A cluster that ended without success resumes where it ran: the same run, with its checkpoints.
    root = run_location_root(existing.run_dir, cluster_id) if existing is not None else run_root or default_run_root()
    store = (launcher.run_store(f"{str(root).rstrip('/')}/{cluster_id}") if is_remote(root)
             else RunStore(str(RunFolder.of(cluster_id, root).path)))
    folder = RunFolder(staging_dir(cluster_id)) if store.remote else RunFolder.of(cluster_id, root)
    run_dir = folder.path
    run_dir.mkdir(parents=True, exist_ok=True)
    if plan is not None and job.workers not in (None, plan.workers):
        raise ConfigError(f"workers={job.workers} but the shard plan has {plan.workers} workers")
    plan_path = folder.shard_plan
    if job.job_dir is not None:
        job = replace(job, job_dir=prepare_job_dir(job.job_dir, run_dir))
    # A remote run's tasks may not see this disk (pods): its job folder goes to the store too.
    shipped = shipping.ship(store, job.entry_point, job.py_modules, job.job_dir if store.remote else None,
                            local_copy=folder.code_zip if store.remote else None)
    # The spec records what was shipped, not the paths on this host it was packed from.
    recorded = {k: v for k, v in job.to_job().items() if k != "py_modules"}
    if shipped:
        recorded["shipped"] = shipped

    def spec_for(workers: int, worker_hosts=None):
        return build_spec(
            cluster_id=cluster_id, cache=cache, mode=job.mode, workers=workers, ps=job.ps, run_dir=run_dir,
            job=recorded,
            worker_hosts=worker_hosts, shard_plan_path=str(plan_path), env=env, labels=labels,
            supervision=supervision, run_store=store.url if store.remote else "",
        )

    def save_plan(plan) -> None:
        plan.save(plan_path)
        if store.remote:
            store.put_file(plan_path, LAYOUT.shard_plan)

    if plan is not None:
        save_plan(plan)
        return launcher.launch(spec_for(plan.workers, plan.worker_hosts))
    plan_path.unlink(missing_ok=True)  # the fork server's preload waits for this run's plan, never reads an older one
    with launcher.launching(spec_for(job.workers or 1)) as launch:
        pm = PartitionMap.discover(conn, cache)
        workers = job.workers or len(pm.nodes)
        plan = ShardPlan.build(pm, workers, worker_hosts=next_to_nodes(pm, workers), reshuffle=reshuffle,
                               seed=seed, conn=conn, evaluation=evaluation, evaluation_seed=evaluation_seed)
        save_plan(plan)
        return launch(spec_for(plan.workers, plan.worker_hosts))
