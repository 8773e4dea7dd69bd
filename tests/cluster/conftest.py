"""Fixtures of the cluster tests."""

from __future__ import annotations

import pytest

from tests.support.sql import create_table


@pytest.fixture(scope="module")
def data_cache(ignite_conn, request) -> str:
    """A table of ``create_table``'s rows for the test module's clusters to read, named after the module (the
    session's ``drop_module_caches`` drops it when the module ends). ``DATA_ROWS`` in the module sets how many
    rows (default 2000)."""
    name = request.module.__name__.rpartition(".")[2].removeprefix("test_") + "_data"
    client = ignite_conn.client()
    try:
        create_table(client, name, range(getattr(request.module, "DATA_ROWS", 2000)))
    finally:
        client.close()
    return name
