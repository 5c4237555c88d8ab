"""Building and validating graphs, and the runtime's edges: schemas, node signatures,
conditional routing, bad updates, runs without a checkpointer (in-memory saver only)."""

from __future__ import annotations

import asyncio
import operator
from collections import Counter
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict

import pytest

from checkpointer.channels import DeltaSnapshot, Overwrite
from checkpointer.errors import CheckpointNotFoundError, InvalidUpdateError
from checkpointer.graph import (
    END,
    START,
    Command,
    EmptyInputError,
    GraphBuildError,
    StateGraph,
    interrupt,
)
from checkpointer.savers.memory import InMemorySaver
from checkpointer.types import make_config
from tests.test_graph import Boom, chat_builder, linear_builder, thread


class State(TypedDict):
    value: int
    log: Annotated[list[str], operator.add]


def node(name: str) -> Any:
    def run(state: dict[str, Any]) -> dict[str, Any]:
        return {"log": [name]}

    return run


def test_compile_rejects_inconsistent_graphs() -> None:
    builder = StateGraph(State)
    builder.add_node("a", node("a"))
    with pytest.raises(GraphBuildError, match="entry point"):
        builder.compile()
    builder.add_edge(START, "a")
    builder.add_edge("a", "missing")
    with pytest.raises(GraphBuildError, match="missing"):
        builder.compile()

    builder = StateGraph(State)
    builder.add_node("a", node("a"))
    builder.add_edge(START, "a")
    with pytest.raises(GraphBuildError, match="nope"):
        builder.compile(interrupt_before=["nope"])
    builder.add_conditional_edges("a", lambda s: "x", {"x": "ghost"})
    with pytest.raises(GraphBuildError, match="ghost"):
        builder.compile()


def test_add_node_rejects_bad_names() -> None:
    builder = StateGraph(State)
    builder.add_node("a", node("a"))
    with pytest.raises(GraphBuildError, match="already exists"):
        builder.add_node("a", node("a"))
    with pytest.raises(GraphBuildError, match="reserved"):
        builder.add_node(END, node("x"))
    with pytest.raises(GraphBuildError, match="state key"):
        builder.add_node("value", node("x"))
    with pytest.raises(GraphBuildError):
        builder.add_edge(END, "a")
    with pytest.raises(GraphBuildError):
        builder.add_edge("a", START)


def test_add_node_named_after_the_function() -> None:
    def greet(state: dict[str, Any]) -> dict[str, Any]:
        return {"log": ["hello"]}

    builder = StateGraph(State)
    builder.add_node(greet)
    builder.set_entry_point("greet")
    builder.set_finish_point("greet")
    assert builder.compile().invoke({"value": 1}) == {"value": 1, "log": ["hello"]}


def test_compiled_graph_is_frozen() -> None:
    builder = StateGraph(State)
    builder.add_node("a", node("a"))
    builder.add_edge(START, "a")
    app = builder.compile()
    builder.add_node("b", node("b"))
    builder.add_edge("a", "b")
    assert app.invoke({"value": 0})["log"] == ["a"]


def test_runs_without_a_checkpointer() -> None:
    builder = StateGraph(State)
    builder.add_node("a", node("a"))
    builder.add_edge(START, "a")
    app = builder.compile()
    assert app.invoke({"value": 1}) == {"value": 1, "log": ["a"]}
    assert list(app.stream({"value": 1})) == [{"a": {"log": ["a"]}}]
    with pytest.raises(ValueError, match="checkpointer"):
        app.get_state(thread())


def test_conditional_edges_with_path_map_and_fan_out() -> None:
    builder = StateGraph(State)
    for name in ("router", "small", "big", "x", "y"):
        builder.add_node(name, node(name))
    builder.add_edge(START, "router")
    builder.add_conditional_edges(
        "router", lambda s: "low" if s["value"] < 10 else "high", {"low": "small", "high": "big"}
    )
    builder.add_conditional_edges("small", lambda s: ["x", "y"])  # fan out, no map
    builder.add_edge("big", END)
    app = builder.compile(checkpointer=InMemorySaver())
    assert app.invoke({"value": 1}, thread())["log"] == ["router", "small", "x", "y"]
    assert app.invoke({"value": 50}, thread())["log"] == ["router", "big"]


def test_branch_sees_the_nodes_own_update() -> None:
    builder = StateGraph(State)
    builder.add_node("set", lambda s: {"value": 42})
    builder.add_node("yes", node("yes"))
    builder.add_edge(START, "set")
    builder.add_conditional_edges("set", lambda s: "yes" if s["value"] == 42 else END)
    assert builder.compile().invoke({"value": 0})["log"] == ["yes"]


def test_conditional_entry_point_and_unknown_target() -> None:
    builder = StateGraph(State)
    builder.add_node("a", node("a"))
    builder.set_conditional_entry_point(lambda s: "a" if s["value"] else "nowhere")
    app = builder.compile(checkpointer=InMemorySaver())
    assert app.invoke({"value": 1}, thread())["log"] == ["a"]
    with pytest.raises(InvalidUpdateError, match="nowhere"):
        app.invoke({"value": 0}, thread())


@dataclass
class DataState:
    count: int = 0
    items: Annotated[list[str], operator.add] = field(default_factory=list)


def test_dataclass_schema_nodes_get_an_instance() -> None:
    seen: list[Any] = []

    def bump(state: DataState) -> dict[str, Any]:
        seen.append(state)
        return {"count": state.count + 1, "items": [f"n{state.count}"]}

    builder = StateGraph(DataState)
    builder.add_node("bump", bump)
    builder.add_edge(START, "bump")
    app = builder.compile(checkpointer=InMemorySaver())
    config = thread()
    assert app.invoke(DataState(count=1), config) == {"count": 2, "items": ["n1"]}
    assert isinstance(seen[0], DataState)


def test_async_nodes_and_config_parameter_in_the_sync_runtime() -> None:
    async def slow(state: dict[str, Any]) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"log": ["async"]}

    def with_config(state: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        return {"log": [config["configurable"]["thread_id"]]}

    builder = StateGraph(State)
    builder.add_node("slow", slow)
    builder.add_node("cfg", with_config)
    builder.add_edge(START, "slow")
    builder.add_edge("slow", "cfg")
    app = builder.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "tid-1"}}
    assert app.invoke({"value": 0}, config)["log"] == ["async", "tid-1"]


def test_bad_updates_are_errors_naming_the_problem() -> None:
    builder = StateGraph(State)
    builder.add_node("typo", lambda s: {"valeu": 1})
    builder.add_node("list", lambda s: [1])
    builder.add_conditional_edges(START, lambda s: "typo" if s["value"] else "list")
    app = builder.compile(checkpointer=InMemorySaver())
    with pytest.raises(InvalidUpdateError, match="valeu"):
        app.invoke({"value": 1}, thread())
    with pytest.raises(InvalidUpdateError, match="dict"):
        app.invoke({"value": 0}, thread())
    with pytest.raises(InvalidUpdateError, match="bogus"):
        app.invoke({"bogus": 1}, thread())


def test_thread_errors() -> None:
    builder = StateGraph(State)
    builder.add_node("a", node("a"))
    builder.add_edge(START, "a")
    app = builder.compile(checkpointer=InMemorySaver())
    with pytest.raises(ValueError, match="thread_id"):
        app.invoke({"value": 1}, {"configurable": {}})
    assert app.invoke(None, thread()) == {}
    with pytest.raises(EmptyInputError):
        app.invoke(Command(resume=1), thread())
    empty = app.get_state(thread())
    assert empty.values == {} and empty.next == () and empty.metadata is None
    missing = make_config("nobody", checkpoint_id="0190c0de-0000-7000-8000-000000000000")
    with pytest.raises(CheckpointNotFoundError):
        app.invoke({"value": 1}, missing)


def test_command_resume_without_pending_interrupt_is_an_error() -> None:
    builder = StateGraph(State)
    builder.add_node("a", node("a"))
    builder.add_edge(START, "a")
    app = builder.compile(checkpointer=InMemorySaver())
    config = thread()
    app.invoke({"value": 1}, config)
    with pytest.raises(EmptyInputError, match="no interrupt"):
        app.invoke(Command(resume="x"), config)


def test_several_pending_interrupts_need_a_resume_map() -> None:
    runs: Counter[str] = Counter()

    def asker(name: str) -> Any:
        def run(state: dict[str, Any]) -> dict[str, Any]:
            runs[name] += 1
            return {"log": [f"{name}={interrupt(name)}"]}

        return run

    builder = StateGraph(State)
    builder.add_node("p", asker("p"))
    builder.add_node("q", asker("q"))
    builder.add_edge(START, "p")
    builder.add_edge(START, "q")
    app = builder.compile(checkpointer=InMemorySaver())
    config = thread()
    pending = {i.value: i.id for i in app.invoke({"value": 0}, config)["__interrupt__"]}
    assert set(pending) == {"p", "q"}
    with pytest.raises(InvalidUpdateError, match="interrupt_id"):
        app.invoke(Command(resume="both"), config)
    out = app.invoke(Command(resume={pending["p"]: 1, pending["q"]: 2}), config)
    assert out["log"] == ["p=1", "q=2"]


def test_a_task_error_is_stored_as_itself_or_a_stand_in() -> None:
    """Errors always load back (the class's own, or a `StoredException` standing in for a
    class a strict serializer does not allow), so a task's error never blocks a resume."""
    from checkpointer.errors import StoredException
    from checkpointer.serde import MsgpackSerializer

    def fail(state: dict[str, Any]) -> dict[str, Any]:
        raise Boom("kaput")

    builder = StateGraph(State)
    builder.add_node("fail", fail)
    builder.add_edge(START, "fail")
    for serde, expected in ((None, Boom), (MsgpackSerializer(strict=True), StoredException)):
        app = builder.compile(checkpointer=InMemorySaver(serde=serde))
        config = thread()
        with pytest.raises(Boom):
            app.invoke({"value": 0}, config)
        [task] = app.get_state(config).tasks
        assert type(task.error) is expected
        assert repr(task.error) == "Boom('kaput')"


def test_an_error_that_cannot_be_stored_is_stored_as_runtime_error() -> None:
    class Unstorable(Exception):
        pass

    def fail(state: dict[str, Any]) -> dict[str, Any]:
        raise Unstorable(object())

    builder = StateGraph(State)
    builder.add_node("fail", fail)
    builder.add_edge(START, "fail")
    app = builder.compile(checkpointer=InMemorySaver())
    config = thread()
    with pytest.raises(Unstorable):
        app.invoke({"value": 0}, config)
    [task] = app.get_state(config).tasks
    assert isinstance(task.error, RuntimeError)
    assert "Unstorable: <object object" in str(task.error)


def test_stream_modes() -> None:
    builder = StateGraph(State)
    builder.add_node("a", node("a"))
    builder.add_edge(START, "a")
    app = builder.compile(checkpointer=InMemorySaver())
    chunks = list(app.stream({"value": 3}, thread(), stream_mode=["updates", "values"]))
    assert chunks == [
        ("values", {"value": 3, "log": []}),
        ("updates", {"a": {"log": ["a"]}}),
        ("values", {"value": 3, "log": ["a"]}),
    ]
    with pytest.raises(ValueError, match="stream_mode"):
        list(app.stream({"value": 3}, thread(), stream_mode="debug"))  # type: ignore[arg-type]


def test_delta_snapshots_follow_the_counters_in_metadata() -> None:
    saver = InMemorySaver()
    app = chat_builder(Counter()).compile(checkpointer=saver)  # snapshot_frequency=4
    config = thread()
    for turn in range(4):
        app.invoke({"messages": [f"u{turn}"]}, config)
    rows = []
    for tup in reversed(list(saver.list(config))):
        stored = tup.checkpoint["channel_values"].get("messages")
        counters = tup.metadata.get("counters_since_delta_snapshot", {})
        rows.append((isinstance(stored, DeltaSnapshot), tuple(counters.get("messages", (0, 0)))))
    # The root snapshots; every checkpoint after writes one message (input, draft, review),
    # so every 4th snapshots and resets the (updates, supersteps) counters in metadata.
    cycle = [(True, (0, 0)), (False, (1, 1)), (False, (2, 2)), (False, (3, 3))]
    assert rows == cycle * 3


def test_overwrite_through_update_state_snapshots_and_replays() -> None:
    saver = InMemorySaver()
    app = linear_builder(Counter()).compile(checkpointer=saver)
    config = thread()
    app.invoke({"messages": ["one"]}, config)
    new_config = app.update_state(config, {"messages": Overwrite(["fresh"])}, as_node="b")
    tup = saver.get_tuple(new_config)
    assert tup is not None
    assert tup.checkpoint["channel_values"]["messages"] == DeltaSnapshot(["fresh"])
    app.invoke({"messages": ["two"]}, config)
    assert app.get_state(config).values["messages"] == ["fresh", "two", "a", "b:-"]
    history = list(app.get_state_history(config))
    assert [app.get_state(h.config).values for h in history] == [h.values for h in history]
