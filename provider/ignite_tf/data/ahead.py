"""Reading a dataset's first block before the dataset exists (``read_ahead``): in a thread, or in a child
process that reads the whole first pass (``ignite_tf.reader.ahead`` holds the machinery); the next ``dataset``
call with the same arguments starts from it."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.data.deprecated import label_renamed
from ignite_tf.data.plan import load_plan, worker_index
from ignite_tf.data.rows import blocks, cache_columns, columns_to_read
from ignite_tf.defaults import DEFAULT_SHUFFLE_BUFFER
from ignite_tf.plan.shards import ShardPlan
from ignite_tf.reader.ahead import HeadStart
from ignite_tf.reader.blocks import BLOCK_ROWS


@label_renamed
def read_ahead(batch_size: int = 1024, epoch: int = 0, *, label_column: str | None = None,
               features: list[str] | None = None, stack: bool = False, worker: int | None = None, plan=None,
               conn: IgniteConnectionConfig | None = None, shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
               seed: int | None = None,
               page_size: int = 1024, block_rows: int = BLOCK_ROWS, include_key: bool = False,
               process: bool = False) -> None:
    """Start reading the first block of ``dataset(...)`` with the same arguments, in a background thread.

    For a process about to import TensorFlow (the import keeps one core busy for seconds while the other
    core and the Ignite nodes wait), or about to build its model and trace its training step: a first block
    of a small cache can scan every partition, a round trip each, and tf.data starts reading only when the
    traced step first asks. The next ``dataset`` call with the same ``plan`` and ``conn`` objects and the
    same arguments starts from that block (the call itself waits only for the columns; its first element
    waits for the block); nothing else is shared. If the read-ahead fails, the dataset reads as usual (and
    raises there). Without such a call the reader stays open until ``drop_read_ahead()`` or the process ends.

    :param process: read in a child Python process instead (``ignite_tf.reader.ahead``), which then reads the
        dataset's whole first pass and hands it over block by block: decoding there competes neither for
        this process's GIL nor with the import. The child ends with the pass, when the dataset is deleted,
        on ``drop_read_ahead()``, or at its next block once this process is gone.
    """
    plan = load_plan(plan, conn=conn)
    index = worker if worker is not None else worker_index()
    key = ahead_key(plan, conn, epoch, index, batch_size, label_column, features, stack, shuffle_buffer, seed,
                    page_size, block_rows, include_key)
    args = (plan, conn, epoch, index, batch_size, label_column, features, stack, shuffle_buffer, seed, page_size,
            block_rows, include_key)
    if process:
        HeadStart.start_process(key, f"{__name__}:first_pass", args, keep=(plan, conn))
        return

    def first_block(head: HeadStart) -> None:
        head.columns, head.rest = first_pass(*args)
        head.ready.set()
        head.first = next(head.rest, None)

    HeadStart.start(key, first_block, keep=(plan, conn))


def first_pass(plan: ShardPlan, conn, epoch: int, index: int, batch_size: int, label_column: str | None,
               features: list[str] | None, stack: bool, shuffle_buffer: int, seed: int | None, page_size: int,
               block_rows: int, include_key: bool) -> tuple[tuple, Iterator[dict[str, np.ndarray]]]:
    """(``cache_columns``, the block stream) of ``dataset(...)``'s first pass: what a read-ahead reads."""
    columns = names, label_name, _, layout = cache_columns(plan, conn, label_column, features, include_key)
    read_columns, decode_stack = columns_to_read(plan, names, label_name, stack)
    return columns, blocks(epoch, batch_size=batch_size, worker=index, plan=plan, conn=conn, columns=read_columns,
                           shuffle_buffer=shuffle_buffer, seed=seed, page_size=page_size, stack=decode_stack,
                           block_rows=block_rows, layout=layout)


def drop_read_ahead() -> None:
    """Close the readers of ``read_ahead`` calls that no ``dataset`` took."""
    HeadStart.drop_all()


def ahead_key(plan, conn, epoch, index, batch_size, label_column, features, *rest) -> tuple:
    """What a ``dataset`` call must share with a ``read_ahead`` to start from its block (plan, conn: the objects)."""
    columns = tuple(features) if features is not None else None
    return (id(plan), id(conn), epoch, index, batch_size, label_column, columns, *rest)

