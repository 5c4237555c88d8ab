"""A small superstep graph runtime on top of the persistence layer.

Shaped like LangGraph's `StateGraph` so its users feel at home:

    from checkpointer.graph import END, START, StateGraph

    builder = StateGraph(State)
    builder.add_node("a", a)
    builder.add_edge(START, "a")
    builder.add_edge("a", END)
    graph = builder.compile(checkpointer=InMemorySaver())
    graph.invoke({"x": 1}, {"configurable": {"thread_id": "t1"}})

Each task's writes are saved as it finishes and each checkpoint after its superstep, so a
crash or an interrupt loses no finished task: `invoke(None, config)` continues.
"""

from checkpointer.errors import InvalidUpdateError
from checkpointer.graph.builder import StateGraph
from checkpointer.graph.compiled import CompiledStateGraph
from checkpointer.graph.constants import END, START
from checkpointer.graph.errors import EmptyInputError, GraphBuildError, GraphRecursionError
from checkpointer.graph.interrupts import GraphInterrupt, interrupt
from checkpointer.graph.types import Command, Interrupt, PregelTask, StateSnapshot, StateTask

__all__ = [
    "END",
    "START",
    "Command",
    "CompiledStateGraph",
    "EmptyInputError",
    "GraphBuildError",
    "GraphInterrupt",
    "GraphRecursionError",
    "Interrupt",
    "InvalidUpdateError",
    "PregelTask",
    "StateGraph",
    "StateSnapshot",
    "StateTask",
    "interrupt",
]
