"""The pods' output, copied by their supervisor into the run's log files while they run.

Each started pod's log is streamed (``follow``) into its task's log file, ``<run>/logs/<task>.log`` (the chief's is
what ``attach`` and the Airflow task log show), so logs outlive the pods. ``copied`` counts the bytes of each
pod's log written; a pod supervisor records it in the cluster's state (``launcher.followed``), so that the
supervisor replacing it goes on from there (``PodBackend.adopt``). The streams of stopped pods get one bound
for all to deliver their last lines, then are closed (``end``); a supervisor that hands its pods over closes
their streams at once (``hand_over``): the pods run on, and their streams never end by themselves.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from ignite_tf.cluster.k8s import objects

FOLLOWERS_JOIN_S = 5.0
"""How long a supervisor waits, in all, for the log streams of the pods it stopped (or released) to end; a stream
still open then is closed (a pod on a simulated node serves one that never ends)."""
CLOSED_JOIN_S = 1.0  # for the followers of the closed streams, in all


class PodLogs:
    """The log followers of one cluster's pods in ``namespace``; ``heartbeat()`` is called while they are
    waited for (a supervisor that records nothing for a while is taken for lost)."""

    def __init__(self, namespace: str, heartbeat=lambda: None):
        self.namespace, self.heartbeat = namespace, heartbeat
        self.copied: dict[str, int] = {}  # pod name -> bytes of its log copied
        self.followers: dict[str, threading.Thread] = {}
        self.streams: dict[str, Any] = {}  # pod name -> its open log stream (urllib3 response)
        self._following = threading.Event()
        self._following.set()

    def follow(self, core, name: str, path: str) -> None:
        """Copy the pod ``name``'s log into the file ``path`` from where the last supervisor left it
        (``copied``), in a thread, once per pod."""
        if name in self.followers:
            return
        skip = self.copied.setdefault(name, 0)

        def copy():
            nonlocal skip
            try:
                resp = core.read_namespaced_pod_log(name, self.namespace, container=objects.CONTAINER,
                                                    follow=True, _preload_content=False)
                self.streams[name] = resp
                with open(path, "ab") as f:
                    for chunk in resp.stream(1024):
                        if not self._following.is_set():
                            return  # handed over: the successor copies from ``copied`` on
                        if skip:
                            chunk, skip = chunk[skip:], max(0, skip - len(chunk))
                            if not chunk:
                                continue
                        f.write(chunk)
                        f.flush()
                        self.copied[name] = self.copied.get(name, 0) + len(chunk)
            except Exception as exc:  # noqa: BLE001 - a node without logs (simulated) must not stop us
                if name in self.streams:  # not closed by ``end``
                    sys.stdout.write(f"[ignite-tf] no log from pod {name}: {str(exc)[:200]}\n")
            finally:
                self.streams.pop(name, None)

        thread = threading.Thread(target=copy, name=f"log-{name}", daemon=True)
        self.followers[name] = thread
        thread.start()

    def end(self, names: list[str] | None = None, wait_s: float = FOLLOWERS_JOIN_S) -> None:
        """Let the log streams of the pods ``names`` (default all) copy their last lines, within ``wait_s`` for
        all, then close those still open and wait for their followers, within ``CLOSED_JOIN_S`` for all. Joined
        one by one (5 s each), 64 streams that never end (simulated nodes) kept a stopping supervisor from its
        heartbeat for minutes, and it was taken for lost."""
        deadline = time.monotonic() + wait_s
        followers = [(n, self.followers[n]) for n in (list(self.followers) if names is None else names)
                     if n in self.followers]
        for _, t in followers:
            t.join(timeout=max(0.0, deadline - time.monotonic()))
        self.heartbeat()
        closed = []
        for name, t in followers:
            resp = self.streams.pop(name, None)
            if t.is_alive() and resp is not None:
                resp.shutdown()  # unblocks the follower's read (urllib3 >= 2.3)
                closed.append(t)
        deadline = time.monotonic() + CLOSED_JOIN_S
        for t in closed:
            t.join(timeout=max(0.0, deadline - time.monotonic()))

    def hand_over(self) -> None:
        """Stop copying: every stream closed at once (a chunk being copied then is counted in ``copied``)."""
        self._following.clear()
        self.end(wait_s=0.0)

    def followed(self, live) -> dict[str, int]:
        """``copied`` for the pods named in ``live`` (those still there): what a pod supervisor records."""
        return {n: c for n, c in self.copied.items() if n in live}
