"""The state store's one primitive: key spaces of JSON values, with an atomic compare-and-set on each key.

``KeyValueStore`` is all the typed store (:mod:`ignite_tf.state.store`) asks of a backend: ``get``, ``put``,
``put_if_absent``, ``replace_if_equals``, ``keys`` and ``delete``, each atomic on its key from any process.
Two backends implement it: files in a folder (:mod:`ignite_tf.state.files`) and caches on the Ignite cluster
(:mod:`ignite_tf.state.ignite`).

A value is anything JSON can hold except None (a missing key reads as None). Both backends keep its JSON text
(``encode``) and compare values by that text, so ``replace_if_equals`` takes the value as ``get`` returned it.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from ignite_tf.errors import ConfigError

__all__ = ["KeyValueStore", "check_key", "decode", "encode"]


def check_key(space: str, key: str) -> str:
    """``key`` when it is a non-empty string; a ConfigError naming the space otherwise."""
    if not isinstance(key, str) or not key:
        raise ConfigError(f"state store key in {space!r} must be a non-empty string, not {key!r}")
    return key


def encode(space: str, key: str, value: Any) -> str:
    """The JSON text a value is kept (and compared) as; a ConfigError for None or what JSON cannot hold."""
    if value is None:
        raise ConfigError(f"state store value {space}/{key} is None: None reads as a missing key; delete it instead")
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"state store value {space}/{key} is not JSON ({exc}): "
                          "give dicts, lists, strings, numbers or booleans") from exc


def decode(text: str | None) -> Any:
    return None if text is None else json.loads(text)


class KeyValueStore(ABC):
    """Spaces (a name each) of keys (non-empty strings) to JSON values. Every operation is safe from any process
    and atomic on its key; ``put_if_absent`` and ``replace_if_equals`` are the backend's compare-and-set."""

    @abstractmethod
    def get(self, space: str, key: str) -> Any:
        """The value under ``key``, or None."""

    def get_many(self, space: str, keys: Iterable[str]) -> dict[str, Any]:
        """The values of those of ``keys`` that are present (a backend may read them in one request)."""
        found = {key: self.get(space, key) for key in keys}
        return {key: value for key, value in found.items() if value is not None}

    @abstractmethod
    def put(self, space: str, key: str, value: Any) -> None:
        """Set ``key`` to ``value``, whatever it held."""

    @abstractmethod
    def put_if_absent(self, space: str, key: str, value: Any) -> bool:
        """Set ``key`` to ``value`` if it holds nothing: True for the one caller that did."""

    @abstractmethod
    def replace_if_equals(self, space: str, key: str, old: Any, new: Any) -> bool:
        """Set ``key`` to ``new`` if it holds ``old``: True for the one caller that did."""

    @abstractmethod
    def keys(self, space: str, prefix: str = "") -> list[str]:
        """The keys in ``space`` that start with ``prefix``, in no particular order."""

    @abstractmethod
    def delete(self, space: str, keys: Iterable[str]) -> None:
        """Remove ``keys`` (those missing are no error)."""

    @abstractmethod
    def describe(self) -> str:
        """Where the values live, for messages: ``local state directory /x``, ``Ignite at h:10800``."""

    def another(self) -> KeyValueStore:
        """A handle on the same values for another thread: one with connections of its own where a connection
        serves one thread at a time (a thin client); else this one."""
        return self

    def close(self) -> None:  # noqa: B027 - only backends holding a connection need it
        """Release connections (backends that hold none need not override this)."""
