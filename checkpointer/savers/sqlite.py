"""SQLite savers: `SqliteSaver` (sqlite3) and `AsyncSqliteSaver` (aiosqlite).

Both store only the channel values that changed (a blob table, not the whole state per
checkpoint), use WAL with a configurable busy timeout, and write in BEGIN IMMEDIATE
transactions. Call `setup()` once per database (idempotent) before use.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from checkpointer.savers.sql.async_exec import AsyncSqliteExecutor
from checkpointer.savers.sql.migration import parse_url
from checkpointer.savers.sql.saver import DEFAULT_PAGE_SIZE, AsyncSqlSaver, SyncSqlSaver
from checkpointer.savers.sql.sqlite_dialect import SqliteDialect
from checkpointer.savers.sql.sync_exec import SqliteExecutor
from checkpointer.serde import Serializer

__all__ = ["AsyncSqliteSaver", "SqliteSaver"]


def _path(conn_string: str | os.PathLike[str]) -> str:
    text = os.fspath(conn_string)
    if text.startswith("sqlite:"):
        return parse_url(text)[1]
    return text


class SqliteSaver(SyncSqlSaver):
    """Checkpoints in a SQLite file, safe to share between threads and processes.

    `conn` is a path (each thread then gets its own connection, so threads never queue on
    a Python lock), ":memory:", or an existing `sqlite3.Connection` (shared under a lock
    held for one operation at a time; it is switched to autocommit mode).
    """

    _executor: SqliteExecutor

    def __init__(
        self,
        conn: sqlite3.Connection | str | os.PathLike[str],
        *,
        serde: Serializer | None = None,
        busy_timeout: float = 5.0,
        synchronous: str = "NORMAL",
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        super().__init__(serde=serde, page_size=page_size)
        target = conn if isinstance(conn, sqlite3.Connection) else _path(conn)
        self._executor = SqliteExecutor(target, busy_timeout=busy_timeout, synchronous=synchronous)
        self._dialect = SqliteDialect(self._executor.where)

    @classmethod
    @contextmanager
    def from_conn_string(
        cls, conn_string: str | os.PathLike[str], *, setup: bool = True, **kwargs: Any
    ) -> Iterator[SqliteSaver]:
        """A saver on a path or `sqlite:///path` URL, closed on exit; `setup=True` also
        creates or upgrades the schema."""
        saver = cls(_path(conn_string), **kwargs)
        try:
            if setup:
                saver.setup()
            yield saver
        finally:
            saver.close()

    from_url = from_conn_string


class AsyncSqliteSaver(AsyncSqlSaver):
    """Checkpoints in a SQLite file through aiosqlite; one connection, one operation at a
    time (a SQLite file has one writer anyway)."""

    _executor: AsyncSqliteExecutor

    def __init__(
        self,
        conn: Any,
        *,
        serde: Serializer | None = None,
        busy_timeout: float = 5.0,
        synchronous: str = "NORMAL",
        page_size: int = DEFAULT_PAGE_SIZE,
    ) -> None:
        """`conn` is an `aiosqlite.Connection`, a path, or ":memory:" (opened on first use)."""
        super().__init__(serde=serde, page_size=page_size)
        import aiosqlite

        target = conn if isinstance(conn, aiosqlite.Connection) else _path(conn)
        self._executor = AsyncSqliteExecutor(
            target, busy_timeout=busy_timeout, synchronous=synchronous
        )
        self._dialect = SqliteDialect(self._executor.where)

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, conn_string: str | os.PathLike[str], *, setup: bool = True, **kwargs: Any
    ) -> AsyncIterator[AsyncSqliteSaver]:
        saver = cls(_path(conn_string), **kwargs)
        try:
            await saver._executor.open()
            if setup:
                await saver.setup()
            yield saver
        finally:
            await saver.aclose()

    from_url = from_conn_string
