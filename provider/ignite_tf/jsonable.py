"""One clean-up for values written as JSON (validation results, registry metadata, cluster state).

NumPy scalars and arrays become Python values, NaN and pandas' missing values become ``null``, infinities their
string, dataclasses and objects with ``to_dict()`` their dicts; anything else its ``str``. Importing this module
imports neither NumPy nor pandas.
"""

from __future__ import annotations

import math
from dataclasses import asdict, is_dataclass

_MISSING_TYPES = {"NAType", "NaTType"}  # pandas.NA, pandas.NaT (recognised without importing pandas)


def jsonable(value):
    """``value`` as plain JSON data (dict keys become strings)."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in value]
    if type(value).__name__ in _MISSING_TYPES:
        return None
    if hasattr(value, "item") and getattr(value, "shape", None) == ():  # a NumPy scalar or 0-d array
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else str(value)
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "to_dict"):
        return jsonable(value.to_dict())
    if hasattr(value, "tolist"):
        return jsonable(value.tolist())
    if is_dataclass(value) and not isinstance(value, type):
        return jsonable(asdict(value))
    return str(value)
