"""A fork server for local tasks: TensorFlow imported once per cluster, each task forked from it.

Importing TensorFlow is most of a task's start (2.5 s of CPU here), and every local task of a cluster paid it
at the same moment on the same cores: three workers on two cores reached their first step 2.2x later than one
import takes. The supervisor instead starts one process, ``python -m ignite_tf.cluster.forkserver``, that
imports TensorFlow, tf_keras and the runtime (``PRELOAD``) and then forks a child for each runtime task it is
asked for; the child takes the task's environment, working directory and log, and runs
``python -m ignite_tf.runtime ...`` in-process, its imports already done and its memory pages shared.

Forking is safe only before TensorFlow creates its runtime (thread pools, devices, gRPC): the server never
does more than import, and it is used only where no GPU can be initialised at import (no ``/dev/nvidia*`` or
``/dev/kfd`` on the host, or ``CUDA_VISIBLE_DEVICES`` set to ``-1`` or empty), since a CUDA driver set up
before a fork is unusable in the child. ``IGNITE_TF_FORKSERVER=off`` starts every task as its own process, as
do user commands (they may configure TensorFlow before importing it) and any task when the server failed to
start (the supervisor says so in the chief's output).

Lifetimes: the server runs in its own process group and gets SIGKILL when the supervisor dies
(``PR_SET_PDEATHSIG``); each child, in its own process group too, gets SIGKILL when the server dies. The
server reports each child's pid and exit status to the supervisor over a pipe; a child whose status was not
reported (the server died) counts as killed.
"""

from __future__ import annotations

import functools
import gc
import glob
import importlib
import json
import os
import queue
import select
import signal
import subprocess
import sys
import threading
import time
import traceback

from ignite_tf.cluster.commands import RUNTIME_MODULE
from ignite_tf.cluster.procs import own_group_dying_with, pid_alive
from ignite_tf.cluster.spec import ClusterSpec
from ignite_tf.contract import PER_TASK_ENV, exit_now, handle_stop
from ignite_tf.errors import ConfigError

ENV_FORKSERVER = "IGNITE_TF_FORKSERVER"
FORKSERVER_MODES = ("auto", "off")
# Loaded by the server in this order ("module:function" is called: TensorFlow and tf_keras imported the way
# the runtime imports them); the preload hook starts in a thread once the light ones are in, so that it never
# imports beside TensorFlow.
LIGHT = ("ignite_tf.runtime.train", "ignite_tf.runtime.inputs", "ignite_tf.data.feed", "ignite_tf.reader.partition",
         "ignite_tf.data")
HEAVY = ("ignite_tf.runtime.start:import_tf", "ignite_tf.models")
PRELOAD = LIGHT + HEAVY
# What the server calls beside its import, with the arguments of the module it will fork: the runtime reads
# the cluster's columns and label classes there once for all its tasks.
HOOKS = {RUNTIME_MODULE: "ignite_tf.runtime.train:preload"}
HOOK_TIMEOUT_S = 60.0
GPU_DEVICES = ("/dev/nvidia[0-9]*", "/dev/kfd")


def settings_for(spec: ClusterSpec, task_env, command_for) -> tuple[dict[str, str], tuple | None] | None:
    """``(env, hook)`` of the fork server for ``spec``'s cluster, or None when none of its tasks would be
    forked (``wanted``, ``module_of``). ``env`` is a task's environment (``task_env(task)``) but for the
    variables of its own (``PER_TASK_ENV``); the hook is that of the module the chief runs, else the first
    forked task's, called with its arguments."""
    env = {k: v for k, v in task_env(spec.chief).items() if k not in PER_TASK_ENV}
    targets = [module_of(command_for(spec, t)) for t in [spec.chief, *spec.tasks]]
    if not wanted(env) or not any(targets):
        return None
    module, args = next(t for t in targets if t)
    return env, ((HOOKS[module], args) if module in HOOKS else None)


def wanted(env: dict[str, str]) -> bool:
    """Whether tasks with environment ``env`` are forked: ``IGNITE_TF_FORKSERVER`` (auto by default, or off)
    and no GPU that TensorFlow's import could initialise."""
    how = env.get(ENV_FORKSERVER, "auto").strip().lower() or "auto"
    if how not in FORKSERVER_MODES:
        raise ConfigError(f"{ENV_FORKSERVER}={how!r}: use one of {', '.join(FORKSERVER_MODES)}")
    if how == "off":
        return False
    cpu_only = env.get("CUDA_VISIBLE_DEVICES", "unset").strip() in ("", "-1")
    return cpu_only or not any(glob.glob(pattern) for pattern in GPU_DEVICES)


def module_of(argv: list[str], python: str | None = sys.executable) -> tuple[str, list[str]] | None:
    """``(module, args)`` of ``[python, -m, module, *args]``, the only commands forked; else None. ``python``:
    the interpreter ``argv[0]`` must be (default this one); None: any ``python*`` by its file name (a pod's, whose
    command names the image's Python)."""
    if len(argv) < 3 or argv[1] != "-m":
        return None
    runs = argv[0] == python if python is not None else argv[0].rpartition("/")[2].startswith("python")
    return (argv[2], list(argv[3:])) if runs else None


class ForkedTask:
    """A forked task, with the part of ``subprocess.Popen``'s interface the supervisor uses."""

    def __init__(self, server: ForkServer, pid: int):
        self.server, self.pid, self.returncode = server, pid, None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.server.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"task {self.pid}", timeout)
            time.sleep(0.02)
        return self.returncode


class ForkServer:
    """The supervisor's end: start the server, fork tasks from it, learn how they ended, close it.

    :param env: the server's environment, what every task's environment has in common.
    :param cwd: its working directory (the cluster's run folder: its command line names it, so ``ps`` shows
        whose server and tasks these are; a forked task keeps that command line, and is named after its task).
    :param log: the file (open, binary) its own output goes to.
    :param modules: what it imports before it forks (``PRELOAD``); ``"module:function"`` is imported and called.
    :param hook: ``("module:function", args)`` it calls in a thread beside its imports, before it says it is
        ready; what the function keeps in its module, the forked tasks inherit. A hook that fails is only
        reported in the server's output; one still running after ``HOOK_TIMEOUT_S`` ends the server.
    """

    def __init__(self, env: dict[str, str], cwd: str, log, modules: tuple[str, ...] = PRELOAD,
                 hook: tuple[str, list[str]] | None = None):
        self.settings = (env, hook)  # as settings_for gives them
        req_r, self._requests = os.pipe()
        self._replies, rep_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", __name__, cwd, str(req_r), str(rep_w),
             json.dumps({"modules": list(modules), "hook": hook})], env=env, cwd=cwd,
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, pass_fds=(req_r, rep_w),
            preexec_fn=functools.partial(own_group_dying_with, os.getpid()),
        )
        os.close(req_r)
        os.close(rep_w)
        self._ready = threading.Event()
        self._pids: queue.Queue = queue.Queue()
        self._exits: dict[int, int] = {}
        self._gone = False
        threading.Thread(target=self._read, name="forkserver-replies", daemon=True).start()

    def _read(self) -> None:
        with os.fdopen(self._replies, "rb") as replies:
            for line in replies:
                reply = json.loads(line)
                if "ready" in reply:
                    self._ready.set()
                elif "pid" in reply:
                    self._pids.put(reply)
                elif "exit" in reply:
                    self._exits[reply["exit"]] = reply["code"]
        self._gone = True
        self._pids.put({"error": f"the fork server ended (status {self.proc.wait()})"})

    def ready(self, timeout: float) -> bool:
        """Whether the server has its imports done, waiting up to ``timeout`` s (False at once if it ended)."""
        return self._ready.wait(timeout) and not self._gone

    @property
    def gone(self) -> bool:
        return self._gone

    def start(self, name: str, module: str, args: list[str], env: dict[str, str], cwd: str, log: str) -> ForkedTask:
        """Fork task ``name``: ``python -m module *args`` with ``env`` in ``cwd``, its output appended to ``log``."""
        request = {"name": name, "module": module, "args": args, "env": env, "cwd": cwd, "log": log}
        os.write(self._requests, json.dumps(request).encode() + b"\n")
        reply = self._pids.get(timeout=30)
        if "error" in reply:
            raise OSError(f"could not fork {module}: {reply['error']}")
        return ForkedTask(self, reply["pid"])

    def exit_code(self, pid: int) -> int | None:
        """``pid``'s exit status (negative: a signal); None while it runs. Without the server, a child that
        is gone was killed with it."""
        if pid in self._exits:
            return self._exits[pid]
        if self._gone and not pid_alive(pid):
            return -signal.SIGKILL
        return None

    def close(self, timeout: float = 5.0) -> None:
        """End the server (its children, if any are left, die with it)."""
        try:
            os.close(self._requests)
        except OSError:
            pass
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- the server's side -----------------------------------------------------------------------------------------
def serve(requests: int, replies: int, modules: list[str], hook: tuple[str, list[str]] | None = None) -> int:
    """Import ``modules`` (calling ``hook`` beside the heavy ones), then fork a task for each request line read
    from fd ``requests``; pids and exit statuses go to fd ``replies``. Ends when the supervisor closes
    ``requests``."""
    gc.disable()  # its passes over the imports' objects cost 15% of the import; the server makes no garbage
    light = [m for m in modules if m not in HEAVY]
    for name in light:
        load(name)
    helper = _start_hook(*hook) if hook else None
    for name in modules:
        if name not in light:
            load(name)
    if helper is not None:
        helper.join(HOOK_TIMEOUT_S)
        if helper.is_alive():  # never fork beside a running thread
            print(f"fork server: {hook[0]} still running after {HOOK_TIMEOUT_S:.0f}s", flush=True)
            return 1
    gc.freeze()  # and no child's collection walks (and so copies) the pages of what was imported
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    signal.set_wakeup_fd(wake_w)
    _reply(replies, {"ready": os.getpid()})
    pending, server = b"", os.getpid()  # the children's parent, taken before any fork
    while True:
        try:
            readable, _, _ = select.select([requests, wake_r], [], [])
        except InterruptedError:
            continue
        if wake_r in readable:
            os.read(wake_r, 4096)
            _reap(replies)
        if requests in readable:
            data = os.read(requests, 65536)
            if not data:
                return 0  # the supervisor closed its end: nothing more to fork
            pending += data
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _become_task(json.loads(line), server, closing=(requests, replies, wake_r, wake_w))
                _reply(replies, {"pid": pid})


def load(name: str) -> None:
    """Import ``name``; ``"module:function"`` is imported and the function called (what a server preloads)."""
    module, _, call = name.partition(":")
    loaded = importlib.import_module(module)
    if call:
        getattr(loaded, call)()


def _name_process(name: str) -> None:
    import ctypes

    PR_SET_NAME = 15
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)


def call_hook(call: str, args: list[str]) -> None:
    """Call a module's hook (``HOOKS``: ``"module:function"``) with the arguments of the task that runs it; a
    warm standby pod calls it too (``ignite_tf.cluster.k8s.standby``)."""
    module, _, name = call.partition(":")
    getattr(importlib.import_module(module), name)(args)


def _start_hook(call: str, args: list[str]) -> threading.Thread:
    def run():
        try:
            call_hook(call, args)
        except BaseException as exc:  # noqa: BLE001 - each task meets the same failure and reports it
            print(f"fork server: {call} failed ({type(exc).__name__}: {exc}); each task does it itself",
                  flush=True)

    helper = threading.Thread(target=run, name="forkserver-hook", daemon=True)
    helper.start()
    return helper


def _reap(replies: int) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _reply(replies, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _reply(fd: int, message: dict) -> None:
    os.write(fd, json.dumps(message).encode() + b"\n")


def _become_task(request: dict, server: int, closing: tuple[int, ...]) -> None:
    """In the child: become the task and never return to the server's loop."""
    code = 1
    try:
        own_group_dying_with(server)
        signal.set_wakeup_fd(-1)
        gc.enable()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for fd in closing:
            os.close(fd)
        handle_stop()  # SIGTERM ends the task: its watcher thread did not survive the fork
        _name_process(f"tf {request['name']}")
        os.chdir(request["cwd"])
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.close(log)
        os.close(null)
        os.environ.clear()
        os.environ.update(request["env"])
        sys.path[0] = os.getcwd()  # as ``python -m`` started here would have it
        sys.argv = [request["module"], *request["args"]]
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()  # the global generator is not reseeded by a fork
        import runpy

        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - a task's failure ends the task, never the server
        traceback.print_exc()
    finally:
        exit_now(code)  # its output flushed, without Python's or TensorFlow's exit work, as the runtime ends


if __name__ == "__main__":
    _config = json.loads(sys.argv[4])  # argv[1]: the run folder, for ps
    sys.exit(serve(int(sys.argv[2]), int(sys.argv[3]), _config["modules"], _config["hook"]))
