"""Savers handed to LangGraph's tests: ours wrapped in `LangGraphSaver`, and LangGraph's own
(the baseline), each opened for a sync test or for an async one.

A sync test runs with no event loop in its thread, so an async saver of ours gets a loop of
its own in a background thread and serves the test's sync calls there, the way a sync app
would use it. An async test opens every saver on the test's own loop.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import queue
import secrets
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Coroutine, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

PG_URL = os.environ.get("CHECKPOINTER_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")

#: Our savers, in report order.
OURS = ("memory", "sqlite", "async_sqlite", "postgres", "async_postgres")
#: LangGraph's savers on the same tests (sync tests get the sync saver, async tests the
#: async one, as in LangGraph's own fixtures).
BASELINE = ("lg-memory", "lg-sqlite", "lg-postgres")
ASYNC_KINDS = frozenset({"async_sqlite", "async_postgres"})
PG_KINDS = frozenset({"postgres", "async_postgres", "lg-postgres"})

_TMP: Path | None = None


def _token() -> str:
    """A random name part. Not uuid4: some of LangGraph's tests patch `uuid.uuid4` to count
    from zero, and a saver taking ids from it would shift theirs (and collide across
    workers)."""
    return secrets.token_hex(6)


def tmp_dir() -> Path:
    """One directory per process for SQLite files, removed when the process exits."""
    global _TMP
    if _TMP is None:
        _TMP = Path(tempfile.mkdtemp(prefix="lgsuites-"))
        atexit.register(shutil.rmtree, _TMP, True)
    return _TMP


def _db_path() -> Path:
    return tmp_dir() / f"{_token()}.db"


# ------------------------------------------------------------------ Postgres schemas
def new_schema() -> str:
    import psycopg

    name = f"lgsuites_{_token()}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{name}"')
    return name


def drop_schema(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


class _Schemas:
    """Fresh schemas with our tables already migrated, made ahead by a background thread,
    and used ones dropped there: a test still gets a schema nobody used, without waiting for
    the migrations (a few hundred ms each) or the drop."""

    AHEAD = 2

    def __init__(self) -> None:
        self._ready: queue.Queue[str] = queue.Queue(maxsize=self.AHEAD)
        self._used: queue.Queue[str] = queue.Queue()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def take(self) -> str:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, daemon=True)
                self._thread.start()
                atexit.register(self.close)
        return self._ready.get()

    def give_back(self, name: str) -> None:
        self._used.put(name)

    def _make(self) -> str:
        from checkpointer.savers.postgres import PostgresSaver

        name = new_schema()
        saver = PostgresSaver(PG_URL, schema=name, min_size=1, max_size=1)
        try:
            saver.setup()
        finally:
            saver.close()
        return name

    def _drop_used(self) -> None:
        while True:
            try:
                name = self._used.get_nowait()
            except queue.Empty:
                return
            drop_schema(name)

    def _work(self) -> None:
        while not self._stop.is_set():
            self._drop_used()
            name = self._make()
            while not self._stop.is_set():
                try:
                    self._ready.put(name, timeout=0.2)
                    break
                except queue.Full:
                    self._drop_used()
            else:
                drop_schema(name)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        while True:
            try:
                self._used.put(self._ready.get_nowait())
            except queue.Empty:
                break
        self._drop_used()


_SCHEMAS = _Schemas()


def schema_url(schema: str) -> str:
    """PG_URL with `schema` first on the search path (for LangGraph's savers, which name
    their tables unqualified)."""
    sep = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{sep}options=-csearch_path%3D{schema}"


# ------------------------------------------------------------------ our savers
def _wrap(saver: Any, kind: str) -> Any:
    from checkpointer.langgraph import LangGraphSaver

    wrapped = LangGraphSaver(saver)
    wrapped._conformance_kind = kind  # type: ignore[attr-defined]
    return wrapped


def _open_sync_kind(kind: str, schema: str | None) -> Any:
    if kind == "memory":
        from checkpointer.savers.memory import InMemorySaver

        return InMemorySaver()
    if kind == "sqlite":
        from checkpointer.savers.sqlite import SqliteSaver

        saver: Any = SqliteSaver(_db_path())
        saver.setup()
        return saver
    if kind == "postgres":
        from checkpointer.savers.postgres import PostgresSaver

        saver = PostgresSaver(PG_URL, schema=schema or "public", min_size=1, max_size=4)
        saver.setup()
        return saver
    raise ValueError(f"not a sync saver kind: {kind}")


async def _open_async_kind(kind: str, schema: str | None) -> Any:
    if kind == "async_sqlite":
        from checkpointer.savers.sqlite import AsyncSqliteSaver

        saver: Any = AsyncSqliteSaver(_db_path())
        await saver.setup()
        return saver
    if kind == "async_postgres":
        from checkpointer.savers.postgres import AsyncPostgresSaver

        saver = AsyncPostgresSaver(PG_URL, schema=schema or "public", min_size=1, max_size=4)
        await saver.setup()
        return saver
    raise ValueError(f"not an async saver kind: {kind}")


class _LoopThread:
    """An event loop running in a daemon thread, for async savers serving sync callers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@contextmanager
def ours_for_sync(kind: str) -> Iterator[Any]:
    """Our saver `kind`, wrapped, for a test that makes sync calls."""
    schema = _SCHEMAS.take() if kind in PG_KINDS else None
    try:
        if kind in ASYNC_KINDS:
            runner = _LoopThread()
            try:
                saver = runner.run(_open_async_kind(kind, schema))
                try:
                    yield _wrap(saver, kind)
                finally:
                    runner.run(saver.aclose())
            finally:
                runner.stop()
        else:
            saver = _open_sync_kind(kind, schema)
            try:
                yield _wrap(saver, kind)
            finally:
                if kind != "memory":
                    saver.close()
    finally:
        if schema is not None:
            _SCHEMAS.give_back(schema)


@asynccontextmanager
async def ours_for_async(kind: str) -> AsyncIterator[Any]:
    """Our saver `kind`, wrapped, opened on the running loop, for a test making async calls."""
    schema = _SCHEMAS.take() if kind in PG_KINDS else None
    try:
        if kind in ASYNC_KINDS:
            saver = await _open_async_kind(kind, schema)
            try:
                yield _wrap(saver, kind)
            finally:
                await saver.aclose()
        else:
            saver = _open_sync_kind(kind, schema)
            try:
                yield _wrap(saver, kind)
            finally:
                if kind != "memory":
                    saver.close()
    finally:
        if schema is not None:
            _SCHEMAS.give_back(schema)


# ------------------------------------------------------------------ LangGraph's savers
@contextmanager
def langgraph_postgres_sync() -> Iterator[Any]:
    from langgraph.checkpoint.postgres import PostgresSaver

    schema = new_schema()
    try:
        with PostgresSaver.from_conn_string(schema_url(schema)) as saver:
            saver.setup()
            yield saver
    finally:
        drop_schema(schema)


@asynccontextmanager
async def langgraph_postgres_async() -> AsyncIterator[Any]:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    schema = new_schema()
    try:
        async with AsyncPostgresSaver.from_conn_string(schema_url(schema)) as saver:
            await saver.setup()
            yield saver
    finally:
        drop_schema(schema)
