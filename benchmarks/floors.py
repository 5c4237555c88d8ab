"""Physical floors: the least the raw driver needs to do what a saver operation does.

Measured on the same machine in the same run as the savers, so "ours / floor" says how
much of our time is the database's and how much is ours. Two floors per database:

- delta history: the N + 1 writes of one channel (the chat's message batches, the first
  input's included), fetched by one index range scan and decoded with ormsgpack.
- put: each step's rows (checkpoint record, changed channel values, task writes; the same
  sizes LangGraph hands a saver, serialized by its own serializer) inserted with the
  fewest statements, one transaction per step, at the reference's durability (SQLite WAL +
  synchronous=FULL; PostgreSQL's default synchronous_commit=on).

The tables are the minimum those operations need: a primary key to find the rows, a blob.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import ormsgpack

from benchmarks.graphs import chat_builder, first_input, make_messages, run_config

FLOOR_SCHEMA = "bench_floor"


# ----------------------------------------------------------------------------- payloads
def history_payloads(n: int) -> list[bytes]:
    """The message channel's N + 1 writes (the input's, then one per step), packed."""
    batches = [first_input(n)["messages"], *make_messages(n)]
    return [ormsgpack.packb(batch) for batch in batches]


@dataclass
class StepRows:
    """Sizes of the rows one step stores: (table, payload bytes)."""

    rows: list[tuple[str, int]] = field(default_factory=list)


@functools.lru_cache(maxsize=4)
def step_rows(variant: str, n: int) -> list[StepRows]:
    """Run the chat graph once on a recording in-memory saver; one StepRows per put, with
    the writes stored since the previous put. Sizes are LangGraph's serializer's output.
    Cached: the sync and async cells of one storage, and both storages, share it."""
    from langgraph.checkpoint.memory import InMemorySaver

    steps: list[StepRows] = []
    pending = StepRows()

    class Recorder(InMemorySaver):
        def put(self, config: Any, checkpoint: Any, metadata: Any, new_versions: Any) -> Any:
            nonlocal pending
            values = checkpoint.get("channel_values", {})
            record = {k: v for k, v in checkpoint.items() if k != "channel_values"}
            pending.rows.append(
                ("checkpoints", len(self._dump(record)) + len(self._dump(metadata)))
            )
            for channel in new_versions:
                if channel in values:
                    pending.rows.append(("blobs", len(self._dump(values[channel]))))
            steps.append(pending)
            pending = StepRows()
            return super().put(config, checkpoint, metadata, new_versions)

        def put_writes(self, config: Any, writes: Any, task_id: str, task_path: str = "") -> None:
            pending.rows.extend(("writes", len(self._dump(value))) for _, value in writes)
            super().put_writes(config, writes, task_id, task_path)

        def _dump(self, value: Any) -> bytes:
            return self.serde.dumps_typed(value)[1]

    graph = chat_builder(variant, make_messages(n)).compile(checkpointer=Recorder())
    graph.invoke(first_input(n), run_config(f"floor-{variant}", n), durability="sync")
    return steps


def _pool(steps: list[StepRows]) -> memoryview:
    """Incompressible bytes to slice each row's payload from (as large as the largest)."""
    largest = max((size for step in steps for _, size in step.rows), default=1)
    return memoryview(os.urandom(max(largest, 1)))


# ------------------------------------------------------------------------------- SQLite
SQLITE_TABLES = (
    "CREATE TABLE checkpoints (thread_id TEXT, step INTEGER, body BLOB, "
    "PRIMARY KEY (thread_id, step))",
    "CREATE TABLE blobs (thread_id TEXT, step INTEGER, idx INTEGER, body BLOB, "
    "PRIMARY KEY (thread_id, step, idx))",
    "CREATE TABLE writes (thread_id TEXT, step INTEGER, idx INTEGER, body BLOB, "
    "PRIMARY KEY (thread_id, step, idx))",
    "CREATE TABLE history (thread_id TEXT, channel TEXT, step INTEGER, body BLOB, "
    "PRIMARY KEY (thread_id, channel, step))",
)


class SqliteFloor:
    """sqlite3 on a fresh file: WAL, synchronous=FULL (the reference SqliteSaver's)."""

    def __init__(self, path: str) -> None:
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(path + suffix):
                os.remove(path + suffix)
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        for ddl in SQLITE_TABLES:
            self.conn.execute(ddl)
        self._threads = 0

    def put(self, steps: list[StepRows], n: int) -> float:
        """ms per step (total / N, as the savers' put is reported): each step's rows
        inserted in one transaction, into a new thread."""
        self._threads += 1
        thread, pool, conn = f"t{self._threads}", _pool(steps), self.conn
        start = time.perf_counter()
        for k, step in enumerate(steps):
            conn.execute("BEGIN")
            for idx, (table, size) in enumerate(step.rows):
                if table == "checkpoints":
                    conn.execute(
                        "INSERT INTO checkpoints VALUES (?, ?, ?)", (thread, k, pool[:size])
                    )
                else:
                    conn.execute(
                        f"INSERT INTO {table} VALUES (?, ?, ?, ?)", (thread, k, idx, pool[:size])
                    )
            conn.execute("COMMIT")
        return (time.perf_counter() - start) / n * 1000.0

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
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(self.path + suffix):
                os.remove(self.path + suffix)


# --------------------------------------------------------------------------- PostgreSQL
PG_TABLES = tuple(
    ddl.replace("INTEGER", "int").replace("TEXT", "text").replace("BLOB", "bytea")
    for ddl in SQLITE_TABLES
)


class PgFloor:
    """psycopg in a fresh `bench_floor` schema; PostgreSQL's default synchronous_commit=on."""

    def __init__(self, url: str) -> None:
        import psycopg

        self.url = url
        self._drop()
        with psycopg.connect(url, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {FLOOR_SCHEMA}")
        self.conn = psycopg.connect(url, autocommit=True, options=f"-c search_path={FLOOR_SCHEMA}")
        for ddl in PG_TABLES:
            self.conn.execute(ddl)
        self.conn.autocommit = False
        self._threads = 0

    def put(self, steps: list[StepRows], n: int) -> float:
        """ms per step (total / N): per step one INSERT for the record, one executemany
        (pipelined by psycopg) per other table, one commit."""
        self._threads += 1
        thread, pool, conn = f"t{self._threads}", _pool(steps), self.conn
        start = time.perf_counter()
        for k, step in enumerate(steps):
            with conn.cursor() as cur:
                many: dict[str, list[tuple[Any, ...]]] = {"blobs": [], "writes": []}
                for idx, (table, size) in enumerate(step.rows):
                    if table == "checkpoints":
                        cur.execute(
                            "INSERT INTO checkpoints VALUES (%s, %s, %s)", (thread, k, pool[:size])
                        )
                    else:
                        many[table].append((thread, k, idx, pool[:size]))
                for table, params in many.items():
                    if params:
                        cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s)", params)
            conn.commit()
        return (time.perf_counter() - start) / n * 1000.0

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
