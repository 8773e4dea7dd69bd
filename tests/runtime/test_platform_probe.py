"""The answer TensorFlow's preemption handler gets to "is this Google Cloud?", asked once from the task's start.

Real: a local HTTP server standing where the metadata server would (``GCE_METADATA_IP``, TensorFlow's own
variable for it), and the task's Python in its own process. Simulated: nothing (off Google Cloud the real
metadata server does not exist; the refused and the wrongly answered request are what a task elsewhere meets).
"""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading

import pytest

from ignite_tf.ports import free_port

ASK = ("from ignite_tf.runtime import stopping; stopping.probe_platform(); stopping.probe_platform(); "
       "print(stopping.on_google_cloud())")


class _Metadata(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        ok = self.path == "/computeMetadata/v1/instance/hostname" and self.headers.get("Metadata-Flavor") == "Google"
        self.send_response(200 if ok else 403)
        self.end_headers()
        self.wfile.write(b"vm.internal" if ok else b"")

    def log_message(self, *args):
        pass


@pytest.fixture
def metadata_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Metadata)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def _ask(address: str) -> bool:
    import os

    env = {**os.environ, "GCE_METADATA_IP": address}
    out = subprocess.run([sys.executable, "-c", ASK], env=env, capture_output=True, text=True, timeout=60, check=True)
    return out.stdout.split()[-1] == "True"


def test_a_metadata_server_that_answers_as_googles_does_is_google_cloud(metadata_server):
    assert _ask(metadata_server) is True


def test_no_metadata_server_or_a_wrong_answer_is_not_google_cloud(metadata_server):
    refused = f"127.0.0.1:{free_port()}"
    assert _ask(refused) is False
    assert _ask(f"{metadata_server}/elsewhere") is False  # a 403 from a server that is not the metadata one


def test_tensorflows_handler_takes_the_probes_answer(metadata_server, tmp_path):
    """Once a sync worker's backup callbacks are made, the preemption handler's platform (what decides its Google
    Cloud behaviour) is the probe's answer, asked at the task's start: GCE_CPU from a server that answered as
    Google's does, although the address the handler itself would ask by then refuses."""
    import json
    import os

    refused = f"127.0.0.1:{free_port()}"
    code = f"""
import os
from pathlib import Path
from ignite_tf.runtime import stopping
from ignite_tf.runtime.start import import_tf
from ignite_tf.runtime.task import task_info
stopping.probe_platform()
assert stopping.on_google_cloud()
os.environ["GCE_METADATA_IP"] = {refused!r}  # asked again now, TensorFlow's own request would be refused
tf = import_tf()
import tf_keras
from tensorflow.python.distribute.failure_handling import failure_handling_util
strat = tf.distribute.MultiWorkerMirroredStrategy()
stopping.backup_callbacks(tf_keras, strat, task_info("sync"), Path({str(tmp_path / "backup")!r}), "epoch")
print(failure_handling_util.detect_platform().name)
"""
    tf_config = {"cluster": {"worker": [f"127.0.0.1:{free_port()}"]}, "task": {"type": "worker", "index": 0}}
    env = {**os.environ, "GCE_METADATA_IP": metadata_server, "TF_CPP_MIN_LOG_LEVEL": "3", "TF_USE_LEGACY_KERAS": "1",
           "TF_CONFIG": json.dumps(tf_config)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "GCE_CPU", out.stdout[-2000:]


class _SlowMetadata(_Metadata):
    def do_GET(self):  # noqa: N802 - http.server's name
        import time

        time.sleep(1.0)
        super().do_GET()


def test_a_task_forked_while_the_server_asked_asks_again(tmp_path):
    """The fork server may start the probe and fork a task before the answer came: the thread asking is not in
    the forked task, which asks again and gets the answer (not the wait's end and a False)."""
    import os

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowMetadata)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    code = """
import os, sys
from ignite_tf.runtime import stopping
stopping.probe_platform()
pid = os.fork()
if pid == 0:
    print("child", stopping.on_google_cloud(), flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print("parent", stopping.on_google_cloud(), flush=True)
"""
    try:
        env = {**os.environ, "GCE_METADATA_IP": f"127.0.0.1:{server.server_address[1]}"}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    finally:
        server.shutdown()
        server.server_close()
    assert out.returncode == 0, out.stderr[-2000:]
    assert sorted(out.stdout.split("\n")[:2]) == ["child True", "parent True"], out.stdout + out.stderr
