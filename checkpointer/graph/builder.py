"""`StateGraph`: describe nodes and edges over a state schema, then `compile()` it.

The schema decides how each key merges parallel writes (seed 001, via `checkpointer.state`):
a plain key holds one value per step, an `Annotated[T, reducer]` key folds every write, an
`Annotated[T, DeltaChannel(...)]` key is stored as its writes. The builder only records the
graph; `compile()` validates it and freezes it into a `GraphSpec`, so changing the builder
afterwards never changes a compiled graph.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, Self

from checkpointer.graph.constants import END, RESERVED_NAMES, START
from checkpointer.graph.errors import GraphBuildError
from checkpointer.graph.spec import (
    BranchSpec,
    NodeFn,
    accepts_config,
    build_spec,
    is_async_callable,
)
from checkpointer.state import SchemaChannels

if TYPE_CHECKING:
    from checkpointer.graph.compiled import CompiledStateGraph
    from checkpointer.savers.base import BaseCheckpointSaver


class StateGraph:
    """A graph whose nodes read the state and return partial updates to it.

    graph = StateGraph(State)
    graph.add_node("draft", draft)
    graph.add_edge(START, "draft")
    graph.add_edge("draft", END)
    app = graph.compile(checkpointer=InMemorySaver())
    """

    def __init__(
        self,
        state_schema: Any,
        *,
        input_schema: Any | None = None,
        output_schema: Any | None = None,
    ) -> None:
        self.state_schema = state_schema
        self.schema = SchemaChannels.from_schemas(
            state_schema, input_schema=input_schema, output_schema=output_schema
        )
        self.nodes: dict[str, NodeFn] = {}
        self.edges: set[tuple[str, str]] = set()
        self.waiting_edges: set[tuple[tuple[str, ...], str]] = set()
        self.branches: dict[str, list[BranchSpec]] = defaultdict(list)

    # ------------------------------------------------------------- building
    def add_node(self, node: str | NodeFn, action: NodeFn | None = None) -> Self:
        """Add a node: `add_node("name", fn)` or `add_node(fn)` (named after the function).

        `fn(state)` or `fn(state, config)`, sync or async, returns a dict of updates or None.
        """
        if action is None:
            if isinstance(node, str):
                raise GraphBuildError(f"add_node({node!r}) needs a function")
            action, node = node, getattr(node, "__name__", None) or type(node).__name__
        if not isinstance(node, str) or not node:
            raise GraphBuildError(f"node name must be a non-empty string, got {node!r}")
        if not callable(action):
            raise GraphBuildError(f"node {node!r}: {action!r} is not callable")
        if node in RESERVED_NAMES:
            raise GraphBuildError(f"node name {node!r} is reserved")
        if node in self.nodes:
            raise GraphBuildError(f"node {node!r} already exists")
        if node in self.schema.channels:
            raise GraphBuildError(f"node name {node!r} is already used as a state key")
        self.nodes[node] = action
        return self

    def add_edge(self, start_key: str | Sequence[str], end_key: str) -> Self:
        """`a -> b`: b runs in the step after a. With a list of sources, b waits for all."""
        if end_key == START:
            raise GraphBuildError("START cannot be the end of an edge")
        if isinstance(start_key, str):
            if start_key == END:
                raise GraphBuildError("END cannot be the start of an edge")
            self.edges.add((start_key, end_key))
            return self
        sources = tuple(sorted(set(start_key)))
        if not sources:
            raise GraphBuildError("add_edge needs at least one source")
        if START in sources or END in sources:
            raise GraphBuildError("a join edge waits for nodes; START and END cannot be sources")
        if len(sources) == 1:
            self.edges.add((sources[0], end_key))
        else:
            self.waiting_edges.add((sources, end_key))
        return self

    def add_conditional_edges(
        self,
        source: str,
        path: Callable[..., Any],
        path_map: Mapping[Hashable, str] | Sequence[str] | None = None,
    ) -> Self:
        """After `source`, run the node(s) `path(state)` names (a name, a list, or END).

        `path_map` maps what `path` returns to node names; a list means "these names".
        """
        if source == END:
            raise GraphBuildError("END cannot be the source of a conditional edge")
        mapping: dict[Hashable, str] | None
        if path_map is None:
            mapping = None
        elif isinstance(path_map, Mapping):
            mapping = dict(path_map)
        else:
            mapping = {name: name for name in path_map}
        self.branches[source].append(
            BranchSpec(
                source=source, path=path, path_map=mapping, takes_config=accepts_config(path)
            )
        )
        return self

    def set_entry_point(self, key: str) -> Self:
        return self.add_edge(START, key)

    def set_finish_point(self, key: str) -> Self:
        return self.add_edge(key, END)

    def set_conditional_entry_point(
        self,
        path: Callable[..., Any],
        path_map: Mapping[Hashable, str] | Sequence[str] | None = None,
    ) -> Self:
        return self.add_conditional_edges(START, path, path_map)

    # ----------------------------------------------------------- compiling
    def validate(self, interrupt: Sequence[str] | Literal["*"] = ()) -> None:
        """Raise GraphBuildError naming the first inconsistency found."""
        nodes = set(self.nodes)
        for start, end in self.edges:
            if start != START and start not in nodes:
                raise GraphBuildError(f"edge {start!r} -> {end!r}: unknown node {start!r}")
            if end != END and end not in nodes:
                raise GraphBuildError(f"edge {start!r} -> {end!r}: unknown node {end!r}")
        for sources, end in self.waiting_edges:
            for source in sources:
                if source not in nodes:
                    raise GraphBuildError(
                        f"edge {list(sources)} -> {end!r}: unknown node {source!r}"
                    )
            if end != END and end not in nodes:
                raise GraphBuildError(f"edge {list(sources)} -> {end!r}: unknown node {end!r}")
        for source, branches in self.branches.items():
            if source != START and source not in nodes:
                raise GraphBuildError(f"conditional edge from unknown node {source!r}")
            for branch in branches:
                for target in (branch.path_map or {}).values():
                    if target != END and target not in nodes:
                        raise GraphBuildError(
                            f"conditional edge from {source!r}: path_map names unknown node "
                            f"{target!r}"
                        )
        if not any(start == START for start, _ in self.edges) and START not in self.branches:
            raise GraphBuildError(
                "the graph has no entry point: add an edge from START, e.g. "
                "add_edge(START, 'first_node')"
            )
        if interrupt != "*":
            for name in interrupt:
                if name not in nodes:
                    raise GraphBuildError(f"interrupt on unknown node {name!r}")

    def compile(
        self,
        checkpointer: BaseCheckpointSaver | None = None,
        *,
        interrupt_before: Sequence[str] | Literal["*"] | None = None,
        interrupt_after: Sequence[str] | Literal["*"] | None = None,
        name: str = "StateGraph",
        single_writer: bool = False,
    ) -> CompiledStateGraph:
        """Validate and freeze the graph. Without a checkpointer each run is self-contained
        (no state, history or resume). `single_writer=True` makes every run take its
        thread's lock (`ThreadBusy` for a second concurrent run; see `graph.guard`)."""
        from checkpointer.graph.compiled import CompiledStateGraph

        before = "*" if interrupt_before == "*" else tuple(interrupt_before or ())
        after = "*" if interrupt_after == "*" else tuple(interrupt_after or ())
        self.validate(before)
        self.validate(after)
        spec = build_spec(
            self.state_schema,
            self.schema,
            {
                name: (fn, is_async_callable(fn), accepts_config(fn))
                for name, fn in self.nodes.items()
            },
            set(self.edges),
            set(self.waiting_edges),
            {source: list(branches) for source, branches in self.branches.items()},
        )
        return CompiledStateGraph(
            spec,
            checkpointer=checkpointer,
            interrupt_before=before,
            interrupt_after=after,
            name=name,
            single_writer=single_writer,
        )
