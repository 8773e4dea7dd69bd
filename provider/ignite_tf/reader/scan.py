"""Several requests in flight on one node connection: the reader's pipelined scans.

A scan page costs the node some work and the reader some decoding; sent one after the other they wait for
each other. The reader keeps the next request on the wire while it decodes (the next page of the partition
being read, the first pages of the partitions after it), so both sides work at once and a node never idles
between two partitions.

The thin-client protocol allows this: every response carries its request's id. A node may answer requests
of one connection out of order (it serves them from a thread pool), so a response for another request is
kept until its reader asks for it. pyignite's own ``Connection.recv`` may read past the end of a short packet
into the next one, so packets are read here, exactly: the 4-byte length, then the rest.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Callable, Iterator

from pyignite.exceptions import ReconnectError

from ignite_tf.reader.binary import I32
from ignite_tf.typecodes import NULL, STRING

OP_RESOURCE_CLOSE, OP_QUERY_SCAN, OP_QUERY_SCAN_CURSOR_GET_PAGE = 0, 2000, 2001
FAILURES = (OSError, EOFError, ReconnectError)
_REQUEST_ID = struct.Struct("<iq")  # a response starts with its length and its request's id
_SCAN = struct.Struct("<iHqibBiiB")  # len, op, query id, cache id, flags, filter (null), page size, partition, local
_BY_ID = struct.Struct("<iHqq")  # len, op, query id, cursor / resource id


# -- requests and responses --------------------------------------------------------------------------------
def scan_request(query_id: int, cache_id: int, page_size: int, partition: int) -> bytes:
    """``OP_QUERY_SCAN`` without filter. Not ``local``: a node that lost the primary forwards the query."""
    return _SCAN.pack(_SCAN.size - 4, OP_QUERY_SCAN, query_id, cache_id, 0, NULL, page_size, partition, 0)


def by_id_request(op: int, query_id: int, resource_id: int) -> bytes:
    """``OP_QUERY_SCAN_CURSOR_GET_PAGE`` or ``OP_RESOURCE_CLOSE`` of a cursor."""
    return _BY_ID.pack(_BY_ID.size - 4, op, query_id, resource_id)


def parse_response(buf: bytearray, status_flags: bool) -> tuple[int, int, str | None]:
    """(start of the body, end of the packet, the server's error message or None).

    A receive buffer may be longer than the packet: the packet's own length says where it ends.
    """
    end = I32.unpack_from(buf, 0)[0] + 4
    if status_flags:
        flags, pos = struct.unpack_from("<h", buf, 12)[0], 14
        pos += 12 if flags & 2 else 0  # topology changed: the new affinity version follows
        if not flags & 1:
            return pos, end, None
        pos += 4  # status code
    else:
        if I32.unpack_from(buf, 12)[0] == 0:
            return 16, end, None
        pos = 16
    if buf[pos] != STRING:
        return pos, end, "(no message)"
    return pos, end, bytes(buf[pos + 5:pos + 5 + I32.unpack_from(buf, pos + 1)[0]]).decode("utf-8", "replace")


class NodeFailed(Exception):
    """The connection to a node failed, or the node answered a request with an error."""

    def __init__(self, message: str, connection_lost: bool):
        super().__init__(message)
        self.connection_lost = connection_lost


class NodeWire:
    """Requests and responses on one pyignite connection, any number in flight, matched by request id.

    Before pyignite itself uses the connection (metadata requests), ``quiesce`` reads every response still
    due, so pyignite's request/response pairs find nothing of ours on the socket.
    """

    def __init__(self, conn):
        self.conn = conn
        self.name = f"{conn.host}:{conn.port}"
        self._due: set[int] = set()
        self._kept: dict[int, bytearray] = {}

    def expects(self, request_id: int) -> bool:
        """Whether the response to ``request_id`` is still to be had (not read, not lost with the connection)."""
        return request_id in self._due or request_id in self._kept

    def send(self, request_id: int, data: bytes) -> None:
        try:
            self.conn.send(data, reconnect=False)
        except FAILURES as exc:
            raise self._lost(exc) from None
        self._due.add(request_id)

    def recv(self, request_id: int) -> bytearray:
        """The response to ``request_id`` (a whole packet, length prefix included)."""
        while request_id not in self._kept:
            if request_id not in self._due:  # forgotten: the connection broke since it was sent
                raise NodeFailed(f"{self.name}: the connection was lost", True)
            self._read()
        return self._kept.pop(request_id)

    def quiesce(self) -> None:
        """Read every response still due (kept for whoever asks), so the socket holds nothing of ours."""
        while self._due:
            self._read()

    def forget(self) -> None:
        """After the connection broke or was replaced: nothing is due on it any more."""
        self._due.clear()
        self._kept.clear()

    def _read(self) -> None:
        sock = self.conn._socket
        try:
            if sock is None:
                raise EOFError("connection closed")
            head = _exactly(sock, 4)
            size = int.from_bytes(head, "little", signed=True)
            buf = bytearray(4 + size)
            buf[:4] = head
            view = memoryview(buf)[4:]
            while view:
                got = sock.recv_into(view)
                if not got:
                    raise EOFError("connection closed by the node")
                view = view[got:]
        except FAILURES as exc:
            raise self._lost(exc) from None
        request_id = _REQUEST_ID.unpack_from(buf, 0)[1]
        self._due.discard(request_id)
        self._kept[request_id] = buf

    def _lost(self, exc: BaseException) -> NodeFailed:
        self.conn.failed = True
        self.forget()
        return NodeFailed(f"{self.name}: {exc.__class__.__name__}: {exc}", True)


def _exactly(sock, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError("connection closed by the node")
        data += chunk
    return data


class NodeScans:
    """Pipelined scans on the connections of one reader: requests, responses, decoded pages, cursors.

    ``dead`` holds the indexes of connections that broke; ``stats`` counts pages and bytes.

    :param conns: pyignite connections, one per node.
    :param cache_id: the cache scanned.
    :param page_size: rows per page.
    :param stats: the reader's counters (``pages``, ``pages_per_node``, ``bytes``).
    """

    def __init__(self, conns: list, cache_id: int, page_size: int, stats: dict):
        self.conns, self.cache_id, self.page_size, self.stats = conns, cache_id, page_size, stats
        self.wires = [NodeWire(c) for c in conns]
        self.dead: set[int] = set()
        self.decode: Callable | None = None  # set once the reader knows the columns
        self._qids = itertools.count(1)

    def alive(self) -> list[int]:
        return [i for i in range(len(self.conns)) if i not in self.dead]

    def quiesce(self, index: int | None = None) -> None:
        """Read every response due on node ``index`` (default: all), before pyignite uses a connection."""
        for i in self.alive() if index is None else [index]:
            try:
                self.wires[i].quiesce()
            except NodeFailed:
                self.dead.add(i)

    def send(self, index: int, make: Callable[[int], bytes]) -> int:
        """Send the request ``make(request_id)`` to node ``index``; its request id. Raises NodeFailed."""
        qid = next(self._qids)
        self.wires[index].send(qid, make(qid))
        return qid

    def response(self, index: int, qid: int) -> tuple[bytearray, int, int]:
        """The response to ``qid``: (packet, start of its body, end). Raises NodeFailed."""
        node = self.wires[index]
        buf = node.recv(qid)
        pos, end, error = parse_response(buf, node.conn.protocol_context.is_status_flags_supported())
        if error is not None:
            raise NodeFailed(f"{node.name} answered: {error}", False)
        self.stats["bytes"] += end
        return buf, pos, end

    def request(self, index: int, make: Callable[[int], bytes]) -> tuple[bytearray, int, int]:
        return self.response(index, self.send(index, make))

    def send_scan(self, index: int, partition: int) -> int:
        return self.send(index, lambda qid: scan_request(qid, self.cache_id, self.page_size, partition))

    def close_cursor(self, index: int, cursor: int) -> None:
        try:
            self.request(index, lambda qid: by_id_request(OP_RESOURCE_CLOSE, qid, cursor))
        except NodeFailed:
            pass  # the node is gone or the cursor already closed: nothing left to free

    def expects(self, index: int, qid: int) -> bool:
        """Whether the response to ``qid`` on node ``index`` is still to be had."""
        return index not in self.dead and self.wires[index].expects(qid)

    def discard(self, index: int, qid: int, cursor: int | None = None) -> None:
        """Read the response to a request no longer wanted; close the cursor it leaves open."""
        if not self.expects(index, qid):
            return  # the connection broke (and the node freed its cursors) or was replaced since
        try:
            buf, pos, end = self.response(index, qid)
        except NodeFailed as exc:
            if exc.connection_lost:
                self.dead.add(index)
            return  # an error answer: the node freed the cursor itself
        if buf[end - 1]:
            self.close_cursor(index, struct.unpack_from("<q", buf, pos)[0] if cursor is None else cursor)

    def pages(self, index: int, partition: int, sent: int | None = None) -> Iterator[tuple[dict, dict]]:
        """Decoded pages of one scan of ``partition`` on node ``index`` (its scan request ``sent`` already,
        or sent now). The next page is asked for before a page is decoded; an abandoned scan's cursor is closed.
        """
        due = self.send_scan(index, partition) if sent is None else sent
        node = self.wires[index].name
        cursor = None
        try:
            buf, pos, end = self.response(index, due)
            due = None
            cursor = struct.unpack_from("<q", buf, pos)[0]
            pos += 8
            while True:
                count = struct.unpack_from("<i", buf, pos)[0]
                if buf[end - 1]:
                    due = self.send(index, lambda qid: by_id_request(OP_QUERY_SCAN_CURSOR_GET_PAGE, qid, cursor))
                self.stats["pages"] += 1
                self.stats["pages_per_node"][node] = self.stats["pages_per_node"].get(node, 0) + 1
                yield self.decode(buf, pos + 4, end - 1, count)
                if due is None:
                    return
                buf, pos, end = self.response(index, due)
                due = None
        finally:
            if due is not None:
                self.discard(index, due, cursor)

    def reconnect_all(self) -> None:
        """Every node failed: try them all again (a restarted node, or a network blip)."""
        for i, conn in enumerate(self.conns):
            conn.reconnect()
            self.wires[i].forget()
            if conn.alive:
                self.dead.discard(i)
