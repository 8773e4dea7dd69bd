"""Operators for the data layer: ETL load into Ignite and partition discovery."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ignite_tf.operators.base import IgniteTFOperator


class IgniteLoadOperator(IgniteTFOperator):
    """Load a CSV or Parquet file (or a DataFrame built by ``source_callable``) into an Ignite SQL table.

    Idempotent: keys are deterministic, so a retry overwrites rather than duplicates.

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
        super().__init__(**kwargs)
        if (source is None) == (source_callable is None):
            raise ValueError(f"{self.task_id}: give exactly one of source= or source_callable=")
        self.cache, self.source, self.source_callable = cache, source, source_callable
        self.schema, self.key, self.batch_size = schema, key, batch_size

    def execute(self, context) -> dict[str, Any]:
        from ignite_tf.etl import load

        source = self.source_callable() if self.source_callable else self.source
        report = load(self.conn, self.cache, source, schema=self.schema, key=self.key, batch_size=self.batch_size)
        self.log.info("loaded %d rows into %s in %.1fs (%d rows in cache)", report.rows_written, self.cache,
                      report.seconds, report.rows_in_cache)
        return report.to_dict()


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
