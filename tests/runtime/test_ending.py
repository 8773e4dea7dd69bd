"""The end of a task (ignite_tf.runtime.ending): it exits with its code and its output, whatever TensorFlow
leaves running; TensorFlow's per-device datasets get autotuning off; the model is saved by the chief alone."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

HANG_GUARD_S = 120  # a task that does not end is a failure, however slow the machine: not a timing check


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=HANG_GUARD_S)


def test_exit_now_ends_despite_a_running_thread_and_keeps_the_output():
    # A non-daemon thread that never ends and an exit handler that blocks: sys.exit would wait for both.
    done = run_python("""
        import atexit, threading, time, sys
        from ignite_tf.runtime.ending import exit_now
        threading.Thread(target=time.sleep, args=(3600,)).start()
        atexit.register(time.sleep, 3600)
        print("model saved", end="")
        sys.stderr.write("last words")
        exit_now(0)
    """)
    assert done.returncode == 0
    assert done.stdout == "model saved" and done.stderr == "last words"


def test_exit_now_keeps_a_failure_code():
    done = run_python("""
        import threading, time
        from ignite_tf.runtime.ending import exit_now
        threading.Thread(target=time.sleep, args=(3600,)).start()
        print("failed")
        exit_now(3)
    """)
    assert done.returncode == 3 and done.stdout == "failed\n"


def test_runtime_main_exits_with_its_code():
    # A training task without an entry point: a configuration error, exit code 2, the message on stderr.
    done = subprocess.run([sys.executable, "-m", "ignite_tf.runtime", "--epochs", "1", "--label", "label"],
                          capture_output=True, text=True, timeout=HANG_GUARD_S)
    assert done.returncode == 2
    assert "error: --entry-point module:function is required" in done.stderr


def test_runtime_main_exits_with_the_retryable_status_when_ignite_is_unreachable(tmp_path):
    """Not the task's own code failing (status 1, which the default policy does not restart) but its
    infrastructure: ``UNAVAILABLE_EXIT_CODE``, which it restarts from the last backup."""
    import json
    import os
    import socket

    from ignite_tf.contract import UNAVAILABLE_EXIT_CODE

    with socket.socket() as probe:  # a port nothing listens on once closed
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    env = {**os.environ, "TF_CONFIG": json.dumps({"cluster": {"worker": ["127.0.0.1:1"]},
                                                  "task": {"type": "worker", "index": 0}}),
           "IGNITE_TF_ADDRESSES": f"127.0.0.1:{closed}", "IGNITE_TF_CACHE": "rows",
           "IGNITE_TF_RUN_DIR": str(tmp_path / "run")}
    done = subprocess.run([sys.executable, "-m", "ignite_tf.runtime", "--entry-point",
                           "ignite_tf.models:tabular_classifier", "--epochs", "1"], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, cwd=tmp_path, env=env)
    assert done.returncode == UNAVAILABLE_EXIT_CODE, done.stderr[-2000:]
    said = f"error: infrastructure unavailable: IgniteUnavailableError: no Ignite node reachable at 127.0.0.1:{closed}"
    assert said in done.stderr, done.stderr[-2000:]


def test_runtime_main_exits_with_the_data_status_on_a_row_without_a_label(ignite_conn, tmp_path):
    """A row whose label is NULL fails the read inside ``fit`` (TensorFlow carries the error): the task exits
    ``DATA_EXIT_CODE``, never restarted, its last line the error the supervisor puts in the cluster's reason."""
    import json
    import os
    import uuid

    from ignite_tf.contract import DATA_EXIT_CODE
    from tests.support.sql import sql

    table = f"nolabel_{uuid.uuid4().hex[:8]}"
    client = ignite_conn.client()
    try:
        sql(client, f'CREATE TABLE {table} (ID BIGINT PRIMARY KEY, F0 REAL, LABEL INT) '
                    f'WITH "template=ignite_tf_small,cache_name={table}"')
        sql(client, f"INSERT INTO {table} (ID, F0, LABEL) VALUES "
                    + ",".join(f"({k},{k / 2},{'NULL' if k == 7 else k % 2})" for k in range(64)))
        one_worker = {"cluster": {"worker": ["127.0.0.1:1"]}, "task": {"type": "worker", "index": 0}}
        env = {**os.environ, **ignite_conn.to_env(), "CUDA_VISIBLE_DEVICES": "-1",
               "TF_CONFIG": json.dumps(one_worker), "IGNITE_TF_CACHE": table,
               "IGNITE_TF_RUN_DIR": str(tmp_path / "run")}
        done = subprocess.run([sys.executable, "-m", "ignite_tf.runtime", "--entry-point",
                               "ignite_tf.models:tabular_classifier", "--epochs", "1", "--batch-size", "16"],
                              capture_output=True, text=True, timeout=HANG_GUARD_S * 3, cwd=tmp_path, env=env)
    finally:
        client.get_cache(table).destroy()
        client.close()
    assert done.returncode == DATA_EXIT_CODE, done.stderr[-3000:]
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: data: ") and "keys [7]" in last, last


def test_timing_marks_are_lines_bench_e2e_reads():
    done = run_python("""
        from ignite_tf.timeline import mark
        mark("fit_end")
        mark("hidden", show=False)
    """)
    from ignite_tf.timeline import marks

    assert done.stdout.count("\n") == 1 and list(marks(done.stdout)) == ["fit_end"]
    assert marks("timing: x at 1.5\nepoch 1/2\ntiming: x at 2.5\ntiming: y at 3") == {"x": 2.5, "y": 3.0}


def test_device_datasets_are_built_without_autotuning():
    import tensorflow as tf
    from tensorflow.python.data.ops import multi_device_iterator_ops as mdi

    from ignite_tf.runtime.ending import quiet_device_datasets

    original = mdi._create_device_dataset
    try:
        mdi._create_device_dataset = lambda *args, **kwargs: tf.data.Dataset.range(3)  # TF's, stood in
        assert quiet_device_datasets()
        assert quiet_device_datasets()  # applied once: not wrapped twice
        ds = mdi._create_device_dataset(None, None, 1, False)
        assert ds.options().autotune.enabled is False
        assert list(ds.as_numpy_iterator()) == [0, 1, 2]
    finally:
        mdi._create_device_dataset = original

    # With TF's own function: a strategy's distributed dataset still yields every element.
    assert quiet_device_datasets()
    try:
        strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
        dist = strategy.experimental_distribute_dataset(tf.data.Dataset.range(8).batch(2))
        assert [int(x.numpy().sum()) for x in dist] == [1, 5, 9, 13]
    finally:
        mdi._create_device_dataset = original


def test_save_once_outside_a_cluster_saves_the_model_itself(tmp_path):
    from ignite_tf.cluster.spec import Mode
    from ignite_tf.runtime.ending import save_once
    from ignite_tf.runtime.task import TaskInfo

    saved = []
    result = save_once("model", rebuild=lambda: pytest.fail("no copy needed"), save=lambda m: saved.append(m) or "dir",
                       info=TaskInfo(None, 0, Mode.SYNC))
    assert result == "dir" and saved == ["model"]


def test_lean_save_keeps_the_serving_signature_and_loads(tmp_path):
    import numpy as np
    import tensorflow as tf
    import tf_keras

    from ignite_tf.models import tabular_classifier
    from ignite_tf.runtime.ending import save_options

    model = tabular_classifier(n_features=4, n_classes=3)
    x = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
    assert save_options(model)["save_traces"] is False
    model.save(str(tmp_path / "m"), save_format="tf", **save_options(model))
    loaded = tf_keras.models.load_model(str(tmp_path / "m"), compile=False)
    np.testing.assert_allclose(loaded.predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6)
    serving = tf.saved_model.load(str(tmp_path / "m")).signatures["serving_default"]
    np.testing.assert_allclose(next(iter(serving(tf.constant(x)).values())).numpy(), model.predict(x, verbose=0),
                               rtol=1e-6)

    class Custom(tf_keras.layers.Layer):
        def call(self, inputs):
            return inputs * 2

    own = tf_keras.Sequential([tf_keras.Input((4,)), Custom()])
    assert save_options(own) == {}  # a class of its own: every trace kept, it loads without its code
