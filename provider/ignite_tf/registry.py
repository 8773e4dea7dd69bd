"""Model registry: immutable published versions of a model, a blessing gate, and a production pointer.

Layout under ``root`` (a local path, an fsspec URL such as ``s3://bucket/models``, or an Airflow
``ObjectStoragePath``)::

    <root>/<model>/<version>/saved_model/   the SavedModel exported from the chief's checkpoint
                             checkpoint/    the checkpoint files
                             tensorboard/   the event files
                             metadata.json  metrics, params, data snapshot, run context, versions, gate verdict
                             _COMPLETE      written last: a version without it does not exist
    <root>/<model>/PRODUCTION               {"version": ..., "generation": n, "previous": ..., ...}

Why a crash never shows a partial version: on a local file system a version is written into
``<model>/.staging/<version>-<uuid>/`` (files fsync'ed) and renamed onto ``<model>/<version>`` in one atomic
rename. Object stores cannot rename a folder atomically, so there files are written in place and
``_COMPLETE`` last; readers list only versions holding it. ``PRODUCTION`` is replaced (temp file + rename,
or one PUT) only after its version is complete. ``recover()``, run by every publish, deletes staging
folders and versions without ``_COMPLETE``, and finishes a promotion cut off between the version becoming
visible and the pointer update, if the pointer has not moved since the gate judged it (metadata records
the pointer generation), so a rollback with ``promote()`` is never undone.

Publishes of one model are serialised by an ``flock`` on ``<model>/.lock`` on a local file system; on an
object store run one publisher per model at a time (an Airflow pool of one slot, or max_active_runs=1).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import math
import os
import re
import shutil
import sys
import uuid
from dataclasses import asdict, dataclass, field

import fsspec
from fsspec.implementations.local import LocalFileSystem

from ignite_tf.errors import ConfigError, IgniteTFError

COMPLETE, METADATA, POINTER, STAGING, LOCK = "_COMPLETE", "metadata.json", "PRODUCTION", ".staging", ".lock"
CRASH_ENV = "IGNITE_TF_REGISTRY_CRASH_AT"
CRASH_STEPS = ("staged", "copied", "metadata_written", "marker_written", "renamed", "pointer_temp_written",
               "promoted")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_AUTO = re.compile(r"v(\d+)")


class VersionNotFoundError(IgniteTFError, LookupError):
    """The model or version asked for is not in the registry (or is not complete)."""


class _SimulatedCrash(BaseException):
    """Raised instead of ``os._exit`` when ``IGNITE_TF_REGISTRY_CRASH_MODE=raise`` (in-memory stores in tests)."""


def _crash(step: str) -> None:
    """Die at ``step`` when the crash-test variable names it: the tests SIGKILL-equivalent every step."""
    if os.environ.get(CRASH_ENV) == step:
        if os.environ.get("IGNITE_TF_REGISTRY_CRASH_MODE") == "raise":
            raise _SimulatedCrash(step)
        os._exit(137)


def validate_name(value, what: str) -> str:
    """``value`` if it is a safe folder name for a model or version, else ConfigError naming ``what``."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or ".." in value or value.upper() == POINTER:
        raise ConfigError(f"{what} {value!r} is invalid: use 1-64 characters of A-Z a-z 0-9 _ . -, starting with "
                          f"a letter or digit, without '..' or '/' and not {POINTER!r} (it becomes a folder name "
                          f"in the registry)")
    return value


def _number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) and not hasattr(value, "__float__"):
        raise ConfigError(f"{what} must be a number (got {value!r})")
    return float(value)


@dataclass
class BlessingGate:
    """Decides whether a new version becomes production.

    A version is blessed when every gated metric (each key of ``thresholds``) lies within its bounds AND is
    not worse than the production version's value by more than ``tolerance``, taken RELATIVE to the
    production value: a higher-is-better metric passes when ``new >= prod - tolerance * |prod|``, a
    lower-is-better one when ``new <= prod + tolerance * |prod|``. With no production version only the
    bounds apply; with no thresholds every version is blessed (the latest wins).

    :param thresholds: metric -> ``(min, max)``; either may be None. ``(None, None)`` only compares the
        metric with production.
    :param tolerance: relative slack against production, >= 0 (0.01: up to 1% worse still passes).
    :param higher_is_better: metric -> direction; default: names containing "loss" or "error" are
        lower-is-better, every other metric higher-is-better.
    """

    thresholds: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    tolerance: float = 0.0
    higher_is_better: dict[str, bool] = field(default_factory=dict)

    def __post_init__(self):
        clean = {}
        for name, bounds in dict(self.thresholds or {}).items():
            if not isinstance(bounds, (list, tuple)) or len(bounds) != 2:
                raise ConfigError(f"BlessingGate.thresholds[{name!r}] must be (min, max) (got {bounds!r})")
            lo, hi = (None if b is None else _number(b, f"BlessingGate.thresholds[{name!r}]") for b in bounds)
            if lo is not None and hi is not None and lo > hi:
                raise ConfigError(f"BlessingGate.thresholds[{name!r}]: min {lo} is above max {hi}")
            clean[str(name)] = (lo, hi)
        self.thresholds = clean
        self.tolerance = _number(self.tolerance, "BlessingGate.tolerance")
        if not math.isfinite(self.tolerance) or self.tolerance < 0:
            raise ConfigError(f"BlessingGate.tolerance must be a finite number >= 0 (got {self.tolerance})")
        self.higher_is_better = {str(k): bool(v) for k, v in dict(self.higher_is_better or {}).items()}

    def higher(self, metric: str) -> bool:
        if metric in self.higher_is_better:
            return self.higher_is_better[metric]
        return not ("loss" in metric.lower() or "error" in metric.lower())

    def evaluate(self, metrics: dict[str, float], production: dict[str, float] | None,
                 production_version: str | None = None) -> tuple[list[str], dict]:
        """Reasons the version is NOT blessed (empty when it is), and the per-metric comparison."""
        reasons, compared = [], {}
        for name, (lo, hi) in sorted(self.thresholds.items()):
            if name not in metrics:
                reasons.append(f"metric {name!r} is gated but missing from this run's metrics "
                               f"(have: {', '.join(sorted(metrics)) or 'none'})")
                continue
            value = metrics[name]
            if not math.isfinite(value):
                reasons.append(f"metric {name!r} is {value}")
                continue
            if lo is not None and value < lo:
                reasons.append(f"{name} = {value:.6g} is below the threshold min {lo:.6g}")
            if hi is not None and value > hi:
                reasons.append(f"{name} = {value:.6g} is above the threshold max {hi:.6g}")
            old = (production or {}).get(name)
            if production is None or old is None or not math.isfinite(old):
                continue
            higher, slack = self.higher(name), self.tolerance * abs(old)
            worse = value < old - slack if higher else value > old + slack
            compared[name] = {"new": value, "production": old, "higher_is_better": higher, "worse": worse}
            if worse:
                reasons.append(f"{name} = {value:.6g} is worse than production {production_version} ({old:.6g}; "
                               f"{'higher' if higher else 'lower'} is better, relative tolerance {self.tolerance:g})")
        return reasons, compared

    def to_dict(self) -> dict:
        return {"thresholds": {k: list(v) for k, v in self.thresholds.items()}, "tolerance": self.tolerance,
                "higher_is_better": dict(self.higher_is_better)}

    @classmethod
    def from_dict(cls, data: dict) -> BlessingGate:
        return cls(**{k: v for k, v in data.items() if k in ("thresholds", "tolerance", "higher_is_better")})


@dataclass
class PublishResult:
    """What a publish did. ``status`` is ``production`` or ``candidate``; ``reasons`` say why not promoted."""

    model: str
    version: str
    path: str
    status: str
    reasons: list[str]
    previous_production: str | None
    recovered: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)


def _jsonable(value):
    """Metadata from callers may hold NumPy scalars, dataclasses or objects with ``to_dict()``."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "to_dict"):
        return _jsonable(value.to_dict())
    if hasattr(value, "tolist"):
        return value.tolist()
    if hasattr(value, "__dataclass_fields__"):
        return _jsonable(asdict(value))
    return str(value)


def _software(ignite_version: str | None) -> dict:
    """Versions without importing TensorFlow (a publish only copies files)."""
    from importlib.metadata import PackageNotFoundError, version

    import ignite_tf

    def dist(name):
        with contextlib.suppress(PackageNotFoundError):
            return version(name)
        return None

    tf = sys.modules.get("tensorflow")
    return {"ignite_tf": ignite_tf.__version__, "tensorflow": getattr(tf, "__version__", None) or dist("tensorflow"),
            "tf_keras": dist("tf-keras"), "python": sys.version.split()[0], "ignite": ignite_version}


def _fsync(path: str, directory: bool = False) -> None:
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if directory else 0))
    os.fsync(fd)
    os.close(fd)


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _order(name: str) -> list:
    return [int(t) if i % 2 else t for i, t in enumerate(re.split(r"(\d+)", name))]


class ModelRegistry:
    """Published versions of models under ``root``.

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
            fs, path = fsspec.core.url_to_fs(text, **(storage_options or {}))
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
            _fsync(path)

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
        sfs, spath = fsspec.core.url_to_fs(source)
        files, size = 0, 0
        if self.local and isinstance(sfs, LocalFileSystem):
            shutil.copytree(spath, dest)
            for folder, _, names in os.walk(dest):
                for name in names:
                    _fsync(os.path.join(folder, name))
                    files, size = files + 1, size + os.path.getsize(os.path.join(folder, name))
                _fsync(folder, directory=True)
            return {"files": files, "bytes": size}
        for src in sfs.find(spath):
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
        return sorted((n for n in names if _NAME.fullmatch(n) and ".." not in n), key=_order)

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

    # -- writing -----------------------------------------------------------------------------------------
    def publish(self, model: str, *, saved_model_dir: str, checkpoint_dir: str | None = None,
                tensorboard_dir: str | None = None, metrics: dict, params: dict | None = None,
                data: dict | None = None, context: dict | None = None, gate: BlessingGate | None = None,
                version: str | None = None, ignite_version: str | None = None) -> PublishResult:
        """Publish a new immutable version; promote it to production when the gate blesses it.

        :param model: model name (a folder name: see :func:`validate_name`).
        :param saved_model_dir: the SavedModel folder (path or URL) holding ``saved_model.pb``.
        :param checkpoint_dir: checkpoint folder copied into ``checkpoint/``; None to skip.
        :param tensorboard_dir: event-file folder copied into ``tensorboard/``; None to skip.
        :param metrics: metric name -> number; the gate reads these.
        :param params: training parameters (epochs, learning rate, workers, features, label...).
        :param data: data snapshot (cache, PartitionMap summary, rows, validation summary...).
        :param context: run context (dag id, run id, ...).
        :param gate: the blessing gate; default ``BlessingGate()`` (no thresholds: always promoted).
        :param version: explicit version id; default the next ``vNNNN``. An existing version is an error.
        :param ignite_version: the Ignite cluster's version, recorded in the metadata.
        :raises ConfigError: invalid names or metrics, missing SavedModel, or an existing ``version``.
        """
        validate_name(model, "model name")
        if version is not None:
            validate_name(version, "version")
        if not isinstance(metrics, dict):
            raise ConfigError(f"metrics must be a dict of metric name -> number (got {type(metrics).__name__})")
        metrics = {str(k): _number(v, f"metric {k!r}") for k, v in metrics.items()}
        gate = gate if gate is not None else BlessingGate()
        sources = {"saved_model": saved_model_dir, "checkpoint": checkpoint_dir, "tensorboard": tensorboard_dir}
        sfs, spath = fsspec.core.url_to_fs(str(saved_model_dir))
        if not any(sfs.exists(f"{spath}/{n}") for n in ("saved_model.pb", "saved_model.pbtxt")):
            raise ConfigError(f"saved_model_dir {saved_model_dir!r} holds no saved_model.pb: export the model "
                              f"with model.save(<dir>) or tf.saved_model.save first")
        for part, src in sources.items():
            if src is not None and not (lambda fs, path: fs.isdir(path))(*fsspec.core.url_to_fs(str(src))):
                raise ConfigError(f"{part}_dir {src!r} is not a directory (give the folder, or None to skip it)")

        with self._lock(model):
            recovered = self._recover(model)
            pointer = self._pointer(model)
            previous = self.production(model)
            existing = self._dirs(self._path(model))
            if version is None:
                last = max((int(m.group(1)) for n in existing if (m := _AUTO.fullmatch(n))), default=0)
                version = f"v{last + 1:04d}"
            elif version in existing:
                raise ConfigError(f"version {version!r} of model {model!r} already exists in {self.url}: versions "
                                  f"are never overwritten; pass another version, or none for the next vNNNN")
            reasons, compared = gate.evaluate(
                metrics, self.metadata(model, previous)["metrics"] if previous else None, previous)
            final = self._path(model, version)
            target = self._path(model, STAGING, f"{version}-{uuid.uuid4().hex[:8]}") if self.local else final
            self.fs.makedirs(target, exist_ok=True)
            _crash("staged")
            files = {part: self._copy(str(src), f"{target}/{part}") for part, src in sources.items() if src}
            _crash("copied")
            meta = {
                "model": model, "version": version,
                "created_at": _now(),
                "metrics": metrics, "params": _jsonable(params or {}), "data": _jsonable(data or {}),
                "context": _jsonable(context or {}), "software": _software(ignite_version), "files": files,
                "sources": {k: str(v) for k, v in sources.items() if v is not None},
                "gate": {"blessed": not reasons, "reasons": reasons, "compared_to": previous,
                         "comparisons": compared, "pointer_generation": (pointer or {}).get("generation", 0),
                         "config": gate.to_dict()},
            }
            self._write(f"{target}/{METADATA}", json.dumps(meta, indent=2, sort_keys=True).encode())
            _crash("metadata_written")
            self._write(f"{target}/{COMPLETE}", b"")
            _crash("marker_written")
            if self.local:
                _fsync(target, directory=True)
                os.rename(target, final)  # fails rather than replace: version folders are never empty
                _fsync(self._path(model), directory=True)
            _crash("renamed")
            if not reasons:
                self._set_pointer(model, version, pointer, "blessed by the gate at publish")
                _crash("promoted")
        return PublishResult(model, version, final if self.local else self.fs.unstrip_protocol(final),
                             "candidate" if reasons else "production", reasons, previous, recovered)

    def _set_pointer(self, model: str, version: str, pointer: dict | None, reason: str) -> None:
        generation = (pointer or {}).get("generation", 0) + 1
        body = json.dumps({"version": version, "generation": generation, "previous": (pointer or {}).get("version"),
                           "reason": reason, "updated_at": _now()}).encode()
        if not self.local:
            return self._write(self._path(model, POINTER), body)
        tmp = self._path(model, f".{POINTER}.{uuid.uuid4().hex[:8]}.tmp")
        self._write(tmp, body)
        _crash("pointer_temp_written")
        os.replace(tmp, self._path(model, POINTER))
        _fsync(self._path(model), directory=True)

    def promote(self, model: str, version: str, reason: str = "promoted by hand") -> None:
        """Make a complete ``version`` production regardless of the gate (a rollback, or an override)."""
        validate_name(model, "model name")
        validate_name(version, "version")
        with self._lock(model):
            self.metadata(model, version)
            self._set_pointer(model, version, self._pointer(model), reason)

    def recover(self, model: str) -> list[str]:
        """Clean up after a crashed publish of ``model`` (also run by every publish); what was done."""
        validate_name(model, "model name")
        with self._lock(model):
            return self._recover(model)

    def _recover(self, model: str) -> list[str]:
        done = []
        for entry in self._children(self._path(model, STAGING)):
            self._rm(entry["name"])
            done.append(f"deleted unfinished staging folder {entry['name']}")
        for entry in self._children(self._path(model)):
            if re.fullmatch(rf"\.{POINTER}\.\w+\.tmp", entry["name"].rsplit("/", 1)[-1]):
                self._rm(entry["name"])
                done.append(f"deleted unused pointer temp file {entry['name']}")
        versions = []
        for name in self._dirs(self._path(model)):
            if self._complete(model, name):
                versions.append(name)
            else:
                self._rm(self._path(model, name))
                done.append(f"deleted incomplete version {name} (no {COMPLETE} marker)")
        pointer = self._pointer(model)
        generation = (pointer or {}).get("generation", 0)
        metas = [self.metadata(model, v) for v in versions if v != (pointer or {}).get("version")]
        cut_off = [m for m in metas if m["gate"]["blessed"] and m["gate"].get("pointer_generation") == generation]
        if cut_off:
            newest = max(cut_off, key=lambda m: (m["created_at"], _order(m["version"])))
            self._set_pointer(model, newest["version"], pointer,
                              "blessed at publish; promotion finished by recover() after the publish stopped")
            done.append(f"finished the promotion of {newest['version']} to production")
        return done
