"""TFClusterOperator: start a TensorFlow cluster next to the data and (by default) wait for it, deferred."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from ignite_tf.cluster.launcher import LauncherKind
from ignite_tf.contract import Mode
from ignite_tf.defaults import DEFAULT_BATCH_SIZE, DEFAULT_EPOCHS, DEFAULT_LABEL_COLUMN, DEFAULT_POLL_INTERVAL
from ignite_tf.operators.base import IgniteTFOperator, WaitsForCluster, as_dict
from ignite_tf.operators.links import ClusterPageLink, TensorBoardLink, first_try_of, task_instance_cluster_id
from ignite_tf.public_api import warn_deprecated

# The keyword arguments a ``job=`` stands for, with their defaults (one given beside ``job=`` is refused).
JOB_KEYWORDS = {"entry_point": None, "command": None, "job_dir": None, "mode": Mode.SYNC.value, "workers": None,
                "ps": 1, "epochs": DEFAULT_EPOCHS, "batch_size": DEFAULT_BATCH_SIZE, "learning_rate": None,
                "label_column": DEFAULT_LABEL_COLUMN, "model_args": None, "extra_args": None, "py_modules": None}


class TFClusterOperator(WaitsForCluster, IgniteTFOperator):
    """Start a TF cluster over ``cache`` and wait for it to finish.

    One cluster per task instance across its tries: the cluster id comes from (dag_id, run_id, task_id, map
    index, generation), the generation being the first try since the task instance was created or cleared
    (``ignite_tf.operators.links.first_try_of``). A retry (``retries``) therefore finds its cluster: it
    re-attaches to one that still runs, reuses the result of one that succeeded (nothing is trained again),
    and resumes one that failed, was stopped or lost its supervisor from its run's checkpoints, in the same
    run location. Clearing the task (or a new DAG run) starts a fresh cluster. A claim in the state store
    keeps two tries from starting two clusters.

    :param cache: cache with the training data (templated).
    :param job: the whole training at once: a :class:`ignite_tf.cluster.job.TrainingJob` (or its ``to_dict()``):
        code, mode, workers, ps, epochs, batch size, label, features, model arguments, py_modules. It stands
        for the job's keyword arguments below (``entry_point`` to ``extra_args``, ``mode``, ``workers``,
        ``ps``, ``py_modules``): give one or the other.
    :param entry_point: ``module:function`` returning a compiled tf_keras model (the runtime trains it); give
        this or ``command``.
    :param command: a user script's command (list), run in ``job_dir`` with TF_CONFIG set (templated).
    :param job_dir: the folder (or zip) the ``command`` runs in (templated).
    :param plan: ShardPlan dict from an upstream ``ShardPlanOperator``; planned here when None.
    :param mode: ``sync`` (MultiWorkerMirroredStrategy) or ``async`` (ParameterServerStrategy) (templated).
    :param workers: workers (templated; default one per Ignite server node when no plan is given).
    :param ps: parameter servers in async mode (templated).
    :param epochs: training epochs of an entry point (templated).
    :param batch_size: rows per step per worker of an entry point (templated).
    :param learning_rate: passed to the entry point's model function (templated; None: its own default).
    :param label_column: the label column an entry point trains on (templated).
    :param model_args: keyword arguments of the entry point's model function, a dict or its JSON text
        (templated), e.g. ``{"hidden": 64}``; each becomes ``--model-arg key=<JSON value>``.
    :param max_restarts: restarts after failures (templated; None: ``Supervision``'s default, as for every
        supervision setting here).
    :param startup_deadline_s: seconds for all tasks to come up.
    :param extra_args: more arguments of ``python -m ignite_tf.runtime`` for an entry point.
    :param run_root: where runs live (default ``$IGNITE_TF_RUN_ROOT``): a folder, or an object-store URL such as
        ``s3://bucket/runs`` (templated; see ``ignite_tf.runstore``).
    :param run_store_conn_id: the Airflow ``aws`` connection whose credentials (and ``endpoint_url`` in its
        extra) reach an object-store ``run_root`` (None: the worker's environment, as s3fs reads it). They
        reach the tasks through their environment only (a pod's Secret).
    :param py_modules: folders or ``.py`` files shipped to every task beside the entry point's own module
        (templated; see docs/guides/code.md).
    :param restart_policy: which failures are restarted: ``on-failure``, ``exit-code`` (default: signals,
        statuses >= 128 and the watchdog, not the job's own error) or ``never`` (templated).
    :param progress_timeout_s: a task silent this long after its first progress report fails the cluster
        (0: watchdog off).
    :param supervision: all the supervisor's settings at once (``ignite_tf.cluster.supervision.Supervision``
        or its dict, templated), e.g. ``{"max_restarts": 3, "grace_period_s": 30}``; the single arguments
        above change one setting of it each.
    :param env: variables for every task (templated), ``["NAME", "NAME=VALUE", ...]``: ``NAME`` passes this
        Airflow worker's value through the environment only; ``NAME=VALUE`` is recorded in the run folder, so
        not for secrets. Tasks get nothing else of the worker's environment beyond what the runtime needs (no
        ``AIRFLOW_CONN_*``): see ``ignite_tf.cluster.environment``.
    :param launcher: ``local`` (processes on the Airflow worker's machine, the default) or ``kubernetes`` (one
        pod per task, next to the Ignite nodes holding its partitions; connection ``kubernetes_default``).
    :param kubernetes: settings of the Kubernetes launcher (templated): namespace, image, resources,
        service_account, node_selector, tolerations, volumes, labels, placement (see
        ``ignite_tf.cluster.k8s.settings.KubernetesSettings``).
    :param deferrable: wait in the triggerer (no worker slot held) — the default. The task owns its cluster: a
        user's kill, the deferral's timeout (what is left of ``execution_timeout``) and ``execution_timeout``
        stop it. With ``launcher='local'`` it needs a worker that outlives the task (refused under
        KubernetesExecutor and the like: ``ignite_tf.operators.executors``).
    :param wait_for_completion: False returns the cluster id at once (watch it with ``TFClusterSensor``; the
        same executor rule applies).
    :param poll_interval: seconds between state polls.
    :param validation: the ``ValidationGateOperator`` result (templated): with ``plan``, every worker checks
        each partition it reads against the fingerprints of what the gate validated.
    :param on_data_change: when they differ: ``fail`` (the run fails naming the partitions and what changed) or
        ``warn`` (recorded in the cluster state's reads; the training goes on) (templated).
    """

    template_fields: Sequence[str] = ("cache", "plan", "mode", "workers", "ps", "epochs", "batch_size",
                                      "learning_rate", "label_column", "max_restarts", "command", "job_dir",
                                      "restart_policy", "env", "model_args", "launcher", "kubernetes", "supervision",
                                      "run_root", "py_modules", "validation", "on_data_change")
    operator_extra_links = (ClusterPageLink(), TensorBoardLink())

    def __init__(self, *, cache: str, job: Any = None, entry_point: str | None = None, command: list[str] | None = None,
                 job_dir: str | None = None, plan: Any = None, mode: str = Mode.SYNC.value,
                 workers: int | str | None = None,
                 ps: int | str = 1, epochs: int | str = DEFAULT_EPOCHS, batch_size: int | str = DEFAULT_BATCH_SIZE,
                 learning_rate: float | str | None = None, label_column: str = DEFAULT_LABEL_COLUMN,
                 model_args: dict[str, Any] | str | None = None, max_restarts: int | str | None = None,
                 startup_deadline_s: float | None = None, extra_args: list[str] | None = None,
                 run_root: str | None = None, deferrable: bool = True, wait_for_completion: bool = True,
                 poll_interval: float = DEFAULT_POLL_INTERVAL,
                 restart_policy: str | None = None, progress_timeout_s: float | None = None,
                 env: list[str] | dict[str, str] | None = None, launcher: str = LauncherKind.LOCAL.value,
                 kubernetes: dict[str, Any] | None = None, supervision: Any = None,
                 run_store_conn_id: str | None = None, py_modules: list[str] | None = None,
                 validation: Any = None, on_data_change: str = "fail", **kwargs):
        super().__init__(**kwargs)
        if job is not None:
            given = {k for k, v in locals().items() if k in JOB_KEYWORDS and v != JOB_KEYWORDS[k]}
            if given:
                raise ValueError(f"{self.task_id}: job= holds {', '.join(sorted(given))}: give them in job= only")
        elif (entry_point is None) == (command is None):
            raise ValueError(f"{self.task_id}: give exactly one of entry_point= or command=")
        if command is not None and model_args:
            raise ValueError(f"{self.task_id}: model_args= goes with entry_point=; a command takes its own arguments")
        self.given_job = job  # job=, as given (``training_job`` renders it)
        self.cache, self.entry_point, self.command, self.job_dir = cache, entry_point, command, job_dir
        self.plan, self.mode, self.workers, self.ps = plan, mode, workers, ps
        self.epochs, self.batch_size, self.learning_rate = epochs, batch_size, learning_rate
        self.label_column, self.model_args = label_column, model_args
        self.max_restarts, self.startup_deadline_s, self.extra_args = max_restarts, startup_deadline_s, extra_args
        self.run_root, self.env = run_root, env
        self.run_store_conn_id, self.py_modules = run_store_conn_id, py_modules
        self.deferrable, self.wait_for_completion, self.poll_interval = deferrable, wait_for_completion, poll_interval
        self.restart_policy, self.progress_timeout_s = restart_policy, progress_timeout_s
        self.launcher, self.kubernetes, self.supervision = launcher, kubernetes, supervision
        self.validation, self.on_data_change = validation, on_data_change
        self._cluster_id: str | None = None

    def cluster_id_for(self, context, try_number: int | None = None) -> str:
        """This task instance's cluster id (``links.task_instance_cluster_id``). ``try_number`` is ignored:
        every try of a generation shares the id."""
        if try_number is not None:
            warn_deprecated(f"{__name__}.TFClusterOperator.cluster_id_for(try_number=)")
        ti = context["ti"]
        return task_instance_cluster_id(context["dag"].dag_id, context["run_id"], self.task_id,
                                        getattr(ti, "map_index", -1), first_try_of(ti, self.retries))

    def labels_for(self, context) -> dict[str, str]:
        """The Airflow task behind the cluster, kept in its state (``ps``, the ignite-tf page)."""
        ti = context["ti"]
        return {"dag_id": context["dag"].dag_id, "run_id": context["run_id"], "task_id": self.task_id,
                "try_number": str(ti.try_number), "map_index": str(getattr(ti, "map_index", -1)),
                "first_try": str(first_try_of(ti, self.retries))}

    def job(self) -> dict[str, Any]:
        """Deprecated: the job as the dict a cluster spec records, ``training_job().to_job()``."""
        warn_deprecated("ignite_tf.operators.tensorflow.TFClusterOperator.job()")
        return self.training_job().to_job()

    def training_job(self):
        """The ``TrainingJob`` of ``job=``, or of the job's keyword arguments, their templates rendered: the one
        place they become one value."""
        from ignite_tf.cluster.job import TrainingJob

        if self.given_job is not None:
            given = self.given_job
            return TrainingJob.parse(given if isinstance(given, TrainingJob) else as_dict(given))
        if self.command:
            job = TrainingJob(command=self.command, job_dir=self.job_dir or ".")
        else:
            job = TrainingJob(entry_point=self.entry_point).build(
                epochs=self.epochs, batch_size=self.batch_size, learning_rate=self.learning_rate,
                label_column=self.label_column, model_args=self.model_args or None)
        job = job.build(mode=self.mode, workers=self.workers or None, ps=self.ps,
                        py_modules=tuple(self.py_modules or ()) or None)
        return job.with_flags(self.extra_args) if self.extra_args and not self.command else job

    def supervision_settings(self):
        """The ``Supervision`` of ``supervision=`` and the single settings, their templates rendered."""
        from ignite_tf.cluster.supervision import Supervision

        base = as_dict(self.supervision) if isinstance(self.supervision, str) else self.supervision
        return Supervision.build(base, max_restarts=self.max_restarts, startup_deadline_s=self.startup_deadline_s,
                                 restart_policy=self.restart_policy, progress_timeout_s=self.progress_timeout_s)

    def execute(self, context) -> dict[str, Any]:
        from ignite_tf.cluster.api import make_launcher, start_cluster
        from ignite_tf.plan.shards import ShardPlan

        launcher = make_launcher(self.conn, kind=self.launcher,
                                 kubernetes=as_dict(self.kubernetes) if self.kubernetes else None,
                                 run_store_conn_id=self.run_store_conn_id)
        cluster_id = self._cluster_id = self.cluster_id_for(context)
        self._log_launch(launcher, cluster_id)
        plan = ShardPlan.from_dict(as_dict(self.plan)) if self.plan else None
        fingerprints = (as_dict(self.validation) if self.validation else {}).get("fingerprints")
        if plan is not None and fingerprints:
            from ignite_tf.validation.fingerprints import OnDataChange

            # The workers check every partition they read against what the gate validated.
            plan.fingerprints = {"expected": fingerprints,
                                 "on_data_change": OnDataChange.parse(self.on_data_change).value}
        job = self.training_job()
        state = start_cluster(
            self.cache, job, conn=self.conn, cluster_id=cluster_id, run_root=self.run_root, launcher=launcher,
            plan=plan, env=self.env, labels=self.labels_for(context), supervision=self.supervision_settings(),
        )
        self.log.info("TensorFlow cluster %s (%s, %d tasks) started; run dir %s", cluster_id, job.mode.value,
                      len(state.tasks), state.run_dir)
        context["ti"].xcom_push(key="cluster_id", value=cluster_id)
        if state.status.final and self.wait_for_completion:  # an earlier try's cluster succeeded: its result
            from ignite_tf.triggers.cluster_events import event_for

            return self.execute_complete(context, event_for(state, launcher))
        if not self.wait_for_completion:
            return {"cluster_id": cluster_id, "status": state.status.value, "run_dir": state.run_dir}
        if self.deferrable:
            self.defer(trigger=self.watch_trigger(context, cluster_id), method_name="execute_complete",
                       timeout=self.deferral_timeout(context))
        final = launcher.wait(cluster_id, poll_s=self.poll_interval,
                              outage_budget_s=self.supervision_settings().outage_budget_s,
                              on_output=lambda text: [self.log.info("%s", line) for line in text.splitlines()])
        from ignite_tf.triggers.cluster_events import event_for

        return self.execute_complete(context, event_for(final, launcher))

    def _log_launch(self, launcher, cluster_id: str) -> None:
        """Say what this try does with its task instance's cluster: start, re-attach, reuse or resume."""
        found = launcher.find(cluster_id)
        if found is None:
            self.log.info("starting TensorFlow cluster %s", cluster_id)
        elif launcher.is_alive(found):
            self.log.info("re-attaching to TensorFlow cluster %s, still running (started by try %s)", cluster_id,
                          found.labels.get("try_number", "?"))
        elif found.status.value == "succeeded":
            self.log.info("TensorFlow cluster %s already succeeded (try %s): its result is reused, nothing is "
                          "trained again; clear the task to train afresh", cluster_id,
                          found.labels.get("try_number", "?"))
        else:
            self.log.info("resuming TensorFlow cluster %s from its checkpoints in %s (it %s%s)", cluster_id,
                          found.run_dir, "was lost" if not found.status.final else found.status.value,
                          f": {found.reason}" if found.reason else "")

    # The launching task owns its cluster: a user killing it, its deferral timing out and its execution_timeout
    # stop the cluster (a TFClusterSensor only watches). The methods below are that ownership's part.

    def pre_execute(self, context) -> None:
        """Refuse, before anything starts, a launch whose cluster cannot outlive this task's worker."""
        from airflow.sdk.exceptions import AirflowFailException

        from ignite_tf.operators.executors import refusal

        super().pre_execute(context)
        why = refusal(self, launcher=self.launcher, deferrable=self.deferrable,
                      wait_for_completion=self.wait_for_completion)
        if why:
            raise AirflowFailException(why)  # no retry: the next try would be refused the same way

    def watch_trigger(self, context, cluster_id: str):
        """The trigger this task defers to: it logs the chief's output into this try's log and, as the
        owner's, stops the cluster when a user kills the task."""
        from ignite_tf.triggers.cluster_events import watcher_of
        from ignite_tf.triggers.tf_cluster import TFClusterTrigger

        return TFClusterTrigger(cluster_id=cluster_id, ignite_conn_id=self.ignite_conn_id,
                                poll_interval=self.poll_interval, run_store_conn_id=self.run_store_conn_id,
                                watcher=watcher_of(context, self.task_id), owns_cluster=True,
                                outage_budget_s=self.supervision_settings().outage_budget_s)

    def deferral_timeout(self, context) -> timedelta:
        """What is left of ``execution_timeout`` since the try started (Airflow applies it only to the task's
        turns on a worker, not to the deferral), else a week; at least a second."""
        if self.execution_timeout is None:
            return timedelta(days=7)
        from datetime import UTC, datetime

        started = getattr(context["ti"], "start_date", None)
        spent = datetime.now(UTC) - started if started is not None else timedelta(0)
        return max(self.execution_timeout - spent, timedelta(seconds=1))

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context):
        from airflow.sdk.exceptions import TaskDeferralTimeout

        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except TaskDeferralTimeout:
            self.stop_owned_cluster(self._cluster_id or self.cluster_id_for(context),
                                    "the deferral timed out (execution_timeout, or a week without one)")
            raise

    def execute_complete(self, context, event: dict[str, Any]) -> dict[str, Any]:
        self._cluster_id = event.get("cluster_id") or self._cluster_id  # so that on_kill finds it here too
        result = super().execute_complete(context, event)
        if isinstance(result, dict):  # where the model came from, for the registry: this task's try, not publish's
            ti = context["ti"]
            result["trained_by"] = {"task_id": self.task_id, "try_number": ti.try_number,
                                    "map_index": getattr(ti, "map_index", -1), "cluster_id": result.get("cluster_id")}
        return result

    def get_openlineage_facets_on_start(self):
        """The table it trains on, in (the model it makes is the publish task's output)."""
        from ignite_tf.lineage import lineage, table_input

        return lineage([table_input(self.conn, self.cache)])

    def stop_owned_cluster(self, cluster_id: str, why: str) -> None:
        """Stop the cluster this task launched (nothing to do when it has ended)."""
        from ignite_tf.cluster.api import make_launcher

        self.log.info("%s: stopping the TensorFlow cluster %s it launched", why, cluster_id)
        self._stop_if_running(make_launcher(self.conn, run_store_conn_id=self.run_store_conn_id), cluster_id)

    def on_kill(self) -> None:
        if self._cluster_id:  # Airflow calls on_kill for a user's kill of a running task and for execution_timeout
            self.stop_owned_cluster(self._cluster_id, "the task was killed or timed out")

    def _stop_if_running(self, launcher, cluster_id: str) -> None:
        state = launcher.find(cluster_id)
        if state is not None and launcher.is_alive(state):
            self.log.info("stopping TensorFlow cluster %s", cluster_id)
            launcher.stop(cluster_id)
