"""``TrainingJob``: what a cluster trains, as one value — from the operator, the YAML spec, the CLI's dict and
``start_cluster`` to the launch and the memory estimate.

An entry point's settings are rendered as flags of ``python -m ignite_tf.runtime`` here (``runtime_args``)
and read back from flags here only (``from_job``: the ``{"entry_point", "args"}`` / ``{"command", "job_dir"}``
dicts a spec records and earlier releases took). A command is run unchanged: its settings are what its own
flags say (``--batch-size 64`` in ``[train.py, --batch-size, 64]``), read for the memory estimate.

Strings (a templated operator argument, JSON) become typed values here, once; a bad value is a
:class:`JobError` naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from ignite_tf.contract import Mode
from ignite_tf.defaults import DEFAULT_BATCH_SIZE, DEFAULT_EPOCHS, DEFAULT_LABEL_COLUMN, DEFAULT_SHUFFLE_BUFFER
from ignite_tf.errors import ConfigError

# The runtime's flags (``ignite_tf.runtime.train.build_parser``) -> the field each sets; ``--label`` is the old
# name of ``--label-column``. A test holds this table and the runtime's parser together.
RUNTIME_FLAGS = {"--entry-point": "entry_point", "--epochs": "epochs", "--batch-size": "batch_size",
                 "--label-column": "label_column", "--label": "label_column", "--features": "features",
                 "--learning-rate": "learning_rate", "--steps-per-epoch": "steps_per_epoch",
                 "--checkpoint-every-steps": "checkpoint_every_steps", "--shuffle-buffer": "shuffle_buffer",
                 "--model-arg": "model_args"}
# The settings a runtime flag carries (a command's are read from its own flags, never given beside it).
SETTINGS = ("epochs", "batch_size", "steps_per_epoch", "learning_rate", "label_column", "features",
            "shuffle_buffer", "checkpoint_every_steps", "model_args")
JOB_KEYS = frozenset({"entry_point", "args", "command", "job_dir", "serve_command", "py_modules", "shipped"})
"""The keys of a job dict (``from_job``); ``shipped`` is what a launch added (``ignite_tf.runstore.code``)."""
_INTS = {"workers": 1, "ps": 0, "epochs": 1, "batch_size": 1, "steps_per_epoch": 1, "checkpoint_every_steps": 1,
         "shuffle_buffer": 0}  # integer field -> its least value


class JobError(ConfigError):
    """A training job's setting is invalid; ``field`` names it."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field} {message}")
        self.field = field


@dataclass(frozen=True)
class TrainingJob:
    """One training: the code it runs, the cluster's shape and the runtime's settings. Give ``entry_point``
    (the runtime trains the model it returns) or ``command`` (a user's program, run with TF_CONFIG set)."""

    entry_point: str | None = None
    """``module:function`` returning a compiled tf_keras model."""
    command: tuple[str, ...] = ()
    """A user's program and its arguments, run in ``job_dir`` (as ``ignite-tf start``)."""
    job_dir: str | None = None
    """The folder (or zip) ``command`` runs in."""
    serve_command: tuple[str, ...] = ()
    """What an async cluster's workers and parameter servers run instead of the runtime's TF server (a
    command's own server)."""
    py_modules: tuple[str, ...] = ()
    """Folders or ``.py`` files shipped to every task beside the entry point's own module."""
    mode: Mode = Mode.SYNC
    """``sync`` (MultiWorkerMirroredStrategy) or ``async`` (ParameterServerStrategy)."""
    workers: int | None = None
    """Workers; None: one per Ignite server node (or the shard plan's)."""
    ps: int = 1
    """Parameter servers (async mode)."""
    epochs: int | None = DEFAULT_EPOCHS
    """Passes over the data (None: not given; an entry point then fails to train, a command decides)."""
    batch_size: int = DEFAULT_BATCH_SIZE
    """Rows per step per worker."""
    steps_per_epoch: int | None = None
    """Steps of an epoch (None: the largest shard over the batch)."""
    learning_rate: float | None = None
    """Passed to the model function (None: its own default)."""
    label_column: str = DEFAULT_LABEL_COLUMN
    """The column the model predicts."""
    features: tuple[str, ...] = ()
    """Feature columns (empty: every numeric column but the key and the label)."""
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER
    """Rows a worker's input shuffles among."""
    checkpoint_every_steps: int | None = None
    """Back up within an epoch every this many steps (None: at each epoch's end)."""
    model_args: Mapping[str, Any] = field(default_factory=dict)
    """Keyword arguments of the model function (a dict, or its JSON text)."""
    extra_args: tuple[str, ...] = ()
    """More flags of ``python -m ignite_tf.runtime``, passed as they are."""

    def __post_init__(self):
        set_ = object.__setattr__
        try:
            set_(self, "mode", Mode(self.mode))
        except ValueError:
            raise JobError("mode", f"must be one of {[m.value for m in Mode]} (got {self.mode!r})") from None
        set_(self, "command", _strings("command", self.command))
        set_(self, "serve_command", _strings("serve_command", self.serve_command))
        set_(self, "py_modules", _strings("py_modules", self.py_modules))
        set_(self, "extra_args", _strings("extra_args", self.extra_args))
        set_(self, "features", _features(self.features))
        set_(self, "model_args", dict(_mapping("model_args", self.model_args)))
        for name, least in _INTS.items():
            set_(self, name, _integer(name, getattr(self, name), least))
        if self.learning_rate is not None:
            set_(self, "learning_rate", _number("learning_rate", self.learning_rate))
        if (self.entry_point is None) == (not self.command):
            raise JobError("entry_point", "or command: give exactly one of entry_point ('module:function') or "
                                          "command ([script, args...] with job_dir)")
        if self.mode is Mode.ASYNC and self.ps < 1:
            raise JobError("ps", f"must be at least 1 in async mode (got {self.ps})")
        if self.command:
            self._read_command_settings()
        elif self.job_dir is not None:
            raise JobError("job_dir", "goes with command; other code an entry point needs goes in py_modules")

    def _read_command_settings(self) -> None:
        """A command's settings are what its flags say; one given beside it must agree with them."""
        if self.extra_args:
            raise JobError("extra_args", "goes with entry_point; a command takes its settings as arguments")
        declared = {**_defaults(), "epochs": None, **_read_flags(self.command, strict=False)}
        declared.pop("entry_point", None)
        for name in SETTINGS:
            given, default = getattr(self, name), _defaults()[name]
            if given not in (default, declared[name]):
                raise JobError(name, f"goes with entry_point; a command sets it with its own flag (got {given!r})")
            object.__setattr__(self, name, declared[name])

    # -- reading ---------------------------------------------------------------------------------------------
    @classmethod
    def from_job(cls, job: TrainingJob | Mapping[str, Any], **fields_: Any) -> TrainingJob:
        """A job dict (``{"entry_point": ..., "args": [...]}`` or ``{"command": [...], "job_dir": ...}``,
        ``"py_modules"`` optional) as a TrainingJob; ``fields_`` (``mode=``, ``workers=``...) change one field
        each (None: unchanged). The runtime's flags in ``args`` become their fields; others stay in
        ``extra_args``."""
        if isinstance(job, TrainingJob):
            return job.build(**fields_)
        job = dict(job)
        unknown = set(job) - JOB_KEYS
        if unknown:
            raise JobError("job", f"has unknown keys {sorted(unknown)}: give entry_point and args, or command and "
                                  f"job_dir")
        if "command" in job:
            base = cls(command=job["command"], job_dir=job.get("job_dir"), py_modules=job.get("py_modules", ()),
                       serve_command=job.get("serve_command") or ())
        else:
            args, extra = _split_flags(_strings("args", job.get("args") or ()))
            read = {"epochs": None, **_read_flags(args, strict=True)}
            base = cls(**{"entry_point": job.get("entry_point"), **read, "extra_args": extra,
                          "py_modules": job.get("py_modules", ()), "serve_command": job.get("serve_command") or ()})
        return base.build(**fields_)

    def build(self, **settings: Any) -> TrainingJob:
        """This job with the ``settings`` given; a None or empty-string setting keeps this job's (an operator
        argument left out, a template that rendered to nothing)."""
        _check_known(settings)
        given = {k: v for k, v in settings.items() if v is not None and v != ""}
        return replace(self, **given) if given else self

    def with_flags(self, argv: Iterable[str]) -> TrainingJob:
        """This job with more runtime flags (an operator's ``extra_args``): the known ones set their fields."""
        args, extra = _split_flags(_strings("extra_args", argv))
        read = _read_flags(args, strict=True)
        if "model_args" in read:
            read["model_args"] = {**self.model_args, **read["model_args"]}
        return replace(self, **read, extra_args=(*self.extra_args, *extra))

    @property
    def model_entry_point(self) -> str | None:
        """The entry point whose model the tasks build: ``entry_point``, or a command's ``--entry-point``."""
        return self.entry_point or _read_flags(self.command, strict=False).get("entry_point")

    # -- rendering -------------------------------------------------------------------------------------------
    def runtime_args(self) -> list[str]:
        """The flags of ``python -m ignite_tf.runtime`` (after ``--entry-point``) that carry this job's settings."""
        if self.command:
            return []
        args = [*(["--epochs", str(self.epochs)] if self.epochs is not None else []),
                "--batch-size", str(self.batch_size), "--label-column", self.label_column]
        optional = {"--learning-rate": self.learning_rate, "--steps-per-epoch": self.steps_per_epoch,
                    "--checkpoint-every-steps": self.checkpoint_every_steps,
                    "--features": ",".join(self.features) or None,
                    "--shuffle-buffer": None if self.shuffle_buffer == DEFAULT_SHUFFLE_BUFFER else self.shuffle_buffer}
        for flag, value in optional.items():
            args += [flag, str(value)] if value is not None else []
        for key, value in self.model_args.items():
            args += ["--model-arg", f"{key}={json.dumps(value)}"]
        return [*args, *self.extra_args]

    def to_job(self) -> dict[str, Any]:
        """What a cluster's spec records and its tasks run (``ClusterSpec.job``): ``{"entry_point", "args"}`` or
        ``{"command", "job_dir"}``, with ``py_modules`` when there are any. ``from_job`` reads it back."""
        out: dict[str, Any] = ({"command": list(self.command), **({"job_dir": self.job_dir} if self.job_dir else {})}
                               if self.command else {"entry_point": self.entry_point, "args": self.runtime_args()})
        optional = {"serve_command": list(self.serve_command), "py_modules": list(self.py_modules)}
        return {**out, **{k: v for k, v in optional.items() if v}}

    def to_dict(self) -> dict[str, Any]:
        """JSON-able, every field; ``from_dict`` reads it back."""
        return {**asdict(self), "mode": self.mode.value, "model_args": dict(self.model_args),
                **{k: list(getattr(self, k)) for k in ("command", "serve_command", "py_modules", "features",
                                                  "extra_args")}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TrainingJob:
        _check_known(data)
        return cls(**data)

    @classmethod
    def parse(cls, value: TrainingJob | Mapping[str, Any]) -> TrainingJob:
        """A TrainingJob, its ``to_dict``, or a job dict of ``from_job``'s form."""
        if isinstance(value, TrainingJob):
            return value
        if set(value) <= JOB_KEYS:
            return cls.from_job(value)
        return cls.from_dict(value)


def _check_known(settings: Mapping[str, Any]) -> None:
    known = {f.name for f in fields(TrainingJob)}
    unknown = set(settings) - known
    if unknown:
        raise ConfigError(f"unknown training job settings {sorted(unknown)} (known: {sorted(known)})")


def _defaults() -> dict[str, Any]:
    return {f.name: f.default_factory() if callable(f.default_factory) else f.default for f in fields(TrainingJob)}


def _split_flags(argv: list[str]) -> tuple[list[str], list[str]]:
    """(the runtime's flags with their values, everything else) of an ``args`` list."""
    known, extra, i = [], [], 0
    while i < len(argv):
        flag = argv[i].partition("=")[0]
        if flag in RUNTIME_FLAGS:
            take = 1 if "=" in argv[i] else 2
            known += argv[i:i + take]
            i += take
        else:
            extra.append(argv[i])
            i += 1
    return known, extra


def _read_flags(argv: Iterable[str], *, strict: bool) -> dict[str, Any]:
    """The fields the runtime's flags in ``argv`` set (the last of a repeated flag wins, ``--model-arg``s add
    up). ``strict``: a bad value is an error (the runtime would refuse it); else it is skipped (a command's
    template not yet rendered)."""
    argv, out = list(argv), {}
    for i, item in enumerate(argv):
        flag, sep, inline = item.partition("=")
        name = RUNTIME_FLAGS.get(flag)
        if name is None or (not sep and i + 1 >= len(argv)):
            continue
        text = inline if sep else argv[i + 1]
        try:
            if name == "model_args":
                key, eq, raw = text.partition("=")
                if not eq or not key:
                    raise JobError(name, f"--model-arg {text!r}: expected key=value")
                out[name] = {**out.get(name, {}), key: _json_or_text(raw)}
            elif name in _INTS:
                out[name] = _integer(name, text, _INTS[name])
            elif name == "learning_rate":
                out[name] = _number(name, text)
            elif name == "features":
                out[name] = _features(text)
            else:
                out[name] = text
        except JobError:
            if strict:
                raise
    return out


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _strings(name: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise JobError(name, f"must be a list of strings (got {value!r})")
    return tuple(str(v) for v in value)


def _features(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        value = value.split(",")
    return tuple(s for s in (str(v).strip() for v in _strings("features", value)) if s)


def _mapping(name: str, value: Any) -> Mapping[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except ValueError:
            raise JobError(name, f"must be a mapping or its JSON text (got {value!r})") from None
    if not isinstance(value, Mapping):
        raise JobError(name, f"must be a mapping, e.g. {{\"hidden\": 64}} (got {value!r})")
    return value


def _integer(name: str, value: Any, least: int) -> int | None:
    if value is None and name in ("workers", "epochs", "steps_per_epoch", "checkpoint_every_steps"):
        return None
    try:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        number = int(value)
    except (TypeError, ValueError):
        raise JobError(name, f"must be an integer (got {value!r})") from None
    if number < least:
        raise JobError(name, f"must be at least {least} (got {number})")
    return number


def _number(name: str, value: Any) -> float:
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
    except (TypeError, ValueError):
        raise JobError(name, f"must be a number (got {value!r})") from None
    if number <= 0:
        raise JobError(name, f"must be > 0, or None for the model's default (got {number:g})")
    return number
