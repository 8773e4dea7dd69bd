"""Input pipelines of the worker runtime: sync datasets, the async workers' local feed, resume points.

Sync mode (MultiWorkerMirroredStrategy): every worker runs its own input pipeline, so it reads its shard
straight from Ignite with ``ignite_tf.data.dataset``; the epochs of one ``fit`` are chained, each epoch
exactly ``steps`` batches long (all workers must take the same number of steps).

Async mode (ParameterServerStrategy): each async worker writes its shard's rows for every epoch into its OWN
working directory, and the chief's dataset graph reads them there (the files and that graph:
``ignite_tf.reader.feed``). Under the runtime's chief a worker writes its feed from its command line's flags
before its TF server starts (``serve``); under a user's chief script it serves at once and writes the feed the
script's ``ignite_tf.data.parameter_server_dataset_fn`` asks for (``answer_requests``).

Disk cost of the feed, per worker: ``epochs x shard rows x (n_features + 1) x 4`` bytes (10 epochs of a
1M-row shard with 16 features: 680 MB). A restarted worker reuses a complete feed written for the same
plan, columns, batch size and epochs (``feed/meta.json``) instead of reading Ignite again. The feed lives
in the task directory of the run; removing the run directory removes it.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np

import ignite_tf.data as itd
from ignite_tf.defaults import DEFAULT_SHUFFLE_BUFFER
from ignite_tf.errors import ConfigError
from ignite_tf.reader.blocks import filled
from ignite_tf.reader.feed import ANSWER, FEED_DIR, REQUEST, feed_dataset_fn, feed_file

__all__ = ["FEED_DIR", "answer", "answer_requests", "columns", "feed_dataset_fn", "feed_file", "label_classes",
           "pending_request", "prepare_feed", "read_feed", "resume_point", "sync_dataset", "write_feed"]

_META = "meta.json"


def columns(plan, label: str | None, features: list[str] | None, conn=None) -> tuple[list[str], str, np.dtype]:
    """(feature names, label name, label dtype) of the plan's cache; numeric columns only."""
    if not label:
        raise ConfigError("no label column: pass label_column=... (--label-column), the column the model predicts")
    names, label_name, dtypes, _ = itd.cache_columns(plan, conn, label, features)
    bad = [n for n in [*names, label_name] if np.dtype(dtypes[n]).kind not in "fiub"]
    if bad:
        raise ConfigError(f"column(s) {bad} of cache '{plan.partition_map.cache}' are not numeric: the runtime "
                          f"feeds float32 features; pass --features with numeric columns only")
    return names, label_name, np.dtype(dtypes[label_name])


def label_classes(plan, label: str, label_dtype, conn=None) -> int | None:
    """Classes of an integer label: ``MAX(label) + 1`` over the plan's cache, one SQL aggregate.

    None for a label that is not an integer, a cache without an SQL table, or no connection; the model
    function then needs ``n_classes`` from its model arguments.
    """
    from ignite_tf.connection import IgniteConnectionConfig, sql

    conn = conn or IgniteConnectionConfig.from_env()
    if conn is None or np.dtype(label_dtype).kind not in "iu":
        return None
    cache = plan.partition_map.cache
    client = conn.client()
    try:
        tables = sql(client, "SELECT SCHEMA_NAME, TABLE_NAME FROM SYS.TABLES WHERE CACHE_NAME = ?", [cache])
        if not tables:
            return None
        schema, table = tables[0]
        columns = sql(client, "SELECT COLUMN_NAME FROM SYS.TABLE_COLUMNS WHERE SCHEMA_NAME = ? AND TABLE_NAME = ?",
                      [schema, table])
        column = next((r[0] for r in columns if r[0].lower() == label.lower()), None)
        if column is None:
            return None
        (low, high), = sql(client, f'SELECT MIN("{column}"), MAX("{column}") FROM "{schema}"."{table}"')
    finally:
        client.close()
    if high is None:
        return None
    if low < 0:
        raise ConfigError(f"label {label!r} of cache '{cache}' holds {low}: class labels must be 0 .. n-1")
    return int(high) + 1


# -- sync: the epochs of one fit, read from Ignite ----------------------------------------------------------
def sync_dataset(*, plan, batch_size: int, label: str, features: list[str] | None, epochs: int, steps: int,
                 start_epoch: int = 0, start_step: int = 0, shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
                 input_context=None,
                 conn=None):
    """This worker's batches for epochs ``start_epoch .. epochs-1``, exactly ``steps`` per epoch.

    Each epoch reads that epoch's assignment of the plan (reshuffled per epoch); a short shard is repeated
    and a long one cut so every worker takes the same number of steps. The first epoch skips
    ``start_step`` batches (resuming from a step-level backup).
    """
    import tensorflow as tf

    def each(ds, epoch):
        ds = ds.repeat().take(steps)
        if not start_step:
            return ds
        return ds.skip(tf.cast(tf.equal(epoch, start_epoch), tf.int64) * start_step)

    # One dataset for all the epochs, built once; an epoch's reader opens when the previous epoch ends.
    ds = itd.epochs_dataset(batch_size, range(start_epoch, epochs), each=each, label_column=label, features=features,
                            stack=True, plan=plan, conn=conn, shuffle_buffer=shuffle_buffer, prefetch=False,
                            input_context=input_context)
    return ds.prefetch(tf.data.AUTOTUNE)


# -- async: the workers' local feed ------------------------------------------------------------------------
def _fingerprint(plan, names, label_name, batch_size, epochs, shuffle_buffer) -> str:
    text = json.dumps([plan.to_dict(), names, label_name, batch_size, epochs, shuffle_buffer], sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def write_feed(epochs: int, *, batch_size: int, label: str, features: list[str] | None = None,
               worker: int | None = None, plan=None, conn=None, shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
               feed_dir: str | Path = FEED_DIR, log=print) -> dict:
    """Write this worker's shard for epochs ``0 .. epochs-1`` under ``feed_dir`` (default ``./feed``).

    Every file is written to a temporary name and renamed, and ``meta.json`` last, so a feed with a
    ``meta.json`` is complete. A complete feed with the same fingerprint is reused.

    :param epochs: epochs of training; one file per epoch (each epoch's plan assignment differs).
    :param batch_size: rows per record (the chief turns each record into one batch).
    :param worker: this worker's index (default: from TF_CONFIG).
    :returns: the feed's meta: rows and bytes per epoch, columns, seconds, ``reused``.
    """
    import tensorflow as tf

    plan = itd.load_plan(plan, conn=conn)
    index = itd.worker_index() if worker is None else int(worker)
    names, label_name, _ = columns(plan, label, features, conn)
    fingerprint = _fingerprint(plan, names, label_name, batch_size, epochs, shuffle_buffer)
    out = Path(feed_dir)
    meta_path = out / _META
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if meta.get("fingerprint") == fingerprint and meta.get("worker") == index and all(
                (out / Path(feed_file(e)).name).exists() for e in range(epochs)):
            log(f"feed: reusing {out} ({sum(meta['rows'])} rows, {epochs} epochs)")
            return {**meta, "reused": True}
        meta_path.unlink()
    out.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    rows, sizes = [], []
    for epoch in range(epochs):
        path = out / Path(feed_file(epoch)).name
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        n = 0
        with tf.io.TFRecordWriter(str(tmp)) as writer:
            for batch in itd.batches(epoch, batch_size=batch_size, worker=index, plan=plan, conn=conn,
                                     columns=[*names, label_name], shuffle_buffer=shuffle_buffer):
                block = np.empty((len(batch[label_name]), len(names) + 1), dtype=np.float32)
                for j, name in enumerate([*names, label_name]):
                    block[:, j] = filled(batch[name])
                writer.write(block.tobytes())
                n += len(block)
        tmp.replace(path)
        rows.append(n)
        sizes.append(path.stat().st_size)
        log(f"feed: worker {index} epoch {epoch}: {n} rows, {sizes[-1] / 2**20:.1f} MiB -> {path}")
    meta = {"fingerprint": fingerprint, "worker": index, "epochs": epochs, "features": names, "label": label_name,
            "batch_size": batch_size, "rows": rows, "bytes": sizes, "seconds": round(time.monotonic() - started, 3)}
    tmp = meta_path.with_name(f".{_META}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(meta))
    tmp.replace(meta_path)
    return {**meta, "reused": False}


def pending_request() -> dict | None:
    """The chief's last feed request in this worker's directory (``ignite_tf.data.parameter_server_dataset_fn``)."""
    try:
        return json.loads(Path(REQUEST).read_text())
    except (OSError, ValueError):  # none yet; the chief's write replaces the file whole
        return None


def answer(request: dict, *, worker: int, plan=None, conn=None, log=print) -> dict:
    """Write (or reuse) the feed ``request`` asks for, then ``ANSWER``: the chief waits for it. A failure is
    answered too (the chief raises it, naming this worker) instead of leaving the chief waiting."""
    try:
        meta = write_feed(int(request["epochs"]), batch_size=int(request["batch_size"]), label=request["label_column"],
                          features=request.get("features"), worker=worker, plan=plan, conn=conn,
                          shuffle_buffer=int(request.get("shuffle_buffer", DEFAULT_SHUFFLE_BUFFER)), log=log)
        reply = {"id": request.get("id"), "worker": worker, "rows": meta["rows"], "reused": meta["reused"]}
    except Exception as exc:  # noqa: BLE001 - reported to the chief, which fails the job with it
        log(f"feed: worker {worker} could not write the requested feed: {type(exc).__name__}: {exc}")
        reply = {"id": request.get("id"), "worker": worker, "error": f"{type(exc).__name__}: {exc}"}
    path = Path(ANSWER)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(reply))
    tmp.replace(path)
    return reply


def prepare_feed(worker: int, epochs: int, *, log=print, **flags) -> str | None:
    """An async worker's feed before its server starts: given ``epochs`` (the runtime's chief), written from the
    flags (``write_feed``'s); else (a user's chief) the request the chief made before this worker restarted,
    if any, answered so the chief's datasets find it again. Returns the id of the request answered."""
    if epochs > 0:
        write_feed(epochs, worker=worker, log=log, **flags)
        return None
    request = pending_request()
    if request is None:
        return None
    answer(request, worker=worker, log=log)
    return request.get("id")


def answer_requests(worker: int, *, answered: str | None = None, plan=None, conn=None, log=print,
                    poll_s: float = 0.2) -> None:
    """An async worker under a user's chief script: answer each new feed request of the chief, forever (the
    TF server answers the chief meanwhile, in its own threads). A request already answered before this process
    started (a restarted worker) is answered before its server starts (``serve``), which passes its ``answered``
    id."""
    while True:
        request = pending_request()
        if request is not None and request.get("id") != answered:
            answer(request, worker=worker, plan=plan, conn=conn, log=log)
            answered = request.get("id")
        time.sleep(poll_s)


def read_feed(feed_dir: str | Path, epoch: int) -> np.ndarray:
    """The rows of one epoch's feed file as a ``[rows, n_features + 1]`` float32 array (for checks)."""
    import tensorflow as tf

    path = Path(feed_dir) / Path(feed_file(epoch)).name
    blocks = [np.frombuffer(r.numpy(), dtype=np.float32) for r in tf.data.TFRecordDataset(str(path))]
    meta = json.loads((Path(feed_dir) / _META).read_text())
    width = len(meta["features"]) + 1
    return np.concatenate(blocks).reshape(-1, width) if blocks else np.empty((0, width), np.float32)


# -- resuming ---------------------------------------------------------------------------------------------
def resume_point(backup_dir: str | Path, steps_per_epoch: int, *, step_level: bool = False) -> tuple[int, int]:
    """``(epoch, step)`` where ``fit`` will resume from ``BackupAndRestore(backup_dir)``; (0, 0) if no backup.

    Mirrors tf_keras' own rule (worker_training_state.py) so the input pipeline can start at the same
    epoch before ``fit`` restores the model.
    """
    import tensorflow as tf

    latest = tf.train.latest_checkpoint(str(Path(backup_dir) / "chief"))
    if not latest:
        return 0, 0
    names = dict(tf.train.list_variables(latest))
    epoch_key = next((k for k in names if k.startswith("ckpt_saved_epoch")), None)
    batch_key = next((k for k in names if k.startswith("ckpt_saved_batch")), None)
    epoch = int(tf.train.load_variable(latest, epoch_key)) if epoch_key else -1
    batch = int(tf.train.load_variable(latest, batch_key)) if batch_key else -1
    if step_level:
        if batch < 0:
            return 0, 0
        return (epoch + 1, 0) if batch == steps_per_epoch - 1 else (epoch, batch + 1)
    return (epoch + 1, 0) if epoch >= 0 else (0, 0)
