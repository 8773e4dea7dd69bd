"""Airflow executors and the local launcher: which combinations can keep a training alive.

The local launcher runs the cluster (its supervisor and every TF task) as processes on the machine of the
Airflow worker that launched it. That works while the worker stays: LocalExecutor's and CeleryExecutor's
workers outlive the task, so a deferred task's cluster trains on while the triggerer watches it. Under an
executor whose worker *is* the task (KubernetesExecutor's pod per task, AWS ECS, Batch or Lambda), the worker
ends as soon as the task defers or returns, and the cluster ends with it. Such a launch is refused before
anything starts, naming the setting and what to do.
"""

from __future__ import annotations

WORKER_ENDS_WITH_TASK = frozenset({"KubernetesExecutor", "AwsEcsExecutor", "AwsBatchExecutor", "AwsLambdaExecutor"})
"""Executors (class names) whose worker ends with the task it runs."""


def executor_of(task) -> str:
    """The class name of the executor running ``task``: its own ``executor=``, else Airflow's default (the
    first of ``[core] executor``). Entries may be ``KubernetesExecutor``, ``alias:module.Class`` or
    ``module.Class``."""
    name = getattr(task, "executor", None)
    if not name:
        from airflow.sdk.configuration import conf

        name = (conf.get("core", "executor", fallback="") or "").split(",")[0]
    return name.strip().rpartition(":")[2].rpartition(".")[2]


def refusal(task, *, launcher: str, deferrable: bool, wait_for_completion: bool) -> str | None:
    """Why ``task``'s launch cannot work under its executor (None: it can), in words a DAG author acts on."""
    from ignite_tf.cluster.launcher import LauncherKind

    if LauncherKind.parse(launcher) is not LauncherKind.LOCAL:
        return None
    executor = executor_of(task)
    if executor not in WORKER_ENDS_WITH_TASK:
        return None
    if not wait_for_completion:
        how = "wait_for_completion=False (the task returns as soon as the cluster starts)"
    elif deferrable:
        how = "deferrable=True (the default: the task defers while the cluster trains)"
    else:
        return None  # the task waits in its worker, which holds the cluster as long as the training lasts
    return (f"{task.task_id}: launcher='local' with {how} cannot work under {executor}: its worker ends with "
            f"the task's turn on it, and the local launcher's supervisor and TF processes end with the worker. "
            f"Use launcher='kubernetes' (YAML: training.launcher: kubernetes; its supervisor runs as a pod of its "
            f"own), or wait_for_completion=True with deferrable=False (the task waits in its worker, which holds the "
            f"training), or run this task on an executor whose worker stays (the task's executor=, e.g. "
            f"'LocalExecutor' or 'CeleryExecutor').")
