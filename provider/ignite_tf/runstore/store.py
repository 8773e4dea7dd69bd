"""RunStore: where one run lives — a local folder, or a prefix in object storage — read and written through fsspec.

A run root is a folder (``runs`` in the ignite-tf home, the default) or an object-store URL
(``s3://bucket/prefix``; ``gs://`` where gcsfs is installed). A run's objects keep the layout of
``RunFolder`` (``cluster.json``, ``shard_plan.json``, ``logs/<task>.log``, ``checkpoints/``...), relative to
the run's URL. For a local root the run folder *is* the store and nothing is copied; for a remote root every
process that writes a run works in a local staging folder and copies what others read to the store
(``mirror.py`` for logs, ``sync.py`` for a task's checkpoints, model and TensorBoard events), and every reader
(``attach``, the Airflow task log, the UI page, ``ignite-tf tensorboard``, publishing) reads the store.

Credentials never appear in a URL or in the options written down: they come from the environment
(``credentials.py``).
"""

from __future__ import annotations

import errno
import json
import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path, PurePath
from typing import Any

from ignite_tf.errors import ConfigError
from ignite_tf.runstore.layout import RunFolder

LAYOUT = RunFolder(Path("."))
"""``RunFolder``'s names relative to a run (``LAYOUT.log("chief-0")`` is ``logs/chief-0.log``)."""


def is_remote(root: str | os.PathLike | None) -> bool:
    """Whether ``root`` is an object-store URL (``scheme://...``, not ``file://``)."""
    text = str(root or "")
    scheme, sep, _ = text.partition("://")
    return bool(sep) and scheme.lower() not in ("", "file", "local")


def rel(path: str | PurePath) -> str:
    """A layout path (``LAYOUT.spec``...) as the store's relative key."""
    key = PurePath(path).as_posix()
    return "" if key == "." else key.lstrip("/")


def url_to_fs(url: str, **options):
    """fsspec's ``(filesystem, path)`` for ``url``, never an instance cached by fsspec: s3fs takes its endpoint
    and credentials from the environment when an instance is made, and fsspec's cache would hand a later
    caller with other variables (another store, another connection's task) an instance made under the first."""
    import fsspec

    return fsspec.core.url_to_fs(url, skip_instance_cache=True, **options)


@dataclass
class RunStore:
    """One run's place: ``url`` a local folder or an object-store URL of the run itself (root + cluster id).

    :param options: fsspec storage options that are not secrets (``endpoint_url``, ``client_kwargs``...);
        default ``credentials.storage_options()`` (``IGNITE_TF_RUN_STORE_OPTIONS``).
    """

    url: str
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        self.url = str(self.url).rstrip("/") if is_remote(self.url) else str(Path(self.url).expanduser())
        if not self.options and self.remote:
            from ignite_tf.runstore.credentials import storage_options

            self.options = storage_options()

    @classmethod
    def of(cls, cluster_id: str, root: str | os.PathLike | None = None, **options: Any) -> RunStore:
        """The store of ``cluster_id`` under the run root ``root`` (default ``IGNITE_TF_RUN_ROOT``)."""
        from ignite_tf.runstore.layout import default_run_root

        root = str(root or default_run_root())
        if is_remote(root):
            return cls(f"{root.rstrip('/')}/{cluster_id}", options)
        return cls(str(Path(root).expanduser() / cluster_id), options)

    @property
    def remote(self) -> bool:
        return is_remote(self.url)

    # -- fsspec ----------------------------------------------------------------------------------------------
    @property
    def fs(self):
        fs = self.__dict__.get("_fs")
        if fs is None:
            try:
                fs, _ = url_to_fs(self.url, **self.options)
            except ImportError as exc:
                raise ConfigError(f"run store {self.url}: {exc} (install the fsspec package for its scheme, e.g. "
                                  f"s3fs for s3://, gcsfs for gs://)") from None
            self.__dict__["_fs"] = fs
        return fs

    def path(self, name: str | PurePath = "") -> str:
        """The full location of ``name`` (a ``LAYOUT`` path or a relative key)."""
        key = rel(name)
        if not key:
            return self.url
        return f"{self.url}/{key}" if self.remote else str(Path(self.url) / key)

    def _fs_path(self, name: str | PurePath) -> str:
        return self.fs._strip_protocol(self.path(name)) if self.remote else self.path(name)

    # -- reads -----------------------------------------------------------------------------------------------
    def exists(self, name: str | PurePath) -> bool:
        if not self.remote:
            return Path(self.path(name)).exists()
        self.fs.invalidate_cache()
        return self.fs.exists(self._fs_path(name))

    def read_bytes(self, name: str | PurePath, offset: int = 0) -> bytes | None:
        """``name``'s bytes from ``offset``; None when it does not exist (yet)."""
        try:
            if not self.remote:
                with open(self.path(name), "rb") as f:
                    f.seek(offset)
                    return f.read()
            self.fs.invalidate_cache()
            # One ranged GET: ``fs.open`` pins the object's ETag, so a log rewritten by its streaming writer
            # between the open and the read failed with PreconditionFailed.
            path = self._fs_path(name)
            try:
                return self.fs.cat_file(path, start=offset or None)
            except FileNotFoundError:
                raise
            except OSError as e:
                # A range at (or, while a writer replaces the object, past) its end is refused, not empty:
                # nothing new yet; the caller's next poll reads on from the same offset.
                if offset and e.errno == errno.EINVAL:
                    return b""
                raise
        except FileNotFoundError:
            return None

    def read_text(self, name: str | PurePath) -> str | None:
        data = self.read_bytes(name)
        return None if data is None else data.decode(errors="replace")

    def read_json(self, name: str | PurePath) -> Any | None:
        text = self.read_text(name)
        return None if text is None else json.loads(text)

    def listdir(self, name: str | PurePath = "") -> list[str]:
        """Names directly inside ``name`` (empty when there is nothing)."""
        try:
            if not self.remote:
                return sorted(os.listdir(self.path(name)))
            self.fs.invalidate_cache()
            return sorted(posixpath.basename(p.rstrip("/")) for p in self.fs.ls(self._fs_path(name), detail=False))
        except FileNotFoundError:
            return []

    def get_dir(self, name: str | PurePath, local: str | Path) -> bool:
        """Copy the folder ``name`` to ``local`` (replacing files of the same names); False when it is absent."""
        local = Path(local)
        if not self.remote:
            src = Path(self.path(name))
            if not src.is_dir():
                return False
            if src.resolve() != local.resolve():
                import shutil

                shutil.copytree(src, local, dirs_exist_ok=True)
            return True
        self.fs.invalidate_cache()
        base = self._fs_path(name)
        files = [p for p, info in self.fs.find(base, withdirs=True, detail=True).items()
                 if info.get("type") == "file" and not p.endswith("/")]
        if not files:
            return False
        for p in files:
            target = local / posixpath.relpath(p, base)
            target.parent.mkdir(parents=True, exist_ok=True)
            self.fs.get_file(p, str(target))
        return True

    def get_file(self, name: str | PurePath, local: str | Path) -> bool:
        data = self.read_bytes(name)
        if data is None:
            return False
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        Path(local).write_bytes(data)
        return True

    # -- writes ----------------------------------------------------------------------------------------------
    def write_bytes(self, name: str | PurePath, data: bytes) -> None:
        if not self.remote:
            target = Path(self.path(name))
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
            tmp.write_bytes(data)
            tmp.replace(target)
            return
        self.fs.pipe_file(self._fs_path(name), data)

    def write_text(self, name: str | PurePath, text: str) -> None:
        self.write_bytes(name, text.encode())

    def put_file(self, local: str | Path, name: str | PurePath) -> None:
        """Copy the local file ``local`` to ``name`` (a no-op when they are one file)."""
        if not self.remote:
            target = Path(self.path(name))
            if Path(local).resolve() != target.resolve():
                self.write_bytes(name, Path(local).read_bytes())
            return
        self.fs.put_file(str(local), self._fs_path(name))

    def put_dir(self, local: str | Path, name: str | PurePath, seen: dict[str, tuple] | None = None) -> int:
        """Copy the files of the folder ``local`` under ``name``; with ``seen`` (path -> (size, mtime), kept
        by the caller) only those changed since. Objects the folder no longer has are removed (a backup
        TensorFlow replaced). Returns how many files were copied."""
        local = Path(local)
        if not self.remote:
            return 0
        copied, present = 0, set()
        for path in sorted(p for p in local.rglob("*") if p.is_file()) if local.is_dir() else []:
            key = path.relative_to(local).as_posix()
            present.add(key)
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            stamp = (st.st_size, st.st_mtime_ns)
            if seen is not None and seen.get(key) == stamp:
                continue
            try:
                self.fs.put_file(str(path), self._fs_path(f"{rel(name)}/{key}"))
            except FileNotFoundError:  # replaced meanwhile: the next round copies the new one
                continue
            copied += 1
            if seen is not None:
                seen[key] = stamp
        if seen is not None:
            for key in [k for k in seen if k not in present]:
                seen.pop(key)
                try:
                    self.fs.rm_file(self._fs_path(f"{rel(name)}/{key}"))
                except FileNotFoundError:
                    pass
        return copied

    def remove_dir(self, name: str | PurePath) -> None:
        if not self.remote:
            import shutil

            shutil.rmtree(self.path(name), ignore_errors=True)
            return
        self.fs.invalidate_cache()
        for p in sorted(self.fs.find(self._fs_path(name), withdirs=False), reverse=True):
            try:
                self.fs.rm_file(p)
            except FileNotFoundError:
                pass
