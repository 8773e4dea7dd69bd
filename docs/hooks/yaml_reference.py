"""MkDocs hook: the YAML spec reference, rendered at build time from the JSON Schema the spec parser checks
against (``ignite_tf/resources/pipeline.schema.json``), so the page cannot drift from what is accepted.

``docs/reference/yaml-spec.md`` holds a hand-written intro and the marker below; this hook replaces the marker
with one table per mapping of the spec (key, type, default, description). Every key gets an anchor named by its
path (``#training.restart_policy``), so other pages link to a key. A page without the marker fails the build.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

MARKER = "<!-- yaml-spec: generated from pipeline.schema.json -->"
PAGE = "reference/yaml-spec.md"
# Any string may be an environment reference; a number field accepts one through this pattern.
ENV_REFERENCE_PREFIX = "^\\$\\{"


def schema_text() -> str:
    """The schema as the installed package ships it (``make setup`` installs the source tree editable)."""
    return resources.files("ignite_tf").joinpath("resources", "pipeline.schema.json").read_text()


def on_config(config):
    # `mkdocs serve` rebuilds when the schema changes.
    config.watch.append(str(resources.files("ignite_tf").joinpath("resources")))
    return config


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        from mkdocs.exceptions import PluginError

        raise PluginError(f"{PAGE} lost its marker {MARKER!r}: the generated YAML reference has nowhere to go")
    return markdown.replace(MARKER, render(json.loads(schema_text())))


# -- rendering ------------------------------------------------------------------------------------------------

class Renderer:
    """One section per mapping, depth first: the top-level keys, then ``source``, ``training``,
    ``training.kubernetes``..."""

    def __init__(self, schema: dict[str, Any]):
        self.defs = schema.get("$defs", {})
        self.sections: list[str] = []

    def resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        """A node with its ``$ref`` merged in (the node's own keys, e.g. a description, win)."""
        ref = node.get("$ref")
        if not ref:
            return node
        name = ref.removeprefix("#/$defs/")
        if name not in self.defs:
            raise KeyError(f"pipeline.schema.json: unresolvable $ref {ref!r}")
        merged = dict(self.resolve(self.defs[name]))
        merged.update({k: v for k, v in node.items() if k != "$ref"})
        return merged

    def mapping(self, node: dict[str, Any]) -> dict[str, Any]:
        """The keys a node allows as a mapping: its own and those of its ``allOf``/``anyOf``/``oneOf`` parts; a key
        is required where the node itself or an ``allOf`` part requires it."""
        node = self.resolve(node)
        properties, required = dict(node.get("properties", {})), set(node.get("required", []))
        for kind in ("allOf", "anyOf", "oneOf"):
            for part in node.get(kind, []):
                part = self.mapping(part)
                for key, child in part["properties"].items():
                    properties.setdefault(key, child)
                if kind == "allOf":
                    required |= set(part["required"])
        return {"properties": properties, "required": required}

    def sub_mapping(self, node: dict[str, Any]):
        """``(path suffix, node)`` of a mapping with named keys under this key (a list of them: ``[]``), else None."""
        if self.mapping(node)["properties"]:
            return "", node
        items = node.get("items")
        if isinstance(items, dict) and self.mapping(items)["properties"]:
            return "[]", items
        return None

    def section(self, path: str, node: dict[str, Any], level: int) -> None:
        node = self.resolve(node)
        mapping = self.mapping(node)
        required = mapping["required"]
        title = "Top-level keys" if not path else f"`{path}`"
        lines = [f"{'#' * level} {title} {{#{anchor(path) if path else 'top-level-keys'}}}", ""]
        if path and node.get("description"):
            lines += [escape_text(node["description"]), ""]
        lines += ["| key | type | default | description |", "|---|---|---|---|"]
        nested = []
        for key, child in mapping["properties"].items():
            child_path = f"{path}.{key}" if path else key
            child = self.resolve(child)
            sub = self.sub_mapping(child)
            if sub is not None:
                nested.append((child_path + sub[0], sub[1]))
            lines.append(self.row(child_path, key, child, key in required, sub))
        self.sections.append("\n".join(lines) + "\n")
        # The top-level mappings are sections of their own beside the top-level table, deeper ones nest.
        for child_path, child in nested:
            self.section(child_path, child, min(level + 1 if path else level, 4))

    def row(self, path: str, key: str, node: dict[str, Any], required: bool, sub) -> str:
        # A key whose mapping has its own section is anchored by that section's heading.
        name = ("" if sub is not None and not sub[0] else f'<a id="{anchor(path)}"></a>') + f"`{key}`"
        name += " **required**" if required else ""
        kind = type_text(node, self)
        if sub is not None:
            kind += f" ([keys](#{anchor(path + sub[0])}))"
        default = f"`{yaml_value(node['default'])}`" if "default" in node else ""
        description = escape_text(node.get("description", ""))
        if node.get("deprecated"):
            description = "**Deprecated.** " + description
        return f"| {name} | {kind} | {default} | {description} |"


def anchor(path: str) -> str:
    """The HTML id of a key: its path (``training.kubernetes.placement``); ``[]`` (a list's items) as ``-item``."""
    return path.replace("[]", "-item")


def type_text(node: dict[str, Any], renderer: Renderer) -> str:
    node = renderer.resolve(node)
    alternatives = node.get("anyOf", []) + node.get("oneOf", [])
    if alternatives:
        return " or ".join(dict.fromkeys(type_text(a, renderer) for a in alternatives))
    if "const" in node:
        return f"`{yaml_value(node['const'])}`"
    if "enum" in node:
        return "one of " + ", ".join(f"`{yaml_value(v)}`" for v in node["enum"])
    types = node.get("type", [])
    types = [types] if isinstance(types, str) else list(types)
    if not types:
        return "any"
    scalar_with_reference = "string" in types and len(types) > 1 and str(node.get("pattern", "")).startswith(
        ENV_REFERENCE_PREFIX)
    parts = []
    for t in types:
        if t == "string" and scalar_with_reference:
            parts.append("`${NAME}` reference")
        else:
            parts.append(one_type(t, node, renderer))
    return " or ".join(parts)


def one_type(kind: str, node: dict[str, Any], renderer: Renderer) -> str:
    if kind in ("integer", "number"):
        return kind + bounds(node)
    if kind == "string":
        text = "string"
        if "pattern" in node:
            pattern = node["pattern"].replace("|", "\\|")
            text += f" matching `{pattern}`"
        if "minLength" in node and node["minLength"] > 0:
            text += ", not empty" if node["minLength"] == 1 else f", at least {node['minLength']} characters"
        if "maxLength" in node:
            text += f", at most {node['maxLength']} characters"
        return text
    if kind == "array":
        items = node.get("items")
        text = "list"
        if isinstance(items, dict) and items:
            of = "mappings" if renderer.mapping(items)["properties"] else type_text(items, renderer)
            text += f" of ({of})" if ", " in of or " or " in of else f" of {of}"
        counts = (node.get("minItems"), node.get("maxItems"))
        if counts[0] is not None and counts[0] == counts[1]:
            text += f", exactly {counts[0]} items"
        else:
            if counts[0]:
                text += f", at least {counts[0]} item" + ("s" if counts[0] > 1 else "")
            if counts[1] is not None:
                text += f", at most {counts[1]} items"
        if node.get("uniqueItems"):
            text += ", no duplicates"
        return text
    if kind == "object":
        extra = node.get("additionalProperties")
        if renderer.mapping(node)["properties"]:
            return "mapping"
        if isinstance(extra, dict) and extra:
            return "mapping of name to " + type_text(extra, renderer)
        return "mapping"
    return kind


def bounds(node: dict[str, Any]) -> str:
    low = (">", node["exclusiveMinimum"]) if "exclusiveMinimum" in node else (
        ("≥", node["minimum"]) if "minimum" in node else None)
    high = ("<", node["exclusiveMaximum"]) if "exclusiveMaximum" in node else (
        ("≤", node["maximum"]) if "maximum" in node else None)
    if low and high and low[0] == "≥" and high[0] == "≤":
        return f" {low[1]} to {high[1]}"
    return " " + ", ".join(f"{op} {value}" for op, value in (b for b in (low, high) if b)) if low or high else ""


def yaml_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    return json.dumps(value)


def escape_text(text: str) -> str:
    """Schema prose as plain text in Markdown: no emphasis, links or code, no HTML, and no '{...}' that
    attr_list would take for attributes at the end of a table cell; a bare '|' would end the cell."""
    for char in "\\`*_[]{}|":
        text = text.replace(char, "\\" + char)
    return text.replace("<", "&lt;").replace("\n", " ")


def render(schema: dict[str, Any]) -> str:
    renderer = Renderer(schema)
    intro = []
    if schema.get("description"):
        intro += ['!!! abstract "The schema\'s summary"', "", "    " + escape_text(schema["description"]), ""]
    renderer.section("", schema, 2)
    return "\n".join(intro) + "\n" + "\n".join(renderer.sections)
