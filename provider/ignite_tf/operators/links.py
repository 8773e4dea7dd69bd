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


def cluster_id_of(ti_key) -> str:
    """The id ``TFClusterOperator`` gave the cluster of this task instance (try and map index included)."""
    from ignite_tf.cluster.spec import cluster_id_from

    return cluster_id_from(ti_key.dag_id, ti_key.run_id, ti_key.task_id, ti_key.try_number,
                           getattr(ti_key, "map_index", -1))


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
