"""Extra links of the operators: the ignite-tf page of the task's cluster, its TensorBoard, the published version.

Airflow 3 computes them in the worker when the task ends and keeps them as XComs, so they may use what the
operator instance knows (the cluster id, the publish result).
"""

from __future__ import annotations

from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

from ignite_tf.ui.tensorboard import tensorboard_url

PAGE = "/ignite-tf/"


def page_url(cluster_id: str | None = None, anchor: str | None = None) -> str:
    """The ignite-tf page on this Airflow (``[api] base_url`` when set, else a path on the same server)."""
    try:
        from airflow.configuration import conf

        base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    except Exception:  # noqa: BLE001 - a relative link still works from the UI
        base = ""
    url = f"{base}{PAGE}"
    if cluster_id:
        url += f"?cluster={quote(cluster_id, safe='')}#{quote(anchor or f'cluster-{cluster_id}', safe='-')}"
    return url


def first_try_of(ti, retries: int | None = None) -> int:
    """The first try of ``ti``'s current generation: its tries since it was created or last cleared.

    Airflow sets ``max_tries = try_number + task.retries`` when it clears a task instance (and ``retries`` when
    it creates one), so the generation began at try ``max_tries - retries + 1``. Without ``max_tries`` (an
    object that is not a task instance) each try counts as its own generation: never an older try's result.
    """
    try_number = max(int(getattr(ti, "try_number", 1) or 1), 1)
    max_tries = getattr(ti, "max_tries", None)
    if retries is None:
        retries = getattr(getattr(ti, "task", None), "retries", None)
    if max_tries is None or retries is None:
        return try_number
    # A DAG whose retries changed since the clear gives a number out of range: keep it within the tries made.
    return min(max(int(max_tries) - int(retries) + 1, 1), try_number)


def task_instance_cluster_id(dag_id: str, run_id: str, task_id: str, map_index: int, first_try: int) -> str:
    """The id of a task instance's cluster: dag, run, task, map index and generation (``first_try_of``), the
    same for every retry, so that a retry re-attaches to or resumes its cluster; new after a clear or in a new
    run. ``TFClusterOperator`` and these links both use it."""
    from ignite_tf.cluster.spec import cluster_id_from

    return cluster_id_from(dag_id, run_id, task_id, map_index, f"g{int(first_try)}")


def cluster_id_of(ti, retries: int | None = None) -> str:
    """The cluster id of the task instance ``ti`` (Airflow's runtime TaskInstance, or a key with its fields)."""
    return task_instance_cluster_id(ti.dag_id, ti.run_id, ti.task_id, getattr(ti, "map_index", -1),
                                    first_try_of(ti, retries))


class ClusterPageLink(BaseOperatorLink):
    """The task's cluster on the ignite-tf page (state, curves, shard plan, validation, published model)."""

    name = "Training page"

    def get_link(self, operator, *, ti_key) -> str:
        published = getattr(operator, "published", None)
        if published is not None:  # PublishModelOperator: the cluster it published from
            return page_url(published.get("cluster_id"))
        return page_url(cluster_id_of(ti_key))


class TensorBoardLink(BaseOperatorLink):
    """TensorBoard filtered to the task's run (served by ``ignite-tf tensorboard``)."""

    name = "TensorBoard"

    def get_link(self, operator, *, ti_key) -> str:
        published = getattr(operator, "published", None)
        if published is not None:
            return tensorboard_url(published.get("cluster_id"))
        return tensorboard_url(cluster_id_of(ti_key))


class RegistryVersionLink(BaseOperatorLink):
    """The version a publish made: its folder when the registry is on the web, else its place on the page."""

    name = "Registry version"

    def get_link(self, operator, *, ti_key) -> str:
        published = getattr(operator, "published", None)
        if not published:
            return ""
        path = str(published.get("path") or "")
        if path.startswith(("http://", "https://")):
            return path
        return page_url(published.get("cluster_id"), f"model-{published['model']}-{published['version']}")
