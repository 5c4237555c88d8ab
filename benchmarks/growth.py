"""Growth: do reads of one thread stay O(1) / O(N) as the store fills?

- Many threads: each side builds one short chat thread (delta100) through LangGraph, its
  get_tuple and list are timed with that one thread in the store, then the thread's rows
  are copied in SQL to `threads - 1` more thread ids (every table with a thread_id column,
  so ours and the reference are cloned the same way; rows a trigger already wrote are
  skipped), and get_tuple / list of randomly chosen threads are timed again. The growth
  metric is each side's median with many threads over its median with one (target: ours
  stays flat).
- Long thread (optional, `--long-thread STEPS`): list time per checkpoint of a STEPS-step
  thread over that of a STEPS/10-step thread.
"""

from __future__ import annotations

import gc
import random
import sqlite3
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.backends import Backend, PgAdmin, PostgresBackend, SqliteBackend, Store
from benchmarks.graphs import chat_builder, first_input, make_messages, run_config
from benchmarks.results import Row
from benchmarks.targets import target_for

VARIANT = "delta100"
SOURCE = "grow-0"


@dataclass
class GrowthOptions:
    threads: int = 10_000
    steps: int = 10
    samples: int = 200
    long_steps: int = 0
    pg_url: str = ""
    seed: int = 11
    log: Callable[[str], None] = print


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _build(store: Store, thread: str, steps: int) -> None:
    graph = chat_builder(VARIANT, make_messages(steps)).compile(checkpointer=store.checkpointer)
    cfg = run_config(thread, steps)
    graph.invoke(first_input(steps), cfg, durability="sync")


def _reads(store: Store, threads: list[str], expect: int) -> tuple[list[float], list[float]]:
    """ms per get_tuple (one per thread id given) and per list (of the first quarter). Every
    read must find its thread with `expect` checkpoints: a clone that reads as empty would
    look fast."""
    cp = store.checkpointer
    for thread in threads[:3]:  # warm: statement caches, the page cache
        cp.get_tuple(_cfg(thread))
        list(cp.list(_cfg(thread)))
    gc.collect()
    tuples, lists = [], []
    for thread in threads:
        start = time.perf_counter()
        got = cp.get_tuple(_cfg(thread))
        tuples.append((time.perf_counter() - start) * 1000)
        if got is None or got.config["configurable"]["thread_id"] != thread:
            raise AssertionError(f"get_tuple of {thread} found no checkpoint")
    for thread in threads[: max(len(threads) // 4, 5)]:
        start = time.perf_counter()
        count = len(list(cp.list(_cfg(thread))))
        lists.append((time.perf_counter() - start) * 1000)
        if count != expect:
            raise AssertionError(f"list of {thread}: {count} checkpoints, expected {expect}")
    return tuples, lists


# ------------------------------------------------------------------------ SQL cloning
def clone_sqlite(path: str, count: int) -> None:
    """Copy thread SOURCE's rows to thread ids grow-1 .. grow-<count> in every table that
    has a thread_id column, in one transaction."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA busy_timeout = 10000")
        conn.execute("BEGIN IMMEDIATE")
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for table in tables:
            cols = [r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')]
            if "thread_id" not in cols:
                continue
            names = ", ".join(f'"{c}"' for c in cols)
            values = ", ".join("'grow-' || k.i" if c == "thread_id" else f'src."{c}"' for c in cols)
            conn.execute(
                f"WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?) "
                f'INSERT OR IGNORE INTO "{table}" ({names}) SELECT {values} '
                f'FROM "{table}" AS src, k WHERE src.thread_id = ?',
                (count, SOURCE),
            )
        conn.execute("COMMIT")
    finally:
        conn.close()


def clone_postgres(admin: PgAdmin, schema: str, count: int) -> None:
    """The same on PostgreSQL, then ANALYZE (both sides alike) so plans see the new size."""
    from psycopg import sql

    rows = admin.conn.execute(
        "SELECT table_name, column_name FROM information_schema.columns "
        "WHERE table_schema = %s ORDER BY table_name, ordinal_position",
        (schema,),
    ).fetchall()
    columns: dict[str, list[str]] = {}
    for table, column in rows:
        columns.setdefault(table, []).append(column)
    with admin.conn.transaction():
        for table, cols in columns.items():
            if "thread_id" not in cols:
                continue
            values = sql.SQL(", ").join(
                sql.SQL("'grow-' || k") if c == "thread_id" else sql.Identifier("src", c)
                for c in cols
            )
            admin.conn.execute(
                sql.SQL(
                    "INSERT INTO {t} ({cols}) SELECT {values} FROM {t} AS src, "
                    "generate_series(1, %s) AS k WHERE src.thread_id = %s "
                    "ON CONFLICT DO NOTHING"
                ).format(
                    t=sql.Identifier(schema, table),
                    cols=sql.SQL(", ").join(sql.Identifier(c) for c in cols),
                    values=values,
                ),
                (count, SOURCE),
            )
    analyze_postgres(admin, schema)


def analyze_postgres(admin: PgAdmin, schema: str) -> None:
    """ANALYZE every table of `schema` (before both measurements, on both sides)."""
    from psycopg import sql

    for table in admin.data_tables(schema):
        admin.conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, table)))


# --------------------------------------------------------------------------- the cells
def _backend(column: str, opts: GrowthOptions, suffix: str = "") -> Backend:
    return SqliteBackend() if column == "sqlite" else PostgresBackend(opts.pg_url, suffix)


def run_growth(columns: list[str], opts: GrowthOptions) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    notes: list[str] = []
    for column in columns:
        for what, fn in (("threads", _many_threads), ("long thread", _long_thread)):
            if what == "long thread" and not opts.long_steps:
                continue
            opts.log(f"growth {column} {what} ...")
            t0 = time.perf_counter()
            try:
                rows += fn(column, opts)
            except Exception as exc:
                notes.append(f"FAILED growth/{column}/{what}: {type(exc).__name__}: {exc}")
                continue
            opts.log(f"  done in {time.perf_counter() - t0:.1f} s")
    if not opts.long_steps:
        notes.append(
            "growth: list per checkpoint at 10,000 steps not measured (slow: run with "
            "--long-thread 10000)"
        )
    return rows, notes


def _rows(
    column: str,
    n: int | None,
    pairs: list[tuple[str, str, str]],
    samples: dict[tuple[str, str], list[float]],
    note: str,
) -> list[Row]:
    """(one metric, many metric, growth metric) triples: the first two as measured, the
    growth as each side's median(many) / median(one)."""
    out = []
    for one, many, growth in pairs:
        for metric in (one, many):
            unit = "µs" if metric.startswith("list_per") else "ms"
            ours, ref = samples.get((metric, "ours"), []), samples.get((metric, "ref"), [])
            out.append(Row("growth", column, VARIANT, n, metric, unit, ours, ref, note=note))
        ratio = {
            side: [
                statistics.median(samples[(many, side)]) / statistics.median(samples[(one, side)])
            ]
            for side in ("ours", "ref")
            if samples.get((many, side)) and samples.get((one, side))
        }
        target = target_for("growth", column, VARIANT, None, growth, 0)
        out.append(
            Row(
                "growth",
                column,
                VARIANT,
                n,
                growth,
                "x",
                ratio.get("ours", []),
                ratio.get("ref", []),
                target,
                note=note,
            )
        )
    return out


def _many_threads(column: str, opts: GrowthOptions) -> list[Row]:
    """Two stores per side, one holding the source thread only, one holding it and its
    clones; reads alternate between them (and the sides) in rounds, so load drifting on a
    shared machine does not pass for growth."""
    backends = {"one": _backend(column, opts), "many": _backend(column, opts, "_many")}
    stores: dict[tuple[str, str], Store] = {}
    samples: dict[tuple[str, str], list[float]] = {}
    rng = random.Random(opts.seed)
    picks = [f"grow-{rng.randint(1, opts.threads - 1)}" for _ in range(opts.samples)]
    rounds = 4
    chunk = max(opts.samples // rounds, 1)
    try:
        for side in ("ours", "ref"):
            for size, backend in backends.items():
                store = stores[(side, size)] = backend.open(side, None)
                _build(store, SOURCE, opts.steps)
                if size == "many":
                    if isinstance(backend, PostgresBackend):
                        clone_postgres(backend.admin, store.location, opts.threads - 1)
                    else:
                        clone_sqlite(store.location, opts.threads - 1)
                elif isinstance(backend, PostgresBackend):
                    analyze_postgres(backend.admin, store.location)
        expect = {
            side: len(list(stores[(side, "one")].checkpointer.list(_cfg(SOURCE))))
            for side in ("ours", "ref")
        }
        for r in range(rounds):
            sides = ("ours", "ref") if r % 2 == 0 else ("ref", "ours")
            sizes = ("one", "many", "same") if r % 2 == 0 else ("same", "many", "one")
            for side in sides:
                for size in sizes:
                    # same: the source thread again, read in the store of many threads (the
                    # store's size without the cost of reading a different thread each time)
                    threads = (
                        picks[r * chunk : (r + 1) * chunk] if size == "many" else [SOURCE] * chunk
                    )
                    store = stores[(side, "one" if size == "one" else "many")]
                    tuples, lists = _reads(store, threads, expect[side])
                    samples.setdefault((f"tuple_{size}", side), []).extend(tuples)
                    samples.setdefault((f"list_{size}", side), []).extend(lists)
    finally:
        for store in stores.values():
            store.shutdown()
        for backend in backends.values():
            backend.cleanup()
    note = (
        f"{opts.threads:,} threads of {opts.steps} steps vs 1; {chunk * rounds} get_tuple "
        "calls per side and store, in alternating rounds"
    )
    rows = _rows(
        column,
        None,
        [("tuple_one", "tuple_many", "tuple_growth"), ("list_one", "list_many", "list_growth")],
        samples,
        note,
    )
    for metric in ("tuple_same", "list_same"):
        ours, ref = samples.get((metric, "ours"), []), samples.get((metric, "ref"), [])
        rows.append(Row("growth", column, VARIANT, None, metric, "ms", ours, ref, note=note))
    return rows


def _long_thread(column: str, opts: GrowthOptions) -> list[Row]:
    backend = _backend(column, opts)
    short = max(opts.long_steps // 10, 1)
    samples: dict[tuple[str, str], list[float]] = {}
    try:
        for side in ("ours", "ref"):
            store = backend.open(side, None)
            try:
                for steps, metric in (
                    (short, "list_per_ckpt_short"),
                    (opts.long_steps, "list_per_ckpt_long"),
                ):
                    thread = f"long-{steps}"
                    start = time.perf_counter()
                    _build(store, thread, steps)
                    if steps == opts.long_steps:
                        built = (time.perf_counter() - start) / steps * 1000
                        samples[("long_build_per_step", side)] = [built]
                        size = store.bytes_on_disk()
                        if size is not None:
                            samples[("long_store_bytes", side)] = [size / 1024 / 1024]
                    cp = store.checkpointer
                    got: list[float] = []
                    list(cp.list(_cfg(thread)))  # warm, as in the other cells
                    for _ in range(3):
                        gc.collect()
                        start = time.perf_counter()
                        count = len(list(cp.list(_cfg(thread))))
                        got.append((time.perf_counter() - start) / count * 1e6)
                    samples[(metric, side)] = got
            finally:
                store.shutdown()
    finally:
        backend.cleanup()
    note = f"threads of {short:,} and {opts.long_steps:,} steps, one store per side"
    rows = _rows(
        column,
        None,
        [("list_per_ckpt_short", "list_per_ckpt_long", "list_step_growth")],
        samples,
        note,
    )
    for metric, unit in (("long_build_per_step", "ms"), ("long_store_bytes", "MB")):
        ours, ref = samples.get((metric, "ours"), []), samples.get((metric, "ref"), [])
        if ours or ref:
            rows.append(Row("growth", column, VARIANT, None, metric, unit, ours, ref, note=note))
    return rows
