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

This module publishes, promotes and recovers; finding and reading versions is in
:mod:`ignite_tf.registry.store`, the gate in :mod:`ignite_tf.registry.gate` (both importable from here).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import sys
import uuid
from dataclasses import asdict, dataclass, field

from ignite_tf.errors import ConfigError
from ignite_tf.jsonable import jsonable
from ignite_tf.registry.gate import NOT_BLESSED, BlessingGate, as_number, held_out_inputs
from ignite_tf.registry.store import (
    COMPLETE,
    LOCK,
    METADATA,
    POINTER,
    STAGING,
    RegistryStore,
    VersionNotFoundError,
    fsync_path,
    natural_order,
    validate_name,
)
from ignite_tf.runstore.store import url_to_fs

__all__ = ["COMPLETE", "CRASH_ENV", "CRASH_STEPS", "LOCK", "METADATA", "POINTER", "STAGING", "BlessingGate",
           "ModelRegistry", "PublishResult", "RegistryStore", "VersionNotFoundError", "validate_name"]

CRASH_ENV = "IGNITE_TF_REGISTRY_CRASH_AT"
CRASH_STEPS = ("staged", "copied", "metadata_written", "marker_written", "renamed", "pointer_temp_written",
               "promoted")
_AUTO = re.compile(r"v(\d+)")


class _SimulatedCrash(BaseException):
    """Raised instead of ``os._exit`` when ``IGNITE_TF_REGISTRY_CRASH_MODE=raise`` (in-memory stores in tests)."""


def _crash(step: str) -> None:
    """Die at ``step`` when the crash-test variable names it: the tests SIGKILL-equivalent every step."""
    if os.environ.get(CRASH_ENV) == step:
        if os.environ.get("IGNITE_TF_REGISTRY_CRASH_MODE") == "raise":
            raise _SimulatedCrash(step)
        os._exit(137)


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


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def _checked(model: str, version: str | None, metrics, saved_model_dir: str, checkpoint_dir: str | None,
             tensorboard_dir: str | None) -> tuple[dict[str, float], dict[str, str | None]]:
    """A publish's inputs checked before anything is written: (metrics as numbers, folder by part)."""
    validate_name(model, "model name")
    if version is not None:
        validate_name(version, "version")
    if not isinstance(metrics, dict):
        raise ConfigError(f"metrics must be a dict of metric name -> number (got {type(metrics).__name__})")
    metrics = {str(k): as_number(v, f"metric {k!r}") for k, v in metrics.items()}
    sources = {"saved_model": saved_model_dir, "checkpoint": checkpoint_dir, "tensorboard": tensorboard_dir}
    sfs, spath = url_to_fs(str(saved_model_dir))
    if not any(sfs.exists(f"{spath}/{n}") for n in ("saved_model.pb", "saved_model.pbtxt")):
        raise ConfigError(f"saved_model_dir {saved_model_dir!r} holds no saved_model.pb: export the model "
                          f"with model.save(<dir>) or tf.saved_model.save first")
    for part, src in sources.items():
        if src is not None and not (lambda fs, path: fs.isdir(path))(*url_to_fs(str(src))):
            raise ConfigError(f"{part}_dir {src!r} is not a directory (give the folder, or None to skip it)")
    return metrics, sources


class ModelRegistry(RegistryStore):
    """Published versions of models under ``root``: the store's read side, plus publishing.

    :param root: local path, fsspec URL or Airflow ``ObjectStoragePath`` (its connection's file system).
    :param storage_options: passed to fsspec for a URL root (credentials, endpoint).
    """

    # -- writing -----------------------------------------------------------------------------------------
    def publish(self, model: str, *, saved_model_dir: str, checkpoint_dir: str | None = None,
                tensorboard_dir: str | None = None, metrics: dict, params: dict | None = None,
                data: dict | None = None, context: dict | None = None, gate: BlessingGate | None = None,
                version: str | None = None, ignite_version: str | None = None,
                evaluation: dict | None = None) -> PublishResult:
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
        :param evaluation: the held-out evaluation (``ignite_tf.runtime.evaluation``: rows, metrics,
            production_metrics, production, split); with it the gate judges the held-out metrics against the
            production version's numbers on the same rows (:func:`ignite_tf.registry.gate.held_out_inputs`).
        :raises ConfigError: invalid names or metrics, missing SavedModel, or an existing ``version``.
        """
        metrics, sources = _checked(model, version, metrics, saved_model_dir, checkpoint_dir, tensorboard_dir)
        gate = gate if gate is not None else BlessingGate()
        with self._lock(model):
            recovered = self._recover(model)
            pointer = self._pointer(model)
            previous = self.production(model)
            version = self._new_version(model, version)
            judged, baseline, notes = held_out_inputs(
                metrics, self.metadata(model, previous)["metrics"] if previous else None, previous, evaluation)
            reasons, compared = gate.evaluate(judged, baseline, previous)
            reasons += [n for n in notes if n.startswith(NOT_BLESSED)]
            final = self._path(model, version)
            target = self._path(model, STAGING, f"{version}-{uuid.uuid4().hex[:8]}") if self.local else final
            self.fs.makedirs(target, exist_ok=True)
            _crash("staged")
            files = {part: self._copy(str(src), f"{target}/{part}") for part, src in sources.items() if src}
            _crash("copied")
            meta = {
                "model": model, "version": version,
                "created_at": _now(),
                "metrics": metrics, "params": jsonable(params or {}), "data": jsonable(data or {}),
                "context": jsonable(context or {}), "software": _software(ignite_version), "files": files,
                "sources": {k: str(v) for k, v in sources.items() if v is not None},
                "gate": {"blessed": not reasons, "reasons": reasons, "compared_to": previous,
                         "comparisons": compared, "pointer_generation": (pointer or {}).get("generation", 0),
                         "config": gate.to_dict(), "on": "evaluation" if evaluation else "training",
                         "notes": notes},
            }
            if evaluation:
                meta["evaluation"] = jsonable(evaluation)
            self._complete_version(model, target, final, meta)
            if not reasons:
                self._set_pointer(model, version, pointer, "blessed by the gate at publish")
                _crash("promoted")
        return PublishResult(model, version, final if self.local else self.fs.unstrip_protocol(final),
                             "candidate" if reasons else "production", reasons, previous, recovered)

    def _new_version(self, model: str, version: str | None) -> str:
        """``version`` when it is new, else ConfigError; None: the next ``vNNNN``."""
        existing = self._dirs(self._path(model))
        if version is None:
            last = max((int(m.group(1)) for n in existing if (m := _AUTO.fullmatch(n))), default=0)
            return f"v{last + 1:04d}"
        if version in existing:
            raise ConfigError(f"version {version!r} of model {model!r} already exists in {self.url}: versions "
                              f"are never overwritten; pass another version, or none for the next vNNNN")
        return version

    def _complete_version(self, model: str, target: str, final: str, meta: dict) -> None:
        """Write the metadata and the completion marker into ``target``; a local one is then renamed to ``final``
        (an object store has no rename: there the marker is what makes the version exist)."""
        self._write(f"{target}/{METADATA}", json.dumps(meta, indent=2, sort_keys=True).encode())
        _crash("metadata_written")
        self._write(f"{target}/{COMPLETE}", b"")
        _crash("marker_written")
        if self.local:
            fsync_path(target, directory=True)
            os.rename(target, final)  # fails rather than replace: version folders are never empty
            fsync_path(self._path(model), directory=True)
        _crash("renamed")

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
        fsync_path(self._path(model), directory=True)

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
            newest = max(cut_off, key=lambda m: (m["created_at"], natural_order(m["version"])))
            self._set_pointer(model, newest["version"], pointer,
                              "blessed at publish; promotion finished by recover() after the publish stopped")
            done.append(f"finished the promotion of {newest['version']} to production")
        return done
