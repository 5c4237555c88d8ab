"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = ${repr(branch_labels)}
depends_on = ${repr(depends_on)}

# After adding a revision: append it to KNOWN_REVISIONS and set SCHEMA_REVISION in
# checkpointer/savers/sql/schema.py, change build_metadata() to match, and extend
# tests/test_sql_migrations.py (upgrade from the previous revision keeps data).


def _schema() -> str | None:
    """The PostgreSQL schema holding the tables (None on SQLite), set by migrations/env.py.

    Read when the migration runs, not at import: tools list revisions without an env."""
    return context.config.attributes.get("schema")  # type: ignore[no-any-return]


def upgrade() -> None:
    SCHEMA = _schema()
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    SCHEMA = _schema()
    ${downgrades if downgrades else "pass"}
