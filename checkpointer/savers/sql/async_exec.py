"""Async execute layer: drives the same plans over aiosqlite and psycopg async."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

from checkpointer.errors import CheckpointerError, StorageFullError
from checkpointer.savers.sql.pg_faults import (
    RetryPolicy,
    is_connection_failure,
    is_pool_timeout,
    location,
    next_attempt,
    pool_exhausted,
)
from checkpointer.savers.sql.pg_native import native, raw_cursor_class
from checkpointer.savers.sql.plan import Op, Row, StatementHook, Stmt
from checkpointer.savers.sql.sync_exec import (
    run_sqlite_op,
    sqlite_pragmas,
    typed_busy_errors,
)

T = TypeVar("T")


async def adrive(op: Op[T], execute: Callable[[Stmt], Awaitable[list[Row]]]) -> T:
    plan = op.plan
    try:
        stmt = next(plan)
        while True:
            stmt = plan.send(await execute(stmt))
    except StopIteration as stop:
        return stop.value
    finally:
        plan.close()


def _run_handed_over(conn: Any, handoff: list[Any], trace: StatementHook | None) -> None:
    """Run the op in `handoff` and leave its result there, returning nothing.

    aiosqlite's worker thread keeps its last call (function, arguments, result) referenced
    until the next call arrives. Handing the op in and the result out through a list the
    caller empties means the worker holds neither: a listing's rows or a put's blobs are
    freed by their caller, instead of staying alive and then being freed at the start of
    the next, unrelated call (2-3 ms added to a read right after listing a long thread).
    """
    op = handoff.pop()
    handoff.append(run_sqlite_op(conn, op, trace))


class AsyncSqliteExecutor:
    """One aiosqlite connection (its own worker thread) shared by the saver's tasks; an
    asyncio lock keeps each operation's statements (and transaction) together."""

    def __init__(
        self,
        target: Any,
        *,
        busy_timeout: float = 5.0,
        synchronous: str = "NORMAL",
    ) -> None:
        import aiosqlite

        self.trace: StatementHook | None = None
        self._pragmas = sqlite_pragmas(busy_timeout, synchronous)
        self._busy_timeout = busy_timeout
        self._lock: asyncio.Lock | None = None
        self._closed = False
        if isinstance(target, aiosqlite.Connection):
            self.path: str | None = None
            self._conn: Any = target
            self._owns = False
            self._ready = False
        else:
            self.path = os.fspath(target)
            self._conn = None
            self._owns = True
            self._ready = False

    @property
    def where(self) -> str:
        return f"SQLite database {self.path!r}" if self.path else "SQLite database"

    async def _connect(self) -> Any:
        import aiosqlite

        if self._closed:
            raise CheckpointerError("this saver is closed")
        if self._conn is None:
            assert self.path is not None
            self._conn = await aiosqlite.connect(
                self.path,
                timeout=self._busy_timeout,
                isolation_level=None,
                uri=self.path.startswith("file:"),
            )
        if not self._ready:
            if self._conn.in_transaction:
                await self._conn.commit()
            if self._conn.isolation_level is not None:
                # Autocommit: we issue BEGIN IMMEDIATE ourselves. The attribute belongs to
                # the sqlite3 connection living in aiosqlite's thread, so set it there.
                await self._conn._execute(setattr, self._conn._conn, "isolation_level", None)
            for pragma in self._pragmas:
                # Read every result row: an undrained PRAGMA stays "in progress" and would
                # make a later COMMIT fail.
                async with self._conn.execute(pragma) as cursor:
                    await cursor.fetchall()
            self._ready = True
        return self._conn

    def _get_lock(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock

    async def open(self) -> None:
        async with self._get_lock():
            await self._connect()

    async def _execute(self, conn: Any, stmt: Stmt) -> list[Row]:
        if self.trace is not None:
            self.trace(stmt.sql)
        if stmt.script:
            await conn.executescript(stmt.sql)
            return []
        if stmt.many:
            await conn.executemany(stmt.sql, stmt.params)
            return []
        async with conn.execute(stmt.sql, stmt.params) as cursor:
            if stmt.fetch:
                return list(await cursor.fetchall())
            return []

    async def run(self, op: Op[T]) -> T:
        with typed_busy_errors(self.where, self._busy_timeout):
            return await self._run(op)

    async def _run(self, op: Op[T]) -> T:
        async with self._get_lock():
            conn = await self._connect()
            if hasattr(conn, "_execute"):
                # The whole operation in one hop to aiosqlite's thread, not one per
                # statement; aiosqlite runs queued functions one at a time.
                handoff: list[Any] = [op]
                del op
                await conn._execute(_run_handed_over, conn._conn, handoff, self.trace)
                return handoff.pop()
            if not op.txn:
                return await adrive(op, lambda s: self._execute(conn, s))
            await conn.execute("BEGIN IMMEDIATE")
            try:
                result = await adrive(op, lambda s: self._execute(conn, s))
            except BaseException:
                if conn.in_transaction:
                    await conn.execute("ROLLBACK")
                raise
            await conn.execute("COMMIT")
            return result

    async def close(self) -> None:
        self._closed = True
        if self._owns and self._conn is not None:
            await self._conn.close()
            self._conn = None


class AsyncPostgresExecutor:
    """psycopg async: a pool (no lock) or one connection (an asyncio lock per operation).
    Lost connections are handled as in the sync `PostgresExecutor` (see `pg_faults`)."""

    def __init__(
        self,
        source: Any,
        *,
        prepare: bool = True,
        owns: bool = False,
        where: str = "PostgreSQL database",
        retry: RetryPolicy | None = None,
    ) -> None:
        from psycopg import AsyncConnection
        from psycopg_pool import AsyncConnectionPool

        self.trace: StatementHook | None = None
        self._prepare: bool | None = None if prepare else False
        self._owns = owns
        self._lock: asyncio.Lock | None = None
        self._open_lock: asyncio.Lock | None = None
        self._opened = False
        self.retry = retry or RetryPolicy()
        if isinstance(source, AsyncConnectionPool):
            self._pool: Any = source
            self._conn: Any = None
        elif isinstance(source, AsyncConnection):
            self._pool, self._conn = None, source
        else:
            raise TypeError(
                "expected a psycopg AsyncConnection or psycopg_pool AsyncConnectionPool, got "
                f"{type(source).__name__}"
            )
        at = location(source)
        self.where = f"{where} at {at}" if at else where

    async def open(self) -> None:
        """Open a pool this executor created (it cannot be opened before a loop runs)."""
        if self._pool is None or not self._owns or self._opened:
            return
        if self._open_lock is None:
            self._open_lock = asyncio.Lock()
        async with self._open_lock:
            if not self._opened:
                await self._pool.open()
                self._opened = True

    @asynccontextmanager
    async def _connection(self) -> AsyncIterator[Any]:
        if self._pool is not None:
            if self._owns and not self._opened:
                await self.open()
            async with self._pool.connection() as conn:
                yield conn
        else:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                yield self._conn

    async def _execute(self, cur: Any, stmt: Stmt) -> list[Row]:
        if self.trace is not None:
            self.trace(stmt.sql)
        if stmt.many:
            await cur.executemany(stmt.sql, stmt.params)
            return []
        if stmt.script:
            await cur.execute(stmt.sql, prepare=False)
            return []
        if stmt.params and (converted := native(stmt.sql, stmt.params)) is not None:
            # A long statement in `$n` form, parsed once (`pg_native`), on a raw cursor.
            from psycopg.rows import tuple_row

            raw_class = raw_cursor_class(type(cur))
            async with raw_class(cur.connection, row_factory=tuple_row) as raw:
                raw.format = cur.format
                await raw.execute(*converted, prepare=self._prepare)
                return list(await raw.fetchall()) if stmt.fetch else []
        await cur.execute(stmt.sql, stmt.params or None, prepare=self._prepare)
        return list(await cur.fetchall()) if stmt.fetch else []

    async def _run_on(self, conn: Any, op: Op[T]) -> T:
        from psycopg.rows import tuple_row

        async with conn.cursor(binary=True, row_factory=tuple_row) as cur:
            if op.txn or not conn.autocommit:
                async with conn.transaction():
                    return await adrive(op, lambda s: self._execute(cur, s))
            return await adrive(op, lambda s: self._execute(cur, s))

    async def run(self, op: Op[T]) -> T:
        import psycopg

        retries = 0
        attempt = op
        while True:
            sent = False
            lost: psycopg.Error | None = None
            try:
                async with self._connection() as conn:
                    try:
                        if self._pool is not None and op.restart is None:
                            # See PostgresExecutor.run: swap a connection that died idle.
                            await self._pool.check_connection(conn)
                        sent = True
                        return await self._run_on(conn, attempt)
                    except psycopg.Error as exc:
                        if not is_connection_failure(exc, conn):
                            raise
                        lost = exc
            except psycopg.Error as exc:
                if is_pool_timeout(exc):
                    raise pool_exhausted(self.where, exc) from exc
                if isinstance(exc, psycopg.errors.DiskFull):
                    raise StorageFullError(
                        f"{self.where} is out of disk space: the transaction was rolled "
                        "back and nothing of this call was written; free space and retry"
                    ) from exc
                raise
            assert lost is not None
            if self._pool is not None:
                await self._purge()
            attempt, wait = next_attempt(
                op,
                attempt,
                lost,
                where=self.where,
                pooled=self._pool is not None,
                sent=sent,
                retries=retries,
                policy=self.retry,
            )
            retries += 1
            await asyncio.sleep(wait)

    async def _purge(self) -> None:
        with contextlib.suppress(Exception):
            await self._pool.check()

    async def close(self) -> None:
        if not self._owns:
            return
        if self._pool is not None:
            await self._pool.close()
        elif self._conn is not None:
            await self._conn.close()
