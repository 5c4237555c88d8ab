"""The graph runtime against every sync saver: merging, crashes, interrupts, forks, history.

Each scenario runs on the in-memory saver, SQLite and PostgreSQL (skipped when the server is
unreachable). Nodes count their executions, so "a finished task is not re-run" is measured,
not assumed. The async twins live in test_graph_async.py and reuse the graphs built here.
"""

from __future__ import annotations

import asyncio
import operator
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from checkpointer.channels import DeltaChannel, DeltaSnapshot
from checkpointer.errors import InvalidUpdateError
from checkpointer.graph import (
    END,
    START,
    Command,
    CompiledStateGraph,
    GraphRecursionError,
    StateGraph,
    StateSnapshot,
    interrupt,
)
from checkpointer.ids import superstep_of
from checkpointer.types import ERROR, INTERRUPT, RunnableConfig, checkpoint_id_of
from tests.conftest import close_saver, drop_schema, open_saver, require_postgres

SYNC_KINDS = ("memory", "sqlite", "postgres")


# ------------------------------------------------------------------ fixtures
@pytest.fixture(params=SYNC_KINDS)
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A set-up sync saver of each kind; PostgreSQL in a schema of its own."""
    kind: str = request.param
    schema = None
    if kind == "postgres":
        require_postgres()
        schema = f"cp_test_{uuid.uuid4().hex[:12]}"
    opened = asyncio.run(open_saver(kind, tmp_path, schema))
    try:
        yield opened
    finally:
        asyncio.run(close_saver(kind, opened))
        if schema is not None:
            drop_schema(schema)


def thread() -> RunnableConfig:
    return {"configurable": {"thread_id": f"t-{uuid.uuid4().hex[:10]}"}}


class Boom(Exception):
    """A node failure; its class is not loadable by the serializer (stored as RuntimeError)."""


class ProcessDied(BaseException):
    """Stands for the process dying: not an Exception, so nothing catches or saves it."""


# -------------------------------------------------------------------- graphs
def extend(state: list[str], writes: list[list[str]]) -> list[str]:
    """Batched, batching-invariant reducer of the delta message list."""
    return [*state, *(item for write in writes for item in write)]


class Chat(TypedDict):
    messages: Annotated[list[str], DeltaChannel(extend, snapshot_frequency=4)]
    notes: Annotated[list[str], operator.add]
    topic: str


def chat_builder(
    runs: Counter[str],
    *,
    fail: set[str] | None = None,
    die_after: Callable[[], None] | None = None,
) -> StateGraph:
    """START -> research & draft (parallel) -> review (waits for both) -> END.

    `fail` names nodes that raise Boom once; `die_after` makes draft wait for it and then
    "kill the process" (raise ProcessDied).
    """
    failing = fail if fail is not None else set()

    def research(state: dict[str, Any]) -> dict[str, Any]:
        runs["research"] += 1
        return {"notes": [f"note{len(state['messages'])}"]}

    def draft(state: dict[str, Any]) -> dict[str, Any]:
        runs["draft"] += 1
        if die_after is not None:
            die_after()
            raise ProcessDied
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


class Linear(TypedDict):
    messages: Annotated[list[str], DeltaChannel(extend, snapshot_frequency=100)]
    topic: str


def linear_builder(runs: Counter[str]) -> StateGraph:
    """START -> a -> b -> END, each appending a message."""

    def a(state: dict[str, Any]) -> dict[str, Any]:
        runs["a"] += 1
        return {"messages": ["a"]}

    def b(state: dict[str, Any]) -> dict[str, Any]:
        runs["b"] += 1
        return {"messages": [f"b:{state.get('topic', '-')}"]}

    builder = StateGraph(Linear)
    builder.add_node("a", a)
    builder.add_node("b", b)
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    return builder


class Ask(TypedDict):
    answers: Annotated[list[str], operator.add]
    notes: Annotated[list[str], operator.add]


def ask_builder(runs: Counter[str]) -> StateGraph:
    """`ask` asks two questions with interrupt(); `other` runs beside it once."""

    def ask(state: dict[str, Any]) -> dict[str, Any]:
        runs["ask"] += 1
        first = interrupt("first?")
        second = interrupt("second?")
        return {"answers": [first, second]}

    def other(state: dict[str, Any]) -> dict[str, Any]:
        runs["other"] += 1
        return {"notes": ["other"]}

    builder = StateGraph(Ask)
    builder.add_node("ask", ask)
    builder.add_node("other", other)
    builder.add_edge(START, "ask")
    builder.add_edge(START, "other")
    return builder


class Loop(TypedDict):
    n: int


def loop_builder(stop_at: int) -> StateGraph:
    """`inc` loops on itself through a conditional edge until n reaches `stop_at`."""
    builder = StateGraph(Loop)
    builder.add_node("inc", lambda state: {"n": state["n"] + 1})
    builder.add_edge(START, "inc")
    builder.add_conditional_edges(
        "inc", lambda state: "inc" if state["n"] < stop_at else END, ["inc", END]
    )
    return builder


class Conflict(TypedDict):
    topic: str


def conflict_builder() -> StateGraph:
    builder = StateGraph(Conflict)
    builder.add_node("left", lambda state: {"topic": "left"})
    builder.add_node("right", lambda state: {"topic": "right"})
    builder.add_edge(START, "left")
    builder.add_edge(START, "right")
    return builder


def count_history_calls(saver: Any) -> Counter[str]:
    """Count the saver's delta-history calls (sync and async) by wrapping them in place."""
    calls: Counter[str] = Counter()
    sync, asynchronous = saver.get_delta_channel_history, saver.aget_delta_channel_history

    def counted(**kwargs: Any) -> Any:
        calls["sync"] += 1
        return sync(**kwargs)

    async def acounted(**kwargs: Any) -> Any:
        calls["async"] += 1
        return await asynchronous(**kwargs)

    saver.get_delta_channel_history = counted
    saver.aget_delta_channel_history = acounted
    return calls


def values_of(snapshots: list[StateSnapshot]) -> list[dict[str, Any]]:
    return [s.values for s in snapshots]


# ----------------------------------------------------------------- merging
def test_parallel_writers_merge_through_reducers(saver: Any) -> None:
    runs: Counter[str] = Counter()
    app = chain_app = chat_builder(runs).compile(checkpointer=saver)
    config = thread()
    out = app.invoke({"messages": ["hi"]}, config)
    assert out == {
        "messages": ["hi", "draft1", "review:-"],
        "notes": ["note1"],
        "topic": "reviewed",
    }
    out = chain_app.invoke({"messages": ["again"], "notes": ["user"]}, config)
    assert out["messages"] == ["hi", "draft1", "review:-", "again", "draft4", "review:reviewed"]
    assert out["notes"] == ["note1", "user", "note4"]
    assert runs == {"research": 2, "draft": 2, "review": 2}


def test_stream_yields_one_update_per_task(saver: Any) -> None:
    app = chat_builder(Counter()).compile(checkpointer=saver)
    chunks = list(app.stream({"messages": ["hi"]}, thread()))
    assert chunks == [
        {"draft": {"messages": ["draft1"]}},
        {"research": {"notes": ["note1"]}},
        {"review": {"messages": ["review:-"], "topic": "reviewed"}},
    ]


def test_last_value_conflict_raises_naming_the_key(saver: Any) -> None:
    app = conflict_builder().compile(checkpointer=saver)
    config = thread()
    with pytest.raises(InvalidUpdateError, match="'topic'"):
        app.invoke({"topic": "start"}, config)
    state = app.get_state(config)
    assert state.values == {"topic": "start"}  # the step was not saved
    assert {t.name for t in state.tasks if t.result} == {"left", "right"}  # writes were


def test_metadata_is_small_and_records_source_step_run_and_nodes(saver: Any) -> None:
    app = chat_builder(Counter()).compile(checkpointer=saver)
    config = thread()
    app.invoke({"messages": ["one"]}, config)
    app.invoke({"messages": ["two"]}, config)
    history = list(app.get_state_history(config))
    metas = [h.metadata for h in reversed(history)]
    assert all(m is not None for m in metas)
    rows = [(m["source"], m["step"], m["nodes"]) for m in metas if m is not None]
    assert rows == [
        ("input", -1, ["__start__"]),
        ("loop", 0, ["draft", "research"]),
        ("loop", 1, ["review"]),
        ("input", 2, ["__start__"]),
        ("loop", 3, ["draft", "research"]),
        ("loop", 4, ["review"]),
    ]
    run_ids = [m["run_id"] for m in metas if m is not None]
    assert len(set(run_ids[:3])) == 1 and len(set(run_ids[3:])) == 1
    assert run_ids[0] != run_ids[3]
    for m in metas:
        assert m is not None
        assert set(m) <= {
            "source",
            "step",
            "parents",
            "run_id",
            "nodes",
            "counters_since_delta_snapshot",
        }


# ------------------------------------------------------------------ crashes
def test_failed_node_keeps_sibling_writes_and_resume_skips_finished_task(saver: Any) -> None:
    runs: Counter[str] = Counter()
    app = chat_builder(runs, fail={"draft"}).compile(checkpointer=saver)
    config = thread()
    with pytest.raises(Boom, match="draft failed"):
        app.invoke({"messages": ["hi"]}, config)
    state = app.get_state(config)
    assert state.next == ("draft", "research")
    by_name = {t.name: t for t in state.tasks}
    assert by_name["research"].result == {"notes": ["note1"]}
    assert isinstance(by_name["draft"].error, Exception)
    assert "draft failed" in str(by_name["draft"].error)

    tup = saver.get_tuple(config)
    errors = [w for w in tup.pending_writes if w[1] == ERROR]
    assert [w[0] for w in errors] == [by_name["draft"].id]
    assert superstep_of(by_name["draft"].id) == tup.metadata["step"] + 1

    out = app.invoke(None, config)
    assert runs == {"research": 1, "draft": 2, "review": 1}
    assert out["messages"] == ["hi", "draft1", "review:-"]
    assert out["notes"] == ["note1"]


def test_process_death_mid_superstep_reruns_only_unfinished_task(saver: Any) -> None:
    runs: Counter[str] = Counter()
    config = thread()

    def wait_for_research_saved() -> None:
        # Die only once research's writes are stored: the state a real crash would leave.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            tup = saver.get_tuple(config)
            if tup is not None and any(w[1] == "notes" for w in tup.pending_writes or ()):
                return
            time.sleep(0.005)
        raise AssertionError("research never saved its writes")

    dying = chat_builder(runs, die_after=wait_for_research_saved).compile(checkpointer=saver)
    with pytest.raises(ProcessDied):
        dying.invoke({"messages": ["hi"]}, config)
    assert runs == {"research": 1, "draft": 1}

    # A new process: same graph, same saver, no memory of the dead run.
    fresh = chat_builder(runs).compile(checkpointer=saver)
    out = fresh.invoke(None, config)
    assert runs == {"research": 1, "draft": 2, "review": 1}
    assert out["messages"] == ["hi", "draft1", "review:-"]
    assert out["notes"] == ["note1"]


def test_new_input_after_crash_discards_the_crashed_step(saver: Any) -> None:
    runs: Counter[str] = Counter()
    app = chat_builder(runs, fail={"draft"}).compile(checkpointer=saver)
    config = thread()
    with pytest.raises(Boom):
        app.invoke({"messages": ["hi"]}, config)
    out = app.invoke({"messages": ["instead"]}, config)
    # research's saved note of the abandoned step is not applied; the new run starts clean.
    assert out["messages"] == ["hi", "instead", "draft2", "review:-"]
    assert out["notes"] == ["note2"]
    history = list(app.get_state_history(config))
    assert [app.get_state(h.config).values for h in history] == values_of(history)


# --------------------------------------------------------------- interrupts
def test_interrupt_before_pauses_and_resumes(saver: Any) -> None:
    runs: Counter[str] = Counter()
    app = linear_builder(runs).compile(checkpointer=saver, interrupt_before=["b"])
    config = thread()
    out = app.invoke({"messages": ["hi"]}, config)
    assert out["messages"] == ["hi", "a"]
    state = app.get_state(config)
    assert state.next == ("b",)
    assert runs == {"a": 1}
    out = app.invoke(None, config)
    assert out["messages"] == ["hi", "a", "b:-"]
    assert runs == {"a": 1, "b": 1}
    assert app.get_state(config).next == ()
    # The next run pauses again at the same place.
    app.invoke({"messages": ["again"]}, config)
    assert app.get_state(config).next == ("b",)


def test_interrupt_after_pauses_and_resumes(saver: Any) -> None:
    runs: Counter[str] = Counter()
    app = linear_builder(runs).compile(checkpointer=saver, interrupt_after=["a"])
    config = thread()
    chunks = list(app.stream({"messages": ["hi"]}, config))
    assert chunks == [{"a": {"messages": ["a"]}}, {INTERRUPT: ()}]  # the pause is visible
    assert app.get_state(config).next == ("b",)
    chunks = list(app.stream(None, config))
    assert chunks == [{"b": {"messages": ["b:-"]}}]
    assert runs == {"a": 1, "b": 1}


def test_update_state_while_paused_then_resume(saver: Any) -> None:
    runs: Counter[str] = Counter()
    app = linear_builder(runs).compile(checkpointer=saver, interrupt_before=["b"])
    config = thread()
    app.invoke({"messages": ["hi"]}, config)
    new_config = app.update_state(config, {"topic": "approved"})  # as_node: a (inferred)
    state = app.get_state(config)
    assert state.config == new_config
    assert state.metadata is not None and state.metadata["source"] == "update"
    assert state.next == ("b",)
    assert state.values == {"messages": ["hi", "a"], "topic": "approved"}
    out = app.invoke(None, config)
    assert out["messages"] == ["hi", "a", "b:approved"]
    assert runs == {"a": 1, "b": 1}


def test_update_state_needs_as_node_when_several_nodes_wrote(saver: Any) -> None:
    app = chat_builder(Counter()).compile(checkpointer=saver, interrupt_before=["review"])
    config = thread()
    app.invoke({"messages": ["hi"]}, config)
    with pytest.raises(InvalidUpdateError, match="as_node"):
        app.update_state(config, {"topic": "x"})
    app.update_state(config, {"topic": "x"}, as_node="draft")
    assert app.get_state(config).next == ("review",)
    assert app.invoke(None, config)["messages"][-1] == "review:x"


def test_interrupt_call_and_command_resume(saver: Any) -> None:
    runs: Counter[str] = Counter()
    app = ask_builder(runs).compile(checkpointer=saver)
    config = thread()
    out = app.invoke({"answers": []}, config)
    [asked] = out[INTERRUPT]
    assert asked.value == "first?"
    state = app.get_state(config)
    assert [i.value for i in state.interrupts] == ["first?"]
    out = app.invoke(Command(resume="yes"), config)
    [asked] = out[INTERRUPT]
    assert asked.value == "second?"
    out = app.invoke(Command(resume={asked.id: "sure"}), config)
    assert out == {"answers": ["yes", "sure"], "notes": ["other"]}
    assert runs == {"ask": 3, "other": 1}
    assert app.get_state(config).interrupts == ()


def test_recursion_limit(saver: Any) -> None:
    app = loop_builder(stop_at=100).compile(checkpointer=saver)
    with pytest.raises(GraphRecursionError, match="Recursion limit of 5 reached"):
        app.invoke({"n": 0}, {**thread(), "recursion_limit": 5})
    ok = loop_builder(stop_at=5).compile(checkpointer=saver)
    assert ok.invoke({"n": 0}, {**thread(), "recursion_limit": 5}) == {"n": 5}
    with pytest.raises(GraphRecursionError, match="25"):
        app.invoke({"n": 0}, thread())


# ---------------------------------------------------------------- time travel
def test_fork_from_old_checkpoint_leaves_original_branch_intact(saver: Any) -> None:
    runs: Counter[str] = Counter()
    app = chat_builder(runs).compile(checkpointer=saver)
    config = thread()
    for text in ("one", "two", "three"):
        app.invoke({"messages": [text]}, config)
    original = list(app.get_state_history(config))
    leaf = original[0]
    # The end of the first turn.
    target = next(h for h in original if h.values["messages"][-1] == "review:-")

    out = app.invoke({"messages": ["alt"]}, target.config)
    assert out["messages"] == [*target.values["messages"], "alt", "draft4", "review:reviewed"]

    # The original branch reads exactly as before.
    again = list(app.get_state_history(leaf.config))
    assert [h.config for h in again] == [h.config for h in original]
    assert values_of(again) == values_of(original)
    assert app.get_state(leaf.config).values == leaf.values

    # The new branch starts with a fork checkpoint that snapshots the delta channel.
    branch = list(app.get_state_history(app.get_state(config).config))
    forks = [h for h in branch if h.metadata and h.metadata["source"] == "fork"]
    assert len(forks) == 1
    fork = forks[0]
    assert fork.parent_config is not None
    assert checkpoint_id_of(fork.parent_config) == checkpoint_id_of(target.config)
    assert fork.values == target.values
    stored = saver.get_tuple(fork.config).checkpoint["channel_values"]["messages"]
    assert isinstance(stored, DeltaSnapshot)
    assert branch[-1].config == original[-1].config  # shares its ancestors

    # The whole thread: both branches, each checkpoint readable on its own.
    everything = list(app.get_state_history(config))
    assert len(everything) == len(original) + len(branch) - len(
        [h for h in branch if h.config in [o.config for o in original]]
    )
    assert [app.get_state(h.config).values for h in everything] == values_of(everything)


def test_resume_from_old_checkpoint_forks_and_reruns_its_step(saver: Any) -> None:
    runs: Counter[str] = Counter()
    app = chat_builder(runs).compile(checkpointer=saver)
    config = thread()
    app.invoke({"messages": ["one"]}, config)
    app.invoke({"messages": ["two"]}, config)
    original = list(app.get_state_history(config))
    first_input = original[-1]
    assert first_input.next == ("draft", "research")
    out = app.invoke(None, first_input.config)
    assert out["messages"] == ["one", "draft1", "review:-"]
    assert runs == {"research": 3, "draft": 3, "review": 3}
    again = list(app.get_state_history(original[0].config))
    assert values_of(again) == values_of(original)
    # Task ids differ across forks: the re-run wrote under new ids.
    old = saver.get_tuple(first_input.config).pending_writes
    assert len({w[0] for w in old}) == 2


def test_update_state_on_old_checkpoint_forks(saver: Any) -> None:
    runs: Counter[str] = Counter()
    app = linear_builder(runs).compile(checkpointer=saver)
    config = thread()
    app.invoke({"messages": ["one"]}, config)
    app.invoke({"messages": ["two"]}, config)
    original = list(app.get_state_history(config))
    after_a = next(h for h in original if h.values["messages"] == ["one", "a"])
    new_config = app.update_state(after_a.config, {"topic": "edited"}, as_node="a")
    updated = app.get_state(new_config)
    assert updated.values == {"messages": ["one", "a"], "topic": "edited"}
    assert updated.next == ("b",)
    assert updated.parent_config is not None
    fork = app.get_state(updated.parent_config)
    assert fork.metadata is not None and fork.metadata["source"] == "fork"
    assert fork.parent_config is not None
    assert checkpoint_id_of(fork.parent_config) == checkpoint_id_of(after_a.config)
    assert values_of(list(app.get_state_history(original[0].config))) == values_of(original)
    out = app.invoke(None, new_config)
    assert out["messages"] == ["one", "a", "b:edited"]


def test_history_matches_live_values_and_uses_one_history_call(saver: Any) -> None:
    app = linear_builder(Counter()).compile(checkpointer=saver)
    config = thread()
    live: list[dict[str, Any]] = []
    for turn in range(6):
        live.extend(app.stream({"messages": [f"u{turn}"]}, config, stream_mode="values"))
    calls = count_history_calls(saver)
    history = list(app.get_state_history(config))
    assert values_of(history)[::-1] == live
    assert calls["sync"] <= 1  # the root snapshots every delta channel: often zero

    calls.clear()
    window = list(app.get_state_history(config, limit=10))
    assert values_of(window) == values_of(history)[:10]
    assert calls["sync"] == 1  # the oldest of the window needs its ancestors, once

    calls.clear()
    per_checkpoint = [app.get_state(h.config).values for h in window]
    assert per_checkpoint == values_of(window)
    assert calls["sync"] == len(window)  # what the forward pass saves


def test_history_of_a_branch_and_filters(saver: Any) -> None:
    app = linear_builder(Counter()).compile(checkpointer=saver)
    config = thread()
    app.invoke({"messages": ["one"]}, config)
    app.invoke({"messages": ["two"]}, config)
    history = list(app.get_state_history(config))
    middle = history[3]
    branch = list(app.get_state_history(middle.config))
    assert [h.config for h in branch] == [h.config for h in history[3:]]
    inputs = list(app.get_state_history(config, filter={"source": "input"}))
    assert [h.values["messages"] for h in inputs] == [["one", "a", "b:-", "two"], ["one"]]
    assert len(list(app.get_state_history(config, limit=2))) == 2
    before = list(app.get_state_history(config, before=history[1].config))
    assert [h.config for h in before] == [h.config for h in history[2:]]


def test_task_ids_are_stable_for_a_checkpoint(saver: Any) -> None:
    app = chat_builder(Counter(), fail={"draft"}).compile(checkpointer=saver)
    config = thread()
    with pytest.raises(Boom):
        app.invoke({"messages": ["hi"]}, config)
    first = {t.name: t.id for t in app.get_state(config).tasks}
    second = {t.name: t.id for t in app.get_state(config).tasks}
    assert first == second
    app.invoke(None, config)
    parent = list(app.get_state_history(config))[-1]  # the input checkpoint
    written = {w[0] for w in saver.get_tuple(parent.config).pending_writes}
    assert set(first.values()) == written  # the resumed step wrote under the same ids


def test_sync_runtime_runs_parallel_nodes_concurrently(saver: Any) -> None:
    barrier = threading.Barrier(2, timeout=5)

    def wait(state: dict[str, Any]) -> dict[str, Any]:
        barrier.wait()  # both must be running at once, or this times out
        return {"notes": ["x"]}

    builder = StateGraph(Chat)
    builder.add_node("one", wait)
    builder.add_node("two", wait)
    builder.add_edge(START, "one")
    builder.add_edge(START, "two")
    app: CompiledStateGraph = builder.compile(checkpointer=saver)
    assert app.invoke({"topic": "t"}, thread())["notes"] == ["x", "x"]
