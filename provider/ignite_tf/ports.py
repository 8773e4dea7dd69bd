"""TCP ports on this machine: is one free, which one is free, does something listen on one.

The one place for these checks: the launcher picks task ports with them, the supervisor and the runtime wait
for a task's port, the development tooling and the tests pick ports for Ignite nodes and Airflow services.
"""

from __future__ import annotations

import socket

LOCALHOST = "127.0.0.1"


def port_free(port: int, host: str = LOCALHOST) -> bool:
    """Whether ``port`` can be bound on ``host`` now (a port left in TIME_WAIT counts as free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = LOCALHOST) -> int:
    """A port the kernel says is free on ``host`` now; also one where nothing listens (a closed port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def listening(port: int, host: str = LOCALHOST, timeout: float = 0.2) -> bool:
    """Whether something on ``host`` (a name, an IPv4 or a bracketed IPv6 address) accepts a connection on
    ``port`` within ``timeout`` seconds."""
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False
