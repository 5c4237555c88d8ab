"""Random LangGraph sessions on our savers and on LangGraph's InMemorySaver, compared.

Where `test_differential_langgraph.py` drives the saver API, this drives LangGraph itself:
hypothesis writes a session of a chat graph (a delta channel that snapshots every few
updates, or a plain list channel) - new turns, `update_state` on the head or on any
earlier checkpoint, runs resumed from an earlier checkpoint (replays and forks) - and what a
user sees after each step (the head state and the whole history, with parent links as
positions) must be the same on both savers. Forks of forks make the delta replay walk
ancestors whose snapshots sit on other branches, which no fixed scenario covers.
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("langgraph.checkpoint.memory")

from langchain_core.messages import HumanMessage
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver as ReferenceSaver
from langgraph.errors import InvalidUpdateError

from tests.lg_graphs import add_batches, chat_graph, observe
from tests.test_differential_langgraph import PROGRAMS, opened_adapter
from tests.test_fuzz import example_settings

TURNS = 4
"""Turns per run: each invoke runs the chat node until the state's turn reaches the next
multiple of this."""


class DeltaChat(TypedDict):
    messages: Annotated[list, DeltaChannel(add_batches, snapshot_frequency=3)]
    turn: int
    mood: str


class PlainChat(TypedDict):
    messages: Annotated[list, operator.add]
    turn: int
    mood: str


SESSIONS = settings(PROGRAMS, max_examples=example_settings(8).max_examples)

steps = st.lists(
    st.one_of(
        st.tuples(st.just("say"), st.text(max_size=6)),
        st.tuples(st.just("update"), st.integers(0, 10**6), st.sampled_from(("mood", "say"))),
        st.tuples(st.just("resume_from"), st.integers(0, 10**6)),
    ),
    min_size=1,
    max_size=10,
)


@pytest.fixture(params=("memory", "sqlite", "postgres"))
def graph_saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Our sync savers behind the adapter (LangGraph's sync calls), one per test."""
    with opened_adapter(request.param, tmp_path) as saver:
        yield saver


class Session:
    """One graph on one saver, driven by the steps."""

    def __init__(self, checkpointer: Any, schema: type, thread: str) -> None:
        self.checkpointer, self.schema = checkpointer, schema
        self.graph = chat_graph(schema, 10**6).compile(checkpointer=checkpointer)
        self.graph_until: dict[int, Any] = {}
        self.config = {"configurable": {"thread_id": thread}}
        self.said = 0

    def _runner(self, config: dict[str, Any]) -> Any:
        """The graph that stops at the next multiple of TURNS after `config`'s turn."""
        turn = self.graph.get_state(config).values.get("turn", 0)
        until = (turn // TURNS + 1) * TURNS
        if until not in self.graph_until:
            graph = chat_graph(self.schema, until).compile(checkpointer=self.checkpointer)
            self.graph_until[until] = graph
        return self.graph_until[until]

    def step(self, step: tuple[Any, ...]) -> None:
        kind = step[0]
        history = list(self.graph.get_state_history(self.config))
        if kind == "say" or not history:
            self.said += 1
            message = HumanMessage(
                content=str(step[1]) if kind == "say" else "hi", id=f"u{self.said}"
            )
            values: dict[str, Any] = {"messages": [message]}
            if not history:
                values["turn"] = 0
            self._runner(self.config).invoke(values, self.config)
            return
        target = history[step[1] % len(history)].config
        if kind == "update":
            self.said += 1
            if step[2] == "mood":
                update: dict[str, Any] = {"mood": f"set {self.said}"}
            else:
                update = {"messages": [HumanMessage(content="edit", id=f"e{self.said}")]}
            forked = self.graph.update_state(target, update)
            self._runner(forked).invoke(None, forked)
        else:
            self._runner(target).invoke(None, target)


@pytest.mark.parametrize("schema", [DeltaChat, PlainChat], ids=["delta", "plain"])
@SESSIONS
@given(session=steps)
def test_sessions_look_the_same_as_on_langgraph_in_memory_saver(
    graph_saver: Any, schema: type, session: list[tuple[Any, ...]]
) -> None:
    thread = f"s-{uuid.uuid4().hex[:10]}"
    ours = Session(graph_saver, schema, thread)
    ref = Session(ReferenceSaver(), schema, thread)
    for number, step in enumerate(session):
        outcomes = []
        for side in (ours, ref):
            try:
                side.step(step)
                outcomes.append(None)
            except InvalidUpdateError as exc:  # e.g. an update LangGraph finds ambiguous
                outcomes.append(str(exc))
        assert outcomes[0] == outcomes[1], f"step {number}: {step}"
        assert observe(ours.graph, ours.config) == observe(ref.graph, ref.config), (
            f"after step {number}: {step}"
        )
