"""Sync execute layer: drives plans over sqlite3 and psycopg connections.

Only this module (and its async twin) touches connections; what to run comes
from the plans (`plan.py`).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from checkpointer.errors import CheckpointerError, StorageBusyError, StorageFullError
from checkpointer.savers.sql.pg_faults import (
    RetryPolicy,
    is_connection_failure,
    is_pool_timeout,
    location,
    next_attempt,
    pool_exhausted,
)
from checkpointer.savers.sql.pg_native import native, raw_cursor_class
from checkpointer.savers.sql.plan import Op, Row, StatementHook, Stmt, read_op

T = TypeVar("T")


def drive(op: Op[T], execute: Callable[[Stmt], list[Row]]) -> T:
    """Run a plan to completion: send each statement's rows back into it."""
    plan = op.plan
    try:
        stmt = next(plan)
        while True:
            stmt = plan.send(execute(stmt))
    except StopIteration as stop:
        return stop.value
    finally:
        plan.close()


_BUSY_CODES = (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (primary result codes)
_FULL_CODE = 13  # SQLITE_FULL: disk full, or the file reached max_page_count


@contextmanager
def typed_busy_errors(where: str, busy_timeout: float) -> Iterator[None]:
    """A write that stayed locked past the busy timeout becomes StorageBusyError, one that
    found the database full StorageFullError: clear, catchable errors naming the database
    (the transaction was rolled back: nothing of it was written)."""
    try:
        yield
    except sqlite3.OperationalError as exc:
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None and code & 0xFF == _FULL_CODE:
            raise StorageFullError(
                f"{where} is full (no disk space, or max_page_count reached): the "
                "transaction was rolled back and nothing of this call was written; free "
                "space and retry"
            ) from exc
        if code is None or code & 0xFF not in _BUSY_CODES:
            raise
        raise StorageBusyError(
            f"{where} stayed locked by another writer for longer than busy_timeout="
            f"{busy_timeout:g}s; nothing was written: retry, or raise busy_timeout"
        ) from exc


def run_sqlite_op(conn: sqlite3.Connection, op: Op[T], trace: StatementHook | None) -> T:
    """One operation on an autocommit sqlite3 connection; several statements go in one
    BEGIN IMMEDIATE transaction (taking the write lock up front, so two writers never
    deadlock upgrading read locks). Also run inside aiosqlite's thread by the async saver."""

    def execute(stmt: Stmt) -> list[Row]:
        if trace is not None:
            trace(stmt.sql)
        if stmt.script:
            conn.executescript(stmt.sql)
            return []
        if stmt.many:
            conn.executemany(stmt.sql, stmt.params)
            return []
        # Always drain: an unread RETURNING row keeps the statement open, and COMMIT
        # would then fail with "SQL statements in progress".
        rows = conn.execute(stmt.sql, stmt.params).fetchall()
        return rows if stmt.fetch else []

    if not op.txn:
        return drive(op, execute)
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = drive(op, execute)
        # Inside the try: a COMMIT that fails (a full disk while appending to the WAL)
        # must not leave the transaction open on this connection.
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


SYNCHRONOUS_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


def sqlite_pragmas(busy_timeout: float, synchronous: str) -> list[str]:
    """Per-connection settings. WAL lets readers run beside the one writer; NORMAL sync in
    WAL mode never corrupts the file and survives process crashes (use FULL to also survive
    power loss)."""
    if synchronous.upper() not in SYNCHRONOUS_MODES:
        raise ValueError(f"synchronous must be one of {SYNCHRONOUS_MODES}, got {synchronous!r}")
    return [
        f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}",
        f"PRAGMA synchronous = {synchronous.upper()}",
    ]


def is_memory_path(path: str) -> bool:
    return path in ("", ":memory:") or (path.startswith("file:") and "mode=memory" in path)


class _ConnHolder:
    """Owns one thread's connection; closing it when the holder is collected."""

    __slots__ = ("__weakref__", "conn")

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def close(self) -> None:
        with contextlib.suppress(sqlite3.Error):
            self.conn.close()

    def __del__(self) -> None:
        self.close()


_WRITE_LOCKS: dict[str, threading.Lock] = {}
_WRITE_LOCKS_GUARD = threading.Lock()


def _write_lock(path: str) -> threading.Lock:
    """One lock per database file in this process. SQLite runs one writer at a time
    anyway; queueing our own threads here spares them SQLite's busy handler, which sleeps
    in growing steps (1, 2, 5, 10 ms...) instead of waking when the lock is free."""
    key = os.path.realpath(path)
    with _WRITE_LOCKS_GUARD:
        return _WRITE_LOCKS.setdefault(key, threading.Lock())


class SqliteExecutor:
    """Runs plans on SQLite.

    A file database gets one connection per thread: readers never wait on a Python lock;
    write transactions of one process queue on a per-file lock, and other processes on
    SQLite's own write lock (with `busy_timeout`). A given connection or an in-memory
    database is shared under a lock held for one operation at a time, never while a
    caller iterates `list()`.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | sqlite3.Connection,
        *,
        busy_timeout: float = 5.0,
        synchronous: str = "NORMAL",
    ) -> None:
        self.trace: StatementHook | None = None
        self._pragmas = sqlite_pragmas(busy_timeout, synchronous)
        self._busy_timeout = busy_timeout
        self._closed = False
        self._local = threading.local()
        # Per-thread connections, held weakly: when a thread ends, its thread-local
        # holder goes and closes the connection, so short-lived threads leak nothing.
        self._all: weakref.WeakSet[_ConnHolder] = weakref.WeakSet()
        self._all_lock = threading.Lock()
        self._shared: sqlite3.Connection | None = None
        self._shared_lock = threading.RLock()
        self._owns_shared = False
        if isinstance(target, sqlite3.Connection):
            self.path = None
            self._shared = target
            self._prepare(target, user=True)
        else:
            self.path = os.fspath(target)
            if is_memory_path(self.path):
                self._shared = self._open()
                self._owns_shared = True
        self._writes = (
            _write_lock(self.path)
            if self._shared is None and self.path
            else contextlib.nullcontext()
        )

    @property
    def where(self) -> str:
        return f"SQLite database {self.path!r}" if self.path else "SQLite database"

    def _open(self) -> sqlite3.Connection:
        assert self.path is not None
        conn = sqlite3.connect(
            self.path,
            timeout=self._busy_timeout,
            isolation_level=None,
            check_same_thread=False,
            uri=self.path.startswith("file:"),
        )
        self._prepare(conn, user=False)
        return conn

    def _prepare(self, conn: sqlite3.Connection, *, user: bool) -> None:
        if user and conn.in_transaction:
            conn.commit()
        # Autocommit: we issue BEGIN IMMEDIATE ourselves for multi-statement writes.
        conn.isolation_level = None
        for pragma in self._pragmas:
            conn.execute(pragma)

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        if self._closed:
            raise CheckpointerError("this saver is closed")
        if self._shared is not None:
            with self._shared_lock:
                yield self._shared
            return
        holder: _ConnHolder | None = getattr(self._local, "holder", None)
        if holder is None:
            holder = _ConnHolder(self._open())
            self._local.holder = holder
            with self._all_lock:
                self._all.add(holder)
        yield holder.conn

    def run(self, op: Op[T]) -> T:
        holder: _ConnHolder | None = getattr(self._local, "holder", None)
        if holder is not None and not self._closed and self._shared is None:
            # This thread's connection, without the two context managers below (a put and
            # a put_writes each pass here once); the same lock and the same typed errors.
            try:
                if op.txn or op.write:
                    with self._writes:
                        return run_sqlite_op(holder.conn, op, self.trace)
                return run_sqlite_op(holder.conn, op, self.trace)
            except sqlite3.OperationalError:
                with typed_busy_errors(self.where, self._busy_timeout):
                    raise
        with self._connection() as conn, typed_busy_errors(self.where, self._busy_timeout):
            if not (op.txn or op.write):
                return run_sqlite_op(conn, op, self.trace)
            with self._writes:
                return run_sqlite_op(conn, op, self.trace)

    def fetch(self, stmt: Stmt) -> list[Row]:
        """The rows of a one-statement read: `run(read_op(stmt))` without the plan and
        context-manager layers (the read path's hot call: a get_tuple is one of these)."""
        holder: _ConnHolder | None = getattr(self._local, "holder", None)
        if holder is None or self._closed or self._shared is not None:
            return self.run(read_op(stmt))
        if self.trace is not None:
            self.trace(stmt.sql)
        try:
            return holder.conn.execute(stmt.sql, stmt.params).fetchall()
        except sqlite3.OperationalError:
            with typed_busy_errors(self.where, self._busy_timeout):
                raise

    def close(self) -> None:
        self._closed = True
        with self._all_lock:
            holders, self._all = list(self._all), weakref.WeakSet()
        for holder in holders:
            holder.close()
        if self._shared is not None and self._owns_shared:
            self._shared.close()


class PostgresExecutor:
    """Runs plans on psycopg: a pool (no lock: each operation borrows a connection) or one
    connection (a lock held for one operation at a time, never while iterating).

    A lost connection is handled as `pg_faults` explains: with a pool, a repeatable
    operation is re-run on a fresh connection (`retry` bounds how often); any other
    failure of the connection becomes `StorageUnavailableError`.
    """

    def __init__(
        self,
        source: Any,
        *,
        prepare: bool = True,
        owns: bool = False,
        where: str = "PostgreSQL database",
        retry: RetryPolicy | None = None,
    ) -> None:
        from psycopg import Connection
        from psycopg_pool import ConnectionPool

        self.trace: StatementHook | None = None
        self._prepare: bool | None = None if prepare else False
        self._owns = owns
        self._lock = threading.Lock()
        self.retry = retry or RetryPolicy()
        if isinstance(source, ConnectionPool):
            self._pool: Any = source
            self._conn: Any = None
        elif isinstance(source, Connection):
            self._pool, self._conn = None, source
        else:
            raise TypeError(
                "expected a psycopg Connection or psycopg_pool ConnectionPool, got "
                f"{type(source).__name__}"
            )
        at = location(source)
        self.where = f"{where} at {at}" if at else where

    @contextmanager
    def _connection(self) -> Iterator[Any]:
        if self._pool is not None:
            with self._pool.connection() as conn:
                yield conn
        else:
            with self._lock:
                yield self._conn

    def _execute(self, cur: Any, stmt: Stmt) -> list[Row]:
        if self.trace is not None:
            self.trace(stmt.sql)
        if stmt.many:
            cur.executemany(stmt.sql, stmt.params)
            return []
        if stmt.script:
            cur.execute(stmt.sql, prepare=False)
            return []
        if stmt.params and (converted := native(stmt.sql, stmt.params)) is not None:
            # A long statement in `$n` form, parsed once (`pg_native`), on a raw cursor.
            from psycopg.rows import tuple_row

            with raw_cursor_class(type(cur))(cur.connection, row_factory=tuple_row) as raw:
                raw.format = cur.format
                raw.execute(*converted, prepare=self._prepare)
                return raw.fetchall() if stmt.fetch else []
        cur.execute(stmt.sql, stmt.params or None, prepare=self._prepare)
        return cur.fetchall() if stmt.fetch else []

    def _run_on(self, conn: Any, op: Op[T]) -> T:
        from psycopg.rows import tuple_row

        with conn.cursor(binary=True, row_factory=tuple_row) as cur:
            if op.txn or not conn.autocommit:
                # In autocommit mode this is BEGIN/COMMIT; inside a caller's open
                # transaction it becomes a savepoint and the caller commits.
                with conn.transaction():
                    return drive(op, lambda s: self._execute(cur, s))
            return drive(op, lambda s: self._execute(cur, s))

    def run(self, op: Op[T]) -> T:
        import psycopg

        retries = 0
        attempt = op
        while True:
            sent = False
            lost: psycopg.Error | None = None
            try:
                with self._connection() as conn:
                    try:
                        if self._pool is not None and op.restart is None:
                            # One round trip before an operation that cannot be re-run:
                            # a connection that died while idle is swapped, not failed.
                            self._pool.check_connection(conn)
                        sent = True
                        return self._run_on(conn, attempt)
                    except psycopg.Error as exc:
                        if not is_connection_failure(exc, conn):
                            raise
                        lost = exc  # leaving the block hands the dead connection back
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
                self._purge()
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
            time.sleep(wait)

    def _purge(self) -> None:
        """Drop the pool's other dead idle connections (a server restart kills them all),
        so the next attempts do not draw them one by one."""
        with contextlib.suppress(Exception):
            self._pool.check()

    def close(self) -> None:
        if not self._owns:
            return
        if self._pool is not None:
            self._pool.close()
        elif self._conn is not None:
            self._conn.close()
