"""Random LangGraph workflows on our savers and on LangGraph's InMemorySaver, compared.

`test_differential_graphs.py` drives a chat loop; this drives a workflow with the parts of
LangGraph that lean hardest on a saver: `Send` fan-out (pending sends, the tasks channel),
`interrupt` in the graph and inside a subgraph (checkpoints of a namespace of their own,
resumed by `Command(resume=...)`), static breakpoints (`interrupt_before`), workers that
fail (the writes of the tasks that finished are kept as pending writes and must not run
again), retries, `update_state`, runs resumed from earlier checkpoints, and the three
durability modes. Hypothesis writes the session; after each step the outcome (an error's
type and text), the head state with its subgraph states, the whole history and how many
times each node ran, and every stored checkpoint of both namespaces as the saver's `list`
gives it, must be the same on both savers. The async savers run the same sessions
through `ainvoke`, `aget_state`, ... on the event loop they were opened on.
"""

from __future__ import annotations

import asyncio
import operator
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("langgraph.checkpoint.memory")

from langgraph.channels import DeltaChannel
from langgraph.checkpoint.memory import InMemorySaver as ReferenceSaver
from langgraph.errors import InvalidUpdateError
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

from tests.lg_graphs import add_batches, history_view
from tests.test_differential_langgraph import KINDS, PROGRAMS, AsyncSide, opened_adapter
from tests.test_fuzz import example_settings


class Work(TypedDict, total=False):
    log: Annotated[list, DeltaChannel(add_batches, snapshot_frequency=2)]
    notes: Annotated[list, operator.add]
    total: Annotated[int, operator.add]
    topic: str
    workers: int
    ask: bool
    decision: str


class Inner(TypedDict, total=False):
    notes: Annotated[list, operator.add]
    ask: bool
    decision: str


class Failure(Exception):
    """What a failing worker raises (compared by its text on both sides)."""


class Workflow:
    """The workflow graph of one side: plan, then `workers` research tasks by `Send` beside
    a review that may interrupt, then a subgraph that may interrupt too. Every node counts
    its runs. The worker numbered `failing` raises once every other task of its step
    (the other workers and the review) has finished: LangGraph runs a step's tasks in
    parallel, and which of them finish before one fails must not be left to the
    scheduler. So that the graph's tasks really finish when they say so, the parallel
    nodes are coroutines on an async side (LangGraph cancels a sync node's thread-backed
    future that has not been collected yet, not the thread) and functions on a sync one."""

    def __init__(self, checkpointer: Any, asynchronous: bool) -> None:
        self.runs: Counter[str] = Counter()
        self.failing: int | None = None
        self.finished = 0
        self.finished_changed = threading.Condition()
        builder = self._async_builder() if asynchronous else self._sync_builder()
        self.graph = builder.compile(checkpointer=checkpointer)

    def start(self, failing: int | None) -> None:
        """Before each invocation: which worker fails in it (None: none)."""
        self.failing, self.finished = failing, 0

    def _finish(self) -> None:
        with self.finished_changed:
            self.finished += 1
            self.finished_changed.notify_all()

    @staticmethod
    def _failure(task: dict[str, Any]) -> Failure:
        return Failure(f"worker {task['number']} failed on {task['topic']!r}")

    def _found(self, task: dict[str, Any]) -> dict[str, Any]:
        self._finish()
        return {"notes": [f"found {task['topic']}/{task['number']}"], "total": 1}

    def _review(self, state: Work) -> dict[str, Any]:
        self.runs["review"] += 1
        try:
            decision = "auto"
            if state.get("ask"):
                decision = str(interrupt({"question": "go on?", "notes": len(state["notes"])}))
            return {"decision": decision, "log": [f"review {decision}"]}
        finally:
            self._finish()

    def _sync_builder(self) -> StateGraph:
        def research(task: dict[str, Any]) -> dict[str, Any]:
            self.runs["research"] += 1
            if task["number"] == self.failing:
                with self.finished_changed:  # the other workers and the review
                    done = lambda: self.finished >= task["workers"]  # noqa: E731
                    if not self.finished_changed.wait_for(done, 30):
                        raise AssertionError("the step's other tasks did not finish")
                # and their threads have handed LangGraph their results: it takes a
                # finished task's writes in a callback of the task's future, which a
                # thread still on its way out of the node would run after the failure
                time.sleep(0.1)
                raise self._failure(task)
            return self._found(task)

        return self._builder(research, self._review)

    def _async_builder(self) -> StateGraph:
        async def research(task: dict[str, Any]) -> dict[str, Any]:
            self.runs["research"] += 1
            if task["number"] == self.failing:
                for _ in range(100_000):
                    if self.finished >= task["workers"]:
                        break
                    await asyncio.sleep(0)
                else:
                    raise AssertionError("the step's other tasks did not finish")
                for _ in range(10):  # and LangGraph has taken their results
                    await asyncio.sleep(0)
                raise self._failure(task)
            return self._found(task)

        async def review(state: Work) -> dict[str, Any]:
            return self._review(state)

        return self._builder(research, review)

    def _builder(self, research: Any, review: Any) -> StateGraph:
        runs = self.runs

        def plan(state: Work) -> dict[str, Any]:
            runs["plan"] += 1
            return {"log": [f"plan {state.get('topic')}"], "notes": ["planned"]}

        def fan(state: Work) -> list[Any]:
            topic, workers = state.get("topic", ""), state.get("workers", 0)
            work: list[Any] = [
                Send("research", {"topic": topic, "number": i, "workers": workers})
                for i in range(workers)
            ]
            return [*work, "review"]

        def inner_a(state: Inner) -> dict[str, Any]:
            runs["inner_a"] += 1
            return {"notes": ["inner a"]}

        def inner_b(state: Inner) -> dict[str, Any]:
            runs["inner_b"] += 1
            if state.get("ask"):
                return {"notes": [f"inner b {interrupt('inner question')}"]}
            return {"notes": ["inner b"]}

        inner = StateGraph(Inner)
        inner.add_node("inner_a", inner_a)
        inner.add_node("inner_b", inner_b)
        inner.add_edge(START, "inner_a")
        inner.add_edge("inner_a", "inner_b")

        builder = StateGraph(Work)
        builder.add_node("plan", plan)
        builder.add_node("research", research)
        builder.add_node("review", review)
        builder.add_node("sub", inner.compile())
        builder.add_edge(START, "plan")
        builder.add_conditional_edges("plan", fan, ["research", "review"])
        builder.add_edge("review", "sub")
        builder.add_edge("sub", END)
        return builder


def _snapshot(state: Any) -> dict[str, Any]:
    """A state as a user sees it, with the states of its subgraph tasks (ids left out)."""
    return {
        "values": state.values,
        "next": state.next,
        "interrupts": [i.value for i in state.interrupts],
        "tasks": [
            (t.name, t.error, [i.value for i in t.interrupts], t.result)
            for t in sorted(state.tasks, key=lambda t: (t.name, repr(t.result)))
        ],
        "subgraphs": [
            _snapshot(t.state) for t in state.tasks if t.state is not None and t.name == "sub"
        ],
    }


def _task_and_failed(task: Any) -> tuple[str, bool]:
    return task.name, task.error is not None


class Side:
    """One workflow on one saver, sync or on an event loop (an async saver)."""

    def __init__(self, checkpointer: Any, loop: asyncio.AbstractEventLoop | None, thread: str):
        self.workflow = Workflow(checkpointer, asynchronous=loop is not None)
        self.graph = self.workflow.graph
        self.checkpointer = checkpointer
        self.loop = loop
        self.config: Any = {"configurable": {"thread_id": thread}}

    def _await(self, awaitable: Any) -> Any:
        assert self.loop is not None
        return self.loop.run_until_complete(awaitable)

    def invoke(
        self, value: Any, config: Any, durability: Any = "sync", pause: str | None = None
    ) -> None:
        """Run the graph; `pause`: a node to stop before (a static breakpoint)."""
        before = [pause] if pause else None
        if self.loop is None:
            self.graph.invoke(value, config, durability=durability, interrupt_before=before)
        else:
            run = self.graph.ainvoke(value, config, durability=durability, interrupt_before=before)
            self._await(run)

    def state(self, config: Any) -> Any:
        if self.loop is None:
            return self.graph.get_state(config, subgraphs=True)
        return self._await(self.graph.aget_state(config, subgraphs=True))

    def _listed(self, items: Callable[[], Iterable[Any]], aitems: Callable[[], Any]) -> list[Any]:
        """Everything a listing yields: `items()` on a sync side, `aitems()` (an async
        iterator) on the loop of an async one."""
        if self.loop is None:
            return list(items())

        async def collect() -> list[Any]:
            return [item async for item in aitems()]

        return self._await(collect())

    def history(self) -> list[Any]:
        return self._listed(
            lambda: self.graph.get_state_history(self.config),
            lambda: self.graph.aget_state_history(self.config),
        )

    def update(self, config: Any, values: dict[str, Any]) -> Any:
        if self.loop is None:
            return self.graph.update_state(config, values)
        return self._await(self.graph.aupdate_state(config, values))

    def step(self, step: tuple[Any, ...]) -> None:
        kind = step[0]
        history = self.history()
        self.workflow.start(None)
        if kind == "run" or not history:
            _, topic, workers, ask, failing, durability, pause = (
                step if kind == "run" else ("run", "t", 1, False, None, "sync", None)
            )
            self.workflow.start(failing)
            start = {"topic": topic, "workers": workers, "ask": ask, "log": [f"start {topic}"]}
            self.invoke(start, self.config, durability, pause)
        elif kind == "resume":
            self.invoke(Command(resume=step[1]), self.config)
        elif kind == "retry":
            self.invoke(None, self.config)
        elif kind == "update":
            target = history[step[1] % len(history)].config
            self.update(target, {"ask": step[2], "log": [f"edit {step[2]}"]})
        else:  # "resume_from": replay or fork from an earlier checkpoint
            self.invoke(None, history[step[1] % len(history)].config)

    def stored(self) -> list[tuple[Any, ...]]:
        """The thread's checkpoints of every namespace as the saver's own `list` gives
        them (a config without a namespace lists them all), each summed up without ids:
        namespace path by node names, step, source, channels with a value, pending
        writes' channels. Sorted: LangGraph's savers order namespaces differently."""
        tuples = self._listed(
            lambda: self.checkpointer.list(self.config),
            lambda: self.checkpointer.alist(self.config),
        )
        return sorted(
            (
                "|".join(
                    part.split(":")[0]
                    for part in t.config["configurable"]["checkpoint_ns"].split("|")
                ),
                t.metadata.get("step"),
                t.metadata.get("source"),
                sorted(t.checkpoint["channel_values"]),
                sorted(write[1] for write in t.pending_writes or ()),
            )
            for t in tuples
        )

    def observe(self) -> dict[str, Any]:
        return {
            "head": _snapshot(self.state(self.config)),
            "history": history_view(self.history(), _task_and_failed),
            "runs": dict(self.workflow.runs),
            "stored": self.stored(),
        }


steps = st.lists(
    st.one_of(
        st.tuples(
            st.just("run"),
            st.sampled_from(("a", "b", "\u00e9t\u00e9")),
            st.integers(0, 3),
            st.booleans(),
            st.one_of(st.none(), st.integers(0, 2)),
            st.sampled_from(("sync", "async", "exit")),
            st.sampled_from((None, "review", "sub")),
        ),
        st.tuples(st.just("resume"), st.sampled_from(("yes", "no", ""))),
        st.tuples(st.just("retry")),
        st.tuples(st.just("update"), st.integers(0, 10**6), st.booleans()),
        st.tuples(st.just("resume_from"), st.integers(0, 10**6)),
    ),
    min_size=1,
    max_size=8,
)

SESSIONS = settings(PROGRAMS, max_examples=example_settings(6).max_examples)


@pytest.fixture(params=KINDS)
def saver_side(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Each of our savers behind the adapter: (checkpointer, loop or None)."""
    with opened_adapter(request.param, tmp_path) as saver:
        if isinstance(saver, AsyncSide):
            yield saver.adapter, saver.loop
        else:
            yield saver, None


def _outcome(side: Side, step: tuple[Any, ...]) -> str | None:
    try:
        side.step(step)
    except (Failure, InvalidUpdateError) as exc:  # a worker, or LangGraph refusing
        return f"{type(exc).__name__}: {exc}"
    return None


@SESSIONS
@given(session=steps)
def test_workflows_look_the_same_as_on_langgraph_in_memory_saver(
    saver_side: tuple[Any, asyncio.AbstractEventLoop | None], session: list[tuple[Any, ...]]
) -> None:
    checkpointer, loop = saver_side
    thread = f"w-{uuid.uuid4().hex[:10]}"
    ours = Side(checkpointer, loop, thread)
    ref = Side(ReferenceSaver(), loop, thread)
    for number, step in enumerate(session):
        assert _outcome(ours, step) == _outcome(ref, step), f"step {number}: {step}"
        assert ours.observe() == ref.observe(), f"after step {number}: {step}"
