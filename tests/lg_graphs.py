"""LangGraph graphs used by the drop-in tests: each scenario runs against a checkpointer and
returns what a user can observe (final output, get_state, the whole history)."""

from __future__ import annotations

import operator
from collections.abc import Callable
from operator import attrgetter
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.channels import DeltaChannel
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt


def add_batches(state: list[Any], batches: list[Any]) -> list[Any]:
    """Batched reducer: each write is a list of messages to append."""
    out = list(state)
    for batch in batches:
        out.extend(batch if isinstance(batch, list) else [batch])
    return out


class ChatFew(TypedDict):
    messages: Annotated[list, DeltaChannel(add_batches, snapshot_frequency=3)]
    turn: int
    mood: str


class ChatMany(TypedDict):
    messages: Annotated[list, DeltaChannel(add_batches, snapshot_frequency=10_000)]
    turn: int
    mood: str


class FanOut(TypedDict):
    topic: str
    notes: Annotated[list, operator.add]
    total: Annotated[int, operator.add]


class Approval(TypedDict):
    messages: Annotated[list, DeltaChannel(add_batches, snapshot_frequency=2)]
    decision: str


class Inner(TypedDict):
    messages: Annotated[list, operator.add]


def chat_graph(schema: type, turns: int) -> StateGraph:
    def chat(state: dict[str, Any]) -> dict[str, Any]:
        n = state.get("turn", 0)
        reply = AIMessage(content=f"reply {n}", id=f"ai-{n}")
        extra = [HumanMessage(content=f"follow-up {n}", id=f"h-{n}")] if n % 3 == 0 else []
        return {"messages": [reply, *extra], "turn": n + 1, "mood": "ok" if n % 2 else "fine"}

    builder = StateGraph(schema)
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    builder.add_conditional_edges("chat", lambda s: END if s["turn"] >= turns else "chat")
    return builder


def fan_out_graph() -> StateGraph:
    def plan(state: dict[str, Any]) -> dict[str, Any]:
        return {"notes": [f"plan:{state['topic']}"]}

    def fan(state: dict[str, Any]) -> list[Send]:
        return [Send("research", {"topic": f"{state['topic']}-{i}"}) for i in range(4)]

    def research(state: dict[str, Any]) -> dict[str, Any]:
        return {"notes": [f"found:{state['topic']}"], "total": len(state["topic"])}

    def food(state: dict[str, Any]) -> dict[str, Any]:
        return {"notes": ["food"], "total": 1}

    builder = StateGraph(FanOut)
    builder.add_node("plan", plan)
    builder.add_node("research", research)
    builder.add_node("food", food)
    builder.add_edge(START, "plan")
    builder.add_conditional_edges("plan", fan, ["research"])
    builder.add_edge("plan", "food")
    builder.add_edge(["research", "food"], END)
    return builder


def approval_graph() -> StateGraph:
    def draft(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [AIMessage(content="draft", id="d")]}

    def ask(state: dict[str, Any]) -> dict[str, Any]:
        answer = interrupt({"question": "approve?", "draft": state["messages"][-1].content})
        return {"decision": answer, "messages": [HumanMessage(content=answer, id="ans")]}

    def finish(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": [AIMessage(content=f"done: {state['decision']}", id="fin")]}

    builder = StateGraph(Approval)
    builder.add_node("draft", draft)
    builder.add_node("ask", ask)
    builder.add_node("finish", finish)
    builder.add_edge(START, "draft")
    builder.add_edge("draft", "ask")
    builder.add_edge("ask", "finish")
    builder.add_edge("finish", END)
    return builder


def subgraph_graph() -> StateGraph:
    inner = StateGraph(Inner)
    inner.add_node("inner_a", lambda s: {"messages": ["inner-a"]})
    inner.add_node("inner_b", lambda s: {"messages": ["inner-b"]})
    inner.add_edge(START, "inner_a")
    inner.add_edge("inner_a", "inner_b")
    compiled_inner = inner.compile()

    outer = StateGraph(Inner)
    outer.add_node("before", lambda s: {"messages": ["before"]})
    outer.add_node("sub", compiled_inner)
    outer.add_node("after", lambda s: {"messages": ["after"]})
    outer.add_edge(START, "before")
    outer.add_edge("before", "sub")
    outer.add_edge("sub", "after")
    return outer


def history_view(
    history: list[Any], task: Callable[[Any], Any] = attrgetter("name")
) -> list[dict[str, Any]]:
    """A thread's history (newest first) as a user sees it, ids left out (they are
    time-based) but parent links kept as positions; each task as `task` shows it."""
    ids = [h.config["configurable"]["checkpoint_id"] for h in history]
    return [
        {
            "values": h.values,
            "next": h.next,
            "step": h.metadata.get("step"),
            "source": h.metadata.get("source"),
            "parent": ids.index(h.parent_config["configurable"]["checkpoint_id"])
            if h.parent_config and h.parent_config["configurable"]["checkpoint_id"] in ids
            else None,
            "interrupts": [i.value for i in h.interrupts],
            "tasks": sorted(map(task, h.tasks)),
        }
        for h in history
    ]


def observe(graph: Any, config: dict[str, Any]) -> dict[str, Any]:
    """What a user sees of a thread: head state and the whole history (`history_view`)."""
    state = graph.get_state(config)
    return {
        "values": state.values,
        "next": state.next,
        "history": history_view(list(graph.get_state_history(config))),
    }


def run_chat_few(
    saver: Any, thread_id: str, opening: Any, turns: int, start: int = 0
) -> dict[str, Any]:
    """A ChatFew thread run (or, with `start`, continued) to `turns`, then observed.
    `opening` is the first message of a new thread."""
    graph = chat_graph(ChatFew, turns).compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": thread_id}}
    graph.invoke({"messages": [opening], "turn": 0} if start == 0 else {"turn": start}, config)
    return observe(graph, config)


Scenario = Callable[[BaseCheckpointSaver], dict[str, Any]]


def scenario_chat_few(saver: BaseCheckpointSaver) -> dict[str, Any]:
    graph = chat_graph(ChatFew, 12).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "chat"}}
    graph.invoke({"messages": [HumanMessage(content="hi", id="h")], "turn": 0}, config)
    graph.invoke({"messages": [HumanMessage(content="again", id="h2")], "turn": 9}, config)
    return observe(graph, config)


def scenario_chat_many(saver: BaseCheckpointSaver) -> dict[str, Any]:
    graph = chat_graph(ChatMany, 15).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "chat"}}
    graph.invoke({"messages": [HumanMessage(content="hi", id="h")], "turn": 0}, config)
    return observe(graph, config)


def scenario_fan_out(saver: BaseCheckpointSaver) -> dict[str, Any]:
    graph = fan_out_graph().compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "fan"}}
    graph.invoke({"topic": "tokyo", "notes": [], "total": 0}, config)
    result = observe(graph, config)
    # Parallel writers fold in a deterministic order; compare as the user would.
    return result


def scenario_interrupt(saver: BaseCheckpointSaver) -> dict[str, Any]:
    graph = approval_graph().compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "approval"}}
    first = graph.invoke({"messages": [HumanMessage(content="write", id="w")]}, config)
    paused = observe(graph, config)
    graph.invoke(Command(resume="yes"), config)
    return {
        "first": {k: v for k, v in first.items() if k != "__interrupt__"},
        "interrupt": [i.value for i in first.get("__interrupt__", [])],
        "paused": paused,
        "done": observe(graph, config),
    }


def scenario_update_and_fork(saver: BaseCheckpointSaver) -> dict[str, Any]:
    graph = chat_graph(ChatFew, 6).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "fork"}}
    graph.invoke({"messages": [HumanMessage(content="hi", id="h")], "turn": 0}, config)
    graph.update_state(config, {"messages": [HumanMessage(content="edit", id="e")]})
    history = list(graph.get_state_history(config))
    old = history[4].config
    forked = graph.update_state(old, {"mood": "forked"})
    graph.invoke(None, forked)
    replay_from = history[3].config
    graph.invoke(None, replay_from)
    return observe(graph, config)


def scenario_exit_durability(saver: BaseCheckpointSaver) -> dict[str, Any]:
    graph = chat_graph(ChatFew, 8).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "exit"}}
    graph.invoke(
        {"messages": [HumanMessage(content="hi", id="h")], "turn": 0}, config, durability="exit"
    )
    graph.invoke(
        {"messages": [HumanMessage(content="more", id="m")], "turn": 4}, config, durability="exit"
    )
    return observe(graph, config)


def scenario_subgraph(saver: BaseCheckpointSaver) -> dict[str, Any]:
    graph = subgraph_graph().compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "sub"}}
    graph.invoke({"messages": ["start"]}, config)
    return observe(graph, config)


SCENARIOS: dict[str, Scenario] = {
    "chat_snapshot_3": scenario_chat_few,
    "chat_no_snapshot": scenario_chat_many,
    "fan_out": scenario_fan_out,
    "interrupt_resume": scenario_interrupt,
    "update_and_fork": scenario_update_and_fork,
    "exit_durability": scenario_exit_durability,
    "subgraph": scenario_subgraph,
}
