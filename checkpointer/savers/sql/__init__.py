"""SQL storage shared by the SQLite and PostgreSQL savers.

- `schema`: the tables (SQLAlchemy Core), the schema revision this code uses;
- `plan`: the sans-I/O plumbing (plans yield statements, receive rows);
- `dialect`: the Dialect base; `records`: checkpoint records and metadata, encode/decode;
- `puts`, `reads`, `delta`, `summaries`, `deletion`: the statements and decoders of each
  operation, written once for both databases;
- `sync_exec` / `async_exec`: drive plans over sqlite3, aiosqlite, psycopg (sync, async);
- `lifecycle`: retention, TTL expiry, pins, thread summaries, reclaiming space (plans too);
- `sqlite_dialect` / `postgres_dialect`: what differs between the two databases;
- `migration`: Alembic scripts rendered to SQL and applied under a lock (`migrate(url)`,
  which opens a saver, is `checkpointer.savers.migrate`).
"""

from checkpointer.savers.sql.schema import SCHEMA_REVISION

__all__ = ["SCHEMA_REVISION"]
