"""Time travel: a thread's checkpoints, newest first, each with its full state.

Rebuilding every checkpoint with `channels_from_checkpoint` would walk the ancestors of each
one: quadratic in the thread length. Instead the checkpoints are listed once and rebuilt in
ONE forward pass, parents before children: the oldest checkpoint of the listing is hydrated
normally (at most one `get_delta_channel_history` call), and every later one is its parent's
state plus the parent's pending writes for the delta channels it does not store, which is
exactly what the saver's history walk would have returned.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from checkpointer.channels import MISSING, DeltaSnapshot
from checkpointer.graph.effects import Hydrate, ListTuples, Program
from checkpointer.graph.persistence import Runtime, base_config
from checkpointer.graph.spec import AnyChannel, GraphSpec
from checkpointer.graph.state_api import snapshot_of
from checkpointer.graph.types import StateSnapshot
from checkpointer.replay import channel_from_history, channels_needing_history
from checkpointer.savers.base import metadata_matches, validate_metadata_filter
from checkpointer.types import (
    Checkpoint,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    RunnableConfig,
    checkpoint_id_of,
)


def _id(tup: CheckpointTuple) -> str:
    return str(tup.config["configurable"]["checkpoint_id"])


def _parent_id(tup: CheckpointTuple) -> str | None:
    return checkpoint_id_of(tup.parent_config) if tup.parent_config else None


def history(
    rt: Runtime,
    config: RunnableConfig,
    *,
    filter: Mapping[str, Any] | None = None,
    before: RunnableConfig | None = None,
    limit: int | None = None,
) -> Program[list[StateSnapshot]]:
    """Snapshots newest first: the whole thread, or, when `config` names a checkpoint, that
    checkpoint and its ancestors (its branch)."""
    wanted = validate_metadata_filter(filter)
    tuples: list[CheckpointTuple] = yield ListTuples(base_config(config), before)
    target = checkpoint_id_of(config)
    selected = _branch(tuples, target) if target is not None else tuples
    if limit is not None and not wanted:
        selected = selected[:limit]
    snapshots = yield from _forward_pass(rt.graph, selected)
    out = [snapshots[_id(t)] for t in selected if metadata_matches(t.metadata, wanted)]
    return out[:limit] if limit is not None else out


def _branch(tuples: Sequence[CheckpointTuple], target: str) -> list[CheckpointTuple]:
    """`target` and its ancestors, newest first."""
    by_id = {_id(t): t for t in tuples}
    chain: list[CheckpointTuple] = []
    cursor: str | None = target
    while cursor is not None and cursor in by_id and len(chain) < len(by_id):
        chain.append(by_id[cursor])
        cursor = _parent_id(by_id[cursor])
    return chain


def _parents_first(tuples: Sequence[CheckpointTuple]) -> list[CheckpointTuple]:
    """The checkpoints ordered so each comes after its parent (ids alone may not say so:
    checkpoints written by processes with skewed clocks)."""
    by_id = {_id(t): t for t in tuples}
    done: set[str] = set()
    order: list[CheckpointTuple] = []
    for tup in reversed(tuples):
        stack: list[CheckpointTuple] = []
        cursor: CheckpointTuple | None = tup
        while cursor is not None and _id(cursor) not in done:
            stack.append(cursor)
            done.add(_id(cursor))
            parent = _parent_id(cursor)
            cursor = by_id.get(parent) if parent is not None else None
        order.extend(reversed(stack))
    return order


def _forward_pass(
    graph: GraphSpec, tuples: Sequence[CheckpointTuple]
) -> Program[dict[str, StateSnapshot]]:
    ids = {_id(t) for t in tuples}
    by_id = {_id(t): t for t in tuples}
    children = Counter(p for t in tuples if (p := _parent_id(t)) in ids)
    live: dict[str, dict[str, AnyChannel]] = {}
    snapshots: dict[str, StateSnapshot] = {}
    for tup in _parents_first(tuples):
        parent = _parent_id(tup)
        if parent is not None and parent in live:
            channels = advance(
                graph, live[parent], by_id[parent].pending_writes or (), tup.checkpoint
            )
            children[parent] -= 1
            if children[parent] == 0:
                del live[parent]
        else:
            channels = yield Hydrate(tup.checkpoint, tup.config)
        snapshots[_id(tup)] = snapshot_of(graph, tup, channels)
        if children[_id(tup)]:
            live[_id(tup)] = channels
    return snapshots


def advance(
    graph: GraphSpec,
    parent: Mapping[str, AnyChannel],
    parent_writes: Sequence[PendingWrite],
    checkpoint: Checkpoint,
) -> dict[str, AnyChannel]:
    """A child's channels from its parent's: stored values as stored, every delta channel
    the child does not store = the parent's value + the parent's writes to it, in order."""
    needed = set(channels_needing_history(graph.channels, checkpoint))
    values = checkpoint["channel_values"]
    out: dict[str, AnyChannel] = {}
    for name, spec in graph.channels.items():
        if name not in needed:
            out[name] = spec.from_checkpoint(values.get(name, MISSING))
            continue
        seed = parent[name]
        entry: DeltaChannelHistory = {"writes": [w for w in parent_writes if w[1] == name]}
        if seed.is_available():
            entry["seed"] = DeltaSnapshot(seed.get())
        out[name] = channel_from_history(spec, entry)
    return out
