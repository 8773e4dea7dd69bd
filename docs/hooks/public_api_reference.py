"""MkDocs hook: the public API's tables, rendered at build time from ``ignite_tf.public_api`` (the one list
``tests/test_public_api.py`` pins), so the page cannot drift from what is kept and what is deprecated.

``docs/reference/public-api.md`` holds a hand-written intro and the two markers below; this hook replaces one
with the deprecated names (``DEPRECATED``), the other with the Python names (``PYTHON``). A page without a
marker fails the build.
"""

from __future__ import annotations

from importlib import resources

DEPRECATED_MARKER = "<!-- public-api: deprecated names, generated from ignite_tf.public_api.DEPRECATED -->"
PYTHON_MARKER = "<!-- public-api: Python names, generated from ignite_tf.public_api.PYTHON -->"
PAGE = "reference/public-api.md"
# How each kind of deprecated name is used, as the Deprecated docstring lists them.
KINDS = {"module": "module", "name": "Python name", "value": "Python value", "argument": "argument", "yaml": "YAML key",
         "generator": "`source.generator`", "command": "command"}


def on_config(config):
    # `mkdocs serve` rebuilds when the list changes.
    config.watch.append(str(resources.files("ignite_tf").joinpath("public_api.py")))
    return config


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    from mkdocs.exceptions import PluginError

    from ignite_tf import public_api  # data only: importing it imports nothing

    for marker in (DEPRECATED_MARKER, PYTHON_MARKER):
        if marker not in markdown:
            raise PluginError(f"{PAGE} lost its marker {marker!r}: a generated table has nowhere to go")
    markdown = markdown.replace(DEPRECATED_MARKER, deprecated_table(public_api.DEPRECATED, public_api.REMOVED_IN))
    return markdown.replace(PYTHON_MARKER, python_table(public_api.PYTHON))


def deprecated_table(entries, removed_in: str) -> str:
    lines = [f"Every name below is removed in {removed_in}.", "",
             "| earlier name | use instead | kind | why |", "|---|---|---|---|"]
    for d in entries:
        new = d.new
        if d.kind == "argument" and d.new.endswith("="):
            # "f(old=)" -> "new=": show the new one on its callable too.
            new = f"{d.old.split('(', 1)[0]}({d.new})"
        lines.append(f"| `{d.old}` | `{new}` | {KINDS.get(d.kind, d.kind)} | {d.why} |")
    return "\n".join(lines) + "\n"


def python_table(names: dict[str, str]) -> str:
    lines = ["| name | kind |", "|---|---|"]
    lines += [f"| `{name}` | {kind} |" for name, kind in names.items()]
    return "\n".join(lines) + "\n"
