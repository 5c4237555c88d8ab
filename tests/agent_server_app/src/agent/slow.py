"""Two steps, the second waiting `sleep` seconds: a run that is still going when the next
one arrives (rollback, cancel)."""

from __future__ import annotations

import asyncio
import operator
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph


class State(TypedDict, total=False):
    sleep: float
    log: Annotated[list, operator.add]


def start(state: State) -> dict[str, Any]:
    return {"log": [f"start {state.get('sleep', 0)}"]}


async def wait(state: State) -> dict[str, Any]:
    await asyncio.sleep(min(float(state.get("sleep", 0)), 60.0))
    return {"log": [f"waited {state.get('sleep', 0)}"]}


builder = StateGraph(State)
builder.add_node("start", start)
builder.add_node("wait", wait)
builder.add_edge(START, "start")
builder.add_edge("start", "wait")
builder.add_edge("wait", END)
graph = builder.compile()
