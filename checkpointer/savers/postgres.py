"""PostgreSQL savers: `PostgresSaver` (psycopg 3) and `AsyncPostgresSaver` (psycopg async).

Each accepts a connection, a psycopg_pool pool, or a URL (then it owns a pool). With a pool
there is no saver-wide lock: every operation borrows a connection for its statements only.
Most operations are a single statement (put: blobs and checkpoint together; get_tuple;
list page; delta history), so they work behind PgBouncer in transaction mode; pass
`prepare_threshold=None` there so no server-side prepared statement is ever used.

Connections the saver opens itself (from a URL) prepare a statement at its second use
and ask the server for generic plans (`plan_cache_mode=force_generic_plan`): every
statement is keyed by one thread, so one plan fits every call, and the server stops
planning each call anew (2 ms for a delta history, 1 ms for `get_tuple`: more than
running them). They also turn JIT compilation off (`jit=off`, unless the URL's own
`options` set it): a generic plan cannot see how small one thread is, so its estimates
put a whole-thread `list` past `jit_above_cost`, and compiling it took 60-70 ms of a 90 ms
call whose statement ran in 20. Connections and pools you pass in are used as they are
configured (pass `options="-c jit=off"` to yours).

When a pooled connection dies (server restart, idle timeout, pg_terminate_backend), reads,
put, put_writes and setup are re-run on a fresh connection up to `retries` times; other
operations, and failures past the retries, raise `StorageUnavailableError` (see
`checkpointer.savers.sql.pg_faults`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from checkpointer.errors import StorageUnavailableError
from checkpointer.savers.sql.async_exec import AsyncPostgresExecutor
from checkpointer.savers.sql.migration import parse_url
from checkpointer.savers.sql.pg_faults import (
    DEFAULT_RETRIES,
    DEFAULT_RETRY_BACKOFF,
    RetryPolicy,
    location,
)
from checkpointer.savers.sql.postgres_dialect import PostgresDialect
from checkpointer.savers.sql.saver import DEFAULT_PAGE_SIZE, AsyncSqlSaver, SyncSqlSaver
from checkpointer.savers.sql.sync_exec import PostgresExecutor
from checkpointer.serde import Serializer

__all__ = ["AsyncPostgresSaver", "PostgresSaver"]


def _conninfo(url: str) -> str:
    kind, conninfo = parse_url(url) if "://" in url else ("postgres", url)
    if kind != "postgres":
        raise ValueError(f"not a PostgreSQL URL: {url!r}")
    return conninfo


DEFAULT_PREPARE_THRESHOLD = 1
"""Executions of a statement before it is prepared: prepared at its second use, so a
one-off statement costs no extra round trip."""

GENERIC_PLANS = "-c plan_cache_mode=force_generic_plan"
"""Server option for the connections the saver opens (module docstring)."""

NO_JIT = "-c jit=off"
"""Server option for the connections the saver opens, before the URL's own options so that
a `-c jit=on` there wins (module docstring)."""


def _connect_kwargs(prepare_threshold: int | None, conninfo: str) -> dict[str, Any]:
    """psycopg connection arguments for a connection the saver opens on `conninfo`:
    autocommit, the prepare threshold and, when statements are prepared, generic plans
    without JIT (around any `options` the URL already sets). Without prepared statements
    (for PgBouncer in transaction mode, which may refuse startup options) none is added."""
    kwargs: dict[str, Any] = {"autocommit": True, "prepare_threshold": prepare_threshold}
    if prepare_threshold is not None:
        from psycopg.conninfo import conninfo_to_dict

        given = str(conninfo_to_dict(conninfo).get("options") or "").strip()
        kwargs["options"] = " ".join(o for o in (NO_JIT, given, GENERIC_PLANS) if o)
    return kwargs


def _pool_options(
    min_size: int,
    max_size: int,
    prepare_threshold: int | None,
    extra: dict[str, Any] | None,
    conninfo: str,
) -> dict[str, Any]:
    """What a saver given a URL passes to the pool it creates (sync or async)."""
    return {
        "min_size": min_size,
        "max_size": max_size,
        "kwargs": _connect_kwargs(prepare_threshold, conninfo),
        **(extra or {}),
    }


def _cannot_connect(conninfo: str, schema: str, exc: Exception) -> StorageUnavailableError:
    where = f"PostgreSQL schema {schema!r}"
    at = location(conninfo)
    return StorageUnavailableError(
        f"{where}{f' at {at}' if at else ''}: cannot connect ({type(exc).__name__}: "
        f"{' '.join(str(exc).split())})"
    )


class PostgresSaver(SyncSqlSaver):
    """Checkpoints in PostgreSQL (tables in `schema`, default "public")."""

    _executor: PostgresExecutor

    def __init__(
        self,
        conn: Any,
        *,
        schema: str = "public",
        serde: Serializer | None = None,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
        min_size: int = 1,
        max_size: int = 10,
        pool_kwargs: dict[str, Any] | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        retries: int = DEFAULT_RETRIES,
        retry_backoff: float = DEFAULT_RETRY_BACKOFF,
    ) -> None:
        """`conn`: a psycopg `Connection`, a `psycopg_pool.ConnectionPool`, or a URL (the
        saver then opens and owns a pool of `min_size`..`max_size` connections).
        `prepare_threshold=None` disables server-side prepared statements (PgBouncer in
        transaction mode), also on connections you pass in. `retries`: how many times an
        operation that is safe to repeat is re-run on a fresh pooled connection after its
        connection died (0: never), waiting `retry_backoff` seconds, doubled each time."""
        super().__init__(serde=serde, page_size=page_size)
        self._dialect = PostgresDialect(schema)
        retry = RetryPolicy(retries, retry_backoff)
        owns = isinstance(conn, str)
        if isinstance(conn, str):
            from psycopg_pool import ConnectionPool

            conninfo = _conninfo(conn)
            conn = ConnectionPool(
                conninfo,
                **_pool_options(min_size, max_size, prepare_threshold, pool_kwargs, conninfo),
                open=True,
            )
        self._executor = PostgresExecutor(
            conn,
            prepare=prepare_threshold is not None,
            owns=owns,
            where=self._dialect.describe(),
            retry=retry,
        )

    @classmethod
    @contextmanager
    def from_conn_string(
        cls,
        conn_string: str,
        *,
        pool: bool = True,
        setup: bool = True,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
        **kwargs: Any,
    ) -> Iterator[PostgresSaver]:
        """A saver on a URL, closed on exit: a pool (default) or, with `pool=False`, one
        connection. The schema is created or upgraded on open, as on SQLite, unless
        `setup=False` (a current schema is only read, so a role without DDL rights can
        open it)."""
        if pool:
            saver = cls(conn_string, prepare_threshold=prepare_threshold, **kwargs)
        else:
            from psycopg import Connection, OperationalError

            conninfo = _conninfo(conn_string)
            try:
                connection = Connection.connect(
                    conninfo, **_connect_kwargs(prepare_threshold, conninfo)
                )
            except OperationalError as exc:
                raise _cannot_connect(conninfo, kwargs.get("schema", "public"), exc) from exc
            try:
                saver = cls(connection, prepare_threshold=prepare_threshold, **kwargs)
            except BaseException:
                connection.close()
                raise
            saver._executor._owns = True
        try:
            if setup:
                saver.setup()
            yield saver
        finally:
            saver.close()

    from_url = from_conn_string


class AsyncPostgresSaver(AsyncSqlSaver):
    """Checkpoints in PostgreSQL through psycopg's async API."""

    _executor: AsyncPostgresExecutor

    def __init__(
        self,
        conn: Any,
        *,
        schema: str = "public",
        serde: Serializer | None = None,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
        min_size: int = 1,
        max_size: int = 10,
        pool_kwargs: dict[str, Any] | None = None,
        page_size: int = DEFAULT_PAGE_SIZE,
        retries: int = DEFAULT_RETRIES,
        retry_backoff: float = DEFAULT_RETRY_BACKOFF,
    ) -> None:
        """`conn`: a psycopg `AsyncConnection`, a `psycopg_pool.AsyncConnectionPool`, or a
        URL (the saver then owns a pool, opened on first use). The other options are those
        of `PostgresSaver`."""
        super().__init__(serde=serde, page_size=page_size)
        self._dialect = PostgresDialect(schema)
        retry = RetryPolicy(retries, retry_backoff)
        owns = isinstance(conn, str)
        if isinstance(conn, str):
            from psycopg_pool import AsyncConnectionPool

            conninfo = _conninfo(conn)
            conn = AsyncConnectionPool(
                conninfo,
                **_pool_options(min_size, max_size, prepare_threshold, pool_kwargs, conninfo),
                open=False,
            )
        self._executor = AsyncPostgresExecutor(
            conn,
            prepare=prepare_threshold is not None,
            owns=owns,
            where=self._dialect.describe(),
            retry=retry,
        )

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls,
        conn_string: str,
        *,
        pool: bool = True,
        setup: bool = True,
        prepare_threshold: int | None = DEFAULT_PREPARE_THRESHOLD,
        **kwargs: Any,
    ) -> AsyncIterator[AsyncPostgresSaver]:
        if pool:
            saver = cls(conn_string, prepare_threshold=prepare_threshold, **kwargs)
            await saver._executor.open()
        else:
            from psycopg import AsyncConnection, OperationalError

            conninfo = _conninfo(conn_string)
            try:
                connection = await AsyncConnection.connect(
                    conninfo, **_connect_kwargs(prepare_threshold, conninfo)
                )
            except OperationalError as exc:
                raise _cannot_connect(conninfo, kwargs.get("schema", "public"), exc) from exc
            try:
                saver = cls(connection, prepare_threshold=prepare_threshold, **kwargs)
            except BaseException:
                await connection.close()
                raise
            saver._executor._owns = True
        try:
            if setup:
                await saver.setup()
            yield saver
        finally:
            await saver.aclose()

    from_url = from_conn_string
