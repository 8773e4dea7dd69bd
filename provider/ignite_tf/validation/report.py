"""The reports of a validation: ``validation.json`` and GX's own Data Docs site, written by ``write_results``.

``jsonable`` turns what GX and the reader observed (NumPy scalars, NaN, pandas' missing values) into
plain JSON. The results themselves and their merge are in :mod:`ignite_tf.validation.results`.
"""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import TYPE_CHECKING

from ignite_tf.jsonable import jsonable

if TYPE_CHECKING:
    from ignite_tf.validation.results import ValidationSummary



def _data_docs(summary: ValidationSummary, out: Path) -> Path:
    """GX's own Data Docs site: one page per shard, plus one for the checks made over the whole cache."""
    import great_expectations as gx
    from great_expectations.core.expectation_validation_result import ExpectationSuiteValidationResultSchema
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )

    context = gx.get_context(mode="ephemeral")
    context.add_data_docs_site("ignite_tf", {
        "class_name": "SiteBuilder", "show_how_to_buttons": False,
        "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(out)},
        "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"}})
    run_id = RunIdentifier(run_name=summary.suite, run_time=datetime.datetime.now(datetime.UTC))
    schema = ExpectationSuiteValidationResultSchema()
    pages = {f"shard-{s.shard}": s.gx_result for s in summary.shards if s.gx_result}
    whole = [c for c in summary.checks if c.scope == "cache"]
    if whole:
        results = [{"success": c.success, "expectation_config": {"type": c.expectation, "kwargs": c.kwargs},
                    "result": {"observed_value": c.observed_value, "element_count": c.element_count,
                               "unexpected_count": c.unexpected_count, "unexpected_percent": c.unexpected_percent,
                               "partial_unexpected_list": [b.get("value") for b in c.bad_rows]}
                    if c.unexpected_count is not None else {"observed_value": c.observed_value},
                    "exception_info": {"raised_exception": c.error is not None, "exception_message": c.error,
                                       "exception_traceback": None}}
                   for c in whole]
        ok = sum(c.success for c in whole)
        pages["cache"] = jsonable({"success": ok == len(whole), "results": results, "suite_name": summary.suite,
                                    "meta": {"ignite_tf_scope": "whole cache"},
                                    "statistics": {"evaluated_expectations": len(whole), "successful_expectations": ok,
                                                   "unsuccessful_expectations": len(whole) - ok,
                                                   "success_percent": 100.0 * ok / len(whole)}})
    for name, page in pages.items():
        page["meta"] = {**page.get("meta", {}), "run_id": run_id.to_json_dict(), "active_batch_definition": {
            "datasource_name": "ignite", "data_connector_name": "ignite_tf", "batch_identifiers": {},
            "data_asset_name": f"{summary.cache or 'cache'} {name}"}}
        key = ValidationResultIdentifier(ExpectationSuiteIdentifier(name=summary.suite), run_id, name)
        context.validation_results_store.set(key, schema.load(page))
    context.build_data_docs(site_names=["ignite_tf"])
    return out / "index.html"


def write_results(summary: ValidationSummary, run_dir: str | Path) -> dict[str, str]:
    """Write ``run_dir/validation.json`` and GX Data Docs under ``run_dir/data_docs/``; return their paths.
    ``run_dir`` may be an object-store URL (``ignite_tf.runstore``): the files are made in a temporary
    folder and copied there."""
    from ignite_tf.runstore import RunStore, is_remote

    if is_remote(run_dir):
        import tempfile

        store = RunStore(str(run_dir))
        with tempfile.TemporaryDirectory(prefix="ignite-tf-validation-") as tmp:
            local = write_results(summary, tmp)
            store.put_file(local["json"], "validation.json")
            store.put_dir(Path(tmp) / "data_docs", "data_docs")
            index = Path(local["data_docs"]).relative_to(tmp).as_posix()
        return {"json": store.path("validation.json"), "data_docs": store.path(index)}
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    data = {**summary.to_dict(), "suite_definition": summary.suite_dict,
            "shards": [s.to_dict(gx=False) for s in summary.shards]}
    out = run_dir / "validation.json"
    tmp = out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    tmp.replace(out)
    index = _data_docs(summary, run_dir / "data_docs")
    return {"json": str(out), "data_docs": str(index)}
