"""The published JSON Schema of pipeline specs (``resources/pipeline.schema.json``) and its problems in words.

Each violation becomes ``(field path, message)``: the path a user finds in the file (``training.workers``) and
what is allowed there. A key renamed since an earlier release is read under its new name for one more release
(``upgrade_renamed_keys``; the spec loader warns naming the new key).
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from importlib import resources
from typing import Any

SCHEMA_RESOURCE = "pipeline.schema.json"
# Keys of earlier releases -> their new names, per section; ``script`` + ``args`` together became ``command``.
RENAMED_KEYS = {"training": {"label": "label_column", "script": "command", "args": "command"},
                "publish": {"registry": "registry_root"}}


@cache
def schema() -> dict[str, Any]:
    """The published JSON Schema of pipeline specs."""
    return json.loads(resources.files("ignite_tf").joinpath("resources", SCHEMA_RESOURCE).read_text())


def param_bounds(name: str) -> dict[str, Any]:
    """JSON-schema bounds (``minimum``...) of a training setting, shared by the spec schema and the Params."""
    return {k: v for k, v in schema()["$defs"][name].items() if k not in ("type", "pattern")}


def upgrade_renamed_keys(doc: Any) -> tuple[Any, list[tuple[str, str]]]:
    """``doc`` with the keys of earlier releases (``RENAMED_KEYS``) under their new names, and each renamed
    key as ``(old path, new path)``.

    ``training.script`` + ``training.args`` become ``training.command: [script, *args]``. A section that holds
    both an old key and its new name is left as it is: the schema then refuses the old key, naming the new.
    """
    if not isinstance(doc, dict):
        return doc, []
    out, renamed = dict(doc), []
    for section, names in RENAMED_KEYS.items():
        keys = out.get(section)
        old = [k for k in names if isinstance(keys, dict) and k in keys]
        if not old or any(names[k] in keys for k in old):
            continue
        new = {k: v for k, v in keys.items() if k not in old}
        for key in old:
            if names[key] == "command":
                script = [keys["script"]] if "script" in keys else []
                new["command"] = [*script, *(keys.get("args") or ())]
            else:
                new[names[key]] = keys[key]
            renamed.append((field_path(section, key), field_path(section, names[key])))
        out[section] = new
    return out, renamed


def schema_problems(doc: Any) -> list[tuple[str, str]]:
    """Every JSON-Schema violation of ``doc`` as ``(field path, message)``, in document order."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema())
    out = [_describe(e) for e in sorted(validator.iter_errors(doc), key=lambda e: [str(p) for p in e.absolute_path])]
    return list(dict.fromkeys(out))


def _describe(error) -> tuple[str, str]:
    path = ".".join(str(p) for p in error.absolute_path)
    kind, value, rule, sub = error.validator, error.instance, error.validator_value, error.schema
    allowed = sub.get("description", "")
    if kind == "additionalProperties" and isinstance(value, dict):
        known = sorted(sub.get("properties", {}))
        extra = sorted(set(value) - set(known))
        renamed = RENAMED_KEYS.get(path, {})
        old = next((k for k in extra if k in renamed), None)
        if old is not None:
            new = renamed[old]
            hint = " ([script.py, arg, ...])" if new == "command" else ""
            return (field_path(path, old), f"{old!r} is the old name of {new!r}{hint}: give only {new!r}")
        if known:
            close = difflib.get_close_matches(extra[0], known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return (field_path(path, extra[0]), f"unknown key {extra[0]!r}{hint}; allowed keys: {', '.join(known)}")
        return (field_path(path, extra[0]) if extra else path, error.message)
    if kind == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        what = sub.get("properties", {}).get(missing, {}).get("description", "")
        return (field_path(path, missing), f"is required{f' ({what})' if what else ''}")
    if kind == "pattern" and allowed and "number" in _types(sub):  # a duration: seconds or text with units
        return (path, f"{value!r} is not allowed: {allowed}")
    if kind in ("type", "pattern") and ("integer" in _types(sub) or "number" in _types(sub)):
        want = "an integer" if "integer" in _types(sub) else "a number"
        return (path, f"expected {want} (or a ${{ENV}} reference), got {value!r}")
    if kind == "type":
        return (path, f"expected {' or '.join(_types(sub))}, got {type(value).__name__} {value!r}")
    if kind == "enum":
        return (path, f"{value!r} is not allowed; allowed: {', '.join(map(str, rule))}")
    if kind in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        bounds = {k: sub[k] for k in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum") if k in sub}
        text = ", ".join(f"{k.replace('exclusiveM', 'exclusive m')} {v}" for k, v in bounds.items())
        return (path, f"{value!r} is out of range ({text})")
    if kind == "pattern":
        return (path, f"{value!r} is not allowed: {allowed or 'must match ' + rule}")
    if kind == "anyOf" and error.context:
        return _describe(max(error.context, key=lambda e: len(e.absolute_path)))
    return (path, f"{error.message}{f' ({allowed})' if allowed else ''}")


def _types(sub: dict) -> list[str]:
    kind = sub.get("type", [])
    return [kind] if isinstance(kind, str) else list(kind)


def field_path(path: str, key: str) -> str:
    """``training.workers`` from ``training`` and ``workers``."""
    return f"{path}.{key}" if path else key
