"""The docs site builds with ``mkdocs build --strict`` (a broken link or anchor fails it), offline; its generated
pages show every key of the pipeline schema and every command of the CLI; the README's links into the site point
at pages that exist."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "provider" / "ignite_tf" / "resources" / "pipeline.schema.json"


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    # Material's end-of-life banner is noise here; it is not a warning of the build.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "WARNING" not in done.stderr, done.stderr
    return out


def key_paths(node: dict, defs: dict, path: str = "") -> list[str]:
    """Every key of a schema as the page anchors it: ``training.kubernetes.placement``; a list's items ``-item``."""
    if "$ref" in node:
        node = {**defs[node["$ref"].removeprefix("#/$defs/")], **node}
    out = []
    for key, child in node.get("properties", {}).items():
        child_path = f"{path}.{key}" if path else key
        out += [child_path, *key_paths(child, defs, child_path)]
    for part in node.get("anyOf", []) + node.get("oneOf", []) + node.get("allOf", []):
        out += key_paths(part, defs, path)
    if isinstance(node.get("items"), dict):
        out += key_paths(node["items"], defs, f"{path}-item")
    return list(dict.fromkeys(out))


def test_site_builds_strict_and_the_yaml_page_lists_every_schema_key(site):
    page = (site / "reference" / "yaml-spec" / "index.html").read_text()
    anchors = set(re.findall(r'id="([^"]+)"', page))
    schema = json.loads(SCHEMA.read_text())
    top_level = list(schema["properties"])
    assert top_level and not [k for k in top_level if k not in anchors]
    for key in top_level:
        assert f"<code>{key}</code>" in page, key
    every = key_paths(schema, schema.get("$defs", {}))
    assert len(every) > len(top_level)
    assert not [p for p in every if p not in anchors]
    # Defaults come from the schema too: e.g. training.restart_policy's.
    assert f"<code>{schema['properties']['training']['properties']['restart_policy']['default']}</code>" in page


def test_cli_page_shows_every_command_as_its_help_prints_it(site):
    page = (site / "reference" / "cli" / "index.html").read_text()
    for command in ("start", "stop", "attach", "ps", "tensorboard", "load"):
        assert f"usage: ignite-tf {command} " in page, command
        assert f'id="ignite-tf-{command}"' in page, command
    assert "usage: python -m ignite_tf.runtime " in page and "--progress-timeout" in page


def test_site_keeps_the_readme_screenshots(site):
    for name in ("ignite-tf-page.png", "trigger-form.png"):
        assert (site / name).is_file(), name


def test_readme_links_point_at_files_that_exist():
    text = (ROOT / "README.md").read_text()
    targets = [t for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) if "://" not in t]
    assert any(t.startswith("docs/") for t in targets)
    assert not [t for t in targets if not (ROOT / t).exists()]


def test_the_yaml_page_renders_what_a_schema_may_grow():
    """Keys behind a $ref, in an allOf, deprecated ones, and prose with Markdown's special characters: what the
    pipeline schema may hold after a change (the real schema is rendered by the build above)."""
    spec = importlib.util.spec_from_file_location("yaml_reference", ROOT / "docs" / "hooks" / "yaml_reference.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    schema = {
        "type": "object", "required": ["training"],
        "properties": {
            "training": {"type": "object", "allOf": [{"$ref": "#/$defs/supervision"}], "properties": {
                "label": {"type": "string", "deprecated": True, "description": "use label_column"},
                "env": {"type": "array", "items": {"type": "object", "required": ["name"],
                                                    "properties": {"name": {"type": "string"}}}},
            }},
            "schedule": {"type": ["string", "null"], "description": "a | b, e.g. {asset: <name>}"},
        },
        "$defs": {"supervision": {"type": "object", "required": ["grace_period_s"], "properties": {
            "grace_period_s": {"type": ["number", "string"], "exclusiveMinimum": 0, "default": 10,
                               "pattern": "^\\$\\{[A-Z]+\\}$"}}}},
    }
    page = hook.render(schema)
    for path in key_paths(schema, schema["$defs"]):
        assert f'id="{hook.anchor(path)}"' in page or "{#" + hook.anchor(path) + "}" in page, path
    assert "`grace_period_s` **required** | number > 0 or `${NAME}` reference | `10` |" in page
    assert "**Deprecated.** use label\\_column" in page
    assert "a \\| b, e.g. \\{asset: &lt;name>\\}" in page
