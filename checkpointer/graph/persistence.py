"""Where a run stands and how it moves: load a checkpoint, save the next one, fork.

A `Cursor` is the last saved checkpoint plus the live channels built on it. Every
checkpoint the runtime writes goes through `save` (or `fork`), which is where the delta
snapshot plan is made: counters advance, due channels snapshot, and a delta channel whose
history would be wrong (its parent holds writes this child did not apply) is forced to.

A run, an update or a resume never adds writes to a checkpoint that already has a child
(the child's delta history would replay them): addressing such a checkpoint first saves a
`fork` checkpoint that snapshots every delta channel, and the new branch grows from there.
"""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from checkpointer.channels import MISSING, DeltaChannel, get_overwrite
from checkpointer.errors import CheckpointNotFoundError
from checkpointer.graph.effects import GetTuple, HasChild, Hydrate, Program, Put
from checkpointer.graph.spec import AnyChannel, GraphSpec
from checkpointer.graph.tasks import Writes
from checkpointer.replay import GetNextVersion, create_checkpoint
from checkpointer.replay import plan_delta_snapshots as plan_snapshots
from checkpointer.types import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    PendingWrite,
    RunnableConfig,
    Source,
    checkpoint_id_of,
    checkpoint_ns_of,
    copy_checkpoint,
    empty_checkpoint,
    make_config,
    thread_id_of,
)

InterruptNodes = Collection[str] | Literal["*"]


@dataclass(frozen=True)
class Runtime:
    """What a compiled graph fixes for all its runs."""

    graph: GraphSpec
    next_version: GetNextVersion
    interrupt_before: InterruptNodes = ()
    interrupt_after: InterruptNodes = ()


@dataclass
class Cursor:
    """Where a run stands: the last saved checkpoint and the live channels built on it."""

    checkpoint: Checkpoint
    channels: dict[str, AnyChannel]
    metadata: CheckpointMetadata
    config: RunnableConfig | None
    """The saved checkpoint (None before the first save): parent of the next one."""
    stored_versions: ChannelVersions
    pending: list[PendingWrite] = field(default_factory=list)
    """Writes known to be on `config`: loaded with it, plus resume answers. Tasks of the
    running step add theirs in storage only; `save` counts those as applied."""
    step: int = -2
    tup: CheckpointTuple | None = None


def base_config(config: RunnableConfig) -> RunnableConfig:
    """The thread (and namespace) a config addresses, without a checkpoint id."""
    return make_config(thread_id_of(config), checkpoint_ns_of(config))


def run_metadata(config: RunnableConfig) -> dict[str, Any]:
    """User metadata from `config["metadata"]` plus a fresh run id."""
    user = config.get("metadata") or {}
    return {**dict(user), "run_id": str(uuid.uuid4())}


def _delta_names(graph: GraphSpec) -> set[str]:
    return {k for k, ch in graph.channels.items() if isinstance(ch, DeltaChannel)}


def _stale_delta(graph: GraphSpec, pending: Iterable[PendingWrite], applied: set[str]) -> set[str]:
    """Delta channels with writes on the parent that this child does not apply: their
    history walk would replay them, so the child must snapshot instead."""
    delta = _delta_names(graph)
    return {ch for task_id, ch, _ in pending if task_id not in applied and ch in delta}


def _overwritten(graph: GraphSpec, writes: Iterable[Writes]) -> set[str]:
    delta = _delta_names(graph)
    return {ch for ws in writes for ch, value in ws if ch in delta and get_overwrite(value)[0]}


def _metadata(
    meta: Mapping[str, Any], source: Source, step: int, nodes: list[str]
) -> CheckpointMetadata:
    """Run metadata plus where the checkpoint comes from: small, and filterable by key."""
    return cast(
        CheckpointMetadata,
        {**meta, "source": source, "step": step, "parents": {}, "nodes": nodes},
    )


def nodes_of(metadata: Mapping[str, Any]) -> list[str]:
    """The nodes whose writes made a checkpoint (as recorded in its metadata)."""
    return [str(n) for n in metadata.get("nodes") or ()]


def _fresh_cursor(graph: GraphSpec) -> Cursor:
    return Cursor(
        checkpoint=empty_checkpoint(),
        channels={k: spec.from_checkpoint(MISSING) for k, spec in graph.channels.items()},
        metadata={},
        config=None,
        stored_versions={},
    )


def load(rt: Runtime, config: RunnableConfig) -> Program[Cursor | None]:
    """The cursor at the checkpoint `config` addresses (latest if none), channels hydrated."""
    tup: CheckpointTuple | None = yield GetTuple(config)
    if tup is None:
        if checkpoint_id_of(config) is not None:
            raise CheckpointNotFoundError(f"no checkpoint {checkpoint_id_of(config)!r} in {config}")
        return None
    channels: dict[str, AnyChannel] = yield Hydrate(tup.checkpoint, tup.config)
    return Cursor(
        checkpoint=copy_checkpoint(tup.checkpoint),
        channels=channels,
        metadata=cast(CheckpointMetadata, dict(tup.metadata)),
        config=tup.config,
        stored_versions=dict(tup.checkpoint["channel_versions"]),
        pending=list(tup.pending_writes or ()),
        step=int(tup.metadata.get("step", -1)),
        tup=tup,
    )


def load_for_write(rt: Runtime, config: RunnableConfig, meta: dict[str, Any]) -> Program[Cursor]:
    """`load`, forking first when the addressed checkpoint already has a child."""
    cursor = yield from load(rt, config)
    if cursor is None:
        return _fresh_cursor(rt.graph)
    if checkpoint_id_of(config) is not None and cursor.tup is not None:
        has_child: bool = yield HasChild(cursor.tup)
        if has_child:
            yield from fork(rt, cursor, meta)
    return cursor


def save(
    rt: Runtime,
    cursor: Cursor,
    base: RunnableConfig,
    meta: Mapping[str, Any],
    *,
    source: Source,
    updated: Iterable[str],
    writes: Iterable[Writes],
    applied: set[str],
    nodes: Iterable[str],
) -> Program[None]:
    """Save the checkpoint after a step (or an input, or an update) and move the cursor."""
    updated = set(updated)
    writes = list(writes)
    forced = _stale_delta(rt.graph, cursor.pending, applied) | _overwritten(rt.graph, writes)
    plan = plan_snapshots(
        cursor.channels,
        cursor.metadata,
        updated,
        cursor.checkpoint["channel_versions"],
        forced=forced,
        root=cursor.config is None,
    )
    step = cursor.step + 1
    checkpoint = create_checkpoint(
        cursor.checkpoint,
        cursor.channels,
        step,
        updated_channels=updated,
        get_next_version=rt.next_version,
        channels_to_snapshot=plan.to_snapshot,
        stored_versions=cursor.stored_versions,
    )
    metadata = _metadata(meta, source, step, sorted(set(nodes)))
    yield from _put(cursor, base, checkpoint, plan.apply_to(metadata), step)


def fork(rt: Runtime, cursor: Cursor, meta: Mapping[str, Any]) -> Program[None]:
    """Start a branch at `cursor`: same state, every delta channel snapshotted, no writes.

    The forked checkpoint's pending writes belong to its existing child; the fork leaves
    them (and the old branch) untouched.
    """
    assert cursor.config is not None
    plan = plan_snapshots(
        cursor.channels,
        cursor.metadata,
        (),
        cursor.checkpoint["channel_versions"],
        forced=_delta_names(rt.graph),
    )
    checkpoint = create_checkpoint(
        cursor.checkpoint,
        cursor.channels,
        cursor.step,
        get_next_version=rt.next_version,
        channels_to_snapshot=plan.to_snapshot,
        stored_versions=cursor.stored_versions,
    )
    metadata = _metadata(meta, "fork", cursor.step, nodes_of(cursor.metadata))
    yield from _put(cursor, cursor.config, checkpoint, plan.apply_to(metadata), cursor.step)


def _put(
    cursor: Cursor,
    parent: RunnableConfig,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
    step: int,
) -> Program[None]:
    new_versions = {
        k: v
        for k, v in checkpoint["channel_versions"].items()
        if cursor.stored_versions.get(k) != v
    }
    saved: RunnableConfig = yield Put(cursor.config or parent, checkpoint, metadata, new_versions)
    cursor.config = saved
    cursor.checkpoint = checkpoint
    cursor.metadata = metadata
    cursor.stored_versions = dict(checkpoint["channel_versions"])
    cursor.pending = []
    cursor.step = step
    cursor.tup = None
