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


def step_rows(variant: str, n: int) -> list[StepRows]:
    """Run the chat graph once on a recording in-memory saver; one StepRows per put, with
    the writes stored since the previous put. Sizes are LangGraph's serializer's output."""
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


def _ms(samples: list[float]) -> list[float]:
    return [s * 1000.0 for s in samples]


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


def _sqlite(path: str) -> sqlite3.Connection:
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    for ddl in SQLITE_TABLES:
        conn.execute(ddl)
    return conn


def sqlite_history_floor(path: str, payloads: list[bytes], repeat: int) -> list[float]:
    """ms to fetch the channel's writes by one range scan and decode each with ormsgpack."""
    conn = _sqlite(path)
    try:
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO history VALUES ('t', 'messages', ?, ?)", list(enumerate(payloads))
        )
        conn.execute("COMMIT")
        query = "SELECT body FROM history WHERE thread_id = ? AND channel = ? ORDER BY step"

        def read() -> list[Any]:
            rows = conn.execute(query, ("t", "messages")).fetchall()
            return [ormsgpack.unpackb(body) for (body,) in rows]

        return _ms(_samples(read, repeat))
    finally:
        conn.close()


def sqlite_put_floor(path: str, steps: list[StepRows], n: int, repeat: int) -> list[float]:
    """ms per step (total / N, as the savers' put is reported) to insert each step's rows
    in one transaction at synchronous=FULL."""
    pool = _pool(steps)
    sql = {
        "checkpoints": "INSERT INTO checkpoints VALUES (?, ?, ?)",
        "blobs": "INSERT INTO blobs VALUES (?, ?, ?, ?)",
        "writes": "INSERT INTO writes VALUES (?, ?, ?, ?)",
    }
    samples = []
    for rep in range(repeat):
        conn = _sqlite(path)
        thread = f"t{rep}"
        try:
            start = time.perf_counter()
            for k, step in enumerate(steps):
                conn.execute("BEGIN")
                for idx, (table, size) in enumerate(step.rows):
                    body = pool[:size]
                    params = (thread, k, body) if table == "checkpoints" else (thread, k, idx, body)
                    conn.execute(sql[table], params)
                conn.execute("COMMIT")
            samples.append((time.perf_counter() - start) / n)
        finally:
            conn.close()
    return _ms(samples)


# --------------------------------------------------------------------------- PostgreSQL
PG_TABLES = (
    "CREATE TABLE checkpoints (thread_id text, step int, body bytea, "
    "PRIMARY KEY (thread_id, step))",
    "CREATE TABLE blobs (thread_id text, step int, idx int, body bytea, "
    "PRIMARY KEY (thread_id, step, idx))",
    "CREATE TABLE writes (thread_id text, step int, idx int, body bytea, "
    "PRIMARY KEY (thread_id, step, idx))",
    "CREATE TABLE history (thread_id text, channel text, step int, body bytea, "
    "PRIMARY KEY (thread_id, channel, step))",
)


def _pg(url: str) -> Any:
    """A fresh `bench_floor` schema, and a connection whose search_path is it."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA IF EXISTS {FLOOR_SCHEMA} CASCADE")
        admin.execute(f"CREATE SCHEMA {FLOOR_SCHEMA}")
    conn = psycopg.connect(url, autocommit=True, options=f"-c search_path={FLOOR_SCHEMA}")
    for ddl in PG_TABLES:
        conn.execute(ddl)
    return conn


def drop_pg_floor(url: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"DROP SCHEMA IF EXISTS {FLOOR_SCHEMA} CASCADE")


def pg_history_floor(url: str, payloads: list[bytes], repeat: int) -> list[float]:
    """ms to fetch the channel's writes by one index range scan (binary rows) and decode."""
    conn = _pg(url)
    try:
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO history VALUES ('t', 'messages', %s, %s)", list(enumerate(payloads))
            )
        conn.execute("ANALYZE history")
        query = "SELECT body FROM history WHERE thread_id = %s AND channel = %s ORDER BY step"

        def read() -> list[Any]:
            with conn.cursor(binary=True) as cur:
                rows = cur.execute(query, ("t", "messages")).fetchall()
            return [ormsgpack.unpackb(body) for (body,) in rows]

        return _ms(_samples(read, repeat))
    finally:
        conn.close()


def pg_put_floor(url: str, steps: list[StepRows], n: int, repeat: int) -> list[float]:
    """ms per step (total / N) to insert each step's rows in one transaction: one INSERT
    for the record, one multi-row executemany (pipelined by psycopg) per other table."""
    pool = _pool(steps)
    samples = []
    conn = _pg(url)
    try:
        conn.autocommit = False
        for rep in range(repeat):
            thread = f"t{rep}"
            start = time.perf_counter()
            for k, step in enumerate(steps):
                with conn.cursor() as cur:
                    by_table: dict[str, list[tuple[Any, ...]]] = {"blobs": [], "writes": []}
                    for idx, (table, size) in enumerate(step.rows):
                        body = pool[:size]
                        if table == "checkpoints":
                            cur.execute(
                                "INSERT INTO checkpoints VALUES (%s, %s, %s)", (thread, k, body)
                            )
                        else:
                            by_table[table].append((thread, k, idx, body))
                    for table, params in by_table.items():
                        if params:
                            cur.executemany(f"INSERT INTO {table} VALUES (%s, %s, %s, %s)", params)
                conn.commit()
            samples.append((time.perf_counter() - start) / n)
    finally:
        conn.close()
    return _ms(samples)


def _samples(fn: Callable[[], Any], repeat: int) -> list[float]:
    fn()  # warm: the page cache and the statement cache, as the savers' reads are
    out = []
    for _ in range(max(repeat, 3)):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


# ----------------------------------------------------------------------------- the cell
FAMILIES = {
    "sqlite": ("sqlite", "sqlite_full", "async_sqlite"),
    "postgres": ("postgres", "async_postgres"),
}


@dataclass
class FloorOptions:
    n: int
    variants: list[str]
    columns: list[str]
    repeat: int
    directory: str
    pg_url: str
    log: Callable[[str], None] = print


def run_floors(opts: FloorOptions, chat_rows: list[Any]) -> tuple[list[Any], list[str]]:
    """Measure each database's floors at N and hold the chat rows of its columns (same N)
    against them: one row per column, ours = the chat samples, reference = the floor."""
    from benchmarks.results import Row
    from benchmarks.targets import target_for

    chat = {(r.backend, r.variant, r.metric): r for r in chat_rows if r.workload == "chat"}
    chat = {k: r for k, r in chat.items() if r.n == opts.n}
    rows: list[Row] = []
    notes: list[str] = []
    steps_by_variant = {v: step_rows(v, opts.n) for v in opts.variants}
    for family, members in FAMILIES.items():
        columns = [c for c in members if c in opts.columns]
        if not columns:
            continue
        floors: dict[tuple[str, str], list[float]] = {}
        try:
            if family == "sqlite":
                path = os.path.join(opts.directory, "floor.db")
                for variant, steps in steps_by_variant.items():
                    opts.log(f"floor {family} put {variant} N={opts.n} ...")
                    floors[("put", variant)] = sqlite_put_floor(path, steps, opts.n, opts.repeat)
                if "delta_never" in opts.variants:
                    payloads = history_payloads(opts.n)
                    floors[("delta", "delta_never")] = sqlite_history_floor(
                        path, payloads, opts.repeat
                    )
            else:
                for variant, steps in steps_by_variant.items():
                    opts.log(f"floor {family} put {variant} N={opts.n} ...")
                    floors[("put", variant)] = pg_put_floor(opts.pg_url, steps, opts.n, opts.repeat)
                if "delta_never" in opts.variants:
                    payloads = history_payloads(opts.n)
                    floors[("delta", "delta_never")] = pg_history_floor(
                        opts.pg_url, payloads, opts.repeat
                    )
                drop_pg_floor(opts.pg_url)
        except Exception as exc:
            notes.append(f"FAILED floor/{family}/N={opts.n}: {type(exc).__name__}: {exc}")
            continue
        for (metric, variant), floor in floors.items():
            for column in columns:
                ours = chat.get((column, variant, metric))
                floor_metric = f"{metric}_floor"
                target = target_for("floor", column, variant, opts.n, floor_metric, opts.n)
                rows.append(
                    Row(
                        "floor",
                        column,
                        variant,
                        opts.n,
                        floor_metric,
                        "ms",
                        list(ours.ours_samples) if ours else [],
                        list(floor),
                        target,
                        note="reference column = the raw-driver floor",
                    )
                )
    return rows, notes
