"""Importing threads written by LangGraph's reference savers reproduces state and history."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite")

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver as ReferenceSqliteSaver
from langgraph.types import Command

from checkpointer.importer import _batches_in_slots, _RawWrite, import_from_url
from checkpointer.langgraph import LangGraphSaver
from checkpointer.savers.memory import InMemorySaver
from tests.lg_graphs import (
    ChatFew,
    approval_graph,
    chat_graph,
    fan_out_graph,
    observe,
)


def _write_reference_threads(saver: Any) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Run graphs on a reference saver; returns thread -> (builder, config)."""
    chat = chat_graph(ChatFew, 10)
    fan = fan_out_graph()
    approval = approval_graph()
    threads = {
        "chat": (chat, {"configurable": {"thread_id": "chat"}}),
        "fan": (fan, {"configurable": {"thread_id": "fan"}}),
        "approval": (approval, {"configurable": {"thread_id": "approval"}}),
        "exit": (chat, {"configurable": {"thread_id": "exit"}}),
    }
    chat.compile(checkpointer=saver).invoke(
        {"messages": [HumanMessage(content="hi", id="h")], "turn": 0}, threads["chat"][1]
    )
    fan.compile(checkpointer=saver).invoke(
        {"topic": "x", "notes": [], "total": 0}, threads["fan"][1]
    )
    paused = approval.compile(checkpointer=saver)
    paused.invoke({"messages": [HumanMessage(content="go", id="g")]}, threads["approval"][1])
    chat.compile(checkpointer=saver).invoke(
        {"messages": [HumanMessage(content="hi", id="h")], "turn": 2},
        threads["exit"][1],
        durability="exit",
    )
    return threads


def test_import_from_reference_sqlite_reproduces_state_and_history(tmp_path: Path) -> None:
    path = str(tmp_path / "reference.db")
    with ReferenceSqliteSaver.from_conn_string(path) as reference:
        threads = _write_reference_threads(reference)
        expected = {
            name: observe(builder.compile(checkpointer=reference), config)
            for name, (builder, config) in threads.items()
        }
        checkpoint_count = len(list(reference.list(None)))
    target = InMemorySaver()
    report = import_from_url(path, target)
    assert sorted(report.threads) == sorted(threads)
    assert report.checkpoints == checkpoint_count
    assert report.writes > report.checkpoints
    ours = LangGraphSaver(target)
    for name, (builder, config) in threads.items():
        assert observe(builder.compile(checkpointer=ours), config) == expected[name], name
    # The imported approval thread resumes where it paused.
    builder, config = threads["approval"]
    result = builder.compile(checkpointer=ours).invoke(Command(resume="ok"), config)
    assert result["decision"] == "ok"


def _w(idx: int, channel: str) -> _RawWrite:
    return _RawWrite("t", "", idx, channel, channel)


def test_writes_go_back_to_their_original_slots() -> None:
    batches = _batches_in_slots([_w(-1, "__error__"), _w(0, "a"), _w(2, "b")])
    assert batches == [[("a", "a"), ("__error__", "__error__"), ("b", "b")]]
    assert _batches_in_slots([_w(-3, "__interrupt__")]) == [[("__interrupt__", "__interrupt__")]]


def test_import_from_reference_postgres_reproduces_state_and_history(pg_url: str) -> None:
    import uuid

    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver as ReferencePostgresSaver

    schema = f"cp_ref_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    url = f"{pg_url}?options=-csearch_path%3D{schema}"
    try:
        with ReferencePostgresSaver.from_conn_string(url) as reference:
            reference.setup()
            threads = _write_reference_threads(reference)
            expected = {
                name: observe(builder.compile(checkpointer=reference), config)
                for name, (builder, config) in threads.items()
            }
            checkpoint_count = len(list(reference.list(None)))
        target = InMemorySaver()
        report = import_from_url(url, target)
        assert sorted(report.threads) == sorted(threads)
        assert report.checkpoints == checkpoint_count
        ours = LangGraphSaver(target)
        for name, (builder, config) in threads.items():
            assert observe(builder.compile(checkpointer=ours), config) == expected[name], name
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
