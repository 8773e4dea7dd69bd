"""A worker's rows as NumPy blocks read from Ignite: the shard of an epoch in blocks or batches, the columns of
the plan's cache, and what a read reports (progress for the watchdog, reads and locality for the cluster state,
the check against what validation read)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np

from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.contract import ENV_SHARD_PLAN
from ignite_tf.data.deprecated import label_renamed
from ignite_tf.data.plan import connection, load_plan, shard
from ignite_tf.plan.shards import ShardPlan
from ignite_tf.reader.blocks import BLOCK_ROWS, block_shuffle, group, rebatch


def batches(epoch: int = 0, *, batch_size: int = 1024, worker: int | None = None, plan=None,
            cache: str | None = None, conn: IgniteConnectionConfig | None = None, columns: list[str] | None = None,
            shuffle_buffer: int = 0, seed: int | None = None, page_size: int = 1024,
            input_context=None) -> Iterator[dict[str, np.ndarray]]:
    """NumPy batches of this worker's shard for ``epoch``: every row, the last batch shorter (the same rows,
    in the same order, as the first pass of ``dataset(..., drop_remainder=False)``)."""
    yield from rebatch(blocks(epoch, batch_size=batch_size, worker=worker, plan=plan, cache=cache, conn=conn,
                               columns=columns, shuffle_buffer=shuffle_buffer, seed=seed, page_size=page_size,
                               input_context=input_context), batch_size)


def blocks(epoch: int = 0, *, batch_size: int = 1024, worker: int | None = None, plan=None,
           cache: str | None = None, conn: IgniteConnectionConfig | None = None, columns: list[str] | None = None,
           shuffle_buffer: int = 0, seed: int | None = None, page_size: int = 1024, block_rows: int = BLOCK_ROWS,
           stack: list[str] | None = None, input_context=None, layout: tuple | None = None, iteration: int = 0
           ) -> Iterator[dict[str, np.ndarray]]:
    """This worker's rows for ``epoch`` in blocks of about ``block_rows`` rows: cut into ``batch_size`` pieces,
    they are ``batches(...)``. Fewer, larger pieces cost less Python per row; memory holds one block.

    With ``shuffle_buffer``, rows are permuted within units of ``max(batch_size, shuffle_buffer)`` rows and a
    block is a whole number of units (one, when a unit is larger than ``block_rows``). ``stack``: numeric
    columns decoded straight into one float32 matrix ``block[ignite_tf.reader.partition.STACKED]`` (NULLs filled).
    ``layout``: a ``PartitionReader.layout`` of the cache, so the reader need not ask the cluster for it.
    ``iteration``: which pass over the shard this is. Pass 0 is shuffled by ``(seed, epoch, worker)``, a
    later pass by ``(seed, epoch, worker, iteration)``: a repeated dataset sees a new order every pass, as
    with tf.data's ``shuffle`` (and, with ``drop_remainder``, leaves out different rows each pass).
    """
    from ignite_tf.reader.partition import PartitionReader

    plan = load_plan(plan, cache=cache, conn=conn)
    my = shard(epoch, worker=worker, plan=plan, input_context=input_context)
    unit = max(batch_size, shuffle_buffer) if shuffle_buffer else max(batch_size, block_rows)
    pm = plan.partition_map
    # The plan's routes spare the reader asking the cluster every epoch; a stale route costs a forwarded
    # (or failed-over) scan, never a row.
    with PartitionReader(connection(conn), pm.cache, columns=columns, batch_size=unit, page_size=page_size,
                         primaries=pm.primary_addresses(), backups=pm.backup_addresses(), stack=stack,
                         layout=layout, key_filter=plan.evaluation.training_filter(),
                         fingerprint=data_check(plan)) as reader:
        try:
            stream = reported(reader.batches(my.read_tasks()), epoch)
            if not shuffle_buffer:
                yield from stream
                return
            rng = np.random.default_rng([plan.seed if seed is None else seed, epoch, my.worker]
                                        + ([iteration] if iteration else []))
            yield from group(block_shuffle(stream, rng), max(1, block_rows // unit))
        finally:
            report_reads(reader, plan, my.worker, epoch)


@label_renamed
def cache_columns(plan: ShardPlan, conn, label_column: str | None, features: list[str] | None,
                  include_key: bool = False):
    """(feature names, label name, {column: dtype}, reader layout) of the plan's cache (see
    :func:`ignite_tf.reader.columns.cache_columns`)."""
    from ignite_tf.reader.columns import cache_columns as columns_of

    return columns_of(plan, connection(conn), label_column, features, include_key=include_key)


def columns_to_read(plan: ShardPlan, names: list[str], label_name: str | None, stack: bool):
    """(columns the reader decodes, columns it stacks into one matrix) of a dataset of ``names``."""
    key = plan.partition_map.key_column
    read = [c for c in names + ([label_name] if label_name else []) if c != key]
    # The reader stacks value columns as it decodes (the key is not one: then stack here).
    return read, (names if stack and key not in names else None)


def data_check(plan: ShardPlan):
    """The check of this worker's reads against what validation read (``plan.fingerprints``); False: none."""
    if not plan.fingerprints:
        return False
    from ignite_tf.validation.fingerprints import DataCheck, Fingerprints

    return DataCheck(Fingerprints.from_dict(plan.fingerprints["expected"]), plan.fingerprints.get("on_data_change"),
                     cache=plan.partition_map.cache)


def report_reads(reader, plan: ShardPlan, worker: int, epoch: int) -> dict | None:
    """Add what ``reader`` read (rows per serving Ignite node, the share from this worker's own host or
    Kubernetes node) to the cluster state of the cluster this process belongs to, if any. Never raises: a
    measurement must not fail the training. Returns the record (None when nothing was read)."""
    import logging

    from ignite_tf.reader.locality import ENV_NODE_NAME
    from ignite_tf.state.reports import TaskReports

    if not reader.stats["rows_per_node"]:
        return None
    try:
        node = os.environ.get(ENV_NODE_NAME) or None
        ignite_nodes = (plan.placement or {}).get("ignite_nodes")
        if node and not ignite_nodes and os.environ.get(ENV_SHARD_PLAN):
            # The launcher records where the Ignite pods run once every worker pod is placed, after this
            # worker may have loaded the plan: read the plan's placement again.
            ignite_nodes = (ShardPlan.load(os.environ[ENV_SHARD_PLAN]).placement or {}).get("ignite_nodes")
        record = reader.locality(kubernetes_node=node, ignite_nodes=ignite_nodes)
        check = reader.fingerprints.on_task if reader.fingerprints is not None else None
        if check is not None:
            record["data_check"] = {"tasks_checked": check.checked, "changes": check.changes,
                                    "on_data_change": check.on_change.value}
        reports = TaskReports.from_env()
        if reports is not None:
            with reports:
                reports.reads(worker, epoch, record)
        return record
    except Exception as exc:  # noqa: BLE001 - see the docstring
        logging.getLogger(__name__).warning("could not record the reads of epoch %d: %s", epoch, exc)
        return None


def reported(stream: Iterator[dict], epoch: int) -> Iterator[dict]:
    """Each block read is progress for the supervisor's watchdog (see ``ignite_tf.contract``)."""
    from ignite_tf import contract

    for n, block in enumerate(stream, 1):
        contract.report(f"epoch {epoch + 1}: read block {n}")
        yield block

