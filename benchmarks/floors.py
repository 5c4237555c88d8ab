"""Physical floors: the least the raw driver needs to do what a saver operation does.

Measured on the same machine in the same run as the savers, so "ours / floor" says how
much of our time is the database's and how much is ours. Two floors per database:

- delta history: the N + 1 writes of one channel (the chat's message batches, the first
  input's included), fetched by one index range scan and decoded with ormsgpack.
- put: `FloorSaver`, a LangGraph checkpointer that does only what each call must: its
  rows (the checkpoint record with its metadata, the changed channel values, a task's
  writes) serialized by LangGraph's own serializer and inserted with the fewest
  statements, one transaction per call, at the reference's durability (SQLite WAL +
  synchronous=FULL; PostgreSQL's default synchronous_commit=on). One transaction per call:
  LangGraph hands a step's checkpoint and each task's writes over in separate calls, each
  durable when it returns, so no saver can commit less often. It runs the same graph as the
  savers and is timed by the same wrapper, so it pays what running inside LangGraph costs
  (its calls come from LangGraph's background thread while the loop runs).

The tables are the minimum those operations need: a primary key to find the rows, a blob.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import ormsgpack
from langgraph.checkpoint.base import WRITES_IDX_MAP, BaseCheckpointSaver

from benchmarks.graphs import first_input, make_messages

FLOOR_SCHEMA = "bench_floor"


# ----------------------------------------------------------------------------- payloads
def history_payloads(n: int) -> list[bytes]:
    """The message channel's N + 1 writes (the input's, then one per step), packed."""
    batches = [first_input(n)["messages"], *make_messages(n)]
    return [ormsgpack.packb(batch) for batch in batches]


Call = list[tuple[str, list[tuple[Any, ...]]]]
"""One saver call's rows, (table, parameter rows) per table: inserted in one transaction."""

PUT_TABLES = {
    "checkpoints": (
        "(thread_id TEXT, checkpoint_ns TEXT, checkpoint_id TEXT, body BLOB, "
        "PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id))"
    ),
    "blobs": (
        "(thread_id TEXT, checkpoint_ns TEXT, channel TEXT, version TEXT, body BLOB, "
        "PRIMARY KEY (thread_id, checkpoint_ns, channel, version))"
    ),
    "writes": (
        "(thread_id TEXT, checkpoint_ns TEXT, checkpoint_id TEXT, task_id TEXT, "
        "idx INTEGER, channel TEXT, body BLOB, "
        "PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx))"
    ),
}
"""The put floor's tables: the rows a saver must keep, each under its primary key."""


def insert_rows(table: str, rows: list[tuple[Any, ...]], mark: str) -> tuple[str, list[Any]]:
    """One INSERT of all `rows` into `table` (`mark`: the driver's placeholder)."""
    one = f"({', '.join([mark] * len(rows[0]))})"
    return f"INSERT INTO {table} VALUES {', '.join([one] * len(rows))}", [
        value for row in rows for value in row
    ]


def one_statement(call: Call, mark: str) -> tuple[str, list[Any]]:
    """A call's rows as one PostgreSQL statement (atomic on its own): the inserts of all
    tables but the last as data-modifying CTEs in front of the last one's."""
    parts = [insert_rows(table, rows, mark) for table, rows in call]
    *before, (last, params) = parts
    if not before:
        return last, params
    ctes = ", ".join(f"i{k} AS ({sql})" for k, (sql, _) in enumerate(before))
    return f"WITH {ctes} {last}", [v for _, values in before for v in values] + params


class FloorSaver(BaseCheckpointSaver):
    """The put floor: a LangGraph checkpointer that stores each call's rows raw, in one
    transaction (`commit` / `acommit`, given by the storage's floor), and reads nothing
    back (the graph starts every build on a fresh store)."""

    def __init__(
        self,
        commit: Callable[[Call], None] | None = None,
        acommit: Callable[[Call], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__()
        self._commit, self._acommit = commit, acommit

    def _checkpoint_call(
        self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any
    ) -> tuple[Call, dict[str, Any]]:
        conf = config["configurable"]
        thread_id, ns, checkpoint_id = (
            conf["thread_id"],
            conf.get("checkpoint_ns", ""),
            checkpoint["id"],
        )
        dump = self.serde.dumps_typed
        values = checkpoint["channel_values"]
        record = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        call: Call = [
            ("checkpoints", [(thread_id, ns, checkpoint_id, dump(record)[1] + dump(metadata)[1])])
        ]
        blobs = [
            (thread_id, ns, channel, str(version), dump(values[channel])[1])
            for channel, version in new_versions.items()
            if channel in values
        ]
        if blobs:
            call.append(("blobs", blobs))
        out = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }
        return call, out

    def _writes_call(self, config: Any, writes: Any, task_id: str) -> Call:
        conf = config["configurable"]
        dump = self.serde.dumps_typed
        rows = [
            (
                conf["thread_id"],
                conf.get("checkpoint_ns", ""),
                conf["checkpoint_id"],
                task_id,
                WRITES_IDX_MAP.get(channel, idx),
                channel,
                dump(value)[1],
            )
            for idx, (channel, value) in enumerate(writes)
        ]
        return [("writes", rows)]

    def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        assert self._commit is not None
        call, out = self._checkpoint_call(config, checkpoint, metadata, new_versions)
        self._commit(call)
        return out

    def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
        assert self._commit is not None
        self._commit(self._writes_call(config, writes, task_id))

    async def aput(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
        assert self._acommit is not None
        call, out = self._checkpoint_call(config, checkpoint, metadata, new_versions)
        await self._acommit(call)
        return out

    async def aput_writes(
        self, config: Any, writes: Any, task_id: str, task_path: str = ""
    ) -> None:
        assert self._acommit is not None
        await self._acommit(self._writes_call(config, writes, task_id))

    def get_tuple(self, config: Any) -> Any:
        return None

    async def aget_tuple(self, config: Any) -> Any:
        return None

    def list(self, config: Any, **kwargs: Any) -> Iterator[Any]:
        return iter(())

    async def alist(self, config: Any, **kwargs: Any) -> AsyncIterator[Any]:
        return
        yield


@dataclass
class FloorStore:
    """A fresh put floor for one build: the saver, and how to close what it opened."""

    saver: FloorSaver
    close: Callable[[], None]


# ------------------------------------------------------------------------------- SQLite
HISTORY_TABLE = (
    "CREATE TABLE history (thread_id TEXT, channel TEXT, step INTEGER, body BLOB, "
    "PRIMARY KEY (thread_id, channel, step))"
)


class SqliteFloor:
    """sqlite3 on fresh files: WAL, synchronous=FULL (the reference SqliteSaver's)."""

    def __init__(self, path: str) -> None:
        _remove_sqlite(path)
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute(HISTORY_TABLE)
        self._builds = 0

    def put_store(self, loop: asyncio.AbstractEventLoop | None) -> FloorStore:
        """A put floor on a file of its own, through sqlite3 (or aiosqlite on `loop`): per
        call one multi-row INSERT per table, in BEGIN ... COMMIT when there are two."""
        self._builds += 1
        path = f"{self.path}-put{self._builds}"
        _remove_sqlite(path)
        setup = sqlite3.connect(path, isolation_level=None)
        setup.execute("PRAGMA journal_mode=WAL")
        for table, columns in PUT_TABLES.items():
            setup.execute(f"CREATE TABLE {table} {columns}")
        setup.close()
        if loop is None:
            conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA synchronous=FULL")
            lock = threading.Lock()  # LangGraph calls from more than one thread

            def commit(call: Call) -> None:
                statements = [insert_rows(table, rows, "?") for table, rows in call]
                with lock:
                    if len(statements) == 1:  # one statement: a transaction of its own
                        conn.execute(*statements[0])
                        return
                    conn.execute("BEGIN")
                    for statement in statements:
                        conn.execute(*statement)
                    conn.execute("COMMIT")

            def close() -> None:
                conn.close()
                _remove_sqlite(path)

            return FloorStore(FloorSaver(commit=commit), close)

        import aiosqlite

        aconn = loop.run_until_complete(aiosqlite.connect(path, isolation_level=None))
        loop.run_until_complete(aconn.execute("PRAGMA synchronous=FULL"))

        alock = asyncio.Lock()

        async def acommit(call: Call) -> None:
            statements = [insert_rows(table, rows, "?") for table, rows in call]
            async with alock:
                if len(statements) == 1:
                    await aconn.execute(*statements[0])
                    return
                await aconn.execute("BEGIN")
                for statement in statements:
                    await aconn.execute(*statement)
                await aconn.execute("COMMIT")

        def aclose() -> None:
            loop.run_until_complete(aconn.close())
            _remove_sqlite(path)

        return FloorStore(FloorSaver(acommit=acommit), aclose)

    def history_reader(self, payloads: list[bytes]) -> Callable[[], list[Any]]:
        """Store the channel's writes; return the read: one range scan, ormsgpack decode."""
        conn = self.conn
        conn.execute("BEGIN")
        conn.execute("DELETE FROM history")
        conn.executemany("INSERT INTO history VALUES ('t', 'messages', ?, ?)", enumerate(payloads))
        conn.execute("COMMIT")
        query = "SELECT body FROM history WHERE thread_id = ? AND channel = ? ORDER BY step"

        def read() -> list[Any]:
            rows = conn.execute(query, ("t", "messages")).fetchall()
            return [ormsgpack.unpackb(body) for (body,) in rows]

        return read

    def close(self) -> None:
        self.conn.close()
        _remove_sqlite(self.path)


def _remove_sqlite(path: str) -> None:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)


# --------------------------------------------------------------------------- PostgreSQL
def _pg_ddl(ddl: str) -> str:
    return ddl.replace("INTEGER", "int").replace("TEXT", "text").replace("BLOB", "bytea")


class PgFloor:
    """psycopg in a fresh `bench_floor` schema; PostgreSQL's default synchronous_commit=on."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.url = url
        self._drop()
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {FLOOR_SCHEMA}")
        self.conn = psycopg.connect(url, autocommit=True, options=self._options)
        self.conn.execute(_pg_ddl(HISTORY_TABLE))
        for table, columns in PUT_TABLES.items():
            self.conn.execute(_pg_ddl(f"CREATE TABLE {table} {columns}"))
        self.conn.autocommit = False

    _options = f"-c search_path={FLOOR_SCHEMA}"

    def put_store(self, loop: asyncio.AbstractEventLoop | None) -> FloorStore:
        """A put floor on emptied tables, through psycopg (async on `loop`): per call one
        statement in autocommit (`one_statement`), so one round trip and one commit."""
        import psycopg

        with psycopg.connect(self.url, autocommit=True, options=self._options) as admin:
            admin.execute(f"TRUNCATE {', '.join(PUT_TABLES)}")
        if loop is None:
            conn = psycopg.connect(self.url, autocommit=True, options=self._options)

            def commit(call: Call) -> None:
                conn.execute(*one_statement(call, "%s"))  # psycopg serializes its callers

            return FloorStore(FloorSaver(commit=commit), conn.close)

        aconn = loop.run_until_complete(
            psycopg.AsyncConnection.connect(self.url, autocommit=True, options=self._options)
        )

        async def acommit(call: Call) -> None:
            await aconn.execute(*one_statement(call, "%s"))

        return FloorStore(
            FloorSaver(acommit=acommit), lambda: loop.run_until_complete(aconn.close())
        )

    def history_reader(self, payloads: list[bytes]) -> Callable[[], list[Any]]:
        """Store the channel's writes; return the read: one index range scan (binary rows),
        ormsgpack decode."""
        conn = self.conn
        with conn.cursor() as cur:
            cur.execute("DELETE FROM history")
            cur.executemany(
                "INSERT INTO history VALUES ('t', 'messages', %s, %s)", list(enumerate(payloads))
            )
        conn.commit()
        conn.execute("ANALYZE history")
        conn.commit()
        query = "SELECT body FROM history WHERE thread_id = %s AND channel = %s ORDER BY step"

        def read() -> list[Any]:
            with conn.cursor(binary=True) as cur:
                rows = cur.execute(query, ("t", "messages")).fetchall()
            conn.rollback()  # end the read's transaction, as an autocommit read would
            return [ormsgpack.unpackb(body) for (body,) in rows]

        return read

    def _drop(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {FLOOR_SCHEMA} CASCADE")

    def close(self) -> None:
        self.conn.close()
        self._drop()


Floor = SqliteFloor | PgFloor


def open_floor(storage: str, directory: str, pg_url: str) -> Floor | None:
    """The floor for a backend's storage (None: memory has none)."""
    if storage in ("sqlite", "async_sqlite"):
        return SqliteFloor(os.path.join(directory, f"floor-{storage}.db"))
    if storage in ("postgres", "async_postgres"):
        return PgFloor(pg_url)
    return None
