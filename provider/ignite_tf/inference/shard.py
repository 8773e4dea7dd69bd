"""Scoring one shard: read its rows, run the model, write the predictions (one ``predict_shard`` call).

One call scores one shard (partitions or ReadTasks), so an Airflow task mapped over the shards of a
ShardPlan scores the whole cache in parallel, each task reading its own partitions. Predictions go to
``output_cache`` keyed like the input, written with :func:`ignite_tf.etl.load`: a retried shard overwrites
its own rows and never adds rows. Memory is one read batch plus at most ``write_rows`` pending
predictions, whatever the size of the shard.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from ignite_tf.connection import IgniteConnectionConfig
from ignite_tf.defaults import DEFAULT_LABEL_COLUMN
from ignite_tf.errors import ConfigError
from ignite_tf.inference.model import KINDS, Predictor, postprocess
from ignite_tf.reader.layout import feature_columns
from ignite_tf.reader.partition import PartitionReader
from ignite_tf.reader.tasks import ReadTask


@dataclass
class InferenceReport:
    """What one ``predict_shard`` call did; JSON-able through ``to_dict()`` (it travels through XCom).

    :param kind: ``classifier`` (prediction = argmax class, score = its probability) or ``regressor``.
    :param rows_with_nan: rows with a NULL/NaN feature (scored anyway; their predictions may be NaN).
    """

    model: str
    version: str
    input_cache: str
    output_cache: str
    key_column: str = ""
    features: list[str] = field(default_factory=list)
    kind: str = ""
    partitions: list[int] = field(default_factory=list)
    tasks: int = 0
    rows_scored: int = 0
    rows_written: int = 0
    rows_with_nan: int = 0
    batches: int = 0
    writes: int = 0
    model_load_seconds: float = 0.0
    read_seconds: float = 0.0
    predict_seconds: float = 0.0
    write_seconds: float = 0.0
    seconds: float = 0.0
    rows_per_second: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def predict_shard(conn: IgniteConnectionConfig, *, registry_root, model: str, version: str | None = None,
                  input_cache: str, output_cache: str, tasks, features: list[str] | None = None,
                  batch_size: int = 1024, kind: str | None = None, with_score: bool = True,
                  write_rows: int = 50_000, partition_map=None, model_cache_dir: str | None = None,
                  storage_options: dict | None = None) -> InferenceReport:
    """Score the rows of ``tasks`` in ``input_cache`` and write the predictions to ``output_cache``.

    Output columns: the input's key column (same key values), ``prediction`` (int32 class for a
    classifier, float32 value for a regressor) and, for classifiers with ``with_score``, ``score`` (float32
    probability of the predicted class).

    :param conn: the cluster.
    :param registry_root: the :class:`~ignite_tf.registry.publish.ModelRegistry` root (path, URL, ObjectStoragePath).
    :param model: model name in the registry.
    :param version: version to use; default the production version.
    :param input_cache: cache holding the rows to score.
    :param output_cache: cache (SQL table) receiving the predictions; created on first write.
    :param tasks: partition numbers, ``ReadTask`` objects or their dicts (one shard of a ShardPlan).
    :param features: input columns in the model's order; default the ``features`` training param recorded in
        the version's metadata, else every numeric column but the key and the label.
    :param batch_size: rows per read batch and per model call.
    :param kind: ``classifier`` or ``regressor``; default the ``task`` training param, else from the output width.
    :param with_score: also write ``score`` for classifiers.
    :param write_rows: predictions buffered before each write to Ignite.
    :param partition_map: a ``PartitionMap`` (or its dict) to route reads without asking the cluster.
    :param model_cache_dir: where a model from an object-store registry is downloaded.
    :param storage_options: fsspec options for a URL ``registry_root``.
    :raises ConfigError: unknown model/version, features or kind, or output_cache == input_cache.
    """
    started = time.monotonic()
    _check(input_cache, output_cache, batch_size, write_rows)
    tasks = [ReadTask.coerce(t) for t in tasks]
    path, version, params = _resolve_model(registry_root, model, version, model_cache_dir, storage_options)
    kind = kind or params.get("task")
    if kind is not None and kind not in KINDS:
        raise ConfigError(f"kind must be one of {KINDS} (got {kind!r})")
    report = InferenceReport(model=model, version=version, input_cache=input_cache, output_cache=output_cache,
                             partitions=sorted({t.partition for t in tasks}), tasks=len(tasks))
    routes = _routes(partition_map)
    report.key_column, report.features = _columns(conn, input_cache, batch_size, routes, params, features)
    loaded = time.monotonic()
    predictor = Predictor(path, report.features)
    report.model_load_seconds = round(time.monotonic() - loaded, 3)
    with PredictionWriter(conn, output_cache, report, write_rows) as writer, \
            PartitionReader(conn, input_cache, columns=report.features, batch_size=batch_size, **routes) as reader:
        began = time.monotonic()
        for batch in reader.batches(tasks):
            scoring = time.monotonic()
            report.read_seconds += scoring - began
            frame = _score(batch, predictor, kind, with_score, report)
            report.predict_seconds += time.monotonic() - scoring
            writer.add(frame)
            began = time.monotonic()
    return _finish(report, kind, started)


def _check(input_cache: str, output_cache: str, batch_size: int, write_rows: int) -> None:
    if output_cache.lower() == input_cache.lower():
        raise ConfigError(f"output_cache {output_cache!r} is the input cache: write predictions to another cache")
    if batch_size < 1 or write_rows < 1:
        raise ConfigError(f"batch_size and write_rows must be >= 1 (got {batch_size}, {write_rows})")


def _resolve_model(registry_root, model: str, version: str | None, cache_dir: str | None,
                   storage_options: dict | None) -> tuple[str, str, dict]:
    """(local SavedModel path, version, training params) of ``model`` (default: its production version)."""
    from ignite_tf.registry.publish import ModelRegistry

    registry = ModelRegistry(registry_root, storage_options=storage_options)
    version = version or registry.production(model)
    path = registry.fetch(model, version, cache_dir=cache_dir)  # raises when there is no such version
    return path, version, registry.metadata(model, version).get("params", {})


def _routes(partition_map) -> dict:
    """The reader's routes from a PartitionMap (or its dict); none: the reader asks the cluster."""
    if partition_map is None:
        return {}
    from ignite_tf.plan.partitions import PartitionMap

    pm = partition_map if isinstance(partition_map, PartitionMap) else PartitionMap.from_dict(partition_map)
    return {"primaries": pm.primary_addresses(), "backups": pm.backup_addresses()}


def _columns(conn, cache: str, batch_size: int, routes: dict, params: dict,
             features: list[str] | None) -> tuple[str, list[str]]:
    """(key column, feature columns) of the input: ``features``, else the model's recorded ones, else numeric."""
    with PartitionReader(conn, cache, batch_size=batch_size, **routes) as probe:
        schema, key = dict(probe.schema), probe.key_column
    # ``label`` is what versions published before ``label_column`` recorded.
    label = str(params.get("label_column") or params.get("label") or DEFAULT_LABEL_COLUMN).lower()
    return key, feature_columns(schema, cache, key=key, label=label, numeric=True,
                                features=params.get("features") if features is None else features)


def _score(batch: dict, predictor: Predictor, kind: str | None, with_score: bool,
           report: InferenceReport) -> pd.DataFrame:
    """One read batch's predictions as the output rows (key, prediction[, score])."""
    x = np.column_stack([np.ma.filled(np.ma.asarray(batch[f]).astype(np.float32), np.nan) for f in report.features])
    report.rows_with_nan += int(np.isnan(x).any(axis=1).sum())
    report.kind, pred, score = postprocess(predictor(x), kind)
    out = {report.key_column: np.asarray(batch[report.key_column], dtype=np.int64), "prediction": pred}
    if score is not None and with_score:
        out["score"] = score
    report.rows_scored += len(pred)
    report.batches += 1
    return pd.DataFrame(out)


def _finish(report: InferenceReport, kind: str | None, started: float) -> InferenceReport:
    report.kind = report.kind or kind or ""
    for name in ("read_seconds", "predict_seconds", "write_seconds"):
        setattr(report, name, round(getattr(report, name), 3))
    report.seconds = round(time.monotonic() - started, 3)
    report.rows_per_second = round(report.rows_scored / max(report.seconds, 1e-9), 1)
    return report


class PredictionWriter:
    """Predictions buffered and written to ``output_cache`` with ``load`` once ``write_rows`` are pending
    (and at the end of a shard that finished), over one client; counts go to ``report``."""

    def __init__(self, conn: IgniteConnectionConfig, output_cache: str, report: InferenceReport, write_rows: int):
        self.conn, self.output_cache, self.report, self.write_rows = conn, output_cache, report, write_rows
        self.pending: list[pd.DataFrame] = []
        self.client = conn.client()

    def add(self, frame: pd.DataFrame) -> None:
        self.pending.append(frame)
        if sum(len(p) for p in self.pending) >= self.write_rows:
            self.flush()

    def flush(self) -> None:
        from ignite_tf.etl import load

        if not self.pending:
            return
        began = time.monotonic()
        frame = pd.concat(self.pending, ignore_index=True)
        self.pending.clear()
        load(self.conn, self.output_cache, frame, key=self.report.key_column, client=self.client)
        self.report.rows_written += len(frame)
        self.report.writes += 1
        self.report.write_seconds += time.monotonic() - began

    def __enter__(self) -> PredictionWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                self.flush()
        finally:
            self.client.close()
