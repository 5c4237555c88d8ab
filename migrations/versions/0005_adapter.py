"""Task ids that are not UUIDs, stored exactly on PostgreSQL.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01

`checkpointer_writes.task_name` (text, nullable): PostgreSQL keeps task ids in a `uuid`
column, which refused ids such as "task-1" (LangGraph's own checkpoint tests use them, and
so may other runtimes). Such an id is now stored under a UUID derived from it, with the id
itself in `task_name`; UUID ids (every id LangGraph's runtime and ours produce) leave it
NULL and are stored as before. Adding a nullable column rewrites nothing, on either
database; SQLite gets the column too (one schema for both) and never fills it, since its
`task_id` is text.

Code older than this revision would read a named task's writes under the derived UUID, so
it refuses the database.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

# After adding a revision: append it to KNOWN_REVISIONS and set SCHEMA_REVISION in
# checkpointer/savers/sql/schema.py, change build_metadata() to match, and extend
# tests/test_sql_migrations.py (upgrade from the previous revision keeps data).


def _schema() -> str | None:
    """The PostgreSQL schema holding the tables (None on SQLite), set by migrations/env.py."""
    return context.config.attributes.get("schema")  # type: ignore[no-any-return]


def upgrade() -> None:
    op.add_column(
        "checkpointer_writes",
        sa.Column("task_name", sa.Text(), nullable=True),
        schema=_schema(),
    )


def downgrade() -> None:
    op.drop_column("checkpointer_writes", "task_name", schema=_schema())
