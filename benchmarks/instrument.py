"""Measuring instruments: time spent in put/put_writes and SQL statements per operation.

Statements are counted where the database driver sees them, not where a saver says it
sends them: sqlite3's trace callback (one call per statement execution, so executemany
counts each parameter set) and a psycopg cursor subclass that counts `execute` and every
parameter set of `executemany`. Transaction control (BEGIN/COMMIT/ROLLBACK/SAVEPOINT) is
counted separately, because savers that ask the driver for a transaction (psycopg's
`conn.transaction()`) never show it to the cursor.
"""

from __future__ import annotations

import asyncio
import cProfile
import re
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from langgraph.checkpoint.base import BaseCheckpointSaver

_TXN = re.compile(r"^\s*(BEGIN|COMMIT|ROLLBACK|END|SAVEPOINT|RELEASE)\b", re.IGNORECASE)


@dataclass
class Counted:
    statements: int = 0
    txn: int = 0


class StatementCounter:
    """Process-wide counter; active only inside `measure()`, one measurement at a time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._current: Counted | None = None

    def record(self, sql: Any, times: int = 1) -> None:
        current = self._current
        if current is None:
            return
        text = sql if isinstance(sql, str) else sql.decode() if isinstance(sql, bytes) else ""
        with self._lock:
            if _TXN.match(text):
                current.txn += times
            else:
                current.statements += times

    @contextmanager
    def measure(self) -> Iterator[Counted]:
        counted = Counted()
        self._current = counted
        try:
            yield counted
        finally:
            self._current = None


COUNTER = StatementCounter()


class SqliteTracing:
    """The sqlite3 trace callbacks, switched off while a thread is built.

    sqlite3 calls the callback inside each statement, trigger programs included, and must
    take the interpreter lock to do so: while LangGraph's other thread holds it, that can
    wait a whole switch interval (5 ms). Timing puts with it on charges the instrument to
    the side that runs more SQLite statements, so builds run untraced (on both sides) and
    statements are counted on the reads only."""

    def __init__(self) -> None:
        self.on = True
        # Each switch sets or clears one connection's callback; False once it is closed.
        self._switches: list[Callable[[bool], bool]] = []

    def add(self, switch: Callable[[bool], bool], *, applied: bool = False) -> None:
        """Keep `switch`, setting the current state through it unless `applied` says the
        caller already did."""
        if applied or switch(self.on):
            self._switches.append(switch)

    @contextmanager
    def off(self) -> Iterator[None]:
        self._set(False)
        try:
            yield
        finally:
            self._set(True)

    def _set(self, on: bool) -> None:
        self.on = on
        self._switches = [switch for switch in self._switches if switch(on)]


SQLITE_TRACING = SqliteTracing()


def trace_sqlite(conn: Any) -> None:
    """Count every statement a sqlite3 connection executes (while tracing is on)."""

    def switch(on: bool) -> bool:
        try:
            conn.set_trace_callback(COUNTER.record if on else None)
        except sqlite3.ProgrammingError:  # closed since
            return False
        return True

    SQLITE_TRACING.add(switch)


async def atrace_aiosqlite(conn: Any) -> None:
    """`trace_sqlite` for an aiosqlite connection: switched through its own thread, on
    the event loop the harness drives (never running while builds are switched)."""
    loop = asyncio.get_running_loop()
    await conn.set_trace_callback(COUNTER.record if SQLITE_TRACING.on else None)

    def switch(on: bool) -> bool:
        if getattr(conn, "_connection", None) is None or loop.is_closed():  # closed since
            return False
        loop.run_until_complete(conn.set_trace_callback(COUNTER.record if on else None))
        return True

    SQLITE_TRACING.add(switch, applied=True)


def _query_text(query: Any) -> str:
    if isinstance(query, str | bytes):
        return query if isinstance(query, str) else query.decode(errors="replace")
    return ""


def counting_cursor_classes() -> tuple[type, type]:
    """psycopg cursor classes that count statements; pass as `cursor_factory`."""
    import psycopg

    class CountingCursor(psycopg.Cursor):  # type: ignore[type-arg]
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            COUNTER.record(_query_text(query))
            return super().execute(query, params, **kwargs)

        def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> Any:
            params_seq = list(params_seq)
            COUNTER.record(_query_text(query), len(params_seq))
            return super().executemany(query, params_seq, **kwargs)

    class CountingAsyncCursor(psycopg.AsyncCursor):  # type: ignore[type-arg]
        async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            COUNTER.record(_query_text(query))
            return await super().execute(query, params, **kwargs)

        async def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> Any:
            params_seq = list(params_seq)
            COUNTER.record(_query_text(query), len(params_seq))
            return await super().executemany(query, params_seq, **kwargs)

    return CountingCursor, CountingAsyncCursor


@dataclass
class CallStats:
    """Seconds spent inside put and put_writes (summed over threads and tasks)."""

    put_s: float = 0.0
    put_calls: int = 0
    writes_s: float = 0.0
    writes_calls: int = 0
    # When set, every sync put / put_writes runs under its own profiler: they run on
    # LangGraph's worker threads, which a profiler in the caller's thread never sees.
    profiles: list[cProfile.Profile] | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, kind: str, seconds: float) -> None:
        with self._lock:
            if kind == "put":
                self.put_s += seconds
                self.put_calls += 1
            else:
                self.writes_s += seconds
                self.writes_calls += 1

    def reset(self) -> None:
        with self._lock:
            self.put_s = self.writes_s = 0.0
            self.put_calls = self.writes_calls = 0


class TimedSaver(BaseCheckpointSaver):  # type: ignore[type-arg]
    """A LangGraph checkpointer that forwards everything to `inner` and times the writes.

    Wrapping the checkpointer (rather than patching methods) survives LangGraph's
    `with_allowlist` clone at compile time, and costs both sides the same.
    """

    def __init__(self, inner: BaseCheckpointSaver, stats: CallStats) -> None:  # type: ignore[type-arg]
        super().__init__(serde=inner.serde)
        self.inner = inner
        self.stats = stats

    def _call(self, fn: Any, *args: Any) -> Any:
        profiles = self.stats.profiles
        if profiles is None:
            return fn(*args)
        profiler = cProfile.Profile()
        try:
            return profiler.runcall(fn, *args)
        finally:
            profiles.append(profiler)

    @property
    def config_specs(self) -> list:  # type: ignore[type-arg]
        return self.inner.config_specs

    def with_allowlist(self, extra_allowlist: Collection[tuple[str, ...]]) -> TimedSaver:
        return TimedSaver(self.inner.with_allowlist(extra_allowlist), self.stats)

    def get_next_version(self, current: Any, channel: Any = None) -> Any:
        return self.inner.get_next_version(current, channel)

    # reads
    def get_tuple(self, config: Any) -> Any:
        return self.inner.get_tuple(config)

    def list(self, config: Any, **kwargs: Any) -> Iterator[Any]:
        return self.inner.list(config, **kwargs)

    def get_delta_channel_history(self, *, config: Any, channels: Sequence[str]) -> Mapping:  # type: ignore[type-arg]
        return self.inner.get_delta_channel_history(config=config, channels=channels)

    async def aget_tuple(self, config: Any) -> Any:
        return await self.inner.aget_tuple(config)

    async def alist(self, config: Any, **kwargs: Any) -> AsyncIterator[Any]:
        async for item in self.inner.alist(config, **kwargs):
            yield item

    async def aget_delta_channel_history(self, *, config: Any, channels: Sequence[str]) -> Mapping:  # type: ignore[type-arg]
        return await self.inner.aget_delta_channel_history(config=config, channels=channels)

    # timed writes
    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        start = time.perf_counter()
        try:
            return self._call(self.inner.put, config, checkpoint, metadata, new_versions)
        finally:
            self.stats.add("put", time.perf_counter() - start)

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        start = time.perf_counter()
        try:
            self._call(self.inner.put_writes, config, writes, task_id, task_path)
        finally:
            self.stats.add("writes", time.perf_counter() - start)

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        start = time.perf_counter()
        try:
            return await self.inner.aput(config, checkpoint, metadata, new_versions)
        finally:
            self.stats.add("put", time.perf_counter() - start)

    async def aput_writes(
        self, config: Any, writes: Any, task_id: str, task_path: str = ""
    ) -> None:
        start = time.perf_counter()
        try:
            await self.inner.aput_writes(config, writes, task_id, task_path)
        finally:
            self.stats.add("writes", time.perf_counter() - start)

    # lifecycle: forwarded untimed
    def delete_thread(self, thread_id: str) -> None:
        self.inner.delete_thread(thread_id)

    async def adelete_thread(self, thread_id: str) -> None:
        await self.inner.adelete_thread(thread_id)
