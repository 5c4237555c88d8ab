"""Hostile and odd input at the saver API (issue 16 items 10-13): ids, metadata filters,
typed errors, and reads that must not need SQLite's write lock."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from checkpointer.ids import next_channel_version
from checkpointer.savers.sqlite import AsyncSqliteSaver, SqliteSaver
from checkpointer.types import empty_checkpoint, make_config


def _put_one(saver: SqliteSaver, thread_id: str) -> dict[str, Any]:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"x": 1}
    version = next_channel_version(None)
    checkpoint["channel_versions"] = {"x": version}
    return saver.put(make_config(thread_id), checkpoint, {"step": 0}, {"x": version})


# ------------------------------------------------------------ item 13: reads and the lock
@pytest.fixture
def locked_db(tmp_path: Path) -> Any:
    """A set-up database with one thread, and a second connection holding the write lock
    (BEGIN IMMEDIATE with a row written but not committed) while the test reads."""
    path = tmp_path / "locked.db"
    with SqliteSaver(path) as saver:
        saver.setup()
        _put_one(saver, "old")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute(
        "INSERT INTO checkpointer_threads (thread_id, created_at, updated_at) "
        "VALUES ('other', '2020-01-01 00:00:00.000', '2020-01-01 00:00:00.000')"
    )
    try:
        yield path
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_setup_makes_the_file_settings(tmp_path: Path) -> None:
    """WAL and incremental auto-vacuum are set once, by setup, and persist in the file."""
    path = tmp_path / "fresh.db"
    with SqliteSaver(path) as saver:
        saver.setup()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # INCREMENTAL
    finally:
        conn.close()


def test_a_fresh_saver_reads_while_another_connection_writes(locked_db: Path) -> None:
    with SqliteSaver(locked_db, busy_timeout=0.2) as saver:
        assert saver.get_tuple(make_config("old")) is not None
        assert saver.get_tuple(make_config("never-seen")) is None
        assert len(list(saver.list(make_config("old")))) == 1
        assert [s.thread_id for s in saver.list_threads()] == ["old"]


async def test_a_fresh_async_saver_reads_while_another_connection_writes(
    locked_db: Path,
) -> None:
    saver = AsyncSqliteSaver(locked_db, busy_timeout=0.2)
    try:
        assert await saver.aget_tuple(make_config("old")) is not None
        assert await saver.aget_tuple(make_config("never-seen")) is None
        assert len([t async for t in saver.alist(make_config("old"))]) == 1
    finally:
        await saver.aclose()
