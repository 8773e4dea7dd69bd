"""The async workers' local feed: its files, the dataset the chief traces over them, and how a chief asks for it.

Under ParameterServerStrategy the chief traces the ``dataset_fn`` once and every worker runs that graph, so a
Python generator reading Ignite cannot run on the workers. Each async worker instead writes its own shard, one
file per epoch, under ``FEED_DIR`` in its OWN working directory (``ignite_tf.runtime.feed.write_feed``), and the
graph names the files by RELATIVE paths, which each worker process resolves against its own directory: the
same graph reads a different shard on every worker.

A file holds one TFRecord record per block of ``batch_size`` rows: raw float32 bytes ``[rows, n_features + 1]``,
the label in the last column.

Who says what to write: the built-in runtime passes its flags to the workers' command lines. A user's chief
script cannot, so ``ask_workers`` sends the request through the cluster itself: a TF op placed on each worker
(``tf.io.write_file``, relative path) writes ``REQUEST`` into that worker's directory; the worker's serve loop
(``ignite_tf.runtime.feed.answer_requests``) writes the feed and then ``ANSWER``, which the chief reads back
the same way. Nothing but the TF servers' own channel is needed: no shared disk, no extra port.
"""

from __future__ import annotations

import hashlib
import json
import os
import time

import numpy as np

from ignite_tf import contract
from ignite_tf.errors import ConfigError

FEED_DIR = "feed"  # relative on purpose: resolved against each worker's own working directory
REQUEST = "feed-request.json"  # in the worker's directory: what the chief asks for
ANSWER = f"{FEED_DIR}/answer.json"  # the worker's answer to one request, written once its feed is complete
POLL_S = 0.2


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
            answer = _answer(tf, devices[w])
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


def _answer(tf, device: str) -> dict | None:
    """The worker's answer file, read by an op placed on that worker; None while it has none."""
    with tf.device(device):
        if not int(tf.size(tf.io.matching_files(ANSWER))):
            return None
        raw = tf.io.read_file(ANSWER)
    try:
        return json.loads(raw.numpy().decode())
    except ValueError:  # written by rename, so never partial; a foreign file is no answer
        return None
