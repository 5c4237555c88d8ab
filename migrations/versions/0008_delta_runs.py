"""Checkpoints and writes carry a sequence number, so a delta history is a range scan.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-02

`checkpointer_checkpoints.seq`: the checkpoint's insertion order in its (thread, namespace);
`run_start`: the `seq` where its run starts (a checkpoint whose parent is the previous
`seq` continues its parent's run, any other starts one). The ancestors of a checkpoint
within its run are then exactly a `seq` range. `checkpointer_writes.seq`: the `seq` of the
checkpoint a write is pending on, with an index on (thread, namespace, channel, seq), so a
channel's writes along a run are one index range (`savers/sql/delta_runs.py`).

Existing rows are numbered here in checkpoint id order (the order the savers wrote them
in, one process per thread), and their runs and writes filled in to match. Every read
checks that a run's parent pointers agree with its numbers, and walks parent pointers as
before where they do not (or where a row has no number, as rows written around the saver),
so threads written before read exactly as before.

Code older than this revision leaves the new columns empty on the rows it writes, which
this code reads the old way; it is refused all the same (one revision per database).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def _schema() -> str | None:
    """The PostgreSQL schema holding the tables (None on SQLite), set by migrations/env.py."""
    return context.config.attributes.get("schema")  # type: ignore[no-any-return]


def _table(name: str) -> str:
    schema = _schema()
    return name if schema is None else '"' + schema.replace('"', '""') + '".' + name


# SQLite: writes that arrived before their checkpoint take its seq when it is inserted (on
# PostgreSQL the put statement does it). An upsert of an existing checkpoint fires no
# insert trigger, and keeps its seq.
EARLY_WRITES_TRIGGER = "checkpointer_checkpoints_seq_writes"


def upgrade() -> None:
    schema = _schema()
    cp, wr = "checkpointer_checkpoints", "checkpointer_writes"
    op.add_column(cp, sa.Column("seq", sa.BigInteger(), nullable=True), schema=schema)
    op.add_column(cp, sa.Column("run_start", sa.BigInteger(), nullable=True), schema=schema)
    op.add_column(wr, sa.Column("seq", sa.BigInteger(), nullable=True), schema=schema)
    c, w = _table(cp), _table(wr)
    op.execute(
        f"UPDATE {c} SET seq = n.seq FROM (SELECT thread_id, checkpoint_ns, checkpoint_id, "
        "row_number() OVER (PARTITION BY thread_id, checkpoint_ns ORDER BY checkpoint_id) - 1 "
        f"AS seq FROM {c}) n WHERE {c}.thread_id = n.thread_id "
        f"AND {c}.checkpoint_ns = n.checkpoint_ns AND {c}.checkpoint_id = n.checkpoint_id"
    )
    # A run starts at every checkpoint whose parent is not the previous seq: each row's
    # run_start is the last such start at or before it.
    op.execute(
        f"UPDATE {c} SET run_start = r.run_start FROM (SELECT x.thread_id, x.checkpoint_ns, "
        "x.checkpoint_id, max(CASE WHEN p.seq IS NOT NULL AND p.seq = x.seq - 1 THEN NULL "
        "ELSE x.seq END) OVER (PARTITION BY x.thread_id, x.checkpoint_ns ORDER BY x.seq) "
        f"AS run_start FROM {c} x LEFT JOIN {c} p ON p.thread_id = x.thread_id "
        "AND p.checkpoint_ns = x.checkpoint_ns AND p.checkpoint_id = x.parent_checkpoint_id) r "
        f"WHERE {c}.thread_id = r.thread_id AND {c}.checkpoint_ns = r.checkpoint_ns "
        f"AND {c}.checkpoint_id = r.checkpoint_id"
    )
    op.execute(
        f"UPDATE {w} SET seq = k.seq FROM {c} k WHERE k.thread_id = {w}.thread_id "
        f"AND k.checkpoint_ns = {w}.checkpoint_ns AND k.checkpoint_id = {w}.checkpoint_id"
    )
    if op.get_context().dialect.name == "sqlite":
        op.execute(
            f"CREATE TRIGGER IF NOT EXISTS {EARLY_WRITES_TRIGGER} AFTER INSERT ON {cp} "
            f"FOR EACH ROW BEGIN UPDATE {wr} SET seq = NEW.seq WHERE thread_id = NEW.thread_id "
            "AND checkpoint_ns = NEW.checkpoint_ns AND checkpoint_id = NEW.checkpoint_id "
            "AND seq IS NULL; END"
        )
    # Partial indexes: only queries that name `seq` use them (see schema.py).
    numbered = sa.text("seq IS NOT NULL")
    op.create_index(
        f"{cp}_seq_idx",
        cp,
        ["thread_id", "checkpoint_ns", "seq"],
        schema=schema,
        sqlite_where=numbered,
        postgresql_where=numbered,
    )
    op.create_index(
        f"{wr}_channel_seq_idx",
        wr,
        ["thread_id", "checkpoint_ns", "channel", "seq"],
        schema=schema,
        sqlite_where=numbered,
        postgresql_where=numbered,
    )
    unnumbered = sa.text("seq IS NULL")
    op.create_index(
        f"{wr}_unnumbered_idx",
        wr,
        ["thread_id", "checkpoint_ns", "channel"],
        schema=schema,
        sqlite_where=unnumbered,
        postgresql_where=unnumbered,
    )


def downgrade() -> None:
    schema = _schema()
    if op.get_context().dialect.name == "sqlite":
        op.execute(f"DROP TRIGGER IF EXISTS {EARLY_WRITES_TRIGGER}")
    op.drop_index("checkpointer_writes_unnumbered_idx", "checkpointer_writes", schema=schema)
    op.drop_index("checkpointer_writes_channel_seq_idx", "checkpointer_writes", schema=schema)
    op.drop_index("checkpointer_checkpoints_seq_idx", "checkpointer_checkpoints", schema=schema)
    op.drop_column("checkpointer_writes", "seq", schema=schema)
    op.drop_column("checkpointer_checkpoints", "run_start", schema=schema)
    op.drop_column("checkpointer_checkpoints", "seq", schema=schema)
