"""Initial schema: checkpoints, blobs, writes.

Revision ID: 0001
Revises:
Create Date: 2025-01-01

Frozen copy of checkpointer.savers.sql.schema at revision 0001. Later revisions change the
schema with their own operations; they never edit this file.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def _schema() -> str | None:
    """The PostgreSQL schema holding the tables (None on SQLite), set by migrations/env.py.

    Read when the migration runs, not at import: tools list revisions without an env."""
    return context.config.attributes.get("schema")  # type: ignore[no-any-return]


def _key() -> sa.types.TypeEngine[str]:
    return sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def _json() -> sa.types.TypeEngine[str]:
    return sa.Text().with_variant(postgresql.JSONB(), "postgresql")


def _bytes() -> sa.types.TypeEngine[bytes]:
    return sa.LargeBinary().with_variant(postgresql.BYTEA(), "postgresql")


def upgrade() -> None:
    SCHEMA = _schema()
    op.create_table(
        "checkpointer_checkpoints",
        sa.Column("thread_id", _key(), nullable=False),
        sa.Column("checkpoint_ns", _key(), nullable=False, server_default=""),
        sa.Column("checkpoint_id", _key(), nullable=False),
        sa.Column("parent_checkpoint_id", _key(), nullable=True),
        sa.Column("run_id", sa.Text(), nullable=True),
        sa.Column("checkpoint", _json(), nullable=False),
        sa.Column("metadata", _json(), nullable=False),
        sa.PrimaryKeyConstraint(
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            name="checkpointer_checkpoints_pkey",
        ),
        schema=SCHEMA,
    )
    op.create_index(
        "checkpointer_checkpoints_run_id_idx",
        "checkpointer_checkpoints",
        ["run_id"],
        schema=SCHEMA,
    )
    op.create_table(
        "checkpointer_blobs",
        sa.Column("thread_id", _key(), nullable=False),
        sa.Column("checkpoint_ns", _key(), nullable=False, server_default=""),
        sa.Column("channel", _key(), nullable=False),
        sa.Column("version", _key(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("blob", _bytes(), nullable=False),
        sa.PrimaryKeyConstraint(
            "thread_id", "checkpoint_ns", "channel", "version", name="checkpointer_blobs_pkey"
        ),
        schema=SCHEMA,
    )
    op.create_table(
        "checkpointer_writes",
        sa.Column("thread_id", _key(), nullable=False),
        sa.Column("checkpoint_ns", _key(), nullable=False, server_default=""),
        sa.Column("checkpoint_id", _key(), nullable=False),
        sa.Column(
            "task_id",
            sa.Text().with_variant(postgresql.UUID(as_uuid=False), "postgresql"),
            nullable=False,
        ),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("task_path", _key(), nullable=False, server_default=""),
        sa.Column("channel", _key(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("blob", _bytes(), nullable=False),
        sa.PrimaryKeyConstraint(
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            "task_id",
            "idx",
            name="checkpointer_writes_pkey",
        ),
        schema=SCHEMA,
    )


def downgrade() -> None:
    SCHEMA = _schema()
    op.drop_table("checkpointer_writes", schema=SCHEMA)
    op.drop_table("checkpointer_blobs", schema=SCHEMA)
    op.drop_index("checkpointer_checkpoints_run_id_idx", "checkpointer_checkpoints", schema=SCHEMA)
    op.drop_table("checkpointer_checkpoints", schema=SCHEMA)
