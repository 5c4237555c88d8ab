"""Long statements converted to PostgreSQL's `$n` form (`savers/sql/pg_native.py`) run
exactly as psycopg runs them with its own `%` placeholders: the same rows for any mix of
named parameters (repeated or not), literal `%`, and text. Statements psycopg keeps its
own conversion of, or with other placeholders, are left to psycopg."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpointer.savers.sql.pg_native import PSYCOPG_CACHED_BYTES, native
from tests.conftest import PG_URL, require_postgres
from tests.test_fuzz import example_settings

NAMES = ("a", "b", "thread_id", "x_1")
TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=6)
LONG = "/*" + "p" * PSYCOPG_CACHED_BYTES + "*/ "
"""A comment that makes a statement longer than psycopg keeps the conversion of."""


@pytest.fixture(scope="module")
def conn() -> Iterator[psycopg.Connection[Any]]:
    require_postgres()
    with psycopg.connect(PG_URL, autocommit=True) as connection:
        yield connection


@st.composite
def statements(draw: Any) -> tuple[str, dict[str, str]]:
    """A long `SELECT` of a few columns, each a named parameter (names repeat) or a string
    literal holding `%%` (psycopg's literal `%` when a statement has parameters)."""
    columns = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            columns.append(f"%({draw(st.sampled_from(NAMES))})s::text")
        else:
            literal = draw(TEXT).replace("%", "%%").replace("'", "''")
            columns.append(f"'{draw(st.sampled_from(['', '%%', 'x%%y']))}{literal}'")
    params = {name: draw(TEXT) for name in NAMES}
    return LONG + "SELECT " + ", ".join(columns), params


@example_settings(60)
@given(statement=statements())
def test_a_converted_statement_returns_what_psycopg_returns(
    conn: psycopg.Connection[Any], statement: tuple[str, dict[str, str]]
) -> None:
    sql, params = statement
    want = conn.execute(sql, params).fetchall()
    converted = native(sql, params)
    assert converted is not None
    with psycopg.RawCursor(conn) as cur:
        got = cur.execute(*converted).fetchall()
    assert got == want


def test_a_name_used_twice_is_one_parameter() -> None:
    converted = native(LONG + "SELECT %(a)s, %(b)s, %(a)s, '100%%'", {"b": 2, "a": 1, "c": 3})
    assert converted == ((LONG + "SELECT $1, $2, $1, '100%'").encode(), [1, 2])


def test_statements_psycopg_handles_well_are_left_to_it() -> None:
    assert native("SELECT %(a)s", {"a": 1}) is None  # short: psycopg keeps its conversion
    assert native(LONG + "SELECT %(a)b", {"a": b"x"}) is None  # binary parameters
    assert native(LONG + "SELECT %s", (1,)) is None  # positional
    assert native(LONG + "SELECT 1 %", {"a": 1}) is None
    many = {f"p{i}": i for i in range(60)}
    sql = "SELECT " + ", ".join(f"%(p{i})s" for i in range(60))
    want = "SELECT " + ", ".join(f"${i + 1}" for i in range(60))
    assert native(sql, many) == (want.encode(), list(range(60)))  # 60 parameters: converted


def test_a_missing_parameter_is_psycopgs_error() -> None:
    with pytest.raises(psycopg.ProgrammingError, match="parameter missing: b"):
        native(LONG + "SELECT %(a)s, %(b)s", {"a": 1})


@pytest.mark.parametrize("kind", ["postgres", "async_postgres"])
def test_a_wide_put_and_many_writes_skip_psycopgs_parse_and_read_back(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkpoint of 16 stored values and a task of 20 writes are statements of more
    than 50 parameters, which psycopg parses on every call: they go the `$n` way, values
    in binary as before, and read back exactly."""
    import asyncio

    from checkpointer.ids import task_id_for
    from checkpointer.savers.postgres import AsyncPostgresSaver, PostgresSaver
    from checkpointer.savers.sql import async_exec, sync_exec
    from checkpointer.types import empty_checkpoint, make_config
    from tests.conftest import drop_schema

    require_postgres()
    module = sync_exec if kind == "postgres" else async_exec
    converted: list[str] = []

    def spy(sql: str, params: Any) -> Any:
        found = native(sql, params)
        if found is not None:
            converted.append(sql)
        return found

    monkeypatch.setattr(module, "native", spy)
    checkpoint = empty_checkpoint()
    values = {f"c{i}": {"blob": bytes(range(i, i + 40)), "n": i} for i in range(16)}
    checkpoint["channel_values"] = dict(values)
    checkpoint["channel_versions"] = {channel: "1" for channel in values}
    writes = [(f"c{i % 16}", [i, bytes([i]) * 30]) for i in range(20)]
    schema = f"cp_native_{kind}"
    drop_schema(schema)

    async def run() -> Any:
        if kind == "postgres":
            with PostgresSaver.from_conn_string(PG_URL, schema=schema) as saver:
                config = saver.put(make_config("t"), checkpoint, {}, dict.fromkeys(values, "1"))
                saver.put_writes(config, writes, task_id_for(0, "n"))
                return saver.get_tuple(config)
        async with AsyncPostgresSaver.from_conn_string(PG_URL, schema=schema) as saver:
            config = await saver.aput(make_config("t"), checkpoint, {}, dict.fromkeys(values, "1"))
            await saver.aput_writes(config, writes, task_id_for(0, "n"))
            return await saver.aget_tuple(config)

    try:
        tup = asyncio.run(run())
    finally:
        drop_schema(schema)
    assert tup.checkpoint["channel_values"] == values
    assert [(channel, value) for _, channel, value in tup.pending_writes] == writes
    assert any("INSERT INTO" in sql and "checkpointer_blobs" in sql for sql in converted)
    assert any("INSERT INTO" in sql and "checkpointer_writes" in sql for sql in converted)


def test_bytes_go_in_binary_under_s_as_under_b(conn: psycopg.Connection[Any]) -> None:
    """The dialect's value cells are `%(name)s::bytea`: psycopg's automatic format must
    dump bytes as its binary placeholder does (no hex text of every stored value)."""
    from psycopg.adapt import PyFormat, Transformer
    from psycopg.pq import Format

    transformer = Transformer(conn)
    for value in (b"x" * 10, bytearray(b"y"), memoryview(b"z")):
        automatic = transformer.get_dumper(value, PyFormat.AUTO)
        assert automatic.format == Format.BINARY
        assert type(automatic) is type(transformer.get_dumper(value, PyFormat.BINARY))


@pytest.mark.parametrize("kind", ["postgres", "async_postgres"])
def test_a_connections_cursor_factory_sees_the_converted_statements(kind: str) -> None:
    """The `$n` statements run on a raw variant of the connection's own cursor class, so a
    `cursor_factory` that traces or counts statements sees the delta history's too."""
    import asyncio

    from checkpointer.ids import task_id_for
    from checkpointer.savers.postgres import AsyncPostgresSaver, PostgresSaver
    from checkpointer.types import empty_checkpoint, make_config
    from tests.conftest import drop_schema

    require_postgres()
    seen: list[str] = []

    class Tracing(psycopg.Cursor):  # type: ignore[type-arg]
        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            seen.append(query.decode() if isinstance(query, bytes) else str(query))
            return super().execute(query, params, **kwargs)

    class AsyncTracing(psycopg.AsyncCursor):  # type: ignore[type-arg]
        async def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            seen.append(query.decode() if isinstance(query, bytes) else str(query))
            return await super().execute(query, params, **kwargs)

    schema = f"cp_native_trace_{kind}"
    drop_schema(schema)
    checkpoint = empty_checkpoint()
    checkpoint["channel_versions"] = {"m": "1"}
    checkpoint["channel_values"] = {"m": ["x"]}
    task = task_id_for(0, "n")

    async def run() -> Any:
        if kind == "postgres":
            conn = psycopg.connect(PG_URL, autocommit=True, cursor_factory=Tracing)
            with conn:
                saver = PostgresSaver(conn, schema=schema)
                saver.setup()
                config = saver.put(make_config("t"), checkpoint, {}, {"m": "1"})
                saver.put_writes(config, [("m", "y")], task)
                return saver.get_delta_channel_history(config=config, channels=["m"])
        aconn = await psycopg.AsyncConnection.connect(
            PG_URL, autocommit=True, cursor_factory=AsyncTracing
        )
        async with aconn:
            asaver = AsyncPostgresSaver(aconn, schema=schema)
            await asaver.setup()
            config = await asaver.aput(make_config("t"), checkpoint, {}, {"m": "1"})
            await asaver.aput_writes(config, [("m", "y")], task)
            return await asaver.aget_delta_channel_history(config=config, channels=["m"])

    try:
        asyncio.run(run())
    finally:
        drop_schema(schema)
    long = [q for q in seen if len(q) > PSYCOPG_CACHED_BYTES]
    assert long and all("$1" in q for q in long), [q[:80] for q in seen]
