"""`migrate(url)`: bring a database to this code's schema, or print the SQL that would.

It opens a saver to apply the migrations (the saver's `setup()` runs them under its lock),
so it sits above both the savers and `savers.sql.migration`, which renders the scripts
and must not import a saver back.
"""

from __future__ import annotations

from checkpointer.savers.sql.migration import parse_url, upgrade_script


def migrate(url: str, sql: bool = False, *, schema: str | None = None) -> str | None:
    """Bring the database at `url` to this code's schema, or return the SQL that would.

    `url` is a SQLite path / `sqlite:///path` URL or a `postgresql://` URL. With `sql=True`
    nothing is touched: the returned script creates the schema on an empty database, for
    review or for a DBA to apply. Backs `checkpointer migrate --url URL [--sql]`.
    """
    if sql:
        return upgrade_script(url, schema=schema)
    kind, target = parse_url(url)
    if kind == "postgres":
        from checkpointer.savers.postgres import PostgresSaver

        with PostgresSaver.from_conn_string(target, schema=schema or "public", pool=False) as saver:
            saver.setup()
    else:
        from checkpointer.savers.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(target) as saver:
            saver.setup()
    return None
