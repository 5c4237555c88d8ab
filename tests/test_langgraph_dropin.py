"""The LangGraph drop-in: real LangGraph graphs give the same observable results on our
savers as on LangGraph's own InMemorySaver, and the conformance suite passes in full."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

pytest.importorskip("langgraph.checkpoint.conformance")

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.memory import InMemorySaver as ReferenceSaver
from langgraph.types import Command, Interrupt, Send
from langgraph.types import Overwrite as LangGraphOverwrite

from checkpointer.errors import UnregisteredTypeError
from checkpointer.langgraph import LangGraphSaver, langgraph_serializer
from checkpointer.serde import MsgpackSerializer
from tests.conftest import (
    SAVER_KINDS,
    opened_saver,
)
from tests.lg_graphs import SCENARIOS, ChatFew, chat_graph


@pytest_asyncio.fixture(params=SAVER_KINDS)
async def lg_saver(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    """Each of our savers as a LangGraph checkpointer. Async savers serve LangGraph's sync
    calls from other threads while this test's event loop runs."""
    async with opened_saver(request.param, tmp_path) as saver:
        yield LangGraphSaver(saver)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_scenario_matches_langgraph_in_memory_saver(scenario: str, lg_saver: Any) -> None:
    run = SCENARIOS[scenario]
    ours = await asyncio.to_thread(run, lg_saver)
    assert ours == run(ReferenceSaver())


async def test_async_invoke_matches_reference(lg_saver: Any) -> None:
    async def drive(saver: Any) -> list[Any]:
        graph = chat_graph(ChatFew, 7).compile(checkpointer=saver)
        config = {"configurable": {"thread_id": "async"}}
        await graph.ainvoke({"messages": [HumanMessage(content="hi", id="h")], "turn": 0}, config)
        return [
            (h.values, h.next, h.metadata.get("step"))
            async for h in graph.aget_state_history(config)
        ]

    assert await drive(lg_saver) == await drive(ReferenceSaver())


async def test_conformance_suite_passes_every_capability(lg_saver: Any) -> None:
    @checkpointer_test(name="checkpointer")
    async def factory() -> Any:
        yield lg_saver

    report = await validate(factory)
    failures = {
        cap: [str(f)[:300] for f in (result.failures or [])]
        for cap, result in report.results.items()
        if result.passed is not True
    }
    assert failures == {}
    assert report.conformance_level() == "FULL"


@pytest.mark.parametrize(
    "value",
    [
        HumanMessage(content="hi \x00 there", id="1", additional_kwargs={"k": (1, 2)}),
        AIMessage(content="x", id="2", tool_calls=[{"name": "f", "args": {"a": 1}, "id": "c"}]),
        Send("node", {"arg": (1, 2)}),
        Interrupt(value={"q": "approve?"}, id="abc"),
        Command(resume="yes", update={"k": 1}, goto="n"),
        LangGraphOverwrite(value=[1, 2]),
        {"nested": [Send("a", 1), LangGraphOverwrite([3])]},
    ],
    ids=lambda v: type(v).__name__,
)
def test_langgraph_values_round_trip_exactly(value: Any) -> None:
    serde = langgraph_serializer()
    loaded = serde.loads_typed(serde.dumps_typed(value))
    assert type(loaded) is type(value)
    assert loaded == value


class _NotAllowed:
    pass


def test_unlisted_classes_are_refused_until_allowed() -> None:
    from dataclasses import dataclass

    @dataclass
    class Secret:
        x: int

    Secret.__module__ = __name__
    Secret.__qualname__ = "Secret"
    globals()["Secret"] = Secret
    strict = MsgpackSerializer(strict=True)
    serde = langgraph_serializer(strict)
    data = serde.dumps_typed(Secret(1))
    with pytest.raises(UnregisteredTypeError, match="Secret"):
        serde.loads_typed(data)
    assert langgraph_serializer(strict, allowed_types=[Secret]).loads_typed(data) == Secret(1)
    assert langgraph_serializer().loads_typed(data) == Secret(1)  # an app class: by default


def test_with_allowlist_admits_state_types_without_importing() -> None:
    from checkpointer.savers.memory import InMemorySaver

    saver = LangGraphSaver(InMemorySaver())
    clone = saver.with_allowlist({(__name__, "_NotAllowed"), ("not_imported_module_x", "Y")})
    assert clone is not saver
    assert _NotAllowed in clone.saver.serde.allowed_types  # type: ignore[attr-defined]
    import sys

    assert "not_imported_module_x" not in sys.modules
    thread = str(uuid.uuid4())
    assert clone.get_tuple({"configurable": {"thread_id": thread}}) is None


def test_the_drop_in_keeps_compression_and_its_allowlist() -> None:
    from checkpointer.savers.memory import InMemorySaver
    from checkpointer.serde.compression import CompressingSerializer

    saver = InMemorySaver(serde=CompressingSerializer(threshold=64))
    lg = LangGraphSaver(saver).with_allowlist({(__name__, "_NotAllowed")})
    assert isinstance(lg.saver.serde, CompressingSerializer)
    message = HumanMessage(content="hello " * 200, id="m")
    tag, data = lg.saver.serde.dumps_typed([message])
    assert tag.endswith("+zstd")
    assert lg.saver.serde.loads_typed((tag, data)) == [message]
    assert _NotAllowed in lg.saver.serde.inner.allowed_types  # type: ignore[attr-defined]
