"""Take a database written by this code back to an older revision's tables (what later
revisions added, dropped again; 0009 only reordered an index): the rows are then what code
at that revision wrote, to test the upgrade on."""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

from alembic import command

from checkpointer.savers.sql.migration import alembic_config, split_statements
from checkpointer.savers.sql.schema import SCHEMA_REVISION, VERSION_TABLE


def back_to(revision: str, execute: Callable[[str], Any], schema: str | None = None) -> None:
    """The downgrades from this code's revision to `revision`, each migration's own,
    rendered as SQL and run through `execute`."""
    dialect = "sqlite" if schema is None else "postgresql"
    buffer = io.StringIO()
    cfg = alembic_config(dialect, schema)
    cfg.output_buffer = buffer
    command.downgrade(cfg, f"{SCHEMA_REVISION}:{revision}", sql=True)
    for sql in split_statements(buffer.getvalue()):
        execute(sql)


def back_to_0011(execute: Callable[[str], Any], schema: str | None = None) -> None:
    """Revisions 0013 and 0012 undone (they change SQLite only)."""
    back_to("0011", execute, schema)


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
    back_to_0011(execute, schema)
    for sql in UNDO_0008:
        if "TRIGGER" in sql and schema is not None:
            continue
        execute(sql.replace("{s}", prefix))
    execute(f"UPDATE {prefix}{VERSION_TABLE} SET version_num = '0007'")
