"""What only the SQL savers promise: statement counts, stored rows, dialect details."""

from __future__ import annotations

import gc
import sqlite3
import uuid
import weakref
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import psycopg
import pytest
import pytest_asyncio
from hypothesis import given
from hypothesis import strategies as st
from psycopg_pool import ConnectionPool

from checkpointer.ids import next_channel_version, task_id_for
from checkpointer.savers.postgres import AsyncPostgresSaver, PostgresSaver
from checkpointer.savers.sql import reads
from checkpointer.savers.sql.plan import Op, Stmt
from checkpointer.savers.sql.postgres_dialect import encode_task_id
from checkpointer.savers.sql.sqlite_dialect import SQLITE_TS_FORMAT, format_ts
from checkpointer.savers.sqlite import AsyncSqliteSaver, SqliteSaver
from checkpointer.types import empty_checkpoint, make_config
from tests.conftest import (
    PG_URL,
    StatementCounter,
    close_saver,
    drop_schema,
    open_saver,
    require_postgres,
)

SQL_KINDS = ("sqlite", "async_sqlite", "postgres", "async_postgres")


class Sql:
    """An SQL saver of some kind, called sync or async as its kind says."""

    def __init__(self, saver: Any, kind: str, schema: str | None) -> None:
        self.saver, self.kind, self.schema = saver, kind, schema
        self.is_async = kind.startswith("async")

    async def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.is_async:
            return await getattr(self.saver, "a" + name)(*args, **kwargs)
        return getattr(self.saver, name)(*args, **kwargs)

    async def list(self, config: Any, **kwargs: Any) -> list[Any]:
        if self.is_async:
            return [t async for t in self.saver.alist(config, **kwargs)]
        return list(self.saver.list(config, **kwargs))

    def execute(self, sql: str) -> None:
        """Change the tables directly (a separate connection, committed)."""
        if self.kind.endswith("postgres"):
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'SET search_path TO "{self.schema}"')
                conn.execute(sql)
            return
        with sqlite3.connect(self.saver._executor.path) as conn:
            conn.execute(sql)

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """Read the tables directly (a separate connection)."""
        if self.kind.endswith("postgres"):
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'SET search_path TO "{self.schema}"')
                return conn.execute(sql).fetchall()
        path = self.saver._executor.path
        with sqlite3.connect(path) as conn:
            return conn.execute(sql).fetchall()


@pytest_asyncio.fixture(params=SQL_KINDS)
async def sql(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Sql]:
    kind: str = request.param
    schema = None
    if kind.endswith("postgres"):
        require_postgres()
        schema = f"cp_test_{uuid.uuid4().hex[:12]}"
    saver = await open_saver(kind, tmp_path, schema)
    try:
        yield Sql(saver, kind, schema)
    finally:
        await close_saver(kind, saver)
        if schema:
            drop_schema(schema)


async def build(sql: Sql, thread_id: str, steps: int, delta: bool = True) -> Any:
    """Checkpoints with a plain channel `p` (a list, so a value row every step) and a delta
    channel `d` (stored once, at the root; written every step)."""
    config = make_config(thread_id)
    versions: dict[str, str] = {}
    for step in range(steps):
        new = {"p": next_channel_version(versions.get("p"))}
        values: dict[str, Any] = {"p": [step]}
        if step == 0 or not delta:
            new["d"] = next_channel_version(versions.get("d"))
            values["d"] = ["seed"]
        elif step > 0:
            new["d"] = next_channel_version(versions.get("d"))
        versions.update(new)
        cp = empty_checkpoint()
        cp["channel_versions"] = dict(versions)
        cp["channel_values"] = values
        config = await sql.call(
            "put", config, cp, {"step": step, "run_id": f"run-{step // 3}"}, new
        )
        await sql.call("put_writes", config, [("d", step)], task_id_for(step, "t"))
    return config


async def test_statement_counts(sql: Sql) -> None:
    head = await build(sql, "count", 12)
    counter = StatementCounter(sql.saver)
    await sql.call("get_tuple", head)
    assert counter.count == 1
    counter.reset()
    await sql.call("get_tuple", make_config("count"))
    assert counter.count == 1
    counter.reset()
    assert len(await sql.list(make_config("count"))) == 12
    assert counter.count == 1
    counter.reset()
    assert len(await sql.list(make_config("count"), limit=5)) == 5
    assert counter.count == 1
    counter.reset()
    history = await sql.call("get_delta_channel_history", config=head, channels=["d", "p", "x"])
    assert counter.count == 1
    assert history["d"]["seed"] == ["seed"] and len(history["d"]["writes"]) == 11
    counter.reset()
    await build(sql, "count2", 1)
    if sql.kind.endswith("postgres"):
        # put (blobs + checkpoint) and put_writes are one statement each.
        assert counter.count == 2


async def test_list_pages_are_one_statement_each(sql: Sql, monkeypatch: pytest.MonkeyPatch) -> None:
    await build(sql, "pages", 10, delta=False)
    sql.saver.page_size = 4
    counter = StatementCounter(sql.saver)
    # A thread within the byte budget comes whole, in one statement, whatever page_size.
    assert len(await sql.list(make_config("pages"))) == 10
    assert counter.count == 1
    counter.reset()
    assert len(await sql.list(make_config("pages"), limit=7)) == 7
    assert counter.count == 1
    # Across threads, pages of page_size (the checkpoints are small).
    counter.reset()
    assert len(await sql.list(None)) == 10
    assert counter.count == 3
    # A thread over the byte budget: pages of as many as fit, at least one each.
    monkeypatch.setattr(reads, "LIST_PAGE_BYTES", 10)
    sql.saver._dialect._sql_cache.clear()
    counter.reset()
    listed = await sql.list(make_config("pages"))
    assert counter.count == 11
    assert [t.metadata["step"] for t in listed] == list(range(9, -1, -1))


async def test_list_whole_thread_page_survives_a_stale_summary(sql: Sql) -> None:
    """The summary's checkpoint count only sizes the page: one that is too low costs
    another page, never a missing checkpoint."""
    await build(sql, "stale", 8, delta=False)
    sql.execute("UPDATE checkpointer_threads SET checkpoint_count = 2 WHERE thread_id = 'stale'")
    listed = await sql.list(make_config("stale"))
    assert [t.metadata["step"] for t in listed] == list(range(7, -1, -1))


async def test_blobs_only_for_new_versions(sql: Sql) -> None:
    await build(sql, "blobs", 6)
    # p is stored every step; d only at the root (the rest of d lives in writes).
    rows = sql.rows("SELECT channel, count(*) FROM checkpointer_blobs GROUP BY channel ORDER BY 1")
    assert rows == [("d", 1), ("p", 6)]


async def test_lifecycle_removes_unreferenced_blobs(sql: Sql) -> None:
    await build(sql, "life", 7, delta=False)
    await sql.call("prune", ["life"])
    assert sql.rows("SELECT count(*) FROM checkpointer_checkpoints") == [(1,)]
    assert sql.rows("SELECT count(*) FROM checkpointer_blobs") == [(2,)]
    assert sql.rows("SELECT count(*) FROM checkpointer_writes") == [(1,)]
    await build(sql, "runs", 6, delta=False)
    await sql.call("delete_for_runs", ["run-1"])
    assert sql.rows("SELECT count(*) FROM checkpointer_checkpoints WHERE thread_id = 'runs'") == [
        (3,)
    ]
    # Steps 3..5 are gone; blobs of their p (and d) versions with them.
    assert sql.rows("SELECT count(*) FROM checkpointer_blobs WHERE thread_id = 'runs'") == [(6,)]
    await sql.call("delete_thread", "runs")
    assert sql.rows("SELECT count(*) FROM checkpointer_blobs WHERE thread_id = 'runs'") == [(0,)]


async def test_task_ids(sql: Sql) -> None:
    config = await build(sql, "tasks", 1)
    upper = str(uuid.uuid4()).upper()
    for task_id in ("not-a-uuid", upper):
        await sql.call("put_writes", config, [("x", 1)], task_id)
    tup = await sql.call("get_tuple", config)
    assert {("not-a-uuid", "x", 1), (upper, "x", 1)} <= set(tup.pending_writes)
    names = sql.rows(
        "SELECT task_name FROM checkpointer_writes WHERE thread_id = 'tasks' "
        "AND task_name IS NOT NULL ORDER BY task_name"
    )
    # PostgreSQL names what its uuid column cannot hold; SQLite's text column holds all.
    assert names == ([(upper,), ("not-a-uuid",)] if sql.kind.endswith("postgres") else [])


def test_encode_task_id() -> None:
    value = str(uuid.uuid4())
    assert encode_task_id(value) == value
    for bad in ("", "x", "{" + value + "}", value.upper(), value.replace("-", "")):
        with pytest.raises(ValueError):
            encode_task_id(bad)


# ------------------------------------------------------------------ SQLite
def test_sqlite_uses_wal_and_busy_timeout(tmp_path: Path) -> None:
    with SqliteSaver.from_conn_string(tmp_path / "w.db", setup=True, busy_timeout=7.5) as saver:
        saver.get_tuple(make_config("t"))
        conn = saver._executor._local.holder.conn
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        assert conn.execute("PRAGMA busy_timeout").fetchone() == (7500,)


def test_sqlite_accepts_a_connection_and_url(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    conn = sqlite3.connect(path, check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    cp = empty_checkpoint()
    saver.put(make_config("t"), cp, {}, {})
    saver.close()
    conn.execute("SELECT 1")  # a connection we were given stays open
    conn.close()
    with SqliteSaver.from_conn_string(f"sqlite:///{path}") as again:
        assert again.get_tuple(make_config("t")) is not None


def test_sqlite_connections_of_finished_threads_are_closed(tmp_path: Path) -> None:
    import gc
    import threading

    with SqliteSaver.from_conn_string(tmp_path / "t.db", setup=True) as saver:
        for _ in range(20):
            thread = threading.Thread(target=saver.get_tuple, args=(make_config("t"),))
            thread.start()
            thread.join()
        gc.collect()
        assert len(saver._executor._all) <= 1


async def test_async_sqlite_accepts_a_connection(tmp_path: Path) -> None:
    import aiosqlite

    async with aiosqlite.connect(tmp_path / "a.db") as conn:
        saver = AsyncSqliteSaver(conn)
        await saver.setup()
        await saver.aput(make_config("t"), empty_checkpoint(), {}, {})
        assert await saver.aget_tuple(make_config("t")) is not None


async def test_async_sqlite_worker_thread_keeps_no_op_or_result(tmp_path: Path) -> None:
    """aiosqlite's worker holds its last call until the next one; ours must hand both the
    op and its result back, or a listing's rows stay alive and are freed inside the next
    caller's read."""

    class Result:
        pass

    def plan() -> Any:
        rows = yield Stmt("SELECT 1", fetch=True)
        assert rows == [(1,)]
        return Result()

    saver = AsyncSqliteSaver(tmp_path / "a.db")
    await saver.setup()
    try:
        generator = plan()
        generator_ref = weakref.ref(generator)
        result = await saver._executor.run(Op(generator))
        result_ref = weakref.ref(result)
        del generator, result
        gc.collect()
        assert generator_ref() is None, "the worker thread still holds the op"
        assert result_ref() is None, "the worker thread still holds the result"
    finally:
        await saver.aclose()


# ------------------------------------------------------------------ PostgreSQL
def test_pg_odd_schema_name(pg_url: str) -> None:
    schema = f'Odd "Schema" {uuid.uuid4().hex[:6]}'
    try:
        with PostgresSaver.from_conn_string(pg_url, schema=schema, setup=True) as saver:
            saver.put(make_config("t"), empty_checkpoint(), {}, {})
            assert saver.get_tuple(make_config("t")) is not None
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema.replace(chr(34), chr(34) * 2)}" CASCADE')


def test_pg_without_prepared_statements(pg_url: str, pg_schema: str) -> None:
    """PgBouncer in transaction mode: no server-side prepared statement, ever."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        saver = PostgresSaver(conn, schema=pg_schema, prepare_threshold=None)
        saver.setup()
        for _ in range(3):
            build_sync(saver, "nopre", 4)
            saver.get_tuple(make_config("nopre"))
            list(saver.list(make_config("nopre")))
        assert conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone() == (0,)
        saver.close()
        assert not conn.closed  # not ours to close


def _plan_settings(conn: Any) -> tuple[str, int, int]:
    """(plan_cache_mode, prepared statements, custom plans made for them) of a session."""
    mode = conn.execute("SHOW plan_cache_mode").fetchone()[0]
    prepared, custom = conn.execute(
        "SELECT count(*), coalesce(sum(custom_plans), 0) FROM pg_prepared_statements"
    ).fetchone()
    return mode, int(prepared), int(custom)


def test_pg_own_pool_prepares_generic_plans(pg_url: str, pg_schema: str) -> None:
    """A saver opened on a URL prepares a statement at its second use and asks for
    generic plans: repeated reads are not planned again (server-side planning cost more
    than running them)."""
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, max_size=1) as saver:
        build_sync(saver, "plans", 3)
        for _ in range(4):
            saver.get_tuple(make_config("plans"))
            list(saver.list(make_config("plans")))
        with saver._executor._pool.connection() as conn:
            mode, prepared, custom = _plan_settings(conn)
            jit = conn.execute("SHOW jit").fetchone()
    assert mode == "force_generic_plan"
    assert prepared >= 2  # get_tuple and the list page at least
    assert custom == 0
    assert jit == ("off",)  # generic plans' estimates would JIT-compile a whole-thread list


def test_pg_own_connection_never_jit_compiles(pg_url: str, pg_schema: str) -> None:
    """On a server told to JIT-compile every plan (jit_above_cost 0), the saver's own
    connection compiles nothing and lists a thread as a connection left at the server's
    settings does (which compiles, where the server has JIT at all)."""
    sep = "&" if "?" in pg_url else "?"
    eager = f"{pg_url}{sep}options=-c%20jit_above_cost%3D0"
    probe = "EXPLAIN (ANALYZE, FORMAT JSON) SELECT sum(x) FROM generate_series(1, 1000) x"

    def compiles(conn: Any) -> bool:
        return "JIT" in conn.execute(probe).fetchone()[0][0]

    with PostgresSaver.from_conn_string(eager, schema=pg_schema, pool=False) as saver:
        build_sync(saver, "jit", 3)
        conn = saver._executor._conn
        assert conn.execute("SHOW jit_above_cost").fetchone() == ("0",)
        assert not compiles(conn)
        ours = [t.checkpoint for t in saver.list(make_config("jit"))]
    with psycopg.connect(eager, autocommit=True) as conn:
        available = conn.execute("SELECT pg_jit_available()").fetchone()[0]
        assert compiles(conn) == available
        given = PostgresSaver(conn, schema=pg_schema)
        assert [t.checkpoint for t in given.list(make_config("jit"))] == ours
        assert len(ours) == 3


def test_pg_own_connection_keeps_url_options(pg_url: str, pg_schema: str) -> None:
    """`options` given in the URL stay in force beside the plan setting."""
    sep = "&" if "?" in pg_url else "?"
    url = f"{pg_url}{sep}options=-c%20application_name%3Dplans_probe%20-c%20jit%3Don"
    with PostgresSaver.from_conn_string(url, schema=pg_schema, pool=False) as saver:
        conn = saver._executor._conn
        assert conn.execute("SHOW application_name").fetchone() == ("plans_probe",)
        assert _plan_settings(conn)[0] == "force_generic_plan"
        assert conn.execute("SHOW jit").fetchone() == ("on",)  # the URL's own choice wins


def test_pg_passed_connection_and_no_prepare_keep_server_defaults(
    pg_url: str, pg_schema: str
) -> None:
    """Connections passed in are not reconfigured; `prepare_threshold=None` (PgBouncer)
    opens its own without the plan option, which only matters to prepared statements."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        default = conn.execute("SHOW plan_cache_mode").fetchone()[0]
        saver = PostgresSaver(conn, schema=pg_schema)
        saver.setup()
        build_sync(saver, "given", 2)
        assert conn.execute("SHOW plan_cache_mode").fetchone() == (default,)
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, pool=False, prepare_threshold=None
    ) as saver:
        assert _plan_settings(saver._executor._conn)[:2] == (default, 0)


async def test_async_pg_own_pool_prepares_generic_plans(pg_url: str, pg_schema: str) -> None:
    async with AsyncPostgresSaver.from_conn_string(pg_url, schema=pg_schema, max_size=1) as saver:
        for step in range(3):
            await saver.aput(make_config("aplans"), empty_checkpoint(), {"step": step}, {})
        for _ in range(4):
            await saver.aget_tuple(make_config("aplans"))
        async with saver._executor._pool.connection() as conn:
            mode = (await (await conn.execute("SHOW plan_cache_mode")).fetchone())[0]
            jit = await (await conn.execute("SHOW jit")).fetchone()
            cur = await conn.execute(
                "SELECT count(*), coalesce(sum(custom_plans), 0) FROM pg_prepared_statements"
            )
            prepared, custom = await cur.fetchone()
    assert (mode, int(custom)) == ("force_generic_plan", 0) and prepared >= 1
    assert jit == ("off",)


def test_pg_accepts_pool_and_user_transaction(pg_url: str, pg_schema: str) -> None:
    with ConnectionPool(pg_url, min_size=1, max_size=2, open=True) as pool:
        saver = PostgresSaver(pool, schema=pg_schema)
        saver.setup()
        build_sync(saver, "pooled", 3)
        assert len(list(saver.list(make_config("pooled")))) == 3
    # A connection not in autocommit mode: every operation still commits.
    with psycopg.connect(pg_url) as conn:
        saver = PostgresSaver(conn, schema=pg_schema)
        build_sync(saver, "manual", 2)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as fresh:
        assert len(list(fresh.list(make_config("manual")))) == 2


def test_pg_metadata_with_nul_is_stored_escaped(pg_url: str, pg_schema: str) -> None:
    """jsonb cannot hold NUL: the row holds the reversible escape, readers get the NUL."""
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, setup=True) as saver:
        config = saver.put(make_config("t"), empty_checkpoint(), {"note": "a\x00b\uffff"}, {})
        tup = saver.get_tuple(config)
        assert tup is not None and tup.metadata["note"] == "a\x00b\uffff"
    with psycopg.connect(pg_url) as conn:
        row = conn.execute(
            f"SELECT metadata ->> 'note' FROM \"{pg_schema}\".checkpointer_checkpoints"
        ).fetchone()
    assert row == ("a\uffff0b\uffff\uffff",)


async def test_async_pg_accepts_connection(pg_url: str, pg_schema: str) -> None:
    conn = await psycopg.AsyncConnection.connect(pg_url, autocommit=True)
    try:
        saver = AsyncPostgresSaver(conn, schema=pg_schema, prepare_threshold=None)
        await saver.setup()
        await saver.aput(make_config("t"), empty_checkpoint(), {}, {})
        assert await saver.aget_tuple(make_config("t")) is not None
    finally:
        await conn.close()


def build_sync(saver: Any, thread_id: str, steps: int) -> None:
    config = make_config(thread_id)
    version = None
    for step in range(steps):
        version = next_channel_version(version)
        cp = empty_checkpoint()
        cp["channel_versions"] = {"n": version}
        cp["channel_values"] = {"n": step}
        config = saver.put(config, cp, {"step": step}, {"n": version})
        saver.put_writes(config, [("n", step)], task_id_for(step, "t"))


def test_a_connection_handed_to_the_saver_gets_wal(tmp_path: Path) -> None:
    import sqlite3

    from checkpointer.savers.sqlite import SqliteSaver

    conn = sqlite3.connect(tmp_path / "given.db", check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    memory = sqlite3.connect(":memory:", check_same_thread=False)
    SqliteSaver(memory).setup()
    assert memory.execute("PRAGMA journal_mode").fetchone()[0] == "memory"


async def test_summary_clock_moves_once_a_second(sql: Sql, monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread's last-write time ignores writes within a second of the recorded one (the
    row is then updated in place) and follows any later write."""
    from datetime import timedelta

    import checkpointer.savers.sql.sqlite_dialect as sqlite_dialect

    # The SQLite saver skips the statement for a thread it moved within the last second of
    # its own clock: that clock moves with the recorded time here.
    elapsed = [0.0]
    monkeypatch.setattr(sqlite_dialect, "monotonic", lambda: elapsed[0])

    async def updated_at() -> Any:
        [summary] = await sql.call("list_threads", thread_ids=["clock"])
        return summary.updated_at

    def shift(seconds: int) -> None:
        elapsed[0] += abs(seconds)
        moved = (
            f"updated_at + interval '{seconds} seconds'"
            if sql.kind.endswith("postgres")
            else f"strftime('%Y-%m-%d %H:%M:%f', updated_at, '{seconds:+d} seconds')"
        )
        sql.execute(
            f"UPDATE checkpointer_threads SET updated_at = {moved} WHERE thread_id = 'clock'"
        )

    await build(sql, "clock", 1, delta=False)
    first = await updated_at()
    shift(30)  # recorded "in the future": every write now falls within a second of it
    recorded = await updated_at()
    await build(sql, "clock", 2, delta=False)
    assert await updated_at() == recorded
    shift(-60)  # half a minute old: the next write moves it
    await build(sql, "clock", 1, delta=False)
    now = await updated_at()
    assert first <= now < recorded - timedelta(seconds=25)


@given(
    st.datetimes(
        min_value=datetime(1970, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.sampled_from([UTC, timezone(timedelta(hours=5, minutes=30))]),
    )
)
def test_sqlite_timestamps_read_as_sqlite_writes_them(when: datetime) -> None:
    """The summary's times are compared in SQL with what SQLite's strftime writes: the
    text must be the same, to the millisecond, whatever the offset given."""
    conn = sqlite3.connect(":memory:")
    (by_sqlite,) = conn.execute(
        f"SELECT strftime('{SQLITE_TS_FORMAT}', ?)", (format_ts(when),)
    ).fetchone()
    conn.close()
    assert format_ts(when) == by_sqlite
    utc = when.astimezone(UTC)
    assert format_ts(when)[:19] == utc.strftime("%Y-%m-%d %H:%M:%S")
    assert int(format_ts(when)[20:]) == utc.microsecond // 1000


SCALARS: dict[str, Any] = {
    "none": None,
    "yes": True,
    "no": False,
    "zero": 0,
    "top": 2**63 - 1,
    "bottom": -(2**63),
    "text": "é" * 64,
    "empty": "",
}
NOT_INLINE: dict[str, Any] = {
    "over": 2**63,
    "long": "x" * 65,
    "nul": "a\x00b",
    "surrogate": "\ud800",
    "real": 1.5,
    "tuple": (1,),
}


async def test_small_scalars_are_kept_in_the_record(sql: Sql) -> None:
    """Exactly the small scalars skip the value table, and every value reads back with its
    exact type (True is not 1, a tuple stays a tuple)."""
    values = {**SCALARS, **NOT_INLINE}
    versions = {ch: next_channel_version(None) for ch in values}
    cp = empty_checkpoint()
    cp["channel_versions"] = dict(versions)
    cp["channel_values"] = dict(values)
    config = await sql.call("put", make_config("inline"), cp, {}, versions)
    got = await sql.call("get_tuple", config)
    assert got.checkpoint["channel_values"] == values
    for ch, value in values.items():
        assert type(got.checkpoint["channel_values"][ch]) is type(value), ch
    [listed] = await sql.list(make_config("inline"))
    assert listed.checkpoint["channel_values"] == values
    rows = sql.rows("SELECT channel FROM checkpointer_blobs ORDER BY channel")
    assert [r[0] for r in rows] == sorted(NOT_INLINE)


async def test_unchanged_inline_values_carry_over_even_when_left_out(sql: Sql) -> None:
    """`put` may leave unchanged channels out of `channel_values`; their inline values come
    from the parent's record (remembered from the last put, or read back)."""
    v = {"n": next_channel_version(None), "name": next_channel_version(None)}
    cp = empty_checkpoint()
    cp["channel_versions"] = dict(v)
    cp["channel_values"] = {"n": 5, "name": "a"}
    first = await sql.call("put", make_config("carry"), cp, {}, dict(v))
    for step, forget in enumerate((False, True)):
        if forget:
            sql.saver._recent_inline.clear()  # as a new process would: read the parent
        v[f"other{step}"] = next_channel_version(None)
        cp = empty_checkpoint()
        cp["channel_versions"] = dict(v)
        cp["channel_values"] = {f"other{step}": [step]}  # n and name left out: unchanged
        first = await sql.call("put", first, cp, {}, {f"other{step}": v[f"other{step}"]})
        got = await sql.call("get_tuple", first)
        assert got.checkpoint["channel_values"] == {
            "n": 5,
            "name": "a",
            **{f"other{i}": [i] for i in range(step + 1)},
        }
    # A value that changes gets its new version's value, never the carried one.
    v["n"] = next_channel_version(v["n"])
    cp = empty_checkpoint()
    cp["channel_versions"] = dict(v)
    cp["channel_values"] = {"n": 6}
    last = await sql.call("put", first, cp, {}, {"n": v["n"]})
    got = await sql.call("get_tuple", last)
    assert got.checkpoint["channel_values"]["n"] == 6
    assert got.checkpoint["channel_values"]["name"] == "a"


async def test_serializers_that_seal_values_keep_nothing_inline(sql: Sql) -> None:
    """A size guard below the largest inline value (which would escape it) stores small
    scalars as value rows again."""
    from checkpointer.serde import MsgpackSerializer
    from checkpointer.serde.guard import SizeGuard

    sql.saver.serde = SizeGuard(MsgpackSerializer(), max_bytes=100)
    versions = {"n": next_channel_version(None)}
    cp = empty_checkpoint()
    cp["channel_versions"] = dict(versions)
    cp["channel_values"] = {"n": 1}
    config = await sql.call("put", make_config("guarded"), cp, {}, versions)
    assert sql.rows("SELECT channel FROM checkpointer_blobs") == [("n",)]
    got = await sql.call("get_tuple", config)
    assert got.checkpoint["channel_values"] == {"n": 1}


@pytest.mark.parametrize("channel", ["count", 'odd "name" é', "a}b,c"])
async def test_an_inline_value_seeds_delta_history(sql: Sql, channel: str) -> None:
    """A small scalar stored inline is a stored value for the ancestor walk, whatever its
    channel's name (plain names are found by a text probe, others by parsing)."""
    versions = {channel: next_channel_version(None), "other": next_channel_version(None)}
    cp = empty_checkpoint()
    cp["channel_versions"] = dict(versions)
    cp["channel_values"] = {channel: 5, "other": "x"}
    config = await sql.call("put", make_config("seeded"), cp, {}, dict(versions))
    for step in range(3):
        await sql.call("put_writes", config, [(channel, step)], task_id_for(step, "t"))
        versions[channel] = next_channel_version(versions[channel])  # moved, no value
        cp = empty_checkpoint()
        cp["channel_versions"] = dict(versions)
        cp["channel_values"] = {}
        config = await sql.call("put", config, cp, {}, {channel: versions[channel]})
    history = await sql.call("get_delta_channel_history", config=config, channels=[channel])
    assert history[channel]["seed"] == 5
    assert [w[2] for w in history[channel]["writes"]] == [0, 1, 2]
    got = await sql.call("get_tuple", config)
    assert got.checkpoint["channel_values"] == {"other": "x"}


async def test_inline_values_under_an_encrypting_serializer(sql: Sql) -> None:
    """A database written with inline values, opened with encryption: the values are
    plaintext, so they are refused unless plaintext is allowed (for a migration), in
    `get_tuple` and as a delta seed alike."""
    import os

    from checkpointer.errors import PlaintextRefusedError
    from checkpointer.serde.encryption import EncryptedSerializer

    versions = {"n": next_channel_version(None), "d": next_channel_version(None)}
    cp = empty_checkpoint()
    cp["channel_versions"] = dict(versions)
    cp["channel_values"] = {"n": 5, "d": 1}
    root = await sql.call("put", make_config("enc"), cp, {}, dict(versions))
    await sql.call("put_writes", root, [("d", 2)], task_id_for(0, "t"))
    versions["d"] = next_channel_version(versions["d"])
    cp = empty_checkpoint()
    cp["channel_versions"] = dict(versions)
    cp["channel_values"] = {}
    head = await sql.call("put", root, cp, {}, {"d": versions["d"]})
    key = {"k": os.urandom(32)}
    sql.saver.serde = EncryptedSerializer(keys=key, active_key_id="k")
    with pytest.raises(PlaintextRefusedError):
        await sql.call("get_tuple", head)
    with pytest.raises(PlaintextRefusedError):
        await sql.call("get_delta_channel_history", config=head, channels=["d"])
    sql.saver.serde = EncryptedSerializer(keys=key, active_key_id="k", allow_plaintext=True)
    got = await sql.call("get_tuple", head)
    assert got.checkpoint["channel_values"] == {"n": 5}
    history = await sql.call("get_delta_channel_history", config=head, channels=["d"])
    assert history["d"]["seed"] == 1 and [w[2] for w in history["d"]["writes"]] == [2]


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", ()):
        yield from _plan_nodes(child)


def _long_thread(saver: Any, steps: int = 150) -> list[Any]:
    """A thread of `steps` checkpoints in a line, each with one pending write; their
    configs, in order."""
    config, configs = make_config("long"), []
    for step in range(steps):
        cp = empty_checkpoint()
        cp["id"] = f"{step:06d}"
        cp["channel_versions"] = {"topic": next_channel_version(None)}
        config = saver.put(config, cp, {"step": step}, {})
        saver.put_writes(config, [("topic", step)], str(uuid.uuid4()))
        configs.append(config)
    return configs


def test_pg_put_and_put_writes_probe_one_row_on_tables_without_statistics(
    pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Fresh tables have no statistics, and the planner then takes the parent index's
    (thread, namespace) prefix as readily as the primary key for a probe by checkpoint
    id, reading every checkpoint of the namespace. The probes of the put and put_writes
    statements must read a row or two whatever the thread's length."""
    from checkpointer.savers.sql.sync_exec import PostgresExecutor

    seen: list[tuple[str, dict[str, Any]]] = []
    run = PostgresExecutor._execute

    def record(self: PostgresExecutor, cur: Any, stmt: Any) -> Any:
        seen.append((stmt.sql, stmt.params))
        return run(self, cur, stmt)

    monkeypatch.setattr(PostgresExecutor, "_execute", record)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as saver:
        _long_thread(saver)
    put_sql, put = next(s for s in reversed(seen) if "INSERT INTO" in s[0] and "prior" in s[0])
    writes_sql, writes = next(s for s in reversed(seen) if s[0].startswith("WITH x"))
    last = put["checkpoint_id"]
    cases = [
        # The 151st checkpoint, and a re-put of the 150th (a probe that finds its row).
        (put_sql, {**put, "checkpoint_id": "000150", "head": "000150", "parent_id": last}),
        (put_sql, put),
        # More writes on the 150th (its seq found), and writes before their checkpoint.
        (writes_sql, {**writes, "task_id": str(uuid.uuid4())}),
        (writes_sql, {**writes, "checkpoint_id": "000150"}),
    ]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for sql, params in cases:
            with conn.transaction(force_rollback=True):
                row = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params).fetchone()
            assert row is not None
            for node in _plan_nodes(row[0][0]["Plan"]):
                if node.get("Relation Name") == "checkpointer_checkpoints" and "Scan" in str(
                    node.get("Node Type")
                ):
                    assert node.get("Rows Removed by Filter", 0) <= 1, node
                    assert node["Actual Rows"] <= 1, node


def test_pg_reads_by_id_use_the_primary_key_on_tables_without_statistics(
    pg_url: str, pg_schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same fresh-table planner choice for reads (fixed by the index order of revision
    0009 rather than in each statement): `get_tuple` of a checkpoint by id and the lookups
    by id of a delta history read one checkpoint row each, never the namespace."""
    from checkpointer.savers.sql.sync_exec import PostgresExecutor

    seen: list[tuple[str, dict[str, Any]]] = []
    run = PostgresExecutor._execute

    def record(self: PostgresExecutor, cur: Any, stmt: Any) -> Any:
        seen.append((stmt.sql, stmt.params))
        return run(self, cur, stmt)

    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as saver:
        configs = _long_thread(saver)
        monkeypatch.setattr(PostgresExecutor, "_execute", record)
        assert saver.get_tuple(configs[75]) is not None
        history = saver.get_delta_channel_history(config=configs[75], channels=["topic"])
        assert [w[2] for w in history["topic"]["writes"]] == list(range(75))
    assert len(seen) == 2
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for sql, params in seen:
            row = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params).fetchone()
            assert row is not None
            for node in _plan_nodes(row[0][0]["Plan"]):
                if node.get("Relation Name") != "checkpointer_checkpoints":
                    continue
                if node.get("Index Name") == "checkpointer_checkpoints_seq_idx":
                    continue  # the ranges of a delta history, read on purpose
                assert node.get("Rows Removed by Filter", 0) <= 1, node
                assert node["Actual Rows"] <= 1, node
