"""The retention planner every saver shares: which checkpoints go, which stay, which get a
snapshot. Pure: it reads a thread's *shape* (parent pointers, channel versions, which
values are stored, sizes; never a value) and returns a plan the saver carries out.

The one rule: a kept checkpoint must read back exactly as before. A delta channel's value
at a checkpoint is replayed from its ancestors back to the nearest stored value, so a kept
checkpoint keeps those ancestors, unless the caller passed the channel specs: then the
saver can rebuild the value once and store it on the kept checkpoint (*materialize*), and
the ancestors can go. Channels the specs do not cover are always handled the safe way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from checkpointer.channels import BaseChannel, BinaryOperatorAggregate, DeltaChannel
from checkpointer.lifecycle import KeepLast, MaxAge, RetentionPolicy, ThreadOutcome

BlobRef = tuple[str, str]  # (channel, version)


@dataclass(slots=True)
class NodeShape:
    """One checkpoint as the planner sees it."""

    parent_id: str | None
    versions: dict[str, str]
    ts: datetime | None = None
    pinned: bool = False
    size: int = 0
    writes: int = 0
    writes_size: int = 0
    interrupted: bool = False
    delta_channels: frozenset[str] | None = None
    """Channels this checkpoint rebuilds from ancestor writes (its metadata's delta
    counters); None when unknown, and then every channel without a value counts."""


@dataclass(slots=True)
class NamespaceShape:
    nodes: dict[str, NodeShape] = field(default_factory=dict)
    blobs: dict[BlobRef, int] = field(default_factory=dict)
    """Stored values by (channel, version), with their size in bytes."""
    inline: set[BlobRef] = field(default_factory=set)
    """Values kept inline in checkpoint records (SQL savers, see `sql/inline.py`): stored
    as much as a value row, but gone with the records that hold them."""
    bases: dict[BlobRef, str] = field(default_factory=dict)
    """Tail rows (SQL savers, see `sql/tails.py`) -> the version of their base: a value
    row of the same channel that must stay as long as the tail row does."""


@dataclass(slots=True)
class ThreadShape:
    thread_id: str
    namespaces: dict[str, NamespaceShape] = field(default_factory=dict)

    @property
    def checkpoint_count(self) -> int:
        return sum(len(ns.nodes) for ns in self.namespaces.values())


@dataclass(frozen=True, slots=True)
class Materialization:
    """Store the value of `channels` at checkpoint `checkpoint_id` of namespace `ns`."""

    ns: str
    checkpoint_id: str
    channels: tuple[str, ...]


@dataclass(slots=True)
class ThreadPlan:
    thread_id: str
    delete: dict[str, set[str]]
    garbage: dict[str, set[BlobRef]]
    materialize: list[Materialization]
    outcome: ThreadOutcome

    @property
    def changes_anything(self) -> bool:
        return bool(self.materialize) or any(self.delete.values())


def delta_channels_of(metadata_counters: Any) -> frozenset[str]:
    """The delta channels a checkpoint replays, from its `counters_since_delta_snapshot`.

    Runtimes (ours and LangGraph's) record non-zero counters for every delta channel not
    snapshotted at that checkpoint, so a channel without a value and without counters is
    not a delta channel there.
    """
    if isinstance(metadata_counters, str):
        try:
            metadata_counters = json.loads(metadata_counters)
        except ValueError:
            return frozenset()
    if isinstance(metadata_counters, Mapping):
        return frozenset(str(k) for k in metadata_counters)
    return frozenset()


def parse_ts(value: Any) -> datetime | None:
    """A checkpoint's `ts` as an aware datetime (UTC when it names no zone); None if absent
    or unreadable, which the planner treats as "new" (never dropped for age)."""
    if isinstance(value, datetime):
        parsed = value
    elif isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
    else:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def children_of(nodes: Mapping[str, NodeShape]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for cid, node in nodes.items():
        if node.parent_id is not None and node.parent_id in nodes:
            out.setdefault(node.parent_id, []).append(cid)
    return out


def protected(nodes: Mapping[str, NodeShape]) -> set[str]:
    """Never dropped by a policy: the head, pinned checkpoints, and interrupts still
    waiting for an answer (an `__interrupt__` write and no checkpoint after it)."""
    if not nodes:
        return set()
    children = children_of(nodes)
    keep = {max(nodes)}
    for cid, node in nodes.items():
        if node.pinned or (node.interrupted and cid not in children):
            keep.add(cid)
    return keep


def selected(nodes: Mapping[str, NodeShape], policy: RetentionPolicy, now: datetime) -> set[str]:
    """What the policy alone keeps in one namespace."""
    if isinstance(policy, KeepLast):
        return set(sorted(nodes, reverse=True)[: policy.n])
    if isinstance(policy, MaxAge):
        cutoff = now - policy.max_age
        return {cid for cid, node in nodes.items() if node.ts is None or node.ts >= cutoff}
    raise TypeError(f"{type(policy).__name__} does not select checkpoints")


def _depths(nodes: Mapping[str, NodeShape]) -> dict[str, int]:
    """Distance to the oldest reachable ancestor: sorting by it puts ancestors first."""
    depth: dict[str, int] = {}
    for start in nodes:
        path: list[str] = []
        cursor: str | None = start
        while cursor is not None and cursor in nodes and cursor not in depth:
            if cursor in path:  # a loop in parent pointers: break it here
                break
            path.append(cursor)
            cursor = nodes[cursor].parent_id
        base = depth.get(cursor, -1) if cursor is not None else -1
        for offset, cid in enumerate(reversed(path), start=1):
            depth[cid] = base + offset
    return depth


class _Closure:
    """Grows a keep set until every kept checkpoint can rebuild its delta channels, storing
    snapshots where the specs allow it."""

    def __init__(
        self,
        nodes: Mapping[str, NodeShape],
        blobs: Iterable[BlobRef],
        specs: Mapping[str, BaseChannel] | None,
        unmaterializable: set[tuple[str, str]],
        inline: Iterable[BlobRef] = (),
    ) -> None:
        self.nodes = nodes
        self.stored = set(blobs) | set(inline)
        self.specs = specs
        self.unmaterializable = unmaterializable
        self.materialize: dict[str, set[str]] = {}

    def _is_stored(self, node: NodeShape, channel: str) -> bool:
        version = node.versions.get(channel)
        return version is not None and (channel, version) in self.stored

    def _relevant(self, node: NodeShape, channel: str) -> bool:
        """Whether a reader walks ancestors for this channel when no value is stored.

        With specs, readers only walk for delta (and reducer) channels. Otherwise the
        checkpoint's own delta counters say which channels are delta channels (a trigger
        channel that was cleared has a version and no value too, and needs no history).
        """
        if self.specs is not None and channel in self.specs:
            return isinstance(self.specs[channel], DeltaChannel | BinaryOperatorAggregate)
        return node.delta_channels is None or channel in node.delta_channels

    def _can_materialize(self, checkpoint_id: str, channel: str) -> bool:
        return (
            self.specs is not None
            and isinstance(self.specs.get(channel), DeltaChannel | BinaryOperatorAggregate)
            and (checkpoint_id, channel) not in self.unmaterializable
        )

    def _walk(self, checkpoint_id: str, channel: str) -> list[str]:
        """The ancestors a reader visits for `channel` (as `get_delta_channel_history`
        does): up to and including the nearest one storing a value, or to the chain's end."""
        chain: list[str] = []
        seen = {checkpoint_id}
        cursor = self.nodes[checkpoint_id].parent_id
        while cursor is not None and cursor in self.nodes and cursor not in seen:
            seen.add(cursor)
            chain.append(cursor)
            if self._is_stored(self.nodes[cursor], channel):
                break
            cursor = self.nodes[cursor].parent_id
        return chain

    def close(self, keep: set[str]) -> set[str]:
        keep = set(keep)
        depth = _depths(self.nodes)
        changed = True
        while changed:
            changed = False
            for cid in sorted(keep, key=lambda c: (depth.get(c, 0), c)):
                node = self.nodes[cid]
                for channel, version in sorted(node.versions.items()):
                    if (channel, version) in self.stored or not self._relevant(node, channel):
                        continue
                    chain = self._walk(cid, channel)
                    if all(a in keep for a in chain):
                        continue
                    if self._can_materialize(cid, channel):
                        self.materialize.setdefault(cid, set()).add(channel)
                        self.stored.add((channel, version))
                        continue
                    keep.update(chain)
                    changed = True
        return keep


def plan_namespace(
    ns_shape: NamespaceShape,
    keep: set[str],
    specs: Mapping[str, BaseChannel] | None,
    unmaterializable: set[tuple[str, str]],
) -> tuple[set[str], set[BlobRef], dict[str, set[str]], int]:
    """(checkpoints to delete, values no longer referenced, snapshots to store, how many
    checkpoints stay only for delta history) for one namespace and a wanted keep set."""
    closure = _Closure(ns_shape.nodes, ns_shape.blobs, specs, unmaterializable, ns_shape.inline)
    final = closure.close(keep)
    doomed = set(ns_shape.nodes) - final
    referenced = {
        (channel, version)
        for cid in final
        for channel, version in ns_shape.nodes[cid].versions.items()
    }
    # A tail row reads its base: the base stays with it, referenced or not.
    referenced.update(
        (ref[0], ns_shape.bases[ref]) for ref in list(referenced) if ref in ns_shape.bases
    )
    garbage = {ref for ref in ns_shape.blobs if ref not in referenced}
    # Nothing materialized is ever garbage: its version belongs to a kept checkpoint.
    return doomed, garbage, closure.materialize, len(final - keep)


def plan_thread(
    shape: ThreadShape,
    policy: RetentionPolicy,
    *,
    now: datetime,
    specs: Mapping[str, BaseChannel] | None = None,
    unmaterializable: Mapping[str, set[tuple[str, str]]] | None = None,
) -> ThreadPlan:
    """Apply a checkpoint-level policy (`KeepLast`, `MaxAge`) to one thread.

    `unmaterializable[ns]` lists (checkpoint, channel) pairs whose value could not be
    rebuilt on an earlier try; they fall back to keeping ancestors.
    """
    outcome = ThreadOutcome(shape.thread_id, checkpoints_before=shape.checkpoint_count)
    delete: dict[str, set[str]] = {}
    garbage: dict[str, set[BlobRef]] = {}
    materialize: list[Materialization] = []
    for ns in sorted(shape.namespaces):
        ns_shape = shape.namespaces[ns]
        if not ns_shape.nodes:
            continue
        keep = selected(ns_shape.nodes, policy, now) | protected(ns_shape.nodes)
        doomed, unused, snapshots, extra = plan_namespace(
            ns_shape, keep, specs, set((unmaterializable or {}).get(ns, set()))
        )
        outcome.kept_for_history += extra
        if doomed:
            delete[ns] = doomed
        if unused:
            garbage[ns] = unused
        depth = _depths(ns_shape.nodes)
        for cid in sorted(snapshots, key=lambda c: (depth.get(c, 0), c)):
            materialize.append(Materialization(ns, cid, tuple(sorted(snapshots[cid]))))
            outcome.materialized.append((ns, cid))
        for cid in sorted(doomed):
            node = ns_shape.nodes[cid]
            outcome.deleted.append((ns, cid))
            outcome.writes_deleted += node.writes
            outcome.bytes_freed += node.size + node.writes_size
        outcome.blobs_deleted += len(unused)
        outcome.bytes_freed += sum(ns_shape.blobs[ref] for ref in unused)
    return ThreadPlan(shape.thread_id, delete, garbage, materialize, outcome)


def has_pending_interrupt(shape: ThreadShape) -> bool:
    """Whether some namespace has an interrupt with no checkpoint after it."""
    for ns_shape in shape.namespaces.values():
        children = children_of(ns_shape.nodes)
        if any(n.interrupted and cid not in children for cid, n in ns_shape.nodes.items()):
            return True
    return False


def snapshot_value(spec: BaseChannel, channel: BaseChannel) -> tuple[bool, Any]:
    """The value to store for a rebuilt channel, as the runtime itself would store it:
    `DeltaSnapshot(value)` for a delta channel, the channel's checkpoint otherwise.
    `(False, None)` when there is nothing to store (the channel is empty)."""
    from checkpointer.channels import MISSING, DeltaSnapshot

    if not channel.is_available():
        return False, None
    if isinstance(spec, DeltaChannel):
        return True, DeltaSnapshot(channel.get())
    value = channel.checkpoint()
    if value is MISSING:
        return False, None
    return True, value


def materialize_values(
    specs: Mapping[str, BaseChannel],
    channels: Iterable[str],
    histories: Mapping[str, Any],
) -> tuple[dict[str, Any], list[str]]:
    """Rebuild `channels` from their delta histories the way a reader does, and return
    (value to store per channel, channels that could not be rebuilt)."""
    from checkpointer.errors import CheckpointerError
    from checkpointer.replay import channel_from_history

    values: dict[str, Any] = {}
    failed: list[str] = []
    for name in channels:
        spec = specs.get(name)
        history = histories.get(name)
        if spec is None or history is None:
            failed.append(name)
            continue
        try:
            ok, value = snapshot_value(spec, channel_from_history(spec, history))
        except CheckpointerError:
            ok, value = False, None
        if ok:
            values[name] = value
        else:
            failed.append(name)
    return values, failed


def thread_summary_order(sort: str) -> Any:
    """Sort key for `ThreadSummary` lists (ties broken by thread id), as SQL orders them."""
    if sort == "updated":
        return lambda s: (s.updated_at, s.thread_id)
    if sort == "count":
        return lambda s: (s.checkpoint_count, s.thread_id)
    if sort == "bytes":
        return lambda s: (s.bytes, s.thread_id)
    return lambda s: s.thread_id


def ttl_outcome(shape: ThreadShape) -> ThreadOutcome:
    """The outcome of deleting a whole thread, measured on its shape."""
    outcome = ThreadOutcome(
        shape.thread_id, checkpoints_before=shape.checkpoint_count, thread_deleted=True
    )
    for ns in sorted(shape.namespaces):
        ns_shape = shape.namespaces[ns]
        for node in ns_shape.nodes.values():
            outcome.writes_deleted += node.writes
            outcome.bytes_freed += node.size + node.writes_size
        outcome.blobs_deleted += len(ns_shape.blobs)
        outcome.bytes_freed += sum(ns_shape.blobs.values())
    return outcome
