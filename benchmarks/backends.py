"""Storage backends, each able to open a fresh, empty store for "ours" or "ref".

A store is one LangGraph checkpointer plus how to measure it: bytes on disk and whether
its statements are counted. Ours go through `LangGraphSaver`; the reference savers are
LangGraph's own. Both sides get the same kind of connection, configured the way each
saver's `from_conn_string` would configure it.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from benchmarks.instrument import (
    COUNTER,
    atrace_aiosqlite,
    counting_cursor_classes,
    trace_sqlite,
)

T = TypeVar("T")

SIDES: tuple[str, str] = ("ours", "ref")
ALL_BACKENDS: tuple[str, ...] = (
    "memory",
    "sqlite",
    "sqlite_full",
    "async_sqlite",
    "postgres",
    "async_postgres",
)
"""Report columns. `sqlite` is our SqliteSaver at its default synchronous=NORMAL,
`sqlite_full` the same saver at synchronous=FULL (the reference's durability: an fsync per
commit); both run in one cell against one reference. `async_sqlite` runs ours at FULL."""
SQL_BACKENDS = frozenset({"sqlite", "sqlite_full", "async_sqlite", "postgres", "async_postgres"})
SQLITE_BACKENDS = frozenset({"sqlite", "sqlite_full", "async_sqlite"})
POSTGRES_BACKENDS = frozenset({"postgres", "async_postgres"})

DEFAULT_PG_URL = os.environ.get("BENCH_PG_URL", "postgresql://postgres@127.0.0.1:5432/bench")
SCHEMAS = {"ours": "bench_ours", "ref": "bench_ref"}


@dataclass
class Store:
    """One open, initially empty checkpointer. `loop` is set for async savers: every call
    runs on it (`run`)."""

    checkpointer: Any
    loop: asyncio.AbstractEventLoop | None
    counts_statements: bool
    bytes_on_disk: Callable[[], int | None]
    close: Callable[[], None]
    closed: bool = field(default=False)
    # Where the data lives: the SQLite file, or the Postgres schema (for the growth cell).
    location: str = ""
    # Run after a build, before the reads: what the database would have done on its own by
    # then (PostgreSQL: autovacuum's ANALYZE of the tables the build filled). Without it,
    # statistics left from an earlier run can plan a read of 1,000 rows as if there were
    # ten (the reference's delta history took seconds per statement on a wide thread).
    settle: Callable[[], None] = field(default=lambda: None)

    def run(self, sync: Callable[[], T], coro: Callable[[], Awaitable[T]]) -> T:
        if self.loop is None:
            return sync()
        return self.loop.run_until_complete(coro())  # type: ignore[arg-type]

    def shutdown(self) -> None:
        if not self.closed:
            self.closed = True
            self.close()


class Backend:
    """`name` is the storage (sqlite, postgres, ...); `ours_sides` maps each of our sides
    measured in one cell to its report column (usually one: "ours" -> name)."""

    name: str = ""
    is_async: bool = False
    statements_note: str = ""

    @property
    def ours_sides(self) -> dict[str, str]:
        return {"ours": self.name}

    @property
    def sides(self) -> tuple[str, ...]:
        return (*self.ours_sides, "ref")

    def open(self, side: str, loop: asyncio.AbstractEventLoop | None) -> Store:
        raise NotImplementedError

    def cleanup(self) -> None:
        """Remove whatever the backend created (files); databases are left in place."""


def _run(loop: asyncio.AbstractEventLoop | None, coro: Awaitable[T]) -> T:
    assert loop is not None, "async backend needs an event loop"
    return loop.run_until_complete(coro)  # type: ignore[arg-type]


class MemoryBackend(Backend):
    name = "memory"
    statements_note = "no SQL: statements not applicable"

    def open(self, side: str, loop: asyncio.AbstractEventLoop | None) -> Store:
        if side == "ours":
            from checkpointer.langgraph import LangGraphSaver
            from checkpointer.savers.memory import InMemorySaver

            checkpointer: Any = LangGraphSaver(InMemorySaver())
        else:
            from langgraph.checkpoint.memory import InMemorySaver as RefMemory

            checkpointer = RefMemory()
        return Store(checkpointer, None, False, lambda: None, lambda: None)


# --------------------------------------------------------------------------- SQLite
def _sqlite_files(path: str) -> list[str]:
    return [path, f"{path}-wal", f"{path}-shm"]


def sqlite_bytes(path: str) -> int:
    """File size including the WAL, after checkpointing the WAL into the main file."""
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    conn.close()
    return sum(os.path.getsize(p) for p in (path, f"{path}-wal") if os.path.exists(p))


def _remove(path: str) -> None:
    for p in _sqlite_files(path):
        if os.path.exists(p):
            os.remove(p)


def hook_sqlite_opens(saver: Any) -> str:
    """Trace every connection our SqliteSaver opens (one per thread, opened lazily).

    Our saver is given a path, as users give it (with a connection it would not switch the
    file to WAL), so its connections only exist once it opens them: wrap the executor's
    opener. Falls back to the executor's own statement hook if that is not reachable.
    """
    executor = getattr(saver, "_executor", None)
    opener = getattr(executor, "_open", None)
    if opener is not None:

        def traced_open() -> Any:
            conn = opener()
            trace_sqlite(conn)
            return conn

        executor._open = traced_open  # type: ignore[union-attr]
        return "sqlite3 trace callback"
    if executor is not None and hasattr(executor, "trace"):
        executor.trace = COUNTER.record
        return "the saver's statement hook (transaction control not visible)"
    return "not counted"


class SqliteBackend(Backend):
    """A file per store in a temporary directory. Each side is opened the way its users
    open it: ours from a path (its `from_conn_string`), the reference from a sqlite3
    connection with `check_same_thread=False` (its `from_conn_string`)."""

    name = "sqlite"
    statements_note = "sqlite3 set_trace_callback on every connection the saver uses"

    def __init__(
        self,
        directory: str | None = None,
        synchronous: str | None = None,
        columns: tuple[str, ...] = ("sqlite",),
    ) -> None:
        """`columns`: which of our configurations run against the one reference: `sqlite`
        (PRAGMA synchronous = `synchronous`, None: the saver's default NORMAL) and/or
        `sqlite_full` (FULL)."""
        self._sync: dict[str, str | None] = {}
        self._columns: dict[str, str] = {}
        for column in columns:
            side = "ours_full" if column.endswith("_full") else "ours"
            self._columns[side] = column
            self._sync[side] = "FULL" if side == "ours_full" else synchronous
        self._own_dir = directory is None
        self.directory = directory or tempfile.mkdtemp(prefix="bench-sqlite-")
        self._k = 0

    @property
    def ours_sides(self) -> dict[str, str]:
        return dict(self._columns)

    def ours_kwargs(self, side: str) -> dict[str, Any]:
        sync = self._sync.get(side)
        return {} if sync is None else {"synchronous": sync}

    def _path(self, side: str) -> str:
        self._k += 1
        path = os.path.join(self.directory, f"{self.name}-{side}-{self._k}.db")
        _remove(path)
        return path

    def open(self, side: str, loop: asyncio.AbstractEventLoop | None) -> Store:
        path = self._path(side)
        if side != "ref":
            from checkpointer.langgraph import LangGraphSaver
            from checkpointer.savers.sqlite import SqliteSaver

            saver = SqliteSaver(path, **self.ours_kwargs(side))
            hook_sqlite_opens(saver)
            saver.setup()
            checkpointer: Any = LangGraphSaver(saver)

            def close() -> None:
                saver.close()
                _remove(path)

        else:
            from langgraph.checkpoint.sqlite import SqliteSaver as RefSqlite

            conn = sqlite3.connect(path, check_same_thread=False)
            trace_sqlite(conn)
            checkpointer = RefSqlite(conn)
            checkpointer.setup()

            def close() -> None:
                conn.close()
                _remove(path)

        return Store(checkpointer, None, True, lambda: sqlite_bytes(path), close, location=path)

    def cleanup(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.directory, ignore_errors=True)


class AsyncSqliteBackend(SqliteBackend):
    name = "async_sqlite"
    is_async = True
    statements_note = "sqlite3 set_trace_callback on the aiosqlite connection"

    def __init__(self, directory: str | None = None, synchronous: str | None = "FULL") -> None:
        """Ours at `synchronous` (default FULL: the reference's durability)."""
        super().__init__(directory, synchronous, columns=("async_sqlite",))

    def open(self, side: str, loop: asyncio.AbstractEventLoop | None) -> Store:
        import aiosqlite

        path = self._path(side)

        async def make() -> tuple[Any, Any]:
            if side != "ref":
                from checkpointer.langgraph import LangGraphSaver
                from checkpointer.savers.sqlite import AsyncSqliteSaver

                # From a path, as `from_conn_string` does (a given connection gets no WAL).
                saver = AsyncSqliteSaver(path, **self.ours_kwargs(side))
                await saver.setup()
                conn = getattr(saver._executor, "_conn", None)
                if conn is not None:
                    await atrace_aiosqlite(conn)
                else:
                    saver._executor.trace = COUNTER.record
                return saver.aclose, LangGraphSaver(saver)
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver as RefAsyncSqlite

            conn = await aiosqlite.connect(path)
            await atrace_aiosqlite(conn)
            ref = RefAsyncSqlite(conn)
            await ref.setup()
            return conn.close, ref

        aclose, checkpointer = _run(loop, make())

        def close() -> None:
            _run(loop, aclose())
            _remove(path)

        return Store(checkpointer, loop, True, lambda: sqlite_bytes(path), close, location=path)


# ------------------------------------------------------------------------- Postgres
def _with_dbname(url: str, dbname: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo(**params)


def ensure_database(url: str) -> None:
    """Create the benchmark database if missing (connecting through `postgres`)."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict

    dbname = conninfo_to_dict(url).get("dbname") or "bench"
    try:
        psycopg.connect(url, connect_timeout=5).close()
        return
    except psycopg.OperationalError:
        pass
    with psycopg.connect(
        _with_dbname(url, "postgres"), autocommit=True, connect_timeout=5
    ) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (dbname,))
        if exists.fetchone() is None:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(dbname)))


def postgres_available(url: str) -> str | None:
    """None when usable, else why not."""
    try:
        import psycopg

        ensure_database(url)
        psycopg.connect(url, connect_timeout=5).close()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


class PgAdmin:
    """The harness's own connection: schemas, truncation between runs, sizes."""

    def __init__(self, url: str) -> None:
        import psycopg

        ensure_database(url)
        self.conn = psycopg.connect(url, autocommit=True)

    def ensure_schema(self, schema: str) -> None:
        from psycopg import sql

        self.conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))

    def data_tables(self, schema: str) -> list[str]:
        rows = self.conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
        return [r[0] for r in rows if "migration" not in r[0] and "version" not in r[0]]

    def truncate(self, schema: str) -> None:
        from psycopg import sql

        tables = self.data_tables(schema)
        if tables:
            names = sql.SQL(", ").join(sql.Identifier(schema, t) for t in tables)
            self.conn.execute(sql.SQL("TRUNCATE {}").format(names))

    def analyze(self, schema: str) -> None:
        from psycopg import sql

        for table in self.data_tables(schema):
            self.conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, table)))

    def schema_bytes(self, schema: str) -> int:
        """pg_total_relation_size (heap + TOAST + indexes) of every table in `schema`."""
        row = self.conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'p')",
            (schema,),
        ).fetchone()
        return int(row[0]) if row else 0

    def server_version(self) -> str:
        row = self.conn.execute("SHOW server_version").fetchone()
        return str(row[0]) if row else "?"

    def close(self) -> None:
        self.conn.close()


def ours_pg_kwargs(url: str) -> dict[str, Any]:
    """What our `from_conn_string` passes to psycopg for `url` (the saver's own helper, so
    the benchmark follows the defaults users get: prepared statements, generic plans)."""
    from checkpointer.savers.postgres import DEFAULT_PREPARE_THRESHOLD, _connect_kwargs

    return _connect_kwargs(DEFAULT_PREPARE_THRESHOLD, url)


def ref_pg_kwargs(schema: str) -> dict[str, Any]:
    """What the reference's `from_conn_string` passes, plus a search_path for its tables."""
    from psycopg.rows import dict_row

    return {
        "autocommit": True,
        "prepare_threshold": 0,
        "row_factory": dict_row,
        "options": f"-c search_path={schema}",
    }


class PostgresBackend(Backend):
    """One database; ours in schema bench_ours, the reference in bench_ref (via
    search_path). Each store starts from truncated tables, so sizes are one thread's."""

    name = "postgres"
    statements_note = "psycopg cursor_factory counting execute / executemany rows"

    def __init__(self, url: str = DEFAULT_PG_URL, suffix: str = "") -> None:
        """`suffix` names a second pair of schemas (bench_ours<suffix>, ...), for a cell
        that keeps two stores per side."""
        self.url = url
        self.admin = PgAdmin(url)
        self.schemas = {side: schema + suffix for side, schema in SCHEMAS.items()}
        for schema in self.schemas.values():
            self.admin.ensure_schema(schema)

    def open(self, side: str, loop: asyncio.AbstractEventLoop | None) -> Store:
        import psycopg

        cursor_cls, _ = counting_cursor_classes()
        schema = self.schemas[side]
        if side == "ours":
            from checkpointer.langgraph import LangGraphSaver
            from checkpointer.savers.postgres import PostgresSaver

            conn = psycopg.Connection.connect(
                self.url, cursor_factory=cursor_cls, **ours_pg_kwargs(self.url)
            )
            saver = PostgresSaver(conn, schema=schema)
            saver.setup()
            checkpointer: Any = LangGraphSaver(saver)
        else:
            from langgraph.checkpoint.postgres import PostgresSaver as RefPostgres

            conn = psycopg.Connection.connect(
                self.url, cursor_factory=cursor_cls, **ref_pg_kwargs(schema)
            )
            checkpointer = RefPostgres(conn)
            checkpointer.setup()
        self.admin.truncate(schema)
        return Store(
            checkpointer,
            None,
            True,
            lambda: self.admin.schema_bytes(schema),
            conn.close,
            location=schema,
            settle=lambda: self.admin.analyze(schema),
        )

    def cleanup(self) -> None:
        for schema in self.schemas.values():
            self.admin.truncate(schema)
        self.admin.close()


class AsyncPostgresBackend(PostgresBackend):
    name = "async_postgres"
    is_async = True

    def open(self, side: str, loop: asyncio.AbstractEventLoop | None) -> Store:
        import psycopg

        _, cursor_cls = counting_cursor_classes()
        schema = self.schemas[side]

        async def make() -> tuple[Any, Any]:
            if side == "ours":
                from checkpointer.langgraph import LangGraphSaver
                from checkpointer.savers.postgres import AsyncPostgresSaver

                conn = await psycopg.AsyncConnection.connect(
                    self.url, cursor_factory=cursor_cls, **ours_pg_kwargs(self.url)
                )
                saver = AsyncPostgresSaver(conn, schema=schema)
                await saver.setup()
                return conn, LangGraphSaver(saver)
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver as RefAsyncPg

            conn = await psycopg.AsyncConnection.connect(
                self.url, cursor_factory=cursor_cls, **ref_pg_kwargs(schema)
            )
            ref = RefAsyncPg(conn)
            await ref.setup()
            return conn, ref

        conn, checkpointer = _run(loop, make())
        self.admin.truncate(schema)
        return Store(
            checkpointer,
            loop,
            True,
            lambda: self.admin.schema_bytes(schema),
            lambda: _run(loop, conn.close()),
            location=schema,
            settle=lambda: self.admin.analyze(schema),
        )


def make_backends(
    names: Sequence[str], pg_url: str = DEFAULT_PG_URL, sqlite_synchronous: str | None = None
) -> list[Backend]:
    """One backend per storage, in `names` order; `sqlite` and `sqlite_full` share one
    (one reference, measured once, against both of our configurations)."""
    out: list[Backend] = []
    sqlite_columns = tuple(n for n in names if n in ("sqlite", "sqlite_full"))
    for name in names:
        if name in ("sqlite", "sqlite_full"):
            if name == sqlite_columns[0]:
                out.append(SqliteBackend(synchronous=sqlite_synchronous, columns=sqlite_columns))
        else:
            out.append(make_backend(name, pg_url))
    return out


def make_backend(
    name: str, pg_url: str = DEFAULT_PG_URL, sqlite_synchronous: str | None = None
) -> Backend:
    """`sqlite_synchronous` sets ours in the `sqlite` column (async_sqlite runs ours at
    FULL, the reference's durability)."""
    if name == "memory":
        return MemoryBackend()
    if name == "sqlite":
        return SqliteBackend(synchronous=sqlite_synchronous)
    if name == "sqlite_full":
        return SqliteBackend(columns=("sqlite_full",))
    if name == "async_sqlite":
        return AsyncSqliteBackend()
    if name == "postgres":
        return PostgresBackend(pg_url)
    if name == "async_postgres":
        return AsyncPostgresBackend(pg_url)
    raise ValueError(f"unknown backend {name!r}; expected one of {', '.join(ALL_BACKENDS)}")
