"""Operators for the data layer: ETL load into Ignite and partition discovery."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow.sdk import Asset

from ignite_tf.connection import DEFAULT_CONN_ID
from ignite_tf.lineage import table_uri
from ignite_tf.operators.base import IgniteTFOperator


def table_asset(cache: str, ignite_conn_id: str = DEFAULT_CONN_ID) -> Asset:
    """The Asset of an Ignite table, updated by every ``IgniteLoadOperator`` that loads it; a DAG (or a spec's
    ``schedule: {table: ...}``) scheduled on it retrains when new rows land."""
    return Asset(uri=table_uri(cache, ignite_conn_id))


class IgniteLoadOperator(IgniteTFOperator):
    """Load a CSV or Parquet file (or a DataFrame built by ``source_callable``) into an Ignite SQL table.

    Idempotent: keys are deterministic, so a retry overwrites rather than duplicates. Emits the table's Asset
    (:func:`table_asset`; extra: rows written, rows in the table) unless ``outlets`` is given; reports the table
    as its OpenLineage output.

    :param cache: cache / SQL table name.
    :param source: path of a ``.csv`` or ``.parquet`` file (templated).
    :param source_callable: ``() -> pandas.DataFrame``, instead of ``source`` (called in ``execute`` only).
    :param schema: column -> type (``float32``, ``int32``, ``int64``, ``float64``, ``bool``, ``string``).
    :param key: key column; default a hash of each row.
    :param batch_size: rows per write.
    """

    template_fields: Sequence[str] = ("cache", "source", "key")

    def __init__(self, *, cache: str, source: str | None = None, source_callable=None,
                 schema: dict[str, str] | None = None, key: str | None = None, batch_size: int = 10_000, **kwargs):
        if "{{" not in cache:  # a templated table is known only at run time: no Asset to declare
            kwargs.setdefault("outlets", [table_asset(cache, kwargs.get("ignite_conn_id", DEFAULT_CONN_ID))])
        super().__init__(**kwargs)
        if (source is None) == (source_callable is None):
            raise ValueError(f"{self.task_id}: give exactly one of source= or source_callable=")
        self.cache, self.source, self.source_callable = cache, source, source_callable
        self.schema, self.key, self.batch_size = schema, key, batch_size
        self.loaded: dict[str, Any] | None = None  # the load report, for OpenLineage

    def execute(self, context) -> dict[str, Any]:
        from ignite_tf.etl import load

        source = self.source_callable() if self.source_callable else self.source
        report = load(self.conn, self.cache, source, schema=self.schema, key=self.key, batch_size=self.batch_size)
        self.log.info("loaded %d rows into %s in %.1fs (%d rows in cache)", report.rows_written, self.cache,
                      report.seconds, report.rows_in_cache)
        self.loaded = report.to_dict()
        for outlet in self.outlets:
            if isinstance(outlet, Asset) and outlet.uri == table_uri(self.cache, self.ignite_conn_id):
                context["outlet_events"][outlet].extra = {"rows_written": report.rows_written,
                                                          "rows_in_cache": report.rows_in_cache}
        return self.loaded

    def get_openlineage_facets_on_start(self):
        from ignite_tf.lineage import load_lineage

        return load_lineage(self.conn, self.cache, self.source, self.schema)

    def get_openlineage_facets_on_complete(self, task_instance):
        from ignite_tf.lineage import load_lineage

        return load_lineage(self.conn, self.cache, self.source, self.schema,
                            rows_written=(self.loaded or {}).get("rows_written"))


class IgnitePartitionsOperator(IgniteTFOperator):
    """Discover a cache's PartitionMap (primary/backup node of every partition, rows per partition).

    :param cache: cache name (templated).
    """

    template_fields: Sequence[str] = ("cache",)

    def __init__(self, *, cache: str, **kwargs):
        super().__init__(**kwargs)
        self.cache = cache

    def execute(self, context) -> dict[str, Any]:
        from ignite_tf.plan.partitions import PartitionMap

        pm = PartitionMap.discover(self.conn, self.cache)
        self.log.info("%s", pm.summary())
        return pm.to_dict()
