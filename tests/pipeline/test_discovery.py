"""The DAG file the README documents, written as is into a fresh dags folder, is found by Airflow's DagBag with
safe-mode discovery on (Airflow then parses only files containing "airflow" and "dag")."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def documented_dag_file() -> str:
    """The README's Python block that calls ``load_dags`` (docs and test cannot drift apart)."""
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "README.md").read_text(), flags=re.S)
    found = [b for b in blocks if "load_dags(" in b]
    assert len(found) == 1, found
    return found[0]


def fresh_dags_folder(folder: Path, dag_file: str) -> Path:
    (folder / "specs").mkdir(parents=True)
    (folder / "suite.yaml").write_text((REPO / "dags" / "expectations" / "tabular.yaml").read_text())
    spec = {"dag_id": "discovered_by_safe_mode", "cache": "discovery", "suite": "../suite.yaml",
            "source": {"generator": "ignite_tf_dev.demo_data:tabular", "rows": 100},
            "training": {"entry_point": "ignite_tf.models:tabular_classifier", "workers": 2}}
    (folder / "specs" / "pipeline.yaml").write_text(yaml.safe_dump(spec))
    (folder / "pipelines.py").write_text(dag_file)
    return folder


def test_documented_dag_file_is_the_shipped_one_and_carries_the_words_in_code():
    text = documented_dag_file()
    assert text == (REPO / "dags" / "pipelines.py").read_text()
    module = ast.parse(text)
    assert ast.get_docstring(module) is None
    tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
    assert not [t for t in tokens if t.type in (tokenize.COMMENT, tokenize.STRING) and "airflow" in t.string.lower()]
    code = " ".join(t.string for t in tokens if t.type == tokenize.NAME).lower()
    assert "airflow" in code and "dag" in code


def test_dagbag_in_safe_mode_finds_the_documented_file(tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    folder = fresh_dags_folder(tmp_path / "dags", documented_dag_file())
    bag = DagBag(dag_folder=str(folder), safe_mode=True)
    assert bag.import_errors == {}
    assert set(bag.dags) == {"discovered_by_safe_mode"}
    assert not bag.captured_warnings, bag.captured_warnings
    assert Path(bag.dags["discovered_by_safe_mode"].fileloc) == folder / "pipelines.py"


def test_without_the_name_safe_mode_skips_the_file_and_load_dags_says_so(tmp_path):
    from airflow.dag_processing.dagbag import DagBag

    bare = documented_dag_file().replace("airflow_dags = ", "")
    assert "airflow" not in bare.lower()
    folder = fresh_dags_folder(tmp_path / "dags", bare)
    assert DagBag(dag_folder=str(folder), safe_mode=True).dags == {}
    with pytest.warns(UserWarning, match="safe-mode DAG discovery skips this file"):
        bag = DagBag(dag_folder=str(folder), safe_mode=False)  # parsed anyway: the DAGs are there, and a warning
    assert set(bag.dags) == {"discovered_by_safe_mode"}
    warned = "\n".join(w for ws in bag.captured_warnings.values() for w in ws)
    assert "safe-mode DAG discovery skips this file" in warned, warned
