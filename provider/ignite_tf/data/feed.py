"""The async workers' local feed, whole: its files, how a worker writes them, the dataset the chief traces over
them, and how a chief script asks the workers for them (the request and the answer).

Under ParameterServerStrategy the chief traces the ``dataset_fn`` once and every worker runs that graph, so a
Python generator reading Ignite cannot run on the workers. Each async worker instead writes its own shard, one
file per epoch, under ``FEED_DIR`` in its OWN working directory (``write_feed``), and the graph names the files
by RELATIVE paths, which each worker process resolves against its own directory: the same graph reads a
different shard on every worker.

A file holds one TFRecord record per block of ``batch_size`` rows: raw float32 bytes ``[rows, n_features + 1]``,
the label in the last column. Every file is written to a temporary name and renamed, and ``meta.json`` last, so
a feed with a ``meta.json`` is complete; a restarted worker reuses a complete feed written for the same plan,
columns, batch size and epochs. Disk per worker: ``epochs x shard rows x (n_features + 1) x 4`` bytes (10
epochs of a 1M-row shard with 16 features: 680 MB), in the task's directory of the run.

Who says what to write: the built-in runtime passes its flags to the workers' command lines (``prepare_feed``).
A user's chief script cannot, so ``ask_workers`` sends the request through the cluster itself: a TF op placed
on each worker (``tf.io.write_file``, relative path) writes ``REQUEST`` into that worker's directory; the
worker's serve loop (``answer_requests``) writes the feed and then ``ANSWER``, which the chief reads back the
same way. Nothing but the TF servers' own channel is needed: no shared disk, no extra port.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np

from ignite_tf import contract
from ignite_tf.data.plan import load_plan, worker_index
from ignite_tf.data.rows import batches, cache_columns
from ignite_tf.defaults import DEFAULT_SHUFFLE_BUFFER
from ignite_tf.errors import ConfigError
from ignite_tf.reader.blocks import filled

FEED_DIR = "feed"  # relative on purpose: resolved against each worker's own working directory
REQUEST = "feed-request.json"  # in the worker's directory: what the chief asks for
ANSWER = f"{FEED_DIR}/answer.json"  # the worker's answer to one request, written once its feed is complete
META = "meta.json"  # in the feed's folder, written last: the feed is complete
POLL_S = 0.2


def feed_columns(plan, label: str | None, features: list[str] | None, conn=None) -> tuple[list[str], str, np.dtype]:
    """(feature names, label name, label dtype) of the plan's cache for a feed: numeric columns only (a feed
    holds float32 rows)."""
    if not label:
        raise ConfigError("no label column: pass label_column=... (--label-column), the column the model predicts")
    names, label_name, dtypes, _ = cache_columns(plan, conn, label, features)
    bad = [n for n in [*names, label_name] if np.dtype(dtypes[n]).kind not in "fiub"]
    if bad:
        raise ConfigError(f"column(s) {bad} of cache '{plan.partition_map.cache}' are not numeric: training reads "
                          f"them as float32; pass the features (features=[...], --features) with numeric columns only")
    return names, label_name, np.dtype(dtypes[label_name])


def feed_file(epoch: int, feed_dir: str = FEED_DIR) -> str:
    return f"{feed_dir}/epoch-{int(epoch):05d}.tfrecord"


def feed_dataset_fn(*, n_features: int, label_dtype, epochs: int, start_epoch: int = 0,
                    feed_dir: str = FEED_DIR):
    """The chief's ``dataset_fn`` over the workers' feeds: ``(features [b, n], label [b])`` batches of epochs
    ``start_epoch .. epochs-1`` in order, repeated.

    ``feed_dir`` must stay relative: the traced graph runs in each worker process, whose working
    directory holds that worker's own feed.
    """
    import tensorflow as tf

    if os.path.isabs(str(feed_dir)):
        raise ConfigError(f"feed_dir {feed_dir!r} must be relative: each worker resolves it in its own directory")
    files = [feed_file(e, str(feed_dir)) for e in range(start_epoch, epochs)]
    label_tf = tf.as_dtype(np.dtype(label_dtype))

    def decode(record):
        block = tf.reshape(tf.io.decode_raw(record, tf.float32), [-1, n_features + 1])
        return block[:, :n_features], tf.cast(block[:, n_features], label_tf)

    def dataset_fn(input_context=None):
        ds = tf.data.TFRecordDataset(files).map(decode, num_parallel_calls=tf.data.AUTOTUNE)
        # Async workers run at their own pace: a fast worker wraps around instead of running dry.
        return ds.repeat().prefetch(tf.data.AUTOTUNE)

    return dataset_fn


# -- a worker's side: writing its feed, answering the chief ------------------------------------------------
def feed_fingerprint(plan, names, label_name, batch_size, epochs, shuffle_buffer) -> str:
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

    plan = load_plan(plan, conn=conn)
    index = worker_index() if worker is None else int(worker)
    names, label_name, _ = feed_columns(plan, label, features, conn)
    fingerprint = feed_fingerprint(plan, names, label_name, batch_size, epochs, shuffle_buffer)
    out = Path(feed_dir)
    meta_path = out / META
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
            for batch in batches(epoch, batch_size=batch_size, worker=index, plan=plan, conn=conn,
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
    tmp = meta_path.with_name(f".{META}.{os.getpid()}.tmp")
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
    meta = json.loads((Path(feed_dir) / META).read_text())
    width = len(meta["features"]) + 1
    return np.concatenate(blocks).reshape(-1, width) if blocks else np.empty((0, width), np.float32)


# -- the chief's side: asking for the feeds ----------------------------------------------------------------
def request_text(request: dict) -> str:
    """``request`` (write_feed's settings) as the JSON a worker reads, with an ``id`` naming this exact request."""
    body = json.dumps(request, sort_keys=True)
    return json.dumps({**request, "id": hashlib.sha256(body.encode()).hexdigest()[:16]}, sort_keys=True)


def ask_workers(request: dict, workers: int, *, timeout_s: float) -> list[dict]:
    """Ask every worker of the connected ParameterServerStrategy cluster to write its feed; return their answers
    (worker order) once all are complete. Call it on the chief after making the strategy.

    :raises ConfigError: no cluster connected (the strategy not made yet), a worker failed to write its feed (its
        error is named), or ``timeout_s`` passed with some worker's feed unfinished.
    """
    import tensorflow as tf

    text = request_text(request)
    wanted = json.loads(text)["id"]
    devices = [f"/job:worker/replica:0/task:{w}/device:CPU:0" for w in range(workers)]
    for w, device in enumerate(devices):
        try:
            with tf.device(device):
                tf.io.write_file(REQUEST, text)
        except (tf.errors.OpError, ValueError, RuntimeError) as exc:
            raise ConfigError(f"could not ask worker {w} for its feed ({type(exc).__name__}: {exc}): make the "
                              f"ParameterServerStrategy before asking for its dataset function") from exc
    answers: dict[int, dict] = {}
    deadline = time.monotonic() + timeout_s
    while len(answers) < workers:
        for w in sorted(set(range(workers)) - set(answers)):
            answer = read_answer(tf, devices[w])
            if answer is None or answer.get("id") != wanted:
                continue
            if answer.get("error"):
                raise ConfigError(f"worker {w} could not write its feed: {answer['error']}")
            answers[w] = answer
        contract.report(f"waiting for the workers' feeds ({len(answers)}/{workers} written)")
        if len(answers) < workers:
            if time.monotonic() > deadline:
                missing = sorted(set(range(workers)) - set(answers))
                raise ConfigError(f"worker(s) {missing} wrote no feed within {timeout_s:.0f}s: see their logs; a "
                                  f"large shard needs a larger timeout_s")
            time.sleep(POLL_S)
    return [answers[w] for w in range(workers)]


def read_answer(tf, device: str) -> dict | None:
    """The worker's answer file, read by an op placed on that worker; None while it has none."""
    with tf.device(device):
        if not int(tf.size(tf.io.matching_files(ANSWER))):
            return None
        raw = tf.io.read_file(ANSWER)
    try:
        return json.loads(raw.numpy().decode())
    except ValueError:  # written by rename, so never partial; a foreign file is no answer
        return None

