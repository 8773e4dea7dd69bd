"""Reading YAML/JSON files a user writes (schema files, pipeline specs): one place that reads the text and says
what is wrong with a file that cannot be read or parsed (JSON is YAML, so one parser reads both)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any


def read_yaml(path: str | Path, fail: Callable[[str], Exception]) -> Any:
    """The parsed content of the YAML or JSON file ``path``.

    :param fail: makes the error to raise from what is wrong (``cannot be read (...)``, ``is not valid YAML at
        line L, column C: ...``), so each caller names the file its own way and raises its own error class.
    """
    import yaml

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise fail(f"cannot be read ({exc.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise fail(f"is not valid YAML{at}: {getattr(exc, 'problem', None) or exc}") from None
