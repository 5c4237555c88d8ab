"""SQLite keeps the thread summaries with triggers.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

On SQLite, `checkpointer_threads` (checkpoint count, stored bytes, head) is now kept by
triggers on the checkpoint, value and write tables instead of by a statement the saver
issued with every put and put_writes. A put_writes becomes one statement, a put one fewer:
each statement is a point where the sqlite3 module lets go of the GIL, and a busy
interpreter may take up to its switch interval (5 ms) to hand it back.

The triggers count what is inserted and the size changes of what is updated; deletes keep
recomputing the summaries of the threads they touch. They never move `updated_at` or
`expires_at`: writes refresh those from the saver, so maintenance (copies, retention,
re-encryption) still does not count as activity. PostgreSQL keeps its one-statement put.

Code older than this revision would count its writes twice here, so it refuses the
database.
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

# After adding a revision: append it to KNOWN_REVISIONS and set SCHEMA_REVISION in
# checkpointer/savers/sql/schema.py, change build_metadata() to match, and extend
# tests/test_sql_migrations.py (upgrade from the previous revision keeps data).

# The trigger texts are kept short: SQLite stores them in its schema page, which every
# database file carries.
_NOW = "strftime('%Y-%m-%d %H:%M:%f')"

# A new checkpoint: one more, its bytes, and the head, which moves forward only and only
# for root-namespace checkpoints (a NULL head leaves it alone). In DO UPDATE a bare column
# is the stored row's.
_ADD_CHECKPOINT = (
    "INSERT INTO checkpointer_threads(thread_id,head_checkpoint_id,checkpoint_count,"
    "bytes,created_at,updated_at)VALUES(NEW.thread_id,CASE WHEN NEW.checkpoint_ns='' THEN "
    f"NEW.checkpoint_id END,1,{{size}},{_NOW},{_NOW})ON CONFLICT(thread_id)DO UPDATE SET "
    "head_checkpoint_id=CASE WHEN head_checkpoint_id IS NULL OR excluded.head_checkpoint_id"
    ">head_checkpoint_id THEN excluded.head_checkpoint_id ELSE head_checkpoint_id END,"
    "checkpoint_count=checkpoint_count+1,bytes=bytes+excluded.bytes"
)

# A new value row or pending write: its bytes.
_ADD_VALUE = (
    "INSERT INTO checkpointer_threads(thread_id,bytes,created_at,updated_at)VALUES("
    f"NEW.thread_id,{{size}},{_NOW},{_NOW})ON CONFLICT(thread_id)DO UPDATE SET "
    "bytes=bytes+excluded.bytes"
)

# A row rewritten in place: the change in its size.
_RESIZE = "UPDATE checkpointer_threads SET bytes=bytes+{new}-({old})WHERE thread_id=NEW.thread_id"


def _record_size(row: str) -> str:
    return f"length(CAST({row}.checkpoint AS BLOB))+length(CAST({row}.metadata AS BLOB))"


def _value_triggers(table: str) -> tuple[tuple[str, str, str, str], ...]:
    """A value table's rows count their bytes (a NULL blob counts none)."""
    size = "ifnull(length({row}.blob),0)"
    return (
        (
            f"{table}_ai",
            "AFTER INSERT",
            table,
            _ADD_VALUE.format(size=size.format(row="NEW")),
        ),
        (
            f"{table}_au",
            "AFTER UPDATE OF blob",
            table,
            _RESIZE.format(new=size.format(row="NEW"), old=size.format(row="OLD")),
        ),
    )


# (name, event, table, body): every body is one statement. Names end in _ai (after insert)
# and _au (after update).
TRIGGERS = (
    (
        "checkpointer_checkpoints_ai",
        "AFTER INSERT",
        "checkpointer_checkpoints",
        _ADD_CHECKPOINT.format(size=_record_size("NEW")),
    ),
    (
        "checkpointer_checkpoints_au",
        "AFTER UPDATE OF checkpoint, metadata",
        "checkpointer_checkpoints",
        _RESIZE.format(new=_record_size("NEW"), old=_record_size("OLD")),
    ),
    *(
        trigger
        for table in ("checkpointer_blobs", "checkpointer_writes")
        for trigger in _value_triggers(table)
    ),
)


def upgrade() -> None:
    if op.get_context().dialect.name != "sqlite":
        return
    for name, event, table, body in TRIGGERS:
        op.execute(
            f"CREATE TRIGGER IF NOT EXISTS {name} {event} ON {table} FOR EACH ROW BEGIN {body}; END"
        )


def downgrade() -> None:
    if op.get_context().dialect.name != "sqlite":
        return
    for name, _, _, _ in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name}")
