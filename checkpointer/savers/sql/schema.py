"""The storage schema, defined once: SQLAlchemy Core tables for SQLite and PostgreSQL.

This `MetaData` is the source of truth for what the newest migration must produce (a test
compares a migrated database against it). The Alembic revisions in `migrations/versions`
are frozen copies of each step; the savers only ever talk to the tables named here.

Every primary key starts with `thread_id`, so a thread-sharded PostgreSQL (Citus, distribution
column `thread_id`) can route every per-thread query to one shard.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from checkpointer.errors import ConfigError

CHECKPOINTS = "checkpointer_checkpoints"
BLOBS = "checkpointer_blobs"
WRITES = "checkpointer_writes"
THREADS = "checkpointer_threads"
STORED_CHANNELS = "checkpointer_stored_channels"
VERSION_TABLE = "checkpointer_schema_version"

SCHEMA_REVISION = "0013"
"""The Alembic revision this code reads and writes; `setup()` migrates a database to it."""

KNOWN_REVISIONS: tuple[str, ...] = (
    "0001",
    "0002",
    "0003",
    "0004",
    "0005",
    "0006",
    "0007",
    "0008",
    "0009",
    "0010",
    "0011",
    "0012",
    "0013",
)
"""Every revision this code knows, oldest first; a database at any other one is newer."""


def key_text() -> sa.types.TypeEngine[str]:
    """Text compared bytewise on PostgreSQL (collation "C"), as Python compares strings.

    Locale collations ignore punctuation and case at first level, which would order
    checkpoint ids and task paths differently from the in-memory saver.
    """
    return sa.Text().with_variant(sa.Text(collation="C"), "postgresql")


def json_doc() -> sa.types.TypeEngine[str]:
    """`jsonb` on PostgreSQL (filterable, readable by SQL); JSON text on SQLite."""
    return sa.Text().with_variant(postgresql.JSONB(), "postgresql")


def value_bytes() -> sa.types.TypeEngine[bytes]:
    """Serialized values: `bytea` / BLOB, so any byte (NUL included) round-trips."""
    return sa.LargeBinary().with_variant(postgresql.BYTEA(), "postgresql")


def task_id_type() -> sa.types.TypeEngine[str]:
    """Task ids are UUIDs: 16 bytes in a `uuid` on PostgreSQL, text on SQLite."""
    return sa.Text().with_variant(postgresql.UUID(as_uuid=False), "postgresql")


def timestamp() -> sa.types.TypeEngine[str]:
    """`timestamptz` on PostgreSQL; on SQLite UTC text `YYYY-MM-DD HH:MM:SS.SSS`, which
    sorts in time order and is what SQLite's own date functions produce and read."""
    return sa.Text().with_variant(postgresql.TIMESTAMP(timezone=True), "postgresql")


def blobs_key(dialect: str) -> tuple[str, ...]:
    """The value rows' primary key. On SQLite the version comes before the channel
    (revision 0012): LangGraph gives every channel a step updates the same new version, so
    a step's rows share one leaf of the key instead of dirtying a leaf (and writing a WAL
    page) per channel. PostgreSQL logs index entries, not pages, and keeps the channel
    first."""
    if dialect == "sqlite":
        return ("thread_id", "checkpoint_ns", "version", "channel")
    return ("thread_id", "checkpoint_ns", "channel", "version")


def namespace_columns() -> tuple[sa.Column[str], sa.Column[str]]:
    """(thread_id, checkpoint_ns): the leading key columns of every per-namespace table,
    new objects for each table (SQLAlchemy binds a column to one table)."""
    return (
        sa.Column("thread_id", key_text(), nullable=False),
        sa.Column("checkpoint_ns", key_text(), nullable=False, server_default=""),
    )


def build_metadata(dialect: str, schema: str | None = None) -> sa.MetaData:
    """The tables of `dialect` ("sqlite" or "postgresql"), optionally inside a PostgreSQL
    schema (SQLite has none)."""
    if dialect not in ("sqlite", "postgresql"):
        raise ConfigError(f"unknown SQL dialect {dialect!r}: expected 'sqlite' or 'postgresql'")
    metadata = sa.MetaData(schema=schema)
    sa.Table(
        CHECKPOINTS,
        metadata,
        *namespace_columns(),
        sa.Column("checkpoint_id", key_text(), nullable=False),
        sa.Column("parent_checkpoint_id", key_text(), nullable=True),
        # metadata["run_id"] as a column, so delete_for_runs finds runs by index.
        sa.Column("run_id", sa.Text(), nullable=True),
        # The checkpoint record minus channel_values (v, ts, channel_versions,
        # versions_seen, updated_channels), as JSON so SQL can read channel_versions.
        sa.Column("checkpoint", json_doc(), nullable=False),
        sa.Column("metadata", json_doc(), nullable=False),
        # Pinned checkpoints survive every retention policy (and keep their thread alive).
        sa.Column("pinned", sa.Boolean(), nullable=False, server_default=sa.false()),
        # Insertion order in the namespace, and where the checkpoint's run starts: the
        # ancestors within a run are a `seq` range (see `delta_runs.py`). NULL in rows
        # written around the saver; the delta walk then follows parent pointers.
        sa.Column("seq", sa.BigInteger(), nullable=True),
        sa.Column("run_start", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint(
            "thread_id", "checkpoint_ns", "checkpoint_id", name=f"{CHECKPOINTS}_pkey"
        ),
        sa.Index(f"{CHECKPOINTS}_run_id_idx", "run_id"),
        # put refuses a new checkpoint that a stored one names as its parent (no loops).
        # The parent id first (revision 0009): with (thread, namespace) first, PostgreSQL
        # without statistics read checkpoints by id through it, a scan of the namespace.
        sa.Index(f"{CHECKPOINTS}_parent_idx", "parent_checkpoint_id", "thread_id", "checkpoint_ns"),
        # Partial: only a query that names `seq` can use it, so no planner takes it for a
        # primary-key lookup (PostgreSQL did, on tables without statistics: a scan of the
        # thread per lookup).
        sa.Index(
            f"{CHECKPOINTS}_seq_idx",
            "thread_id",
            "checkpoint_ns",
            "seq",
            sqlite_where=sa.text("seq IS NOT NULL"),
            postgresql_where=sa.text("seq IS NOT NULL"),
        ),
    )
    sa.Table(
        BLOBS,
        metadata,
        *namespace_columns(),
        sa.Column("channel", key_text(), nullable=False),
        sa.Column("version", key_text(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("blob", value_bytes(), nullable=False),
        # A tail row (revision 0010, `tails.py`): the version of a whole row of this
        # channel whose list the value continues (0011: or the list inside its marker,
        # a delta snapshot); NULL for a whole value.
        sa.Column("base_version", key_text(), nullable=True),
        sa.PrimaryKeyConstraint(*blobs_key(dialect), name=f"{BLOBS}_pkey"),
    )
    if dialect == "sqlite":
        # The channels of a namespace that have any value row, kept by an insert trigger
        # on the value rows (revision 0012). The delta history asks "does this channel
        # have a value row at all?" before it parses any ancestor's record; with the
        # version-first key above that would be a scan of the namespace's value rows.
        # Deletes leave a channel listed (which only costs that parse); deleting a thread,
        # or the last value row of a thread, clears the thread's rows.
        sa.Table(
            STORED_CHANNELS,
            metadata,
            *namespace_columns(),
            sa.Column("channel", key_text(), nullable=False),
            sa.PrimaryKeyConstraint(
                "thread_id", "checkpoint_ns", "channel", name=f"{STORED_CHANNELS}_pkey"
            ),
            sqlite_with_rowid=False,
        )
    sa.Table(
        WRITES,
        metadata,
        *namespace_columns(),
        sa.Column("checkpoint_id", key_text(), nullable=False),
        sa.Column("task_id", task_id_type(), nullable=False),
        sa.Column("idx", sa.Integer(), nullable=False),
        sa.Column("task_path", key_text(), nullable=False, server_default=""),
        sa.Column("channel", key_text(), nullable=False),
        sa.Column("type", sa.Text(), nullable=False),
        sa.Column("blob", value_bytes(), nullable=False),
        # PostgreSQL: a task id that is not a UUID, stored with a UUID derived from it in
        # `task_id` (see `postgres_dialect.task_name`); NULL for UUIDs, and on SQLite,
        # whose `task_id` is text and holds every id itself.
        sa.Column("task_name", sa.Text(), nullable=True),
        # The `seq` of the checkpoint the write is pending on (NULL until it is stored):
        # a channel's writes along a run are one range of the index below.
        sa.Column("seq", sa.BigInteger(), nullable=True),
        sa.PrimaryKeyConstraint(
            "thread_id",
            "checkpoint_ns",
            "checkpoint_id",
            "task_id",
            "idx",
            name=f"{WRITES}_pkey",
        ),
        sa.Index(
            f"{WRITES}_channel_seq_idx",
            "thread_id",
            "checkpoint_ns",
            "channel",
            "seq",
            sqlite_where=sa.text("seq IS NOT NULL"),
            postgresql_where=sa.text("seq IS NOT NULL"),
        ),
        # The few writes without a seq (pending on a checkpoint not stored yet).
        sa.Index(
            f"{WRITES}_unnumbered_idx",
            "thread_id",
            "checkpoint_ns",
            "channel",
            sqlite_where=sa.text("seq IS NULL"),
            postgresql_where=sa.text("seq IS NULL"),
        ),
    )
    # One row per thread, kept current by every write and delete in the same transaction, so
    # listing threads and sweeping expired ones never scan checkpoints.
    sa.Table(
        THREADS,
        metadata,
        sa.Column("thread_id", key_text(), nullable=False),
        # Newest checkpoint of the root namespace.
        sa.Column("head_checkpoint_id", key_text(), nullable=True),
        sa.Column("checkpoint_count", sa.BigInteger(), nullable=False, server_default="0"),
        # Stored payload: checkpoint records and metadata, values, pending writes.
        sa.Column("bytes", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("pinned_count", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("created_at", timestamp(), nullable=False),
        # Last checkpoint or pending write: what "idle" and TTLs are measured from.
        sa.Column("updated_at", timestamp(), nullable=False),
        sa.Column("ttl_seconds", sa.Float(), nullable=True),
        sa.Column("expires_at", timestamp(), nullable=True),
        sa.PrimaryKeyConstraint("thread_id", name=f"{THREADS}_pkey"),
        sa.Index(f"{THREADS}_updated_at_idx", "updated_at"),
        sa.Index(f"{THREADS}_expires_at_idx", "expires_at"),
    )
    return metadata


def quote_ident(name: str) -> str:
    """A double-quoted SQL identifier (schema names are user input)."""
    if not isinstance(name, str) or not name or "\x00" in name or len(name) > 63:
        raise ConfigError(f"invalid schema name {name!r}")
    return '"' + name.replace('"', '""') + '"'
