"""Declarative pipelines: Airflow DAGs from YAML specs (schema: ``ignite_tf/resources/pipeline.schema.json``).

A DAG file of three lines registers one DAG per spec (and an inference DAG per spec with ``inference:``)::

    from ignite_tf.pipeline import load_dags

    airflow_dags = load_dags(__file__, "specs/*.yaml", globals())

The name ``airflow_dags`` is there for Airflow: with ``[core] dag_discovery_safe_mode`` (on by default) it
parses only ``.py`` files whose bytes contain both "airflow" and "dag" (any case), and the import line
alone has no "airflow". ``load_dags`` warns when its file would be skipped that way.

A spec with errors does not hide the others. Airflow records an import error per Python file, and an
exception here would drop every DAG of the file; so a bad spec is logged and emitted as a
:class:`SpecWarning` (Airflow keeps the warnings of each parsed file, and the DAG processor log shows them)
naming the spec file and field, and the good specs are registered. ``strict=True`` raises instead (for CI:
``python -m ignite_tf.pipeline dags/specs/*.yaml`` checks specs without Airflow).

Importing this package is light: the factory (and Airflow) is imported when ``load_dags`` runs.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any

from ignite_tf.errors import SpecDeprecationWarning

__all__ = ["SpecDeprecationWarning", "SpecWarning", "load_dags"]

log = logging.getLogger(__name__)


class SpecWarning(UserWarning):
    """A pipeline spec was skipped because it is invalid (the message names the file and the field)."""


def load_dags(dag_file: str | Path, pattern: str = "specs/*.yaml", namespace: dict[str, Any] | None = None, *,
              strict: bool = False) -> dict[str, Any]:
    """Parse every spec matching ``pattern`` (relative to ``dag_file``'s folder) and build its DAGs.

    :param dag_file: the calling DAG file (``__file__``); DAGs are attributed to it.
    :param pattern: glob of spec files, relative to the DAG file's folder.
    :param namespace: where to register the DAGs (the DAG file's ``globals()``), keyed by dag id.
    :param strict: raise the first spec's error instead of skipping bad specs with a warning.
    :returns: dag id -> DAG, the good specs' DAGs.
    :raises SpecError: with ``strict``, a bad spec or a dag id defined twice.
    """
    from ignite_tf.errors import SpecError
    from ignite_tf.pipeline.factory import build_dag, render
    from ignite_tf.pipeline.spec import parse_spec

    _warn_if_skipped_by_safe_mode(Path(dag_file))
    folder = Path(dag_file).absolute().parent
    files = sorted(folder.glob(pattern))
    if not files:
        warnings.warn(f"no pipeline specs match {pattern!r} in {folder}", SpecWarning, stacklevel=2)
    dags: dict[str, Any] = {}
    owners: dict[str, Path] = {}
    for path in files:
        try:
            specs = render(parse_spec(path))
            for spec in specs:
                if spec.dag_id in owners:
                    raise SpecError(path, [("dag_id", f"{spec.dag_id!r} is already defined by {owners[spec.dag_id]}; "
                                                      f"give each spec its own dag_id")])
            built = [build_dag(spec, str(Path(dag_file).absolute())) for spec in specs]
        except Exception as exc:
            error = exc if isinstance(exc, SpecError) else SpecError(
                path, [("(dag)", f"could not be built: {type(exc).__name__}: {exc}")])
            if strict:
                raise error from (None if error is exc else exc)
            log.error("skipped pipeline spec: %s", error)
            warnings.warn(str(error), SpecWarning, stacklevel=2)
            continue
        for dag in built:
            dags[dag.dag_id] = dag
            owners[dag.dag_id] = path
    if namespace is not None:
        namespace.update(dags)
    return dags


def _warn_if_skipped_by_safe_mode(dag_file: Path) -> None:
    """Warn when Airflow's safe-mode discovery would not parse ``dag_file`` (its own heuristic decides)."""
    try:
        from airflow.utils.file import might_contain_dag
    except ImportError:  # another Airflow: its own discovery rules apply, nothing to say here
        return
    if dag_file.suffix == ".py" and dag_file.is_file() and not might_contain_dag(str(dag_file), safe_mode=True):
        warnings.warn(f"{dag_file}: Airflow's safe-mode DAG discovery skips this file, as it lacks the words "
                      f"'airflow' and 'dag'; name the result 'airflow_dags = load_dags(...)' as the README shows",
                      UserWarning, stacklevel=3)
