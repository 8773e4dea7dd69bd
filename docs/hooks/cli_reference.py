"""MkDocs hook: every command and flag of the command lines, as their own ``-h`` prints them at build time, so
the reference cannot drift from the parsers.

``docs/reference/cli.md`` holds the hand-written guide and the marker below; this hook replaces the marker with
``ignite-tf -h``, ``ignite-tf COMMAND -h`` for each command that lists, and ``python -m ignite_tf.runtime -h``.
A page without the marker, a command that fails, or a help without commands fails the build.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

MARKER = "<!-- cli: generated from the -h of each command -->"
PAGE = "reference/cli.md"
# The console script's module (pyproject: ignite-tf = "ignite_tf.cli:main"); its parser names itself ignite-tf.
CLI = [sys.executable, "-m", "ignite_tf.cli"]
RUNTIME = [sys.executable, "-m", "ignite_tf.runtime"]
# One width, whatever the terminal that builds the site.
WIDTH = "100"


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    from mkdocs.exceptions import PluginError

    if MARKER not in markdown:
        raise PluginError(f"{PAGE} lost its marker {MARKER!r}: the generated CLI reference has nowhere to go")
    try:
        return markdown.replace(MARKER, render())
    except RuntimeError as exc:
        raise PluginError(str(exc)) from exc


def help_text(argv: list[str]) -> str:
    env = {**os.environ, "COLUMNS": WIDTH, "TF_CPP_MIN_LOG_LEVEL": "2"}
    done = subprocess.run([*argv, "-h"], capture_output=True, text=True, env=env, timeout=120)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[1:])} -h failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout.rstrip()


def commands(top_help: str) -> list[tuple[str, str]]:
    """``(command, its one-line help)`` as argparse lists the subcommands under COMMAND."""
    found = re.findall(r"^ {4}([a-z][a-z0-9-]*) {2,}(\S.*)$", top_help, flags=re.M)
    if not found:
        raise RuntimeError("ignite-tf -h lists no commands: the CLI reference would be empty")
    return found


def block(title: str, anchor: str, text: str, summary: str = "") -> str:
    lead = re.sub(r"([\\`*_\[\]{}<])", r"\\\1", summary) + "\n\n" if summary else ""
    return f"### {title} {{#{anchor}}}\n\n{lead}```text\n{text}\n```\n"


def render() -> str:
    top = help_text(CLI)
    parts = [block("`ignite-tf`", "ignite-tf", top)]
    for name, summary in commands(top):
        lead = summary[:1].upper() + summary[1:]
        parts.append(block(f"`ignite-tf {name}`", f"ignite-tf-{name}", help_text([*CLI, name]), lead))
    parts.append(block("`python -m ignite_tf.runtime`", "python-m-ignite_tf-runtime", help_text(RUNTIME)))
    return "\n".join(parts)
