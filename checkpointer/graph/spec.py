"""The compiled form of a graph: nodes with their trigger channels and the writes they make.

`StateGraph` (the builder) produces a `GraphSpec`; everything that runs a graph reads only
this. Every node, START included, is a `NodeSpec`: the function to call, the channels that
schedule it, and the edge writes it makes after the function returns.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Any

from checkpointer.channels import BaseChannel, EphemeralValue, NamedBarrierValue
from checkpointer.graph.constants import START, join_channel, trigger_channel
from checkpointer.state import SchemaChannels

AnyChannel = BaseChannel[Any, Any, Any]
NodeFn = Callable[..., Any]


def is_async_callable(fn: Any) -> bool:
    """Whether calling `fn` gives a coroutine (functions, and objects with an async __call__)."""
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - looking for an async __call__
    )


def accepts_config(fn: Any) -> bool:
    """Whether `fn(state, config)` is a valid call, so the node or path receives the config."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return False
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return True
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2 or any(p.name == "config" for p in params)


@dataclass(frozen=True, slots=True)
class BranchSpec:
    """A conditional edge: `path(state)` names the next node(s), through `path_map` if given."""

    source: str
    path: Callable[..., Any]
    path_map: Mapping[Hashable, str] | None = None
    takes_config: bool = False


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node as the loop sees it. START is a node without a function."""

    name: str
    fn: NodeFn | None
    is_async: bool = False
    takes_config: bool = False
    triggers: tuple[str, ...] = ()
    edge_writes: tuple[tuple[str, Any], ...] = ()
    branches: tuple[BranchSpec, ...] = ()


@dataclass(frozen=True)
class GraphSpec:
    """A compiled graph: schema channels, trigger channels and nodes, ready to run."""

    state_schema: Any
    schema: SchemaChannels
    channels: Mapping[str, AnyChannel]
    nodes: Mapping[str, NodeSpec]
    start: NodeSpec
    trigger_to_nodes: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def state_keys(self) -> tuple[str, ...]:
        return self.schema.state_keys

    @property
    def output_keys(self) -> tuple[str, ...]:
        return self.schema.output_keys

    @property
    def input_keys(self) -> tuple[str, ...]:
        return self.schema.input_keys

    def node(self, name: str) -> NodeSpec:
        """A node by name, START included."""
        return self.start if name == START else self.nodes[name]


def build_spec(
    state_schema: Any,
    schema: SchemaChannels,
    nodes: Mapping[str, tuple[NodeFn, bool, bool]],
    edges: set[tuple[str, str]],
    waiting_edges: set[tuple[tuple[str, ...], str]],
    branches: Mapping[str, list[BranchSpec]],
) -> GraphSpec:
    """Turn validated builder tables into channels and node specs.

    `nodes` maps a name to `(fn, is_async, takes_config)`.
    """
    channels: dict[str, AnyChannel] = dict(schema.channels)
    triggers: dict[str, list[str]] = {name: [trigger_channel(name)] for name in nodes}
    for name in nodes:
        channels[trigger_channel(name)] = EphemeralValue(
            Any, guard=False, key=trigger_channel(name)
        )
    writes: dict[str, list[tuple[str, Any]]] = {name: [] for name in [START, *nodes]}
    for source, target in sorted(edges):
        if target in nodes:
            writes[source].append((trigger_channel(target), None))
    for sources, target in sorted(waiting_edges):
        barrier = join_channel(sources, target)
        channels[barrier] = NamedBarrierValue(str, set(sources), key=barrier)
        triggers[target].append(barrier)
        for source in sources:
            writes[source].append((barrier, source))
    specs = {
        name: NodeSpec(
            name=name,
            fn=fn,
            is_async=is_async,
            takes_config=takes_config,
            triggers=tuple(triggers[name]),
            edge_writes=tuple(writes[name]),
            branches=tuple(branches.get(name, ())),
        )
        for name, (fn, is_async, takes_config) in nodes.items()
    }
    start = NodeSpec(
        name=START,
        fn=None,
        edge_writes=tuple(writes[START]),
        branches=tuple(branches.get(START, ())),
    )
    trigger_to_nodes: dict[str, list[str]] = {}
    for spec in specs.values():
        for channel in spec.triggers:
            trigger_to_nodes.setdefault(channel, []).append(spec.name)
    return GraphSpec(
        state_schema=state_schema,
        schema=schema,
        channels=channels,
        nodes=specs,
        start=start,
        trigger_to_nodes={k: tuple(v) for k, v in trigger_to_nodes.items()},
    )
