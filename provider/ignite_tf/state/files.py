"""Key spaces as folders of files: the state store without an Ignite connection, shared by one host's processes.

``<root>/<space>/<name>`` holds one key's value as its JSON text. The name is the key percent-encoded
(``urllib.parse.quote``: ``a/b`` is ``a%2Fb``, a leading dot ``%2E``); a key whose name would run past
``MAX_NAME`` characters (a watcher's name holds a DAG run's id) is kept under its encoded start and a digest,
its file holding the key's JSON on a first line, then the value.

A value is written to a temporary file and renamed over its key's file, so a reader sees the old value or the
new, never part of one, and takes no lock. Every write to a space holds that space's lock (``fcntl.flock`` on
``<space>/.lock``), which makes put-if-absent and replace-if-equals (read, compare, write: ``_compare_and_set``,
the one compare-and-set here) atomic for every process and thread on this host, and orders plain puts and
deletes with them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from ignite_tf.errors import ConfigError, IgniteTFError
from ignite_tf.state.kv import KeyValueStore, check_key, decode, encode

__all__ = ["FileKeyValueStore"]

LOCK = ".lock"
MAX_NAME = 200
LONG = "@"  # never in a percent-encoded key, so it marks the file of a key too long to be its name
SPACE_NAME = re.compile(r"[a-z][a-z0-9_]*")


class FileKeyValueStore(KeyValueStore):
    """Key spaces as folders under ``root`` (made if missing)."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def describe(self) -> str:
        return f"local state directory {self.root}"

    def get(self, space: str, key: str) -> Any:
        path = self._folder(space) / self._name(check_key(space, key))
        text = self._text(path)
        try:
            return decode(text)
        except ValueError as exc:
            raise IgniteTFError(f"state file {path} is not JSON ({exc}): it was not written by ignite-tf; "
                                "remove it") from exc

    def put(self, space: str, key: str, value: Any) -> None:
        text = encode(space, check_key(space, key), value)
        with self._locked(space) as folder:
            self._write(folder / self._name(key), key, text)

    def put_if_absent(self, space: str, key: str, value: Any) -> bool:
        return self._compare_and_set(space, check_key(space, key), None, encode(space, key, value))

    def replace_if_equals(self, space: str, key: str, old: Any, new: Any) -> bool:
        check_key(space, key)
        return self._compare_and_set(space, key, encode(space, key, old), encode(space, key, new))

    def keys(self, space: str, prefix: str = "") -> list[str]:
        folder = self._folder(space)
        try:
            names = os.listdir(folder)
        except FileNotFoundError:
            return []
        found = []
        for name in names:
            if name.startswith("."):  # the lock, a value being written
                continue
            key = self._long_key(folder / name) if LONG in name else unquote(name)
            if key is not None and key.startswith(prefix):
                found.append(key)
        return found

    def delete(self, space: str, keys: Iterable[str]) -> None:
        names = [self._name(check_key(space, key)) for key in keys]
        if not names or not self._folder(space).is_dir():
            return
        with self._locked(space) as folder:
            for name in names:
                (folder / name).unlink(missing_ok=True)

    # -- one space's folder and files ------------------------------------------------------------------------
    def _folder(self, space: str) -> Path:
        if not isinstance(space, str) or not SPACE_NAME.fullmatch(space):
            raise ConfigError(f"state store space {space!r} must be lower-case letters, digits and _")
        return self.root / space

    @staticmethod
    def _name(key: str) -> str:
        name = quote(key, safe="")
        if name.startswith("."):  # ".", ".." and hidden files are not keys' names
            name = "%2E" + name[1:]
        if len(name) <= MAX_NAME:
            return name
        return f"{name[:MAX_NAME - 66]}{LONG}{hashlib.sha256(key.encode()).hexdigest()}"

    @staticmethod
    def _text(path: Path) -> str | None:
        """The value's JSON text in ``path``, None when there is no such file."""
        try:
            content = path.read_text()
        except FileNotFoundError:
            return None
        return content.partition("\n")[2] if LONG in path.name else content

    @staticmethod
    def _long_key(path: Path) -> str | None:
        try:
            return json.loads(path.read_text().partition("\n")[0])
        except FileNotFoundError:
            return None  # deleted meanwhile

    @staticmethod
    def _write(path: Path, key: str, text: str) -> None:
        tmp = path.with_name(f".{path.name[:100]}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_text(f"{json.dumps(key)}\n{text}" if LONG in path.name else text)
        tmp.replace(path)

    @contextmanager
    def _locked(self, space: str) -> Iterator[Path]:
        """The space's folder (made if missing), its lock held; an open file's lock goes with its close, or with
        the process."""
        folder = self._folder(space)
        folder.mkdir(exist_ok=True)
        fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield folder
        finally:
            os.close(fd)

    def _compare_and_set(self, space: str, key: str, expected: str | None, text: str) -> bool:
        """Write ``text`` under ``key`` if it holds ``expected`` (JSON text; None: nothing), under the lock."""
        with self._locked(space) as folder:
            path = folder / self._name(key)
            if self._text(path) != expected:
                return False
            self._write(path, key, text)
            return True
