"""ETL: load CSV/Parquet/generated rows into an Ignite table (input checking, binary encoding, the load).

    from ignite_tf.etl import load

    report = load(conn, "digits", "digits.parquet", key="id")

``input`` reads and checks the rows, ``encode`` turns them into Ignite BinaryObject bytes, ``loader`` writes
the table. ``load`` and ``LoadReport`` are resolved on first use (PEP 562), so importing this package imports
neither NumPy nor pyarrow nor pyignite.

The module ``ignite_tf.etl.load`` of the previous release is now ``ignite_tf.etl.loader``: a module of that
name hid this package's function ``load`` (``TypeError: 'module' object is not callable``). For one release,
``from ignite_tf.etl.load import NAME`` still works and warns (see ``_OldLoadModule``).
"""

from __future__ import annotations

import importlib
import sys
import types

from ignite_tf.exports import lazy_exports

# Public name -> the submodule that defines it.
_PUBLIC = {"load": "loader", "LoadReport": "loader"}

__all__ = ["LoadReport", "load"]

__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)


class _OldLoadModule(types.ModuleType):
    """The deprecated module path ``ignite_tf.etl.load``: each name read from it warns and comes from
    ``ignite_tf.etl.loader``.

    It sits in ``sys.modules`` only, never as an attribute of this package (that name is the function): the
    import system looks there first, so ``from ignite_tf.etl.load import load`` keeps working. A file
    ``etl/load.py`` cannot do this, as importing it would set the package's ``load`` to the module again.
    """

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        from ignite_tf.public_api import DEPRECATED, warn_deprecated

        old = f"{self.__name__}.{name}"
        if old not in {d.old for d in DEPRECATED}:
            raise AttributeError(f"module {self.__name__!r} (deprecated) has no attribute {name!r}")
        warn_deprecated(old)
        return getattr(importlib.import_module(f"{__package__}.loader"), name)


sys.modules.setdefault(f"{__name__}.load", _OldLoadModule(f"{__name__}.load", _OldLoadModule.__doc__))
