"""read_yaml: the one reader of user YAML/JSON files; each caller names the file and raises its own error."""

from __future__ import annotations

import pytest

from ignite_tf.documents import read_yaml
from ignite_tf.errors import LoadError
from ignite_tf.etl.input import read_schema


def test_read_yaml_reads_yaml_and_json_and_says_what_is_wrong(tmp_path):
    (tmp_path / "a.yaml").write_text("x: 1\ny: [a, b]\n")
    (tmp_path / "a.json").write_text('{"x": 1}')
    (tmp_path / "bad.yaml").write_text("x: [\n")
    assert read_yaml(tmp_path / "a.yaml", ValueError) == {"x": 1, "y": ["a", "b"]}
    assert read_yaml(tmp_path / "a.json", ValueError) == {"x": 1}
    with pytest.raises(ValueError, match=r"^is not valid YAML at line 2, column 1"):
        read_yaml(tmp_path / "bad.yaml", ValueError)
    with pytest.raises(ValueError, match=r"^cannot be read \("):
        read_yaml(tmp_path / "missing.yaml", ValueError)


def test_a_schema_file_error_names_the_file(tmp_path):
    (tmp_path / "s.yaml").write_text("a: [\n")
    with pytest.raises(LoadError, match=r"schema file .*s\.yaml: is not valid YAML at line"):
        read_schema(tmp_path / "s.yaml")
    (tmp_path / "s.json").write_text('{"a": "float32"}')
    assert read_schema(tmp_path / "s.json") == {"a": "float32"}
