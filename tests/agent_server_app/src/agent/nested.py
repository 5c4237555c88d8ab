"""A parent graph whose subgraph interrupts: the pause lives in a child namespace."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph
from langgraph.types import interrupt


class State(TypedDict, total=False):
    log: Annotated[list, operator.add]


def inner_ask(state: State) -> dict[str, Any]:
    answer = interrupt("inner question")
    return {"log": [f"inner got {answer}"]}


inner = StateGraph(State)
inner.add_node("inner_prep", lambda state: {"log": ["inner prep"]})
inner.add_node("inner_ask", inner_ask)
inner.add_edge(START, "inner_prep")
inner.add_edge("inner_prep", "inner_ask")
inner.add_edge("inner_ask", END)

outer = StateGraph(State)
outer.add_node("before", lambda state: {"log": ["outer before"]})
outer.add_node("child", inner.compile())
outer.add_node("after", lambda state: {"log": ["outer after"]})
outer.add_edge(START, "before")
outer.add_edge("before", "child")
outer.add_edge("child", "after")
outer.add_edge("after", END)
graph = outer.compile()
