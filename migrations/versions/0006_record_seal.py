"""Checkpoint records carry a seal under encryption.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01

With a serializer that binds values to their location (`EncryptedSerializer`), `put` now
stores in each checkpoint record, under the key `__seal__`, an encrypted digest of the
fields that decide which values the checkpoint reads (channel versions, versions seen,
inline values, the parent id), and every read verifies it (`savers/sql/record_seal.py`).
No table changes: the seal is one more key of the JSON record.

Records written before stay readable without a seal (unless the serializer has
`require_bound=True`); `reencrypt(saver)` seals them. Code older than this revision
would pass the seal on as part of the checkpoint it reads, so it refuses the database.
"""

from __future__ import annotations

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    """Nothing to change in the schema: old records read as unsealed."""


def downgrade() -> None:
    """Nothing to drop: older code ignores no key, so unseal with a plain rewrite first
    if ever needed (records keep reading under this code either way)."""
