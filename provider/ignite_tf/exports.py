"""Public names of a package resolved on first use (PEP 562), so that importing the package stays light."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(package: str, public: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` whose names ``public`` (name -> submodule) are
    imported from their submodule when first read, then kept in the package."""

    def __getattr__(name: str):
        if name not in public:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{public[name]}"), name)
        vars(sys.modules[package])[name] = value  # resolved once
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *public})

    return __getattr__, __dir__
