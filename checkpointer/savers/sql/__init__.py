"""SQL storage shared by the SQLite and PostgreSQL savers.

- `schema`: the tables (SQLAlchemy Core), the schema revision this code uses;
- `core`: statements and row decoding, sans-I/O (plans yield statements, receive rows);
- `sync_exec` / `async_exec`: drive plans over sqlite3, aiosqlite, psycopg (sync, async);
- `lifecycle`: retention, TTL expiry, pins, thread summaries, reclaiming space (plans too);
- `sqlite_dialect` / `postgres_dialect`: what differs between the two databases;
- `migrate`: Alembic scripts rendered to SQL, `migrate(url, sql=False)` for the CLI.
"""

from checkpointer.savers.sql.migration import migrate
from checkpointer.savers.sql.schema import SCHEMA_REVISION

__all__ = ["SCHEMA_REVISION", "migrate"]
