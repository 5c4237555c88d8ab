"""The parent index leads with the parent id.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02

0007 indexed checkpoints on (thread, namespace, parent id). On PostgreSQL, a table without
planner statistics (fresh, or never analysed) led the planner to read a checkpoint by its
id through that index's (thread, namespace) prefix instead of the primary key, filtering
every row of the namespace: each `get_tuple` by id, the probes of each put and the steps
of each delta history read the whole namespace (1,001 rows per probe at 1,000 steps).
Leading with the parent id, the index still answers what it is for (the children of one
checkpoint, asked by every put) and can no longer stand in for the primary key. Rows are
unchanged; the index is rebuilt from them.
"""

from __future__ import annotations

from alembic import context, op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

INDEX = "checkpointer_checkpoints_parent_idx"
TABLE = "checkpointer_checkpoints"


def _schema() -> str | None:
    """The PostgreSQL schema holding the tables (None on SQLite), set by migrations/env.py."""
    return context.config.attributes.get("schema")  # type: ignore[no-any-return]


def upgrade() -> None:
    op.drop_index(INDEX, TABLE, schema=_schema())
    op.create_index(
        INDEX, TABLE, ["parent_checkpoint_id", "thread_id", "checkpoint_ns"], schema=_schema()
    )


def downgrade() -> None:
    op.drop_index(INDEX, TABLE, schema=_schema())
    op.create_index(
        INDEX, TABLE, ["thread_id", "checkpoint_ns", "parent_checkpoint_id"], schema=_schema()
    )
