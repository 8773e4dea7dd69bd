"""A TCP forwarder a test can cut and restore: a real network outage between a client and a real service.

``cut()`` closes the listening socket and every forwarded connection, so the client sees what it sees when a node
or an API server goes away (connections reset, new ones refused); ``restore()`` listens again on the same port.
``freeze()`` holds every byte in both directions, connections open, as a server stopped with SIGSTOP would (a
client's call waits, for as long as its own timeout allows); ``thaw()`` lets them through again.
Nothing about the service is faked: bytes pass through unchanged while the link is up.
"""

from __future__ import annotations

import socket
import threading


class CuttableLink:
    """Forwards ``127.0.0.1:<port>`` to ``target`` (host, port) until cut; a context manager that closes all."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self._listener: socket.socket | None = None
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._flowing = threading.Event()
        self._flowing.set()
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        self.port = probe.getsockname()[1]
        probe.close()
        self.restore()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def restore(self) -> None:
        """Listen again (nothing to do when not cut)."""
        if self._listener is not None:
            return
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(16)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    def cut(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
            conns, self._conns = self._conns, set()
        if listener is not None:
            _close(listener)  # shutdown wakes the thread blocked in accept() (Linux); close alone would not
        for conn in conns:
            _close(conn)

    def close(self) -> None:
        self.thaw()
        self.cut()

    def __enter__(self) -> CuttableLink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # cut
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    _close(client)
                    _close(upstream)
                    return
                self._conns |= {client, upstream}
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                self._flowing.wait()
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                _close(s)
            with self._lock:
                self._conns -= {src, dst}


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
