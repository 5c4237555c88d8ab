"""Async parity: the scenarios of test_graph.py through ainvoke / astream / aget_state /
aget_state_history / aupdate_state, on the async savers (and the in-memory one, whose async
methods wrap its sync ones). Nodes are async coroutines, with one sync node in the mix."""

from __future__ import annotations

import asyncio
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from checkpointer.channels import DeltaSnapshot
from checkpointer.errors import InvalidUpdateError
from checkpointer.graph import END, START, Command, GraphRecursionError, StateGraph, interrupt
from checkpointer.types import INTERRUPT, checkpoint_id_of
from tests.conftest import close_saver, drop_schema, open_saver, require_postgres
from tests.test_graph import (
    Ask,
    Boom,
    Chat,
    Conflict,
    Linear,
    count_history_calls,
    loop_builder,
    thread,
    values_of,
)

ASYNC_KINDS = ("memory", "async_sqlite", "async_postgres")


@pytest_asyncio.fixture(params=ASYNC_KINDS)
async def asaver(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    kind: str = request.param
    schema = None
    if kind == "async_postgres":
        require_postgres()
        schema = f"cp_test_{uuid.uuid4().hex[:12]}"
    opened = await open_saver(kind, tmp_path, schema)
    try:
        yield opened
    finally:
        await close_saver(kind, opened)
        if schema is not None:
            drop_schema(schema)


def async_chat_builder(runs: Counter[str], *, fail: set[str] | None = None) -> StateGraph:
    """test_graph.chat_builder with async research/draft and a sync review."""
    failing = fail if fail is not None else set()

    async def research(state: dict[str, Any]) -> dict[str, Any]:
        runs["research"] += 1
        await asyncio.sleep(0)
        return {"notes": [f"note{len(state['messages'])}"]}

    async def draft(state: dict[str, Any]) -> dict[str, Any]:
        runs["draft"] += 1
        await asyncio.sleep(0.01)  # research finishes (and is saved) first
        if "draft" in failing:
            failing.discard("draft")
            raise Boom("draft failed")
        return {"messages": [f"draft{len(state['messages'])}"]}

    def review(state: dict[str, Any]) -> dict[str, Any]:
        runs["review"] += 1
        return {"messages": [f"review:{state.get('topic', '-')}"], "topic": "reviewed"}

    builder = StateGraph(Chat)
    builder.add_node("research", research)
    builder.add_node("draft", draft)
    builder.add_node("review", review)
    builder.add_edge(START, "research")
    builder.add_edge(START, "draft")
    builder.add_edge(["research", "draft"], "review")
    builder.add_edge("review", END)
    return builder


def async_linear_builder(runs: Counter[str]) -> StateGraph:
    async def a(state: dict[str, Any]) -> dict[str, Any]:
        runs["a"] += 1
        return {"messages": ["a"]}

    async def b(state: dict[str, Any]) -> dict[str, Any]:
        runs["b"] += 1
        return {"messages": [f"b:{state.get('topic', '-')}"]}

    builder = StateGraph(Linear)
    builder.add_node("a", a)
    builder.add_node("b", b)
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    return builder


async def history(app: Any, config: Any, **kwargs: Any) -> list[Any]:
    return [s async for s in app.aget_state_history(config, **kwargs)]


async def test_parallel_writers_merge(asaver: Any) -> None:
    runs: Counter[str] = Counter()
    app = async_chat_builder(runs).compile(checkpointer=asaver)
    config = thread()
    out = await app.ainvoke({"messages": ["hi"]}, config)
    assert out == {
        "messages": ["hi", "draft1", "review:-"],
        "notes": ["note1"],
        "topic": "reviewed",
    }
    chunks = [c async for c in app.astream({"messages": ["again"]}, config)]
    assert chunks == [
        {"draft": {"messages": ["draft4"]}},
        {"research": {"notes": ["note4"]}},
        {"review": {"messages": ["review:reviewed"], "topic": "reviewed"}},
    ]


async def test_last_value_conflict(asaver: Any) -> None:
    builder = StateGraph(Conflict)

    async def left(state: dict[str, Any]) -> dict[str, Any]:
        return {"topic": "left"}

    builder.add_node("left", left)
    builder.add_node("right", lambda state: {"topic": "right"})
    builder.add_edge(START, "left")
    builder.add_edge(START, "right")
    app = builder.compile(checkpointer=asaver)
    with pytest.raises(InvalidUpdateError, match="'topic'"):
        await app.ainvoke({"topic": "start"}, thread())


async def test_crash_resume_skips_finished_task(asaver: Any) -> None:
    runs: Counter[str] = Counter()
    app = async_chat_builder(runs, fail={"draft"}).compile(checkpointer=asaver)
    config = thread()
    with pytest.raises(Boom):
        await app.ainvoke({"messages": ["hi"]}, config)
    state = await app.aget_state(config)
    by_name = {t.name: t for t in state.tasks}
    assert by_name["research"].result == {"notes": ["note1"]}
    assert by_name["draft"].error is not None
    out = await app.ainvoke(None, config)
    assert runs == {"research": 1, "draft": 2, "review": 1}
    assert out["messages"] == ["hi", "draft1", "review:-"]


async def test_interrupt_before_and_after(asaver: Any) -> None:
    runs: Counter[str] = Counter()
    before = async_linear_builder(runs).compile(checkpointer=asaver, interrupt_before=["b"])
    config = thread()
    await before.ainvoke({"messages": ["hi"]}, config)
    assert (await before.aget_state(config)).next == ("b",)
    assert (await before.ainvoke(None, config))["messages"] == ["hi", "a", "b:-"]

    after = async_linear_builder(runs).compile(checkpointer=asaver, interrupt_after=["a"])
    config = thread()
    chunks = [c async for c in after.astream({"messages": ["hi"]}, config)]
    assert chunks == [{"a": {"messages": ["a"]}}, {INTERRUPT: ()}]
    chunks = [c async for c in after.astream(None, config)]
    assert chunks == [{"b": {"messages": ["b:-"]}}]
    assert runs == {"a": 2, "b": 2}


async def test_update_state_while_paused(asaver: Any) -> None:
    runs: Counter[str] = Counter()
    app = async_linear_builder(runs).compile(checkpointer=asaver, interrupt_before=["b"])
    config = thread()
    await app.ainvoke({"messages": ["hi"]}, config)
    await app.aupdate_state(config, {"topic": "approved"})
    out = await app.ainvoke(None, config)
    assert out["messages"] == ["hi", "a", "b:approved"]
    assert runs == {"a": 1, "b": 1}


async def test_interrupt_call_and_command_resume(asaver: Any) -> None:
    runs: Counter[str] = Counter()

    async def ask(state: dict[str, Any]) -> dict[str, Any]:
        runs["ask"] += 1
        return {"answers": [interrupt("first?"), interrupt("second?")]}

    async def other(state: dict[str, Any]) -> dict[str, Any]:
        runs["other"] += 1
        return {"notes": ["other"]}

    builder = StateGraph(Ask)
    builder.add_node("ask", ask)
    builder.add_node("other", other)
    builder.add_edge(START, "ask")
    builder.add_edge(START, "other")
    app = builder.compile(checkpointer=asaver)
    config = thread()
    assert (await app.ainvoke({"answers": []}, config))[INTERRUPT][0].value == "first?"
    assert (await app.ainvoke(Command(resume="yes"), config))[INTERRUPT][0].value == "second?"
    out = await app.ainvoke(Command(resume="sure"), config)
    assert out == {"answers": ["yes", "sure"], "notes": ["other"]}
    assert runs == {"ask": 3, "other": 1}


async def test_recursion_limit(asaver: Any) -> None:
    app = loop_builder(stop_at=100).compile(checkpointer=asaver)
    with pytest.raises(GraphRecursionError, match="Recursion limit of 3"):
        await app.ainvoke({"n": 0}, {**thread(), "recursion_limit": 3})


async def test_fork_leaves_original_branch_intact(asaver: Any) -> None:
    app = async_chat_builder(Counter()).compile(checkpointer=asaver)
    config = thread()
    for text in ("one", "two", "three"):
        await app.ainvoke({"messages": [text]}, config)
    original = await history(app, config)
    target = next(h for h in original if h.values["messages"][-1] == "review:-")
    out = await app.ainvoke({"messages": ["alt"]}, target.config)
    assert out["messages"] == [*target.values["messages"], "alt", "draft4", "review:reviewed"]
    again = await history(app, original[0].config)
    assert values_of(again) == values_of(original)
    branch = await history(app, (await app.aget_state(config)).config)
    [fork] = [h for h in branch if h.metadata and h.metadata["source"] == "fork"]
    assert fork.parent_config is not None
    assert checkpoint_id_of(fork.parent_config) == checkpoint_id_of(target.config)
    stored = (await asaver.aget_tuple(fork.config)).checkpoint["channel_values"]["messages"]
    assert isinstance(stored, DeltaSnapshot)


async def test_update_state_on_old_checkpoint_forks(asaver: Any) -> None:
    app = async_linear_builder(Counter()).compile(checkpointer=asaver)
    config = thread()
    await app.ainvoke({"messages": ["one"]}, config)
    await app.ainvoke({"messages": ["two"]}, config)
    original = await history(app, config)
    after_a = next(h for h in original if h.values["messages"] == ["one", "a"])
    new_config = await app.aupdate_state(after_a.config, {"topic": "edited"}, as_node="a")
    out = await app.ainvoke(None, new_config)
    assert out["messages"] == ["one", "a", "b:edited"]
    assert values_of(await history(app, original[0].config)) == values_of(original)


async def test_history_matches_live_values_with_one_history_call(asaver: Any) -> None:
    app = async_linear_builder(Counter()).compile(checkpointer=asaver)
    config = thread()
    live: list[dict[str, Any]] = []
    for turn in range(6):
        live.extend(
            [c async for c in app.astream({"messages": [f"u{turn}"]}, config, stream_mode="values")]
        )
    calls = count_history_calls(asaver)
    full = await history(app, config)
    assert values_of(full)[::-1] == live
    assert calls["async"] <= 1
    calls.clear()
    window = await history(app, config, limit=10)
    assert values_of(window) == values_of(full)[:10]
    assert calls["async"] == 1  # (the in-memory saver also counts it as its sync call)
    per_checkpoint = [(await app.aget_state(h.config)).values for h in window]
    assert per_checkpoint == values_of(window)
