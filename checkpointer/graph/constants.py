"""Names the runtime reserves: the graph's entry and exit, and its trigger channels.

Edges are not a side table: an edge `a -> b` is a write to the channel `branch:to:b` made by
every task of `a`, so which nodes run next is part of the saved checkpoint. A resumed or
forked run reads it back from storage instead of recomputing it.
"""

from __future__ import annotations

from collections.abc import Iterable

START = "__start__"
"""The entry of the graph: `add_edge(START, "first")`; also the input's node name."""

END = "__end__"
"""The exit of the graph: `add_edge("last", END)` or a path function returning it."""

UPDATE_PATH = "__update__"
"""Task path of the writes `update_state` stores, after every node's path in sort order."""

INPUT_PATH = "__input__"
"""Task path of the writes an input stores."""

NO_WRITES = "__no_writes__"
"""Marker write of a task that finished without writing, so a resume does not re-run it."""

RESERVED_NAMES = frozenset({START, END})


def trigger_channel(node: str) -> str:
    """The channel whose write schedules `node` for the next superstep."""
    return f"branch:to:{node}"


def join_channel(sources: Iterable[str], target: str) -> str:
    """The barrier channel `target` waits on until every one of `sources` has run."""
    return f"join:{'+'.join(sorted(sources))}:{target}"
