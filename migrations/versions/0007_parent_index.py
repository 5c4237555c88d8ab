"""Checkpoints are indexed by their parent.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-02

`put` now accepts a parent that is not stored (LangGraph's own tests and tools write
children of checkpoints they never save). What keeps parent pointers from ever closing a
loop is a different rule: a new checkpoint is refused when a stored one already names it
as its parent (in any loop, the member stored last has a child stored before it, so the
rule leaves no loop possible). The put asks that question with every new checkpoint, so
it needs this index on (thread, namespace, parent id). Rows are unchanged; it is built
from the rows already stored.
"""

from __future__ import annotations

from alembic import context, op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

INDEX = "checkpointer_checkpoints_parent_idx"


def _schema() -> str | None:
    """The PostgreSQL schema holding the tables (None on SQLite), set by migrations/env.py."""
    return context.config.attributes.get("schema")  # type: ignore[no-any-return]


def upgrade() -> None:
    op.create_index(
        INDEX,
        "checkpointer_checkpoints",
        ["thread_id", "checkpoint_ns", "parent_checkpoint_id"],
        schema=_schema(),
    )


def downgrade() -> None:
    """Dropping the index is all there is to undo (code older than 0007 refuses a
    database that may hold children of unsaved parents: it reads the revision first)."""
    op.drop_index(INDEX, "checkpointer_checkpoints", schema=_schema())
