"""Small scalar channel values kept in checkpoint records.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

From this revision on, a checkpoint record (`checkpointer_checkpoints.checkpoint`) may hold
a `channel_values` object: the small scalars (None, booleans, 64-bit ints, short strings)
that earlier revisions stored as rows of `checkpointer_blobs`. Rows already stored stay
as they are and read as before; no table changes. The revision exists so that code older
than it refuses such a database (it would drop those values on reading) instead of
reading it wrongly.
"""

from __future__ import annotations

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# After adding a revision: append it to KNOWN_REVISIONS and set SCHEMA_REVISION in
# checkpointer/savers/sql/schema.py, change build_metadata() to match, and extend
# tests/test_sql_migrations.py (upgrade from the previous revision keeps data).


def upgrade() -> None:
    """Nothing to change in the tables: the new format only adds a key to new records."""


def downgrade() -> None:
    """Nothing to undo in the tables. Records written since may keep values inline, which
    code older than this revision would not see."""
