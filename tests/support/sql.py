"""Small test tables written with plain Ignite SQL (independent of the ETL loader under test)."""

from __future__ import annotations


def sql(client, query: str, args: list | None = None) -> list[list]:
    """The rows of ``query`` (with ``args`` for its ``?`` parameters) as lists."""
    with client.sql(query, query_args=args) as cursor:
        return [list(r) for r in cursor]


def create_table(client, name: str, keys, *, template: str = "partitioned", backups: int = 1) -> None:
    """Table ``name`` (cache ``name``) with a BIGINT key, one REAL column F0 = key / 2 and LABEL = key % 3."""
    sql(client, f'CREATE TABLE {name} (ID BIGINT PRIMARY KEY, F0 REAL, LABEL INT) '
                f'WITH "template={template},backups={backups},cache_name={name}"')
    keys = list(keys)
    for i in range(0, len(keys), 2000):
        values = ",".join(f"({k},{k / 2},{k % 3})" for k in keys[i:i + 2000])
        sql(client, f"INSERT INTO {name} (ID, F0, LABEL) VALUES {values}")
