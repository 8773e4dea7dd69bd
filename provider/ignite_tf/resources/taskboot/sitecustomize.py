"""Put first on the PYTHONPATH of every TensorFlow task by the supervisor (standard library only: the task's
Python may be any interpreter).

An uncaught exception in a task's main thread prints its traceback as usual and then ends the process at
once with status 1. Without this, TensorFlow's threads and exit handlers can keep a failed task alive
forever (its peers then wait in a collective and the supervisor sees nothing). Interpreter finalization
(atexit handlers, joins of non-daemon threads) is skipped for a failed task only.

SIGTERM ends the task within a second or two with status 143 (``ignite_tf.contract.handle_stop``; the runtime
installs a finer handler that writes a checkpoint first). Without it a task that is a pod's pid 1 ignores
SIGTERM (the kernel drops a signal left at its default disposition for a PID namespace's first process), and
TensorFlow's coordination service swallows it (it only records a preemption), so a deleted pod trained on
for its whole grace period. A disposition the task inherited as ignored stays ignored.

Another ``sitecustomize`` later on ``sys.path`` (a venv's or the distribution's) is still run.
"""

import os
import sys

_previous_hook = sys.excepthook


def _exit_on_uncaught(exc_type, exc, tb):
    try:
        _previous_hook(exc_type, exc, tb)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a closed stream must not keep the process alive
                pass
        os._exit(1)


sys.excepthook = _exit_on_uncaught


def _handle_stop():
    import signal

    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return
    try:
        from ignite_tf.contract import handle_stop
    except ImportError:  # an interpreter without ignite_tf: end at once, as STOPPED_EXIT_CODE says
        signal.signal(signal.SIGTERM, lambda *_: os._exit(128 + signal.SIGTERM))
        return
    handle_stop()


_handle_stop()


def _run_next_sitecustomize():
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)


_run_next_sitecustomize()
