"""SQLite keys value rows by version before channel, and lists each namespace's channels
that have value rows.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03

LangGraph gives every channel a step updates the same new version. Keyed (thread,
namespace, channel, version), a step that changes 16 channels put its 16 rows in 16
different leaves of the key, and SQLite wrote each leaf to the WAL whole: a put of a wide
state wrote about 34 pages where LangGraph's own saver writes 4. Keyed (thread, namespace,
version, channel) the step's rows sit side by side.

The delta history asked the old key "does this channel have any value row here?" (one
seek) before parsing any ancestor's record. The new key cannot answer that without a scan,
so `checkpointer_stored_channels` answers it: one row per (thread, namespace, channel)
with a value row, added by an insert trigger on the value rows. The saver clears a thread's
rows when it deletes the thread or the thread's last value row; other deletes leave a
channel listed, which costs only the parse the test exists to skip.

SQLite cannot change a primary key in place: the table is rebuilt (same columns, same
rows), and its summary triggers (revision 0004) are created again after the copy, so the
copied rows are not counted twice. PostgreSQL writes index entries, not pages, to its WAL:
its tables do not change. Code at 0011 would not keep the new table, so it refuses the
database.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

BLOBS = "checkpointer_blobs"
REBUILT = "checkpointer_blobs_rebuilt"
STORED_CHANNELS = "checkpointer_stored_channels"
COLUMNS = "thread_id, checkpoint_ns, channel, version, type, blob, base_version"

# Revision 0004's summary triggers on the value rows, as it wrote them.
_NOW = "strftime('%Y-%m-%d %H:%M:%f')"
_SIZE = "ifnull(length({row}.blob),0)"
SUMMARY_TRIGGERS = (
    (
        f"{BLOBS}_ai",
        "AFTER INSERT",
        "INSERT INTO checkpointer_threads(thread_id,bytes,created_at,updated_at)VALUES("
        f"NEW.thread_id,{_SIZE.format(row='NEW')},{_NOW},{_NOW})ON CONFLICT(thread_id)DO UPDATE "
        "SET bytes=bytes+excluded.bytes",
    ),
    (
        f"{BLOBS}_au",
        "AFTER UPDATE OF blob",
        f"UPDATE checkpointer_threads SET bytes=bytes+{_SIZE.format(row='NEW')}-("
        f"{_SIZE.format(row='OLD')})WHERE thread_id=NEW.thread_id",
    ),
)
CHANNEL_TRIGGER = (
    f"{BLOBS}_channel_ai",
    "AFTER INSERT",
    f"INSERT OR IGNORE INTO {STORED_CHANNELS}(thread_id,checkpoint_ns,channel)VALUES("
    "NEW.thread_id,NEW.checkpoint_ns,NEW.channel)",
)


def _blobs_table(name: str, key: tuple[str, ...]) -> None:
    op.create_table(
        name,
        sa.Column("thread_id", sa.Text(), nullable=False),
        sa.Column("checkpoint_ns", sa.Text(), nullable=False, server_default=""),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.Column("version", sa.Text(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("blob", sa.LargeBinary(), nullable=False),
        sa.Column("base_version", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint(*key, name=f"{BLOBS}_pkey"),
    )


def _rebuild_blobs(key: tuple[str, ...]) -> None:
    """The value rows copied into a table keyed `key`, under the old name, with the
    summary triggers created after the copy."""
    _blobs_table(REBUILT, key)
    op.execute(f"INSERT INTO {REBUILT} ({COLUMNS}) SELECT {COLUMNS} FROM {BLOBS}")
    op.drop_table(BLOBS)  # its triggers go with it
    op.rename_table(REBUILT, BLOBS)
    for name, event, body in SUMMARY_TRIGGERS:
        op.execute(f"CREATE TRIGGER {name} {event} ON {BLOBS} FOR EACH ROW BEGIN {body}; END")


def upgrade() -> None:
    if op.get_context().dialect.name != "sqlite":
        return
    _rebuild_blobs(("thread_id", "checkpoint_ns", "version", "channel"))
    op.create_table(
        STORED_CHANNELS,
        sa.Column("thread_id", sa.Text(), nullable=False),
        sa.Column("checkpoint_ns", sa.Text(), nullable=False, server_default=""),
        sa.Column("channel", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint(
            "thread_id", "checkpoint_ns", "channel", name=f"{STORED_CHANNELS}_pkey"
        ),
        sqlite_with_rowid=False,
    )
    op.execute(
        f"INSERT INTO {STORED_CHANNELS} (thread_id, checkpoint_ns, channel) "
        f"SELECT DISTINCT thread_id, checkpoint_ns, channel FROM {BLOBS}"
    )
    name, event, body = CHANNEL_TRIGGER
    op.execute(f"CREATE TRIGGER {name} {event} ON {BLOBS} FOR EACH ROW BEGIN {body}; END")


def downgrade() -> None:
    if op.get_context().dialect.name != "sqlite":
        return
    op.drop_table(STORED_CHANNELS)
    _rebuild_blobs(("thread_id", "checkpoint_ns", "channel", "version"))
