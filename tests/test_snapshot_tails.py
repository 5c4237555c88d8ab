"""Delta snapshots stored as tails (schema revision 0011): a thread run through LangGraph
reads exactly as on LangGraph's own saver while its snapshots are tail rows, and a
database written at revision 0010 (every snapshot whole) upgrades and reads as before."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from checkpointer.langgraph import LangGraphSaver
from checkpointer.savers.postgres import AsyncPostgresSaver, PostgresSaver
from checkpointer.savers.sql import puts
from checkpointer.savers.sql.schema import SCHEMA_REVISION, VERSION_TABLE
from checkpointer.savers.sqlite import SqliteSaver
from tests.conftest import PG_URL, drop_schema, require_postgres
from tests.lg_graphs import ChatFew, chat_graph, observe, run_chat_few
from tests.old_schema import back_to_0011

TURNS = 45
"""ChatFew snapshots every 3 steps: 15 snapshots of a list that outgrows a tail's base."""

OPENING = HumanMessage(content="opening " * 700, id="open")
"""A first message of some 5 KB: every snapshot is large enough to be a base."""


def _run(saver: Any, thread_id: str, turns: int = TURNS, start: int = 0) -> dict[str, Any]:
    return run_chat_few(saver, thread_id, OPENING, turns, start)


async def _arun(saver: Any, thread_id: str) -> dict[str, Any]:
    graph = chat_graph(ChatFew, TURNS).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": thread_id}}
    await graph.ainvoke({"messages": [OPENING], "turn": 0}, config)
    state = await graph.aget_state(config)
    history = [h async for h in graph.aget_state_history(config)]
    return {"values": state.values, "history": [h.values for h in history]}


def _snapshot_rows(rows: list[Any]) -> tuple[int, int]:
    """(tail rows, whole rows) of the message channel, from (type, base_version) pairs."""
    tails = sum(1 for _, base in rows if base is not None)
    return tails, len(rows) - tails


@contextmanager
def _sqlite(tmp_path: Path) -> Iterator[tuple[Any, Any]]:
    path = tmp_path / "snap.db"
    with SqliteSaver.from_conn_string(path) as saver:

        def rows() -> list[Any]:
            with sqlite3.connect(path) as conn:
                return conn.execute(
                    "SELECT type, base_version FROM checkpointer_blobs WHERE channel = 'messages'"
                ).fetchall()

        yield saver, rows


@contextmanager
def _postgres() -> Iterator[tuple[Any, Any]]:
    require_postgres()
    schema = f"cp_snap_{uuid.uuid4().hex[:10]}"
    try:
        with PostgresSaver.from_conn_string(PG_URL, schema=schema) as saver:

            def rows() -> list[Any]:
                with psycopg.connect(PG_URL) as conn:
                    return conn.execute(
                        f'SELECT type, base_version FROM "{schema}".checkpointer_blobs '
                        "WHERE channel = 'messages'"
                    ).fetchall()

            yield saver, rows
    finally:
        drop_schema(schema)


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_langgraph_thread_with_snapshot_tails_reads_as_on_langgraphs_saver(
    kind: str, tmp_path: Path
) -> None:
    want = _run(InMemorySaver(), "chat")
    opened = _sqlite(tmp_path) if kind == "sqlite" else _postgres()
    with opened as (saver, rows):
        got = _run(LangGraphSaver(saver), "chat")
        tails, whole = _snapshot_rows(rows())
        assert tails >= 5 and whole >= 1  # most snapshots are tails of a few whole ones
        assert got == want
        saver.value_cache.clear()  # and decoded from the rows again
        assert (
            observe(
                chat_graph(ChatFew, TURNS).compile(checkpointer=LangGraphSaver(saver)),
                {"configurable": {"thread_id": "chat"}},
            )
            == want
        )


async def test_async_postgres_thread_with_snapshot_tails_reads_as_on_langgraphs_saver() -> None:
    require_postgres()
    want = await _arun(InMemorySaver(), "chat")
    schema = f"cp_asnap_{uuid.uuid4().hex[:10]}"
    try:
        async with AsyncPostgresSaver.from_conn_string(PG_URL, schema=schema) as saver:
            assert await _arun(LangGraphSaver(saver), "chat") == want
            with psycopg.connect(PG_URL) as conn:
                tails = conn.execute(
                    f'SELECT count(*) FROM "{schema}".checkpointer_blobs '
                    "WHERE base_version IS NOT NULL"
                ).fetchone()
            assert tails is not None and tails[0] >= 5
    finally:
        drop_schema(schema)


def _only_plain_lists_as_tails(monkeypatch: pytest.MonkeyPatch) -> None:
    """Puts as code at revision 0010 made them: only plain lists may be tails."""
    monkeypatch.setattr(puts, "can_be_tail", lambda value: type(value) is list and bool(value))


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_upgrade_from_0010_reads_whole_snapshots_and_goes_on_with_tails(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database written at 0010 (snapshots whole) is upgraded by `setup()`; its thread
    reads as before, and the thread goes on with snapshots stored as tails."""
    want_before = _run(InMemorySaver(), "chat")
    reference = InMemorySaver()
    _run(reference, "chat")
    want_after = _run(reference, "chat", turns=TURNS + 30, start=TURNS)

    if kind == "sqlite":
        path = tmp_path / "old.db"

        def execute(sql: str) -> Any:
            with sqlite3.connect(path) as conn:
                return conn.execute(sql).fetchall()

        def open_saver() -> Any:
            return SqliteSaver.from_conn_string(path)

        table = VERSION_TABLE
        blobs = "checkpointer_blobs"
    else:
        require_postgres()
        schema = f"cp_up11_{uuid.uuid4().hex[:10]}"

        def execute(sql: str) -> Any:
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                cur = conn.execute(sql)
                return cur.fetchall() if cur.description else []

        def open_saver() -> Any:
            return PostgresSaver.from_conn_string(PG_URL, schema=schema)

        table = f'"{schema}".{VERSION_TABLE}'
        blobs = f'"{schema}".checkpointer_blobs'
    try:
        with monkeypatch.context() as patched:
            _only_plain_lists_as_tails(patched)
            with open_saver() as saver:
                assert _run(LangGraphSaver(saver), "chat") == want_before
        assert execute(f"SELECT count(*) FROM {blobs} WHERE base_version IS NOT NULL") == [(0,)]
        back_to_0011(execute, None if kind == "sqlite" else schema)
        execute(f"UPDATE {table} SET version_num = '0010'")

        with open_saver() as saver:  # from_conn_string sets up: the upgrade
            assert execute(f"SELECT version_num FROM {table}") == [(SCHEMA_REVISION,)]
            graph = chat_graph(ChatFew, TURNS).compile(checkpointer=LangGraphSaver(saver))
            assert observe(graph, {"configurable": {"thread_id": "chat"}}) == want_before
            got = _run(LangGraphSaver(saver), "chat", turns=TURNS + 30, start=TURNS)
            assert got == want_after
        tails = execute(f"SELECT count(*) FROM {blobs} WHERE base_version IS NOT NULL")
        assert tails[0][0] >= 3
    finally:
        if kind == "postgres":
            drop_schema(schema)
