"""Draft, ask a human (interrupt), finish; the messages live in a DeltaChannel."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langgraph.channels import DeltaChannel
from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


def add_batches(state: list[Any], batches: list[Any]) -> list[Any]:
    out = list(state)
    for batch in batches:
        out.extend(batch if isinstance(batch, list) else [batch])
    return out


class State(TypedDict, total=False):
    topic: str
    messages: Annotated[list, DeltaChannel(add_batches, snapshot_frequency=2)]
    decision: str


def draft(state: State) -> dict[str, Any]:
    return {"messages": [f"draft about {state.get('topic', '?')}"]}


def ask(state: State) -> dict[str, Any]:
    answer = interrupt({"question": "approve?", "draft": state["messages"][-1]})
    return {"decision": answer, "messages": [f"human: {answer}"]}


def finish(state: State) -> dict[str, Any]:
    return {"messages": [f"done: {state['decision']}"]}


builder = StateGraph(State)
builder.add_node("draft", draft)
builder.add_node("ask", ask)
builder.add_node("finish", finish)
builder.add_edge(START, "draft")
builder.add_edge("draft", "ask")
builder.add_edge("ask", "finish")
builder.add_edge("finish", END)
graph = builder.compile()
