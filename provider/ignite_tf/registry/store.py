"""The model registry's store: its files, the complete versions of each model, the production pointer.

``RegistryStore`` finds and reads versions (``versions``, ``production``, ``metadata``, ``resolve``,
``fetch``) and holds the file-system primitives (fsync'ed writes, the publish lock, tree copies);
:class:`ignite_tf.registry.publish.ModelRegistry` adds publishing, promotion and recovery. The layout is
described in :mod:`ignite_tf.registry.publish`.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import uuid

from fsspec.implementations.local import LocalFileSystem

from ignite_tf.errors import ConfigError, VersionNotFoundError
from ignite_tf.runstore.store import url_to_fs

COMPLETE, METADATA, POINTER, STAGING, LOCK = "_COMPLETE", "metadata.json", "PRODUCTION", ".staging", ".lock"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def validate_name(value, what: str) -> str:
    """``value`` if it is a safe folder name for a model or version, else ConfigError naming ``what``."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or ".." in value or value.upper() == POINTER:
        raise ConfigError(f"{what} {value!r} is invalid: use 1-64 characters of A-Z a-z 0-9 _ . -, starting with "
                          f"a letter or digit, without '..' or '/' and not {POINTER!r} (it becomes a folder name "
                          f"in the registry)")
    return value


def fsync_path(path: str, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    os.fsync(fd)
    os.close(fd)


def natural_order(name: str) -> list:
    return [int(t) if i % 2 else t for i, t in enumerate(re.split(r"(\d+)", name))]


class RegistryStore:
    """The files of a registry under ``root``, and reading its versions (use ``ModelRegistry``).

    :param root: local path, fsspec URL or Airflow ``ObjectStoragePath`` (its connection's file system).
    :param storage_options: passed to fsspec for a URL root (credentials, endpoint).
    """

    def __init__(self, root, *, storage_options: dict | None = None):
        fs = None
        if hasattr(root, "fs") and hasattr(root, "path") and not isinstance(root, str):
            with contextlib.suppress(Exception):  # a scheme with no Airflow connection: plain fsspec below
                fs, path = root.fs, root.path
        if fs is None:
            text = os.fspath(root) if isinstance(root, os.PathLike) else root
            if not isinstance(text, str) or not text.strip():
                raise ConfigError(f"registry root must be a non-empty path or URL (got {root!r})")
            fs, path = url_to_fs(text, **(storage_options or {}))
        self.fs, self.root = fs, path.rstrip("/") or "/"
        self.local = isinstance(fs, LocalFileSystem)
        self.url = self.root if self.local else fs.unstrip_protocol(self.root)
        self._meta: dict[tuple[str, str], dict] = {}  # versions are immutable, so is their metadata

    # -- paths and file-system primitives --------------------------------------------------------------
    def _path(self, *parts: str) -> str:
        return "/".join([self.root.rstrip("/"), *parts])

    def _children(self, path: str) -> list[dict]:
        with contextlib.suppress(AttributeError):
            self.fs.invalidate_cache(path)
        try:
            return self.fs.ls(path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def _write(self, path: str, data: bytes) -> None:
        self.fs.pipe_file(path, data)  # one PUT on an object store: the old or the new object, whole
        if self.local:
            fsync_path(path)

    def _rm(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(path, recursive=True)

    @contextlib.contextmanager
    def _lock(self, model: str):
        if not self.local:
            yield
            return
        import fcntl

        os.makedirs(self._path(model), exist_ok=True)
        with open(self._path(model, LOCK), "a") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # released by the kernel if this process dies
            yield

    def _copy(self, source: str, dest: str) -> dict:
        """Copy the tree at ``source`` (path or URL) to ``dest`` in the registry; file count and bytes."""
        sfs, spath = url_to_fs(source)
        files, size = 0, 0
        if self.local and isinstance(sfs, LocalFileSystem):
            shutil.copytree(spath, dest)
            for folder, _, names in os.walk(dest):
                for name in names:
                    fsync_path(os.path.join(folder, name))
                    files, size = files + 1, size + os.path.getsize(os.path.join(folder, name))
                fsync_path(folder, directory=True)
            return {"files": files, "bytes": size}
        for src, info in sfs.find(spath, detail=True).items():
            if info.get("type") != "file" or src.endswith("/"):
                continue  # a folder marker some object stores list (s3proxy, a console's "create folder")
            target = dest + "/" + os.path.relpath(src, spath).replace(os.sep, "/")
            self.fs.makedirs(target.rsplit("/", 1)[0], exist_ok=True)
            with sfs.open(src, "rb") as reader, self.fs.open(target, "wb") as writer:
                shutil.copyfileobj(reader, writer, 1 << 20)
            files, size = files + 1, size + sfs.size(src)
        return {"files": files, "bytes": size}

    # -- reading -----------------------------------------------------------------------------------------
    def _complete(self, model: str, version: str) -> bool:
        return self.fs.exists(self._path(model, version, COMPLETE))

    def _dirs(self, path: str) -> list[str]:
        """Sub-folders of ``path`` that are valid names (so never ``.staging``), in version order."""
        names = [e["name"].rstrip("/").rsplit("/", 1)[-1] for e in self._children(path)
                 if e.get("type") == "directory"]
        return sorted((n for n in names if _NAME.fullmatch(n) and ".." not in n), key=natural_order)

    def models(self) -> list[str]:
        """Models with at least one complete version."""
        return [m for m in self._dirs(self.root) if self.versions(m)]

    def versions(self, model: str) -> list[str]:
        """Complete versions of ``model``, oldest first (``v0002`` before ``v0010``)."""
        validate_name(model, "model name")
        return [v for v in self._dirs(self._path(model)) if self._complete(model, v)]

    def _pointer(self, model: str) -> dict | None:
        try:
            return json.loads(self.fs.cat_file(self._path(model, POINTER)))
        except FileNotFoundError:
            return None

    def production(self, model: str) -> str | None:
        """The production version of ``model``, or None when no version was ever blessed."""
        validate_name(model, "model name")
        pointer = self._pointer(model)
        version = pointer and pointer.get("version")
        return version if version and self._complete(model, version) else None

    def metadata(self, model: str, version: str) -> dict:
        """The ``metadata.json`` of a complete version."""
        validate_name(model, "model name")
        validate_name(version, "version")
        if (model, version) not in self._meta:
            if not self._complete(model, version):
                have = self.versions(model)
                raise VersionNotFoundError(f"model {model!r} has no complete version {version!r} in registry "
                                           f"{self.url} (versions: {', '.join(have) or 'none'})")
            self._meta[model, version] = json.loads(self.fs.cat_file(self._path(model, version, METADATA)))
        return self._meta[model, version]

    def resolve(self, model: str, version: str | None = None) -> str:
        """Path (local) or URL (object store) of a version's SavedModel; the production version when None."""
        version = self._version_or_production(model, version)
        path = self._path(model, version, "saved_model")
        return path if self.local else self.fs.unstrip_protocol(path)

    def _version_or_production(self, model: str, version: str | None) -> str:
        if version is None:
            version = self.production(model)
            if version is None:
                raise VersionNotFoundError(
                    f"model {model!r} has no production version in registry {self.url} (versions: "
                    f"{', '.join(self.versions(model)) or 'none'}): name a version, or promote one")
        self.metadata(model, version)  # raises when missing
        return version

    def fetch(self, model: str, version: str | None = None, cache_dir: str | None = None) -> str:
        """A LOCAL path of the version's SavedModel (downloaded once into ``cache_dir`` from an object store)."""
        version = self._version_or_production(model, version)
        if self.local:
            return self._path(model, version, "saved_model")
        import hashlib
        import tempfile

        cache_dir = cache_dir or os.path.join(tempfile.gettempdir(), "ignite-tf-models",
                                              hashlib.sha256(self.url.encode()).hexdigest()[:12])
        final = os.path.join(cache_dir, model, version, "saved_model")
        if not os.path.isdir(final):
            tmp = f"{final}.{uuid.uuid4().hex}.tmp"
            os.makedirs(tmp)
            self.fs.get(self._path(model, version, "saved_model") + "/", tmp + "/", recursive=True)
            with contextlib.suppress(OSError):  # another process finished the same download first
                os.rename(tmp, final)
            shutil.rmtree(tmp, ignore_errors=True)
        return final
