"""The columns a task reads from a plan's cache, asked from the cache itself (its SQL table or binary type)."""

from __future__ import annotations

from ignite_tf.errors import ConfigError


def cache_columns(plan, conn, label_column: str | None, features: list[str] | None, include_key: bool = False):
    """(feature names, label name, {column: dtype}, reader layout) of ``plan``'s cache on the cluster ``conn``
    (see :func:`ignite_tf.reader.layout.feature_columns` for which columns are features)."""
    from ignite_tf.reader.layout import feature_columns
    from ignite_tf.reader.partition import PartitionReader

    # The plan's routes: else the probe asks the cluster where each partition lives (0.14 s for 1,024).
    with PartitionReader(conn, plan.partition_map.cache, batch_size=1,
                         primaries=plan.partition_map.primary_addresses()) as probe:
        dtypes, key_column, layout = dict(probe.schema), probe.key_column, probe.layout
    label_name = label_column.lower() if label_column else None
    if label_name and label_name not in dtypes:
        raise ConfigError(f"label_column {label_column!r} is not a column of cache '{plan.partition_map.cache}' "
                          f"(columns: {', '.join(dtypes)})")
    names = feature_columns(dtypes, plan.partition_map.cache, key=key_column, label=label_name, features=features,
                            include_key=include_key)
    return names, label_name, dtypes, layout
