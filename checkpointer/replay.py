"""From task writes to channel values and checkpoints, and back from checkpoints to channels.

This is the engine both runtimes share:
- `apply_writes` merges one superstep's task writes into the channels;
- `plan_delta_snapshots` + `create_checkpoint` decide which delta channels store a full
  `DeltaSnapshot` this step and build the checkpoint to save;
- `channels_from_checkpoint` rebuilds channels from a saved checkpoint, replaying every delta
  channel that has no stored value from ONE `get_delta_channel_history` call.
"""

from __future__ import annotations

import logging
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from checkpointer.channels import (
    MISSING,
    BaseChannel,
    BinaryOperatorAggregate,
    DeltaChannel,
    DeltaSnapshot,
)
from checkpointer.errors import HistoryUnavailableError
from checkpointer.ids import channel_version_counter, new_checkpoint_id
from checkpointer.types import (
    CHECKPOINT_FORMAT_VERSION,
    ERROR,
    INTERRUPT,
    RESUME,
    ChannelVersion,
    Checkpoint,
    CheckpointMetadata,
    DeltaChannelHistory,
    RunnableConfig,
    utc_now_iso,
)

logger = logging.getLogger(__name__)

DELTA_MAX_SUPERSTEPS_ENV = "CHECKPOINTER_DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT"


def _max_supersteps_from_env() -> int:
    raw = os.environ.get(DELTA_MAX_SUPERSTEPS_ENV, "5000")
    message = f"{DELTA_MAX_SUPERSTEPS_ENV} must be a positive integer, got {raw!r}"
    try:
        value = int(raw)
    except ValueError as exc:
        raise ValueError(message) from exc
    if value <= 0:
        raise ValueError(message)
    return value


DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT: int = _max_supersteps_from_env()
"""Upper bound on supersteps between two snapshots of a delta channel, written or not."""

# Writes to these channels carry control information for the runtime, not channel updates.
CONTROL_CHANNELS = frozenset({ERROR, INTERRUPT, RESUME, "__no_writes__", "__return__"})

GetNextVersion = Callable[[ChannelVersion | None], ChannelVersion]
DeltaCounters = dict[str, tuple[int, int]]


class WritesTask(Protocol):
    """What `apply_writes` needs of a task: who ran, in which order, what it read and wrote."""

    @property
    def name(self) -> str: ...

    @property
    def path(self) -> str: ...

    @property
    def triggers(self) -> Sequence[str]: ...

    @property
    def writes(self) -> Sequence[tuple[str, Any]]: ...


@dataclass(frozen=True, slots=True)
class TaskWrites:
    """A plain `WritesTask`, for callers that have the writes but no task object."""

    name: str
    writes: Sequence[tuple[str, Any]]
    triggers: Sequence[str] = ()
    path: str = ""


# ------------------------------------------------------------------ apply_writes
def apply_writes(
    checkpoint: Checkpoint,
    channels: Mapping[str, BaseChannel],
    tasks: Iterable[WritesTask],
    get_next_version: GetNextVersion | None,
    trigger_to_nodes: Mapping[str, Sequence[str]] | None = None,
) -> set[str]:
    """Merge one superstep's writes into `channels`; returns the channels that changed.

    Mutates `checkpoint["versions_seen"]` and `checkpoint["channel_versions"]`: every
    channel changed in the step gets the same next version.
    """
    ordered = sorted(tasks, key=lambda t: t.path)
    bump_step = any(t.triggers for t in ordered)
    versions = checkpoint["channel_versions"]

    for task in ordered:
        seen = checkpoint["versions_seen"].setdefault(task.name, {})
        seen.update({ch: versions[ch] for ch in task.triggers if ch in versions})

    next_version = None
    if get_next_version is not None:
        next_version = get_next_version(_max_version(versions.values()))

    def mark(channel: str, changed: bool, updated: set[str]) -> None:
        if changed and next_version is not None:
            versions[channel] = next_version
            if channels[channel].is_available():
                updated.add(channel)

    updated: set[str] = set()
    consumed = {ch for t in ordered for ch in t.triggers if ch in channels}
    for channel in sorted(consumed):
        if channels[channel].consume() and next_version is not None:
            versions[channel] = next_version

    by_channel: dict[str, list[Any]] = defaultdict(list)
    for task in ordered:
        for channel, value in task.writes:
            if channel in CONTROL_CHANNELS:
                continue
            if channel in channels:
                by_channel[channel].append(value)
            else:
                logger.warning("task %s wrote to unknown channel %r; ignored", task.name, channel)

    for channel, values in by_channel.items():
        mark(channel, channels[channel].update(values), updated)

    # A step that ran tasks tells every other channel that a step passed (some clear).
    if bump_step:
        for channel, ch in channels.items():
            if channel not in updated and ch.is_available():
                mark(channel, ch.update([]), updated)

    # Nothing left that could trigger a node: this is tentatively the last step.
    if bump_step and updated.isdisjoint(trigger_to_nodes or {}):
        for channel, ch in channels.items():
            mark(channel, ch.finish(), updated)
    return updated


def _max_version(versions: Iterable[ChannelVersion]) -> ChannelVersion | None:
    values = list(versions)
    if not values:
        return None
    return max(values, key=_version_sort_key)


def _version_sort_key(version: ChannelVersion) -> tuple[int, str]:
    return (channel_version_counter(version), str(version))


# ------------------------------------------------------------ delta snapshots
def delta_channels_to_snapshot(
    channels: Mapping[str, BaseChannel],
    counters: Mapping[str, tuple[int, int]],
    channel_versions: Mapping[str, ChannelVersion],
    *,
    max_supersteps: int | None = None,
) -> set[str]:
    """Delta channels due for a snapshot (pure: changes nothing).

    Due when available, versioned, and either its updates since the last snapshot reached
    its `snapshot_frequency` or the supersteps since then reached the global bound.
    """
    bound = DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT if max_supersteps is None else max_supersteps
    due: set[str] = set()
    for name, ch in channels.items():
        if not isinstance(ch, DeltaChannel) or not ch.is_available():
            continue
        if name not in channel_versions:
            continue
        updates, supersteps = counters.get(name, (0, 0))
        if updates >= ch.snapshot_frequency or supersteps >= bound:
            due.add(name)
    return due


def advance_delta_counters(
    previous: Mapping[str, Sequence[int]] | None,
    delta_channels: Iterable[str],
    updated_channels: Iterable[str],
) -> DeltaCounters:
    """Counters after one more saved checkpoint: every delta channel saw a superstep, the
    written ones an update too."""
    prev = previous or {}
    written = set(updated_channels)
    out: DeltaCounters = {}
    for name in delta_channels:
        updates, supersteps = prev.get(name, (0, 0))
        out[name] = (int(updates) + (name in written), int(supersteps) + 1)
    return out


@dataclass(slots=True)
class DeltaPlan:
    """Which delta channels snapshot in the next checkpoint, and the counters to store."""

    to_snapshot: set[str]
    counters: DeltaCounters = field(default_factory=dict)

    def apply_to(self, metadata: CheckpointMetadata) -> CheckpointMetadata:
        """Store the non-zero counters in `metadata` (and drop a stale entry)."""
        if self.counters:
            metadata["counters_since_delta_snapshot"] = dict(self.counters)
        else:
            metadata.pop("counters_since_delta_snapshot", None)
        return metadata


def plan_delta_snapshots(
    channels: Mapping[str, BaseChannel],
    previous_metadata: Mapping[str, Any] | None,
    updated_channels: Iterable[str],
    channel_versions: Mapping[str, ChannelVersion],
    *,
    forced: Iterable[str] = (),
    root: bool = False,
    max_supersteps: int | None = None,
) -> DeltaPlan:
    """Advance the counters, pick the channels to snapshot, reset theirs.

    `forced` adds channels that must snapshot whatever their counters say: after an
    `Overwrite`, and on the first checkpoint of a fork. `root=True` (a checkpoint without
    parent) snapshots every delta channel with a value: there is no history to replay.
    """
    delta_names = [k for k, ch in channels.items() if isinstance(ch, DeltaChannel)]
    if root:
        forced = delta_names
    previous = (previous_metadata or {}).get("counters_since_delta_snapshot")
    counters = advance_delta_counters(previous, delta_names, updated_channels)
    due = delta_channels_to_snapshot(
        channels, counters, channel_versions, max_supersteps=max_supersteps
    )
    due |= {
        k
        for k in forced
        if isinstance(channels.get(k), DeltaChannel) and channels[k].is_available()
    }
    for name in due:
        counters[name] = (0, 0)
    return DeltaPlan(due, {k: v for k, v in counters.items() if v != (0, 0)})


def create_checkpoint(
    checkpoint: Checkpoint,
    channels: Mapping[str, BaseChannel] | None,
    step: int,
    *,
    id: str | None = None,
    updated_channels: Iterable[str] | None = None,
    get_next_version: GetNextVersion | None = None,
    channels_to_snapshot: Iterable[str] = (),
    stored_versions: Mapping[str, ChannelVersion] | None = None,
) -> Checkpoint:
    """The checkpoint to save after a step: live channel values plus delta snapshots.

    A delta channel in `channels_to_snapshot` is stored as `DeltaSnapshot(value)`; the others
    are left out (their writes are their history). `put` stores blobs only for channels whose
    version moved, so a snapshot of a channel whose version equals the last saved one
    (`stored_versions`) gets a new version, and nodes that had seen the old one are moved to
    the new one so the bump triggers nothing.
    """
    snapshot = set(channels_to_snapshot)
    versions = dict(checkpoint["channel_versions"])
    versions_seen = {k: dict(v) for k, v in checkpoint["versions_seen"].items()}
    if channels is None:
        values = dict(checkpoint["channel_values"])
    else:
        values = {}
        for name, ch in channels.items():
            if name in snapshot and ch.is_available():
                old = versions.get(name)
                unchanged = stored_versions is not None and stored_versions.get(name) == old
                if get_next_version is not None and (old is None or unchanged):
                    new = get_next_version(old)
                    versions[name] = new
                    for seen in versions_seen.values():
                        if name in seen and seen[name] == old:
                            seen[name] = new
                values[name] = DeltaSnapshot(ch.get())
                continue
            if name not in versions:
                continue
            value = ch.checkpoint()
            if value is not MISSING:
                values[name] = value
    return Checkpoint(
        v=CHECKPOINT_FORMAT_VERSION,
        id=id or new_checkpoint_id(),
        ts=utc_now_iso(),
        channel_values=values,
        channel_versions=versions,
        versions_seen=versions_seen,
        updated_channels=None if updated_channels is None else sorted(updated_channels),
    )


# ----------------------------------------------------------------- hydration
class HistorySource(Protocol):
    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]: ...


class AsyncHistorySource(Protocol):
    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]: ...


def channels_needing_history(specs: Mapping[str, BaseChannel], checkpoint: Checkpoint) -> list[str]:
    """Channels whose value at `checkpoint` must be rebuilt from ancestor writes.

    A delta channel with a version but nothing stored here. A reducer channel
    (BinaryOperatorAggregate) in that state was declared as a delta channel when the thread
    was written, and is rebuilt the same way.
    """
    values = checkpoint["channel_values"]
    return [
        name
        for name, spec in specs.items()
        if isinstance(spec, DeltaChannel | BinaryOperatorAggregate)
        and name in checkpoint["channel_versions"]
        and name not in values
    ]


def channel_from_history(spec: BaseChannel, history: DeltaChannelHistory) -> BaseChannel:
    """A channel rebuilt from its seed (if any) and the writes after it."""
    ch = spec.from_checkpoint(history.get("seed", MISSING))
    if isinstance(ch, DeltaChannel):
        ch.replay_writes(history["writes"])
    else:
        # One update per write: the writes span many steps, and one call would refuse a
        # second Overwrite and drop what followed the first.
        for _, _, value in history["writes"]:
            ch.update([value])
    return ch


def _hydrate(
    specs: Mapping[str, BaseChannel],
    checkpoint: Checkpoint,
    histories: Mapping[str, DeltaChannelHistory],
) -> dict[str, BaseChannel]:
    values = checkpoint["channel_values"]
    out: dict[str, BaseChannel] = {}
    for name, spec in specs.items():
        if name in histories:
            out[name] = channel_from_history(spec, histories[name])
        else:
            out[name] = spec.from_checkpoint(values.get(name, MISSING))
    return out


def _require_history_source(needed: list[str], saver: object, config: object) -> None:
    if needed and (saver is None or config is None):
        raise HistoryUnavailableError(
            f"delta channel(s) {needed} must be rebuilt from ancestor writes, but no saver "
            "and config were given to read them"
        )


def channels_from_checkpoint(
    specs: Mapping[str, BaseChannel],
    checkpoint: Checkpoint,
    *,
    saver: HistorySource | None = None,
    config: RunnableConfig | None = None,
) -> dict[str, BaseChannel]:
    """Channels holding the state of `checkpoint`; delta channels replayed in one call."""
    needed = channels_needing_history(specs, checkpoint)
    _require_history_source(needed, saver, config)
    histories: Mapping[str, DeltaChannelHistory] = {}
    if needed and saver is not None and config is not None:
        histories = saver.get_delta_channel_history(config=config, channels=needed)
    return _hydrate(specs, checkpoint, histories)


async def achannels_from_checkpoint(
    specs: Mapping[str, BaseChannel],
    checkpoint: Checkpoint,
    *,
    saver: AsyncHistorySource | None = None,
    config: RunnableConfig | None = None,
) -> dict[str, BaseChannel]:
    """Async `channels_from_checkpoint`."""
    needed = channels_needing_history(specs, checkpoint)
    _require_history_source(needed, saver, config)
    histories: Mapping[str, DeltaChannelHistory] = {}
    if needed and saver is not None and config is not None:
        histories = await saver.aget_delta_channel_history(config=config, channels=needed)
    return _hydrate(specs, checkpoint, histories)


def read_channel_values(channels: Mapping[str, BaseChannel]) -> dict[str, Any]:
    """The readable value of every available channel (what a node or a user sees)."""
    return {name: ch.get() for name, ch in channels.items() if ch.is_available()}
