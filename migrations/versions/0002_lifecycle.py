"""Data lifecycle: pinned checkpoints and a per-thread summary table, backfilled.

Revision ID: 0002
Revises: 0001
Create Date: 2025-02-01

- `checkpointer_checkpoints.pinned`: retention policies never drop a pinned checkpoint.
- `checkpointer_threads`: one row per thread (head, checkpoint count, stored bytes, first
  and last write, TTL and expiry), maintained by the savers on every write so listing
  threads and sweeping expired ones never scan checkpoints. Existing threads are
  backfilled from their rows; their first/last write times come from checkpoint `ts`.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op
from sqlalchemy.dialects import postgresql

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# After adding a revision: append it to KNOWN_REVISIONS and set SCHEMA_REVISION in
# checkpointer/savers/sql/schema.py, change build_metadata() to match, and extend
# tests/test_sql_migrations.py (upgrade from the previous revision keeps data).


def _schema() -> str | None:
    """The PostgreSQL schema holding the tables (None on SQLite), set by migrations/env.py.

    Read when the migration runs, not at import: tools list revisions without an env."""
    return context.config.attributes.get("schema")  # type: ignore[no-any-return]


def _key() -> sa.types.TypeEngine[str]:
    return sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def _timestamp() -> sa.types.TypeEngine[str]:
    return sa.Text().with_variant(postgresql.TIMESTAMP(timezone=True), "postgresql")


def _qualified(schema: str | None, table: str) -> str:
    if schema is None:
        return table
    return '"' + schema.replace('"', '""') + '".' + table


# Sizes are the stored payload, measured exactly as the savers measure them afterwards.
_SQLITE_BACKFILL = """
INSERT INTO {threads} (thread_id, head_checkpoint_id, checkpoint_count, bytes, pinned_count,
    created_at, updated_at)
SELECT t.thread_id,
    (SELECT max(c.checkpoint_id) FROM {checkpoints} c
     WHERE c.thread_id = t.thread_id AND c.checkpoint_ns = ''),
    (SELECT count(*) FROM {checkpoints} c WHERE c.thread_id = t.thread_id),
    coalesce((SELECT sum(length(CAST(c.checkpoint AS BLOB)) + length(CAST(c.metadata AS BLOB)))
              FROM {checkpoints} c WHERE c.thread_id = t.thread_id), 0)
    + coalesce((SELECT sum(length(b.blob)) FROM {blobs} b WHERE b.thread_id = t.thread_id), 0)
    + coalesce((SELECT sum(length(w.blob)) FROM {writes} w WHERE w.thread_id = t.thread_id), 0),
    0,
    coalesce((SELECT min(strftime('%Y-%m-%d %H:%M:%f', json_extract(c.checkpoint, '$.ts')))
              FROM {checkpoints} c WHERE c.thread_id = t.thread_id),
             strftime('%Y-%m-%d %H:%M:%f', 'now')),
    coalesce((SELECT max(strftime('%Y-%m-%d %H:%M:%f', json_extract(c.checkpoint, '$.ts')))
              FROM {checkpoints} c WHERE c.thread_id = t.thread_id),
             strftime('%Y-%m-%d %H:%M:%f', 'now'))
FROM (SELECT thread_id FROM {checkpoints} UNION SELECT thread_id FROM {writes}) t
"""

# `ts` is only cast when it looks like an ISO timestamp, so one odd record cannot fail the
# upgrade (it then counts as written now).
_PG_TS = (
    "CASE WHEN c.checkpoint ->> 'ts' ~ "
    "'^[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}[T ][0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}([.][0-9]+)?"
    "(Z|[+-][0-9]{{2}}(:?[0-9]{{2}})?)?$' "
    "THEN (c.checkpoint ->> 'ts')::timestamptz END"
)

_PG_BACKFILL = (
    """
INSERT INTO {threads} (thread_id, head_checkpoint_id, checkpoint_count, bytes, pinned_count,
    created_at, updated_at)
SELECT t.thread_id,
    (SELECT max(c.checkpoint_id) FROM {checkpoints} c
     WHERE c.thread_id = t.thread_id AND c.checkpoint_ns = ''),
    (SELECT count(*) FROM {checkpoints} c WHERE c.thread_id = t.thread_id),
    coalesce((SELECT sum(octet_length(c.checkpoint::text) + octet_length(c.metadata::text))
              FROM {checkpoints} c WHERE c.thread_id = t.thread_id), 0)
    + coalesce((SELECT sum(octet_length(b.blob)) FROM {blobs} b
                WHERE b.thread_id = t.thread_id), 0)
    + coalesce((SELECT sum(octet_length(w.blob)) FROM {writes} w
                WHERE w.thread_id = t.thread_id), 0),
    0,
    coalesce((SELECT min("""
    + _PG_TS
    + """) FROM {checkpoints} c WHERE c.thread_id = t.thread_id), now()),
    coalesce((SELECT max("""
    + _PG_TS
    + """) FROM {checkpoints} c WHERE c.thread_id = t.thread_id), now())
FROM (SELECT thread_id FROM {checkpoints} UNION SELECT thread_id FROM {writes}) t
"""
)


def upgrade() -> None:
    SCHEMA = _schema()
    op.add_column(
        "checkpointer_checkpoints",
        sa.Column("pinned", sa.Boolean(), nullable=False, server_default=sa.false()),
        schema=SCHEMA,
    )
    op.create_table(
        "checkpointer_threads",
        sa.Column("thread_id", _key(), nullable=False),
        sa.Column("head_checkpoint_id", _key(), nullable=True),
        sa.Column("checkpoint_count", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("bytes", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("pinned_count", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("created_at", _timestamp(), nullable=False),
        sa.Column("updated_at", _timestamp(), nullable=False),
        sa.Column("ttl_seconds", sa.Float(), nullable=True),
        sa.Column("expires_at", _timestamp(), nullable=True),
        sa.PrimaryKeyConstraint("thread_id", name="checkpointer_threads_pkey"),
        schema=SCHEMA,
    )
    op.create_index(
        "checkpointer_threads_updated_at_idx",
        "checkpointer_threads",
        ["updated_at"],
        schema=SCHEMA,
    )
    op.create_index(
        "checkpointer_threads_expires_at_idx",
        "checkpointer_threads",
        ["expires_at"],
        schema=SCHEMA,
    )
    tables = {
        name: _qualified(SCHEMA, f"checkpointer_{name}")
        for name in ("threads", "checkpoints", "blobs", "writes")
    }
    dialect = op.get_context().dialect.name
    template = _PG_BACKFILL if dialect == "postgresql" else _SQLITE_BACKFILL
    op.execute(template.format(**tables).strip())


def downgrade() -> None:
    SCHEMA = _schema()
    op.drop_index("checkpointer_threads_expires_at_idx", "checkpointer_threads", schema=SCHEMA)
    op.drop_index("checkpointer_threads_updated_at_idx", "checkpointer_threads", schema=SCHEMA)
    op.drop_table("checkpointer_threads", schema=SCHEMA)
    op.drop_column("checkpointer_checkpoints", "pinned", schema=SCHEMA)
