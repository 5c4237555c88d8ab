"""Take a database written by this code back to revision 0007's tables (what 0008 and
0010 added, dropped again; 0009 only reordered an index): the rows are then what code at
0007 wrote, to test the upgrade on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from checkpointer.savers.sql.schema import VERSION_TABLE

UNDO_0008 = [
    "ALTER TABLE {s}checkpointer_blobs DROP COLUMN base_version",  # 0010
    "DROP TRIGGER IF EXISTS checkpointer_checkpoints_seq_writes",  # SQLite only
    "DROP INDEX {s}checkpointer_writes_unnumbered_idx",
    "DROP INDEX {s}checkpointer_writes_channel_seq_idx",
    "DROP INDEX {s}checkpointer_checkpoints_seq_idx",
    "ALTER TABLE {s}checkpointer_writes DROP COLUMN seq",
    "ALTER TABLE {s}checkpointer_checkpoints DROP COLUMN run_start",
    "ALTER TABLE {s}checkpointer_checkpoints DROP COLUMN seq",
]


def back_to_0007(execute: Callable[[str], Any], schema: str | None = None) -> None:
    """Run through `execute` (one SQL text at a time); `schema`: PostgreSQL's."""
    prefix = "" if schema is None else f'"{schema}".'
    for sql in UNDO_0008:
        if "TRIGGER" in sql and schema is not None:
            continue
        execute(sql.replace("{s}", prefix))
    execute(f"UPDATE {prefix}{VERSION_TABLE} SET version_num = '0007'")
