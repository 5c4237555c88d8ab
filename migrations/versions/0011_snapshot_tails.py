"""Tail rows may continue a list inside a marker (a delta channel's snapshot).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03

A delta channel stores its whole value every `snapshot_frequency` steps as a
`DeltaSnapshot` of its message list. Written whole, a thread of N steps held about
N^2 / (2 * frequency) items in snapshots (a 10,000-step chat snapshotting every 100 steps:
100 MB of the file's 128 MB). From this revision a tail row (revision 0010) may continue a
base whose value is a list inside payload markers: its value is the base's, with the tail's
items appended to that list (see `checkpointer/savers/sql/tails.py`).

No table changes. Rows written before read as before. Code at revision 0010 would join
such a tail to its base into a wrong value when it copies or inspects it, so it refuses
the database.
"""

from __future__ import annotations

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Nothing to change in the schema: existing rows keep their meaning."""


def downgrade() -> None:
    """Nothing to drop. Code at 0010 cannot read snapshots stored as tails: go back only
    with a database that holds none (one not written to since before this revision)."""
