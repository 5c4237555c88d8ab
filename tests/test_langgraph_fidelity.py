"""LangGraph drop-in shapes (issue 15): what LangGraph and its apps read back through
`LangGraphSaver` matches LangGraph's own savers, run side by side with its InMemorySaver:
`__copy__` forks that resume, node errors as strings (also where LangGraph's loop reads
them back on resume), run config merged into metadata, no seed for a stored None, and
the savers' lifecycle (`from_conn_string`, `setup`, context managers)."""

from __future__ import annotations

import asyncio
import operator
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
import pytest_asyncio
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("langgraph.checkpoint.conformance")

from langgraph.checkpoint.memory import InMemorySaver as ReferenceSaver
from langgraph.errors import NodeError
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt

from checkpointer.errors import ConfigError
from checkpointer.ids import new_checkpoint_id
from checkpointer.langgraph import LangGraphSaver, run_metadata
from checkpointer.types import empty_checkpoint, make_config
from tests.conftest import (
    PG_URL,
    SAVER_KINDS,
    drop_schema,
    opened_saver,
    require_postgres,
)


@pytest_asyncio.fixture(params=SAVER_KINDS)
async def lg_saver(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
    async with opened_saver(request.param, tmp_path) as saver:
        yield LangGraphSaver(saver)


async def same_as_reference(scenario: Callable[[Any], Any], lg_saver: Any) -> Any:
    """The scenario's observations on our saver (from a worker thread: async savers serve
    sync calls only off their loop), asserted equal to those on LangGraph's saver."""
    ours = await asyncio.to_thread(scenario, lg_saver)
    reference = scenario(ReferenceSaver())
    assert ours == reference
    return ours


# ------------------------------------------------------------------ __copy__ forks
class Steps(TypedDict):
    n: int
    log: str


def two_steps(checkpointer: Any) -> Any:
    builder = StateGraph(Steps)
    builder.add_node("a", lambda s: {"n": s["n"] + 1, "log": s["log"] + "a"})
    builder.add_node("b", lambda s: {"n": s["n"] * 10, "log": s["log"] + "b" * 100})
    builder.add_edge(START, "a")
    builder.add_edge("a", "b")
    builder.add_edge("b", END)
    return builder.compile(checkpointer=checkpointer, interrupt_before=["b"])


def copy_fork_scenario(checkpointer: Any) -> Any:
    graph = two_steps(checkpointer)
    config = {"configurable": {"thread_id": "fork"}}
    graph.invoke({"n": 1, "log": ""}, config)
    before_b = graph.get_state(config)
    fork = graph.update_state(before_b.config, None, as_node="__copy__")
    forked = graph.get_state(fork)
    out = graph.invoke(None, fork)  # runs `b` on the copy
    # ...and a copy of the thread's first checkpoint (no parent), re-run from its start.
    first = list(graph.get_state_history(config))[-1]
    root_copy = graph.update_state(first.config, None, as_node="__copy__")
    root_state = graph.get_state(root_copy)
    history = [
        (h.values, h.next, h.metadata["source"], h.metadata["step"])
        for h in graph.get_state_history(config)
    ]
    return forked.values, forked.next, out, root_state.values, root_state.next, history


async def test_a_copy_fork_keeps_its_state_and_runs_the_next_node(lg_saver: Any) -> None:
    values, next_, out, _, _, _ = await same_as_reference(copy_fork_scenario, lg_saver)
    assert values == {"n": 2, "log": "a"} and next_ == ("b",)
    assert out == {"n": 20, "log": "a" + "b" * 100}


# -------------------------------------------------------------------- node errors
class Flaky(TypedDict):
    attempts: Annotated[list, operator.add]


def failing_then_fixed_scenario(checkpointer: Any) -> Any:
    broken = {"yes": True}

    def work(state: dict[str, Any]) -> dict[str, Any]:
        if broken["yes"]:
            raise ValueError("boom: bad input")
        return {"attempts": ["ok"]}

    builder = StateGraph(Flaky)
    builder.add_node("work", work)
    builder.add_edge(START, "work")
    builder.add_edge("work", END)
    graph = builder.compile(checkpointer=checkpointer)
    config = {"configurable": {"thread_id": "errors"}}
    with pytest.raises(ValueError):
        graph.invoke({"attempts": ["start"]}, config)
    state = graph.get_state(config)
    errors = [task.error for task in state.tasks]
    assert "boom" in errors[0]  # a string, as apps test it
    broken["yes"] = False
    out = graph.invoke(None, config)  # the failed task runs again
    return errors, out, [h.values for h in graph.get_state_history(config)]


async def test_a_node_error_reads_back_as_its_repr(lg_saver: Any) -> None:
    errors, out, _ = await same_as_reference(failing_then_fixed_scenario, lg_saver)
    assert errors == [repr(ValueError("boom: bad input"))]
    assert out == {"attempts": ["start", "ok"]}


class Handled(TypedDict):
    log: Annotated[list, operator.add]


def error_handler_resume_scenario(checkpointer: Any) -> Any:
    """The failure an error handler gets after a resume is what the saver gave back."""

    def work(state: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("missing")

    def handler(state: dict[str, Any], error: NodeError) -> dict[str, Any]:
        answer = interrupt("retry?")
        return {"log": [f"{error.node}:{type(error.error).__name__}:{error.error}:{answer}"]}

    builder = StateGraph(Handled)
    builder.add_node("work", work, error_handler=handler)
    builder.add_edge(START, "work")
    builder.add_edge("work", END)
    graph = builder.compile(checkpointer=checkpointer)
    config = {"configurable": {"thread_id": "handled"}}
    first = graph.invoke({"log": []}, config)
    resumed = graph.invoke(Command(resume="yes"), config)
    return [i.value for i in first["__interrupt__"]], resumed


async def test_an_error_handler_resumes_with_what_langgraph_savers_give(lg_saver: Any) -> None:
    asked, resumed = await same_as_reference(error_handler_resume_scenario, lg_saver)
    assert asked == ["retry?"]
    assert resumed["log"] == ["work:str:KeyError('missing'):yes"]


# ------------------------------------------------------------ metadata from config
def user_runs_scenario(checkpointer: Any) -> Any:
    graph = two_steps(checkpointer)
    for user, thread in (("u1", "t1"), ("u2", "t2"), ("u1", "t3")):
        config = {
            "configurable": {"thread_id": thread, "user_id": user, "__secret": "x", "n": 3},
            "metadata": {
                "langgraph_auth_user_id": f"auth-{user}",
                "langgraph_request_id": f"req-{thread}",
                "nested": {"no": "copied"},
            },
        }
        graph.invoke({"n": 1, "log": ""}, config)
    found = [
        (t.config["configurable"]["thread_id"], t.metadata)
        for t in checkpointer.list(None, filter={"user_id": "u1"})
    ]
    by_auth = len(list(checkpointer.list(None, filter={"langgraph_auth_user_id": "auth-u2"})))
    for _, metadata in found:
        metadata.pop("run_id", None)  # differs between runs
    return sorted(found, key=lambda item: (item[0], item[1]["step"])), by_auth


async def test_run_config_is_merged_into_metadata_and_filterable(lg_saver: Any) -> None:
    found, by_auth = await same_as_reference(user_runs_scenario, lg_saver)
    assert {thread for thread, _ in found} == {"t1", "t3"}
    assert by_auth == 3  # t2: its input, the first loop step, and the stop before `b`
    for _, metadata in found:
        assert metadata["user_id"] == "u1" and metadata["n"] == 3
        assert metadata["langgraph_request_id"].startswith("req-")
        assert "__secret" not in metadata and "thread_id" not in metadata
        assert "nested" not in metadata


def test_run_metadata_follows_langgraph_rules() -> None:
    from langgraph.checkpoint.base import get_checkpoint_metadata

    config = {
        "configurable": {
            "thread_id": "t",
            "checkpoint_ns": "",
            "checkpoint_id": "c",
            "checkpoint_map": {},
            "langgraph_node": "n",
            "__pregel_x": 1,
            "user_id": "u",
            "step": 99,  # metadata already has it: kept from metadata
            "ratio": 0.5,
            "flag": False,
            "obj": object(),
        },
        "metadata": {"user_id": "from-metadata", "tag": "t1", "langgraph_request_id": "r"},
    }
    metadata = {"source": "loop", "step": 1, "parents": {}}
    assert run_metadata(config, metadata) == get_checkpoint_metadata(config, metadata)  # type: ignore[arg-type]
    # NUL stripped from top-level strings as LangGraph does (nested values keep it), and
    # no NaN (not JSON).
    nul = {"configurable": {"note": "a\x00b", "bad": float("nan")}}
    given = {"my_key": "\x00abc", "nested": {"k": "a\x00"}}
    assert run_metadata(nul, given) == {"my_key": "abc", "nested": {"k": "a\x00"}, "note": "ab"}
    theirs = get_checkpoint_metadata(nul, given)  # type: ignore[arg-type]
    assert run_metadata(nul, given) == {k: v for k, v in theirs.items() if k != "bad"}


# ------------------------------------------------------------------------ seed None
async def test_a_stored_none_gives_no_seed_through_the_adapter(lg_saver: Any) -> None:
    saver = lg_saver.saver
    thread_id = f"t-{uuid.uuid4().hex[:8]}"
    config = make_config(thread_id)
    is_async = asyncio.iscoroutinefunction(getattr(saver, "setup", None))
    for step, (value, versions) in enumerate([("start", "1"), (None, "2"), (None, "3")]):
        cp = empty_checkpoint()
        cp["id"] = new_checkpoint_id()
        cp["channel_versions"] = {"items": f"{int(versions):032}.0"}
        new = {}
        if step < 2:
            cp["channel_values"] = {"items": value}
            new = dict(cp["channel_versions"])
        meta = {"source": "loop", "step": step, "parents": {}}
        if is_async:
            config = await saver.aput(config, cp, meta, new)
            await saver.aput_writes(config, [("items", f"w{step}")], str(uuid.uuid4()))
        else:
            config = saver.put(config, cp, meta, new)
            saver.put_writes(config, [("items", f"w{step}")], str(uuid.uuid4()))
    if is_async:
        ours = await saver.aget_delta_channel_history(config=config, channels=["items"])
        adapted = await lg_saver.aget_delta_channel_history(config=config, channels=["items"])
    else:
        ours = saver.get_delta_channel_history(config=config, channels=["items"])
        adapted = await asyncio.to_thread(
            lg_saver.get_delta_channel_history, config=config, channels=["items"]
        )
    assert ours["items"].get("seed", "absent") is None  # our savers: None is a seed
    assert "seed" not in adapted["items"]
    assert [w[2] for w in adapted["items"]["writes"]] == [w[2] for w in ours["items"]["writes"]]


# ------------------------------------------------------------- old-format sends
class Fan(TypedDict):
    items: Annotated[list[str], operator.add]


def _fan_graph(checkpointer: Any) -> Any:
    builder = StateGraph(Fan)
    builder.add_node("worker", lambda state: {"items": [f"done {state['items'][0]}"]})
    builder.add_edge(START, "worker")
    builder.add_edge("worker", END)
    return builder.compile(checkpointer=checkpointer)


def _resume_old_sends(checkpointer: Any) -> Any:
    """A checkpoint of LangGraph's format 2, its `Send`s in `pending_sends` (as savers of
    that era stored them), put and then resumed: the sends must run."""
    from langgraph.checkpoint.base import empty_checkpoint as lg_empty_checkpoint
    from langgraph.types import Send

    graph = _fan_graph(checkpointer)
    thread = f"old-sends-{uuid.uuid4().hex[:8]}"
    version = checkpointer.get_next_version(None, None)
    checkpoint = lg_empty_checkpoint()
    checkpoint["v"] = 2
    checkpoint["channel_values"] = {"items": ["start"]}
    checkpoint["channel_versions"] = {"items": version}
    checkpoint["pending_sends"] = [
        Send("worker", {"items": ["a"]}),
        Send("worker", {"items": ["b"]}),
    ]
    config = checkpointer.put(
        {"configurable": {"thread_id": thread, "checkpoint_ns": ""}},
        checkpoint,
        {"source": "loop", "step": 0, "parents": {}},
        {"items": version},
    )
    before = graph.get_state(config)
    graph.invoke(None, {"configurable": {"thread_id": thread}})
    after = graph.get_state({"configurable": {"thread_id": thread}})
    return before.next, sorted(before.values["items"]), sorted(after.values["items"]), after.next


async def test_old_format_pending_sends_resume_as_on_langgraph_saver(lg_saver: Any) -> None:
    before_next, before, after, after_next = await same_as_reference(_resume_old_sends, lg_saver)
    assert before_next == ("worker", "worker") and before == ["start"]  # not vacuous
    assert after == ["done a", "done b", "start"] and after_next == ()


async def test_an_empty_pending_sends_reads_back_as_put(lg_saver: Any) -> None:
    """LangGraph's `empty_checkpoint()` carries `pending_sends: []`; its savers keep it."""
    from langgraph.checkpoint.base import empty_checkpoint as lg_empty_checkpoint

    def scenario(checkpointer: Any) -> Any:
        checkpoint = lg_empty_checkpoint()
        checkpoint["id"] = "1ef4f797-8335-6428-8001-8a1503f9b875"
        checkpoint["ts"] = "2024-05-04T06:32:42.235444+00:00"
        config = {"configurable": {"thread_id": f"t-{uuid.uuid4().hex}", "checkpoint_ns": ""}}
        checkpointer.put(config, checkpoint, {"source": "input", "step": -1}, {})
        return checkpointer.get_tuple(config).checkpoint

    checkpoint = await same_as_reference(scenario, lg_saver)
    assert checkpoint["pending_sends"] == []


# ------------------------------------------------------------------------ lifecycle
def _run_graph(checkpointer: Any, thread: str) -> Any:
    graph = two_steps(checkpointer)
    config = {"configurable": {"thread_id": thread}}
    graph.invoke({"n": 1, "log": ""}, config)
    return graph.invoke(None, config)


@pytest.mark.parametrize("form", ["path", "url", "memory", "postgres"])
def test_from_conn_string_opens_every_backend(form: str, tmp_path: Path) -> None:
    options: dict[str, Any] = {}
    schema = None
    if form == "postgres":
        require_postgres()
        schema = f"cp_test_{uuid.uuid4().hex[:12]}"
        url, options = PG_URL, {"schema": schema}
    else:
        url = {
            "path": str(tmp_path / "a.db"),
            "url": f"sqlite:///{tmp_path / 'b.db'}",
            "memory": ":memory:",
        }[form]
    try:
        with LangGraphSaver.from_conn_string(url, **options) as checkpointer:
            assert checkpointer.setup() is None  # as LangGraph's docs do: idempotent
            assert _run_graph(checkpointer, "t")["n"] == 20
        if form != "memory":  # the data is there for the next process, set up or not
            with LangGraphSaver.from_conn_string(url, setup=False, **options) as again:
                assert again.get_tuple({"configurable": {"thread_id": "t"}}) is not None
    finally:
        if schema is not None:
            drop_schema(schema)


@pytest.mark.parametrize("form", ["path", "postgres"])
async def test_afrom_conn_string_opens_an_async_saver(form: str, tmp_path: Path) -> None:
    options: dict[str, Any] = {}
    schema = None
    url = str(tmp_path / "a.db")
    if form == "postgres":
        require_postgres()
        schema = f"cp_test_{uuid.uuid4().hex[:12]}"
        url, options = PG_URL, {"schema": schema}
    try:
        async with LangGraphSaver.afrom_conn_string(url, setup=False, **options) as cp:
            await cp.asetup()
            assert asyncio.iscoroutinefunction(cp.saver.setup)
            graph = two_steps(cp)
            config = {"configurable": {"thread_id": "t"}}
            await graph.ainvoke({"n": 1, "log": ""}, config)
            assert (await graph.ainvoke(None, config))["n"] == 20
        # LangGraph's async savers: `async with X.from_conn_string(url) as cp:
        # await cp.setup()`. The same shape works here.
        async with LangGraphSaver.from_conn_string(url, **options) as cp:
            await cp.setup()
            assert (await cp.aget_tuple({"configurable": {"thread_id": "t"}})) is not None
    finally:
        if schema is not None:
            drop_schema(schema)


async def test_the_adapter_closes_the_saver_it_wraps(tmp_path: Path) -> None:
    from checkpointer.savers.sqlite import AsyncSqliteSaver, SqliteSaver

    closed: list[str] = []

    class Sync(SqliteSaver):
        def close(self) -> None:
            closed.append("sync")
            super().close()

    class Async(AsyncSqliteSaver):
        async def aclose(self) -> None:
            closed.append("async")
            await super().aclose()

    with LangGraphSaver(Sync(tmp_path / "s.db")) as cp:
        cp.setup()
    async with LangGraphSaver(Async(tmp_path / "a.db")) as acp:
        await acp.asetup()
    assert closed == ["sync", "async"]


def test_from_conn_string_names_a_bad_url() -> None:
    with pytest.raises(ConfigError, match="mysql"):
        LangGraphSaver.from_conn_string("mysql://x/y")


def test_adapter_builds_langgraph_tuples_positionally() -> None:
    """`_langgraph_tuple` passes LangGraph's CheckpointTuple its fields by position."""
    from langgraph.checkpoint.base import CheckpointTuple as LangGraphTuple

    from checkpointer.langgraph import _langgraph_tuple
    from checkpointer.types import CheckpointTuple

    assert LangGraphTuple._fields == (
        "config",
        "checkpoint",
        "metadata",
        "parent_config",
        "pending_writes",
    )
    ours = CheckpointTuple({"c": 1}, {"channel_values": {"a": 1}}, {"m": 2}, {"p": 3}, [])
    converted = _langgraph_tuple(ours)
    assert converted is not None
    assert converted.config == {"c": 1}
    assert converted.checkpoint == {"channel_values": {"a": 1}}
    assert converted.metadata == {"m": 2}
    assert converted.parent_config == {"p": 3}
    assert converted.pending_writes == []


chain_maps = st.lists(
    st.dictionaries(
        st.sampled_from(["a", "b", "user_id", "__x", "thread_id", "step"]),
        st.one_of(st.integers(), st.text(max_size=3), st.none(), st.lists(st.integers())),
        max_size=4,
    ),
    max_size=3,
)


@settings(max_examples=200, deadline=None)
@given(maps=chain_maps, metadata=chain_maps, configurable=chain_maps)
def test_run_metadata_reads_a_chainmap_as_iterating_it(
    maps: list[dict[str, Any]], metadata: list[dict[str, Any]], configurable: list[dict[str, Any]]
) -> None:
    """`run_metadata` flattens LangGraph's ChainMap of run metadata (`_flat`) to what
    iterating the ChainMap gives: the same merged metadata, keys in the same order."""
    from collections import ChainMap

    config = {"metadata": ChainMap(*maps), "configurable": ChainMap(*configurable)}
    plain = {"metadata": dict(ChainMap(*maps)), "configurable": dict(ChainMap(*configurable))}
    base = dict(ChainMap(*metadata))
    got = run_metadata(config, base)
    assert got == run_metadata(plain, base)
    assert list(got) == list(run_metadata(plain, base))


def test_memory_tuples_are_the_callers_own() -> None:
    """The in-memory saver says its tuples are decoded per call (`returns_own_tuples`), so
    the adapter converts them in place: changing one read's checkpoint, values, metadata
    or writes never shows in another read."""
    from checkpointer.savers.memory import InMemorySaver

    saver = LangGraphSaver(InMemorySaver())
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"a": [1, {"x": 2}]}
    checkpoint["channel_versions"] = {"a": "1"}
    config = saver.put(make_config("t"), checkpoint, {"source": "loop", "step": 0}, {"a": "1"})
    saver.put_writes(config, [("a", [3])], "task")
    for read in (lambda: saver.get_tuple(config), lambda: next(iter(saver.list(config)))):
        first = read()
        assert first is not None
        first.checkpoint["channel_values"]["a"][1]["x"] = 99
        first.checkpoint["channel_values"]["b"] = 1
        first.checkpoint["id"] = "other"
        first.metadata["step"] = 5
        first.pending_writes[0][2].append(4)
        first.config["configurable"]["thread_id"] = "u"
        second = read()
        assert second is not None
        assert second.checkpoint["channel_values"] == {"a": [1, {"x": 2}]}
        assert second.checkpoint["id"] == checkpoint["id"]
        assert second.metadata["step"] == 0
        assert second.pending_writes == [("task", "a", [3])]
        assert second.config["configurable"]["thread_id"] == "t"
