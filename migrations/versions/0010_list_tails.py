"""Value rows may hold only what a list gained since an earlier version of it.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02

A chat history (`Annotated[list, operator.add]`) is a channel whose every new version is
the previous one plus a few items. Storing each version whole rewrote (and recompressed)
the entire history at every step. From this revision a value row may be a *tail*: its
`base_version` names a whole row of the same thread, namespace and channel, and its value
is that row's list followed by the items the tail row holds (see
`checkpointer/savers/sql/tails.py`). Rows written before have no base and read as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

TABLE = "checkpointer_blobs"


def _schema() -> str | None:
    """The PostgreSQL schema holding the tables (None on SQLite), set by migrations/env.py."""
    return context.config.attributes.get("schema")  # type: ignore[no-any-return]


def _key_text() -> sa.types.TypeEngine[str]:
    return sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def upgrade() -> None:
    op.add_column(TABLE, sa.Column("base_version", _key_text(), nullable=True), schema=_schema())


def downgrade() -> None:
    op.drop_column(TABLE, "base_version", schema=_schema())
