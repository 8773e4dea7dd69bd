"""Key spaces as caches on the Ignite cluster: the state store any machine with the connection reads.

Space ``clusters`` is the cache ``ignite_tf_sys_clusters`` (``CACHE_PREFIX``: the names of earlier releases, so
a deployment's records are read on), its keys strings, its values their JSON text (``kv.encode``). pyignite's
``put_if_absent`` and ``replace_if_equals`` are the compare-and-set, atomic on the key's primary node.

A missing cache is created from an explicit configuration (``cache_settings``), not from whatever the server's
defaults or templates say: partitioned with ``BACKUPS`` backup (one node's loss loses no state), writes
returning once every copy has them (``FULL_SYNC``: a read a backup serves sees the last write), all in one
cache group (``GROUP``: one set of partitions for all of them). A cache that exists is used as it is; one with
no backup (made by an earlier release on a server without this project's ``ignite_tf*`` template) is named
in a warning, once per store.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

from ignite_tf.errors import IgniteTFError
from ignite_tf.state.kv import KeyValueStore, check_key, decode, encode

__all__ = ["BACKUPS", "CACHE_PREFIX", "GROUP", "IgniteKeyValueStore", "cache_settings"]

CACHE_PREFIX = "ignite_tf_sys_"
GROUP = "ignite_tf_sys"
BACKUPS = 1

log = logging.getLogger(__name__)


def cache_settings(name: str) -> dict[int, Any]:
    """The configuration a state cache is created with (pyignite's ``{PROP_*: value}``)."""
    from pyignite.datatypes.cache_config import CacheAtomicityMode, CacheMode, WriteSynchronizationMode
    from pyignite.datatypes.prop_codes import (
        PROP_BACKUPS_NUMBER,
        PROP_CACHE_ATOMICITY_MODE,
        PROP_CACHE_MODE,
        PROP_GROUP_NAME,
        PROP_NAME,
        PROP_WRITE_SYNCHRONIZATION_MODE,
    )

    return {PROP_NAME: name, PROP_CACHE_MODE: CacheMode.PARTITIONED, PROP_BACKUPS_NUMBER: BACKUPS,
            PROP_CACHE_ATOMICITY_MODE: CacheAtomicityMode.ATOMIC, PROP_GROUP_NAME: GROUP,
            PROP_WRITE_SYNCHRONIZATION_MODE: WriteSynchronizationMode.FULL_SYNC}


class IgniteKeyValueStore(KeyValueStore):
    """Key spaces as the caches ``CACHE_PREFIX + space`` of the Ignite cluster ``conn`` reaches."""

    def __init__(self, conn):
        self.conn = conn
        self._client = None
        self._checked: set[str] = set()

    def describe(self) -> str:
        return f"Ignite at {self.conn.addresses_str}"

    def get(self, space: str, key: str) -> Any:
        return decode(self._cache(space).get(check_key(space, key)))

    def get_many(self, space: str, keys: Iterable[str]) -> dict[str, Any]:
        keys = [check_key(space, key) for key in keys]
        if not keys:
            return {}
        return {k: decode(v) for k, v in self._cache(space).get_all(keys).items() if v is not None}

    def put(self, space: str, key: str, value: Any) -> None:
        self._cache(space).put(check_key(space, key), encode(space, key, value))

    def put_if_absent(self, space: str, key: str, value: Any) -> bool:
        return bool(self._cache(space).put_if_absent(check_key(space, key), encode(space, key, value)))

    def replace_if_equals(self, space: str, key: str, old: Any, new: Any) -> bool:
        check_key(space, key)
        return bool(self._cache(space).replace_if_equals(key, encode(space, key, old), encode(space, key, new)))

    def keys(self, space: str, prefix: str = "") -> list[str]:
        with self._cache(space).scan(page_size=256) as cursor:
            return [k for k, _ in cursor if isinstance(k, str) and k.startswith(prefix)]

    def delete(self, space: str, keys: Iterable[str]) -> None:
        keys = [check_key(space, key) for key in keys]
        if keys:
            self._cache(space).remove_keys(keys)

    def another(self) -> IgniteKeyValueStore:
        return IgniteKeyValueStore(self.conn)

    def close(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            finally:
                self._client = None

    def _cache(self, space: str):
        # Not partition-aware: pyignite 0.6 forgets a cache's partition map whenever a Cache object is made
        # (as get_or_create_cache does), so each keyed call re-fetched the map of all 1024 partitions, ~70 ms
        # of CPU per state poll; these few small entries gain nothing from going to their primary node.
        name = CACHE_PREFIX + space
        if self._client is None:
            self._client = self.conn.client(partition_aware=False)
        try:
            cache = self._client.get_or_create_cache(cache_settings(name))
        except Exception as exc:  # noqa: BLE001 - a broken connection: reconnect once
            self.close()
            self._client = self.conn.client(partition_aware=False)
            try:
                cache = self._client.get_or_create_cache(cache_settings(name))
            except Exception:
                raise IgniteTFError(f"cluster state cache {name} unavailable on {self.describe()}: {exc}") from exc
        if name not in self._checked:
            self._checked.add(name)
            self._warn_without_backup(cache)
        return cache

    def _warn_without_backup(self, cache) -> None:
        from pyignite.datatypes.cache_config import CacheMode
        from pyignite.datatypes.prop_codes import PROP_BACKUPS_NUMBER, PROP_CACHE_MODE

        settings = cache.settings or {}
        if settings.get(PROP_CACHE_MODE) != CacheMode.REPLICATED and settings.get(PROP_BACKUPS_NUMBER, 0) < BACKUPS:
            log.warning("cluster state cache %s on %s has %s backups (made before ignite-tf created its state "
                        "caches with %d): losing one node loses the state it holds; to recreate it, destroy it "
                        "while no cluster runs", cache.name, self.describe(), settings.get(PROP_BACKUPS_NUMBER),
                        BACKUPS)
