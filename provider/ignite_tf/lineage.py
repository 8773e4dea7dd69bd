"""OpenLineage for the operators, through Airflow's openlineage provider.

The provider calls an operator's ``get_openlineage_facets_on_start`` / ``_on_complete``; ours build their
answer here. Datasets:

- the Ignite table: namespace ``ignite://<host>:<port>`` (the connection's first thin-client endpoint, as
  OpenLineage names a database by its server), name the cache / SQL table;
- a model version: where the registry keeps it (``file`` or the object store's ``scheme://bucket``, then the
  version's path), with a ``version`` facet;
- the validation result: the table's ``dataQualityAssertions`` (one assertion per expectation) and
  ``dataQualityMetrics`` (rows read) facets, on every input that was validated.

OpenLineage's client is imported only inside these functions: Airflow imports operators while parsing DAGs.
"""

from __future__ import annotations

from typing import Any

SCHEME = "ignite"


def table_uri(cache: str, ignite_conn_id: str) -> str:
    """The URI of a table's Airflow Asset, ``ignite://<connection id>/<cache>``: a DAG is parsed without
    reading connections, so the Asset names the connection, not its endpoints."""
    return f"{SCHEME}://{ignite_conn_id}/{cache}"


def table_namespace(conn) -> str:
    """The OpenLineage namespace of an Ignite cluster: ``ignite://host:port`` of its first endpoint."""
    host, port = conn.addresses[0]
    return f"{SCHEME}://{host}:{port}"


def table_input(conn, cache: str, validation: dict | None = None):
    """The table as an OpenLineage input; with ``validation`` (``ValidationSummary.to_dict()``), its checks as
    ``dataQualityAssertions`` and the rows read as ``dataQualityMetrics``."""
    from openlineage.client.event_v2 import InputDataset
    from openlineage.client.facet_v2 import data_quality_assertions_dataset as dqa
    from openlineage.client.facet_v2 import data_quality_metrics_input_dataset as dqm

    facets: dict[str, Any] = {}
    input_facets: dict[str, Any] = {}
    if validation:
        facets["dataQualityAssertions"] = dqa.DataQualityAssertionsDatasetFacet(assertions=[
            # severity "error": a failed check stops the run before training
            dqa.Assertion(assertion=check["expectation"], success=bool(check["success"]), column=check.get("column"),
                          severity="error", params={k: v for k, v in check.get("kwargs", {}).items() if k != "column"},
                          description=check.get("detail") or None)
            for check in validation.get("checks", ())])
        input_facets["dataQualityMetrics"] = dqm.DataQualityMetricsInputDatasetFacet(
            rowCount=validation.get("rows"), columnMetrics={})
    return InputDataset(namespace=table_namespace(conn), name=cache, facets=facets, inputFacets=input_facets)


def table_output(conn, cache: str, schema: dict[str, str] | None = None, rows_written: int | None = None):
    """The table as an OpenLineage output: its columns when known, the rows written."""
    from openlineage.client.event_v2 import OutputDataset
    from openlineage.client.facet_v2 import output_statistics_output_dataset as stats
    from openlineage.client.facet_v2 import schema_dataset

    facets: dict[str, Any] = {}
    if schema:
        facets["schema"] = schema_dataset.SchemaDatasetFacet(fields=[
            schema_dataset.SchemaDatasetFacetFields(name=name, type=kind) for name, kind in schema.items()])
    output_facets = ({"outputStatistics": stats.OutputStatisticsOutputDatasetFacet(rowCount=rows_written)}
                     if rows_written is not None else {})
    return OutputDataset(namespace=table_namespace(conn), name=cache, facets=facets, outputFacets=output_facets)


def file_dataset(location: str) -> tuple[str, str]:
    """(namespace, name) of a file or object-store location, as OpenLineage names files: ``file`` and the
    absolute path, or ``scheme://bucket`` and the key."""
    from pathlib import Path
    from urllib.parse import urlsplit

    if "://" not in location:
        return "file", str(Path(location).expanduser().absolute())
    url = urlsplit(location)
    if url.scheme == "file":
        return "file", url.path
    return f"{url.scheme}://{url.netloc}", url.path.lstrip("/")


def model_output(published: dict):
    """The published model version (``PublishResult.to_dict()``) as an OpenLineage output."""
    from openlineage.client.event_v2 import OutputDataset
    from openlineage.client.facet_v2 import dataset_version_dataset

    namespace, name = file_dataset(published["path"])
    return OutputDataset(namespace=namespace, name=name, facets={
        "version": dataset_version_dataset.DatasetVersionDatasetFacet(datasetVersion=str(published["version"]))})


def load_lineage(conn, cache: str, source: Any, schema: dict[str, str] | None = None,
                 rows_written: int | None = None):
    """A load: the source file (when it is one) in, the table out."""
    from openlineage.client.event_v2 import InputDataset

    inputs = [InputDataset(*file_dataset(source))] if isinstance(source, str) else []
    return lineage(inputs, [table_output(conn, cache, schema, rows_written)])


def lineage(inputs: list | None = None, outputs: list | None = None):
    """The provider's OperatorLineage."""
    from airflow.providers.openlineage.extractors import OperatorLineage

    return OperatorLineage(inputs=list(inputs or ()), outputs=list(outputs or ()))
