"""A reader started before anyone asks for it: see ``ignite_tf.data.read_ahead``.

It reads in a thread of this process, or in a child Python (``python -m ignite_tf.reader.ahead FD``) that
streams what it reads back through a pipe: the child decodes on another core without this process's GIL,
which a TensorFlow import holds for seconds. The child gets ``(target, args)`` pickled on its stdin, calls
the ``"module:function"`` target, which returns ``(columns, block iterator)``, and sends ``("columns", ...)``,
one ``("block", ...)`` per block and ``("end", None)``, or ``("error", exception)``, pickled, to the pipe.
It ends after the last block, or at its next send once this process has closed the pipe or died.
"""

from __future__ import annotations

import importlib
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Iterator

from ignite_tf.errors import IgniteTFError


class HeadStart:
    """One read-ahead: its thread, the cache's columns, the first block and the rest of the block stream.

    ``start(key, work)`` runs ``work(head)`` in a thread, which fills ``columns``, sets ``ready``, then fills
    ``first`` and ``rest``; ``start_process(key, target, args)`` has a child process do the reading.
    ``take(key)`` hands the head start over once its columns are known; ``blocks()`` then waits for the first
    block, so a dataset can be built (and its training step traced) while the first block is still read.
    """

    _pending: dict[tuple, HeadStart] = {}
    _lock = threading.Lock()

    def __init__(self, keep: tuple):
        self.keep = keep  # the plan and conn the key names by id: alive as long as this head start
        self.columns, self.first, self.rest, self.error = None, None, None, None
        self.thread: threading.Thread | None = None
        self.proc: subprocess.Popen | None = None
        self.ready = threading.Event()  # the columns are known, or the read failed

    @classmethod
    def start(cls, key: tuple, work, keep: tuple) -> None:
        head = cls(keep)

        def run():
            try:
                work(head)
            except Exception as exc:  # noqa: BLE001 - the dataset call reads again and raises it there
                head.error = exc
            finally:
                head.ready.set()

        head.thread = threading.Thread(target=run, name="ignite-tf-read-ahead", daemon=True)
        with cls._lock:
            old = cls._pending.pop(key, None)
            cls._pending[key] = head
        if old is not None:
            old.close()
        head.thread.start()

    @classmethod
    def start_process(cls, key: tuple, target: str, args: tuple, keep: tuple) -> None:
        """Read in a child process: ``target`` (``"module:function"``, called there with ``args``) returns
        ``(columns, block iterator)``; the thread here only waits for the columns and the first block."""
        cls.start(key, lambda head: head._from_child(target, args), keep)

    @classmethod
    def take(cls, key: tuple) -> HeadStart | None:
        """The head start for ``key`` once its columns are known; None if there is none or it failed."""
        with cls._lock:
            head = cls._pending.pop(key, None)
        if head is None:
            return None
        head.ready.wait()
        if head.error is not None:
            head.close()
            return None
        return head

    @classmethod
    def drop_all(cls) -> None:
        with cls._lock:
            heads, cls._pending = list(cls._pending.values()), {}
        for head in heads:
            head.close()

    def blocks(self) -> Iterator[dict] | None:
        """The blocks read ahead, first block first, once it is read; None if reading it failed (read again)."""
        self.thread.join()
        if self.error is not None:
            self.close()
            return None
        return self._stream()

    def _stream(self) -> Iterator[dict]:
        if self.first is not None:
            yield self.first
            self.first = None
            yield from self.rest

    def close(self) -> None:
        self.thread.join()
        if self.rest is not None:
            self.rest.close()  # the reader's connections
        self._end_child()

    # -- the child process ---------------------------------------------------------------------------------
    def _from_child(self, target: str, args: tuple) -> None:
        read_fd, write_fd = os.pipe()
        try:
            self.proc = subprocess.Popen([sys.executable, "-m", __name__, str(write_fd)], stdin=subprocess.PIPE,
                                         pass_fds=(write_fd,))
        finally:
            os.close(write_fd)
        pipe = os.fdopen(read_fd, "rb")
        try:
            with self.proc.stdin as request:
                pickle.dump((target, args), request, protocol=pickle.HIGHEST_PROTOCOL)
            kind, self.columns = _receive(pipe)
            if kind != "columns":
                raise IgniteTFError(f"the read-ahead process sent {kind!r} before the columns")
            self.ready.set()
            kind, self.first = _receive(pipe)
        except BaseException:
            pipe.close()
            self._end_child()
            raise
        self.rest = self._child_blocks(pipe) if kind == "block" else iter(())
        if kind != "block":
            pipe.close()
            self._end_child()

    def _child_blocks(self, pipe) -> Iterator[dict]:
        try:
            while True:
                kind, value = _receive(pipe)
                if kind == "end":
                    return
                yield value
        finally:
            pipe.close()
            self._end_child()

    def _end_child(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _receive(pipe) -> tuple[str, object]:
    try:
        kind, value = pickle.load(pipe)
    except (EOFError, pickle.UnpicklingError):  # no message, or one cut short: the child died while writing
        raise IgniteTFError("the read-ahead process ended before its last block (killed? its output is in "
                            "this task's log)") from None
    if kind == "error":
        raise value
    return kind, value


def _send(out, message: tuple) -> None:
    pickle.dump(message, out, protocol=pickle.HIGHEST_PROTOCOL)
    out.flush()


def _serve(fd: int) -> int:
    """The child: read what the request names and send it down the pipe ``fd``."""
    out = os.fdopen(fd, "wb")
    parent = os.getppid()
    try:
        target, args = pickle.load(sys.stdin.buffer)
        try:
            module, _, name = target.partition(":")
            columns, blocks = getattr(importlib.import_module(module), name)(*args)
            _send(out, ("columns", columns))
            for block in blocks:
                if os.getppid() != parent:  # the task is gone
                    return 0
                _send(out, ("block", block))
            _send(out, ("end", None))
        except (BrokenPipeError, KeyboardInterrupt):
            raise
        except Exception as exc:  # noqa: BLE001 - sent to the task, which raises it
            try:
                pickle.dumps(exc)
            except Exception:  # noqa: BLE001 - an exception that does not pickle goes as its text
                exc = IgniteTFError(f"{type(exc).__name__}: {exc}")
            _send(out, ("error", exc))
    except BrokenPipeError:  # the task closed its end or died: nothing more to read for
        return 0
    finally:
        try:
            out.close()
        except BrokenPipeError:
            pass
    return 0


if __name__ == "__main__":
    os._exit(_serve(int(sys.argv[1])))
