"""The saver API every backend implements, sync and async, and what they can share.

A backend overrides the sync methods, the async ones, or both. What it does not override:
- the async methods run the sync ones in a worker thread (a sync saver serves `ainvoke`);
- `get_delta_channel_history` walks the parent chain through `get_tuple`, visiting each
  ancestor once for all channels. Backends with direct storage access replace it with one
  query.
"""

from __future__ import annotations

import asyncio
import builtins
import json
import json.encoder
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from json.encoder import encode_basestring
from typing import Any, Literal

from checkpointer.channels import BaseChannel
from checkpointer.errors import (
    CheckpointerError,
    ConfigError,
    CorruptHistoryError,
    CorruptValueError,
    ParentLoopError,
    ParentMismatchError,
    SerializationError,
)
from checkpointer.ids import next_channel_version
from checkpointer.lifecycle import (
    THREAD_SORTS,
    KeepLast,
    RetentionPolicy,
    RetentionReport,
    SpaceReport,
    ThreadSort,
    ThreadSummary,
)
from checkpointer.savers.metadata import (
    MAX_METADATA_DEPTH,
    filter_path,
    too_deep,
)
from checkpointer.savers.metadata import (
    metadata_matches as metadata_matches,  # re-exported: the rule every saver applies
)
from checkpointer.serde import Serializer, default_serializer
from checkpointer.types import (
    ChannelVersion,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    RunnableConfig,
    check_id,
    checkpoint_id_of,
)

PruneStrategy = Literal["keep_latest", "delete"]
PRUNE_STRATEGIES: tuple[str, ...] = ("keep_latest", "delete")


def _refuse_json(value: Any) -> Any:
    raise SerializationError(
        f"metadata values must be JSON (str, int, float, bool, None, list, dict); "
        f"got {type(value).__name__}: {value!r:.80}"
    )


# CPython's C encoder, which `JSONEncoder` uses when it can (None elsewhere).
_c_make_encoder: Callable[..., Callable[[Any, int], Sequence[str]]] | None = getattr(
    json.encoder, "c_make_encoder", None
)

# Built once: json.dumps with options builds a new encoder on every call.
_METADATA_ENCODER = json.JSONEncoder(
    ensure_ascii=False,
    sort_keys=True,
    separators=(",", ":"),
    allow_nan=False,
    default=_refuse_json,
)


class _QuotedStrings(dict[str, str]):
    """The JSON text (`encode_basestring`) of the short strings a thread encoded last,
    looked up by `dict.__getitem__` in C: the keys, channel names and versions that every
    record and metadata of a thread repeats are escaped once (a character at a time, the
    larger part of encoding a record), not at every put. Emptied when full."""

    __slots__ = ()

    def __missing__(self, text: str) -> str:
        quoted: str = encode_basestring(text)
        if len(text) <= _QUOTED_MAX_LENGTH:
            if len(self) >= _QUOTED_ENTRIES:
                self.clear()
            self[text] = quoted
        return quoted


_QUOTED_MAX_LENGTH = 256
_QUOTED_ENTRIES = 4096


class CompactJsonEncoder(threading.local):
    """`encoder.encode` through CPython's C encoder, built once per thread:
    `JSONEncoder.encode` (and `json.dumps` with options) builds one on every call, which is
    half the cost of encoding a checkpoint's metadata or record. Same text, same errors.

    `markers` is where the encoder tracks the containers it is inside (circular references
    fail as with `encode`); a failure can leave entries behind, so it is emptied then.
    """

    def __init__(self, encoder: json.JSONEncoder) -> None:
        self.fallback = encoder
        self.busy = False
        self.markers: dict[int, Any] = {}
        self.encode: Callable[[Any, int], Sequence[str]] | None = None
        if _c_make_encoder is not None and encoder.indent is None and not encoder.ensure_ascii:
            self.encode = _c_make_encoder(
                self.markers if encoder.check_circular else None,
                encoder.default,
                _QuotedStrings().__getitem__,
                None,
                encoder.key_separator,
                encoder.item_separator,
                encoder.sort_keys,
                encoder.skipkeys,
                encoder.allow_nan,
            )

    def __call__(self, obj: Any) -> str:
        if self.encode is None or self.busy:  # no C encoder; or called back from `default`
            return self.fallback.encode(obj)
        self.busy = True
        try:
            return "".join(self.encode(obj, 0))
        except BaseException:
            self.markers.clear()
            raise
        finally:
            self.busy = False


_encode_metadata = CompactJsonEncoder(_METADATA_ENCODER)


_scan_json: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def loads_json(text: str | bytes) -> Any:
    """`json.loads(text)`, through the C scanner straight when it takes the whole text (a
    record or metadata as the savers write them: no whitespace around it): json.loads' own
    layers (type checks, two whitespace matches) cost as much as scanning a checkpoint's
    metadata, read for every checkpoint. Anything else (bytes, whitespace, damage) goes
    through json.loads, which gives its value or its error."""
    if type(text) is str:
        try:
            value, end = _scan_json(text, 0)
        except (StopIteration, ValueError, RecursionError):
            return json.loads(text)
        if end == len(text):
            return value
    return json.loads(text)


def dumps_json(obj: Any) -> str:
    """Metadata as compact JSON with sorted keys (equal dicts give equal text).

    Every saver stores metadata this way or checks it can, so all refuse the same inputs:
    NaN and infinities (not JSON), lone surrogates (not UTF-8) and nesting deeper than
    `MAX_METADATA_DEPTH`, with SerializationError.
    """
    try:
        text = _encode_metadata(obj)
        if not text.isascii():
            text.encode("utf-8")
    except RecursionError:
        raise _too_deep() from None
    except SerializationError:
        raise
    except UnicodeEncodeError as exc:
        raise SerializationError(
            f"metadata holds a string that is not valid UTF-8 (a lone surrogate): {exc}"
        ) from exc
    except (TypeError, ValueError) as exc:
        raise SerializationError(f"cannot store metadata as JSON: {exc}") from exc
    # Nesting is at most the number of brackets (counted in C); only metadata with more of
    # them than the bound is measured exactly.
    if text.count("{") + text.count("[") > MAX_METADATA_DEPTH and too_deep(obj):
        raise _too_deep()
    return text


def _too_deep() -> SerializationError:
    return SerializationError(
        f"metadata nests lists/objects more than {MAX_METADATA_DEPTH} levels deep; "
        "keep deep structures in channel state"
    )


def validate_metadata_filter(filter: Mapping[str, Any] | None) -> dict[str, Any]:
    """Check `list(filter=...)` before any backend sees it (the matching rule is in
    `checkpointer.savers.metadata`).

    Keys are names of letters, digits, '_' and '-', dotted for nested keys: a key is never
    spliced into SQL, but refusing odd ones early gives a clear error instead of a query
    that silently matches nothing.
    """
    if filter is None:
        return {}
    if not isinstance(filter, Mapping):
        raise ConfigError(f"filter must be a dict of metadata key -> value, got {filter!r:.200}")
    for key in filter:
        filter_path(key)
    try:
        dumps_json(dict(filter))
    except SerializationError as exc:
        raise ConfigError(f"invalid metadata filter value: {exc}") from exc
    return dict(filter)


def validate_prune_strategy(strategy: str) -> None:
    if not isinstance(strategy, str) or strategy not in PRUNE_STRATEGIES:
        raise ConfigError(
            f"unknown prune strategy {strategy!r}; expected one of {', '.join(PRUNE_STRATEGIES)}"
        )


def validate_limit(limit: Any) -> int | None:
    """`list(limit=...)`: None (no limit) or an int >= 0."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
        raise ConfigError(f"limit must be an int >= 0 or None (no limit), got {limit!r:.80}")
    return limit


def validate_thread_listing(sort: str, limit: int | None, offset: int) -> None:
    """Check `list_threads` arguments before any backend sees them."""
    if sort not in THREAD_SORTS:
        raise ConfigError(f"unknown sort {sort!r}; expected one of {', '.join(THREAD_SORTS)}")
    for name, value in (("limit", limit), ("offset", offset)):
        if value is None and name == "limit":
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(f"{name} must be an int >= 0, got {value!r}")


def validate_ttl(ttl: timedelta | None) -> float | None:
    """A thread TTL in seconds (None: never expires)."""
    if ttl is None:
        return None
    if not isinstance(ttl, timedelta) or ttl <= timedelta(0):
        raise ConfigError(f"ttl must be a positive timedelta or None, got {ttl!r}")
    return ttl.total_seconds()


def resolve_now(now: datetime | None) -> datetime:
    """The clock a lifecycle operation measures ages against (injectable for tests and
    for "what would go next week" dry runs)."""
    if now is None:
        return datetime.now(UTC)
    if not isinstance(now, datetime):
        raise ConfigError(f"now must be a datetime, got {now!r}")
    return now if now.tzinfo is not None else now.replace(tzinfo=UTC)


def metadata_counters_as_pairs(
    metadata: dict[str, Any], where: Mapping[str, str | None] | None = None
) -> dict[str, Any]:
    """Metadata decoded from JSON, with the delta counters back as the pairs they were (JSON
    has no tuples). Counters of another shape were not written by a saver: CorruptValueError
    naming `where`."""
    counters = metadata.get("counters_since_delta_snapshot")
    if counters is None:
        return metadata
    where = where or {}
    if type(counters) is not dict:
        raise CorruptValueError("metadata counters_since_delta_snapshot is not an object", **where)
    pairs: dict[str, tuple[Any, Any]] = {}
    for k, v in counters.items():
        if type(v) is not list or len(v) != 2:
            raise CorruptValueError(
                f"metadata counters_since_delta_snapshot[{k!r}] is not a pair", **where
            )
        pairs[k] = (v[0], v[1])
    metadata["counters_since_delta_snapshot"] = pairs
    return metadata


def parent_id_for_put(config: RunnableConfig, checkpoint: Checkpoint) -> str | None:
    """The parent a `put` links to; a checkpoint cannot be its own parent."""
    parent_id = checkpoint_id_of(config)
    if parent_id is not None and parent_id == checkpoint["id"]:
        raise ConfigError(
            f"put(): config addresses checkpoint {parent_id!r} itself as the parent; "
            "pass the config of the previous checkpoint"
        )
    return parent_id


def runs_still_needed(
    thread_id: str, checkpoint_id: str, needed: Iterable[str]
) -> CheckpointerError:
    """`delete_for_runs` refused: a kept checkpoint rebuilds its delta channels from
    checkpoints of the doomed runs (the same words on every saver)."""
    return CheckpointerError(
        f"cannot delete these runs: checkpoint {checkpoint_id} of thread {thread_id!r} "
        f"rebuilds its delta channels from checkpoint(s) {sorted(needed)} they "
        "created; delete the later runs too, or prune the thread first"
    )


def put_parent_loop(thread_id: str, ns: str, checkpoint_id: str) -> ParentLoopError:
    return ParentLoopError(
        f"put(): checkpoint {checkpoint_id!r} is new, but a checkpoint stored in thread "
        f"{thread_id!r}, namespace {ns!r} already names it as its parent; storing it now "
        "could close a loop of parent pointers. Save parents before their children, or "
        "save it under a new checkpoint id. Nothing was written"
    )


def put_parent_mismatch(
    thread_id: str, ns: str, checkpoint_id: str, stored: str | None, given: str | None
) -> ParentMismatchError:
    err = ParentMismatchError(
        f"put(): checkpoint {checkpoint_id!r} of thread {thread_id!r}, namespace {ns!r} is "
        f"stored with parent {stored!r}; saving it again with parent {given!r} would move "
        "it in the history. Re-save it with its own parent, or save a new checkpoint id. "
        "Nothing was written"
    )
    err.stored_parent_id = stored
    return err


def history_loop(thread_id: str, ns: str, checkpoint_id: str) -> CorruptHistoryError:
    """The error every ancestor walk raises when it reaches a checkpoint a second time."""
    return CorruptHistoryError(
        "parent pointers loop: walking the ancestors came back to this checkpoint; "
        "the thread's history is damaged (edit parent_checkpoint_id to break the loop, "
        "or restore the thread)",
        thread_id=thread_id,
        checkpoint_ns=ns,
        checkpoint_id=checkpoint_id,
    )


def new_blob_channels(
    checkpoint: Checkpoint, new_versions: ChannelVersions
) -> dict[str, tuple[ChannelVersion, Any]]:
    """The `(version, value)` pairs `put` must store: only channels whose version moved and
    that have a value in this checkpoint. Everything else keeps pointing at older blobs."""
    values = checkpoint["channel_values"]
    return {ch: (version, values[ch]) for ch, version in new_versions.items() if ch in values}


class BaseCheckpointSaver:
    """Where checkpoints, their channel values and pending writes are stored."""

    serde: Serializer

    def __init__(self, *, serde: Serializer | None = None) -> None:
        self.serde = serde or default_serializer()

    # ------------------------------------------------------------------ sync
    def get(self, config: RunnableConfig) -> Checkpoint | None:
        tup = self.get_tuple(config)
        return tup.checkpoint if tup else None

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        raise NotImplementedError

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        raise NotImplementedError

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        raise NotImplementedError

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        raise NotImplementedError

    def delete_thread(self, thread_id: str) -> None:
        raise NotImplementedError

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        raise NotImplementedError

    def copy_thread(
        self, source_thread_id: str, target_thread_id: str, *, replace: bool = False
    ) -> None:
        """Copy a thread's whole history to `target_thread_id`. A target that already holds
        checkpoints is refused (ThreadExistsError) unless `replace=True`, which deletes it
        first, in the same transaction on SQL savers: two histories never merge."""
        raise NotImplementedError

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        raise NotImplementedError

    # ------------------------------------------------------------ lifecycle
    def apply_retention(
        self,
        policy: RetentionPolicy,
        *,
        thread_ids: Sequence[str] | None = None,
        channels: Mapping[str, BaseChannel] | None = None,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> RetentionReport:
        """Trim threads (all of them when `thread_ids` is None) by `policy`.

        Kept checkpoints always read back exactly as before: pinned checkpoints, each
        namespace's head and interrupts still waiting for an answer stay with their pending
        writes, and so do the ancestors kept checkpoints replay delta channels from, unless
        `channels` (name -> channel spec, e.g. `channels_from_schema(State)` or
        `graph.spec.channels`) lets the saver store a snapshot on the oldest kept checkpoint
        instead. `dry_run=True` changes nothing and reports what would go.
        """
        raise NotImplementedError

    def compact(
        self,
        thread_id: str,
        *,
        channels: Mapping[str, BaseChannel],
        keep_recent: int = 1,
        dry_run: bool = False,
    ) -> RetentionReport:
        """Fold a thread's long delta history into a snapshot plus its `keep_recent` newest
        checkpoints per namespace (with their writes); everything older goes."""
        check_id(thread_id, "thread_id")
        report = self.apply_retention(
            KeepLast(keep_recent), thread_ids=[thread_id], channels=channels, dry_run=dry_run
        )
        report.policy = f"compact, keeping {keep_recent} recent checkpoint(s)"
        return report

    def pin(self, config: RunnableConfig) -> RunnableConfig:
        """Protect a checkpoint (the thread's latest when `config` names none) from every
        retention policy, and its thread from TTL expiry. Returns the pinned checkpoint's
        config; raises CheckpointNotFoundError if there is none."""
        raise NotImplementedError

    def unpin(self, config: RunnableConfig) -> None:
        """Undo `pin` (a checkpoint that is not pinned is left as it is)."""
        raise NotImplementedError

    def list_pinned(self, thread_id: str) -> builtins.list[RunnableConfig]:
        """Configs of a thread's pinned checkpoints, newest first."""
        raise NotImplementedError

    def list_threads(
        self,
        *,
        sort: ThreadSort = "updated",
        descending: bool = True,
        limit: int | None = 100,
        offset: int = 0,
        thread_ids: Sequence[str] | None = None,
    ) -> builtins.list[ThreadSummary]:
        """Thread summaries sorted by last update, checkpoint count, bytes or id, without
        reading checkpoints (SQL savers keep a summary row per thread up to date)."""
        raise NotImplementedError

    def set_thread_ttl(self, thread_id: str, ttl: timedelta | None) -> None:
        """Expire the thread `ttl` after its last write (None: never); see sweep_expired."""
        raise NotImplementedError

    def sweep_expired(
        self, *, now: datetime | None = None, dry_run: bool = False
    ) -> RetentionReport:
        """Delete every thread whose TTL has run out (threads with a pinned checkpoint stay)."""
        raise NotImplementedError

    def reclaim_space(self, *, full: bool = False) -> SpaceReport:
        """Give space freed by deletions back to the file system where the backend allows
        (SQLite: incremental vacuum and WAL truncation; `full=True` rewrites the file).
        PostgreSQL: VACUUM (`full=True`: VACUUM FULL, which locks the tables)."""
        return SpaceReport(None, None)

    def refresh_thread_summaries(self, thread_ids: Sequence[str] | None = None) -> int:
        """Recompute thread summaries from the stored rows (repairs drift); returns how
        many threads were refreshed."""
        return 0

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Seed and writes for each channel, walking parents from `config`'s checkpoint.

        Each ancestor is read once for all channels. A channel stops at the nearest ancestor
        that stores a value for it (any stored value, None included); that ancestor's own
        pending writes are part of the history, the target's are not.
        """
        if not channels:
            return {}
        walk = _HistoryWalk(channels)
        target = self.get_tuple(config)
        cursor = target.parent_config if target else None
        seen = {checkpoint_id_of(target.config)} if target else set()
        while cursor is not None and walk.remaining:
            tup = self.get_tuple(cursor)
            if tup is None:
                break
            here = checkpoint_id_of(tup.config)
            if here in seen:
                conf = tup.config["configurable"]
                raise history_loop(conf["thread_id"], conf.get("checkpoint_ns", ""), str(here))
            seen.add(here)
            walk.visit(tup)
            cursor = tup.parent_config
        return walk.result()

    def get_next_version(self, current: ChannelVersion | None, channel: Any = None) -> str:
        """Next version string for a channel: increasing, and unique across forks."""
        return next_channel_version(current)

    # ----------------------------------------------------------------- async
    async def aget(self, config: RunnableConfig) -> Checkpoint | None:
        tup = await self.aget_tuple(config)
        return tup.checkpoint if tup else None

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        items = await asyncio.to_thread(
            lambda: list(self.list(config, filter=filter, before=before, limit=limit))
        )
        for item in items:
            yield item

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(
        self, source_thread_id: str, target_thread_id: str, *, replace: bool = False
    ) -> None:
        await asyncio.to_thread(
            lambda: self.copy_thread(source_thread_id, target_thread_id, replace=replace)
        )

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await asyncio.to_thread(
            lambda: self.get_delta_channel_history(config=config, channels=channels)
        )

    async def aapply_retention(
        self,
        policy: RetentionPolicy,
        *,
        thread_ids: Sequence[str] | None = None,
        channels: Mapping[str, BaseChannel] | None = None,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> RetentionReport:
        return await asyncio.to_thread(
            lambda: self.apply_retention(
                policy, thread_ids=thread_ids, channels=channels, dry_run=dry_run, now=now
            )
        )

    async def acompact(
        self,
        thread_id: str,
        *,
        channels: Mapping[str, BaseChannel],
        keep_recent: int = 1,
        dry_run: bool = False,
    ) -> RetentionReport:
        check_id(thread_id, "thread_id")
        report = await self.aapply_retention(
            KeepLast(keep_recent), thread_ids=[thread_id], channels=channels, dry_run=dry_run
        )
        report.policy = f"compact, keeping {keep_recent} recent checkpoint(s)"
        return report

    async def apin(self, config: RunnableConfig) -> RunnableConfig:
        return await asyncio.to_thread(self.pin, config)

    async def aunpin(self, config: RunnableConfig) -> None:
        await asyncio.to_thread(self.unpin, config)

    async def alist_pinned(self, thread_id: str) -> builtins.list[RunnableConfig]:
        return await asyncio.to_thread(self.list_pinned, thread_id)

    async def alist_threads(
        self,
        *,
        sort: ThreadSort = "updated",
        descending: bool = True,
        limit: int | None = 100,
        offset: int = 0,
        thread_ids: Sequence[str] | None = None,
    ) -> builtins.list[ThreadSummary]:
        return await asyncio.to_thread(
            lambda: self.list_threads(
                sort=sort,
                descending=descending,
                limit=limit,
                offset=offset,
                thread_ids=thread_ids,
            )
        )

    async def aset_thread_ttl(self, thread_id: str, ttl: timedelta | None) -> None:
        await asyncio.to_thread(self.set_thread_ttl, thread_id, ttl)

    async def asweep_expired(
        self, *, now: datetime | None = None, dry_run: bool = False
    ) -> RetentionReport:
        return await asyncio.to_thread(lambda: self.sweep_expired(now=now, dry_run=dry_run))

    async def areclaim_space(self, *, full: bool = False) -> SpaceReport:
        return await asyncio.to_thread(lambda: self.reclaim_space(full=full))

    async def arefresh_thread_summaries(self, thread_ids: Sequence[str] | None = None) -> int:
        return await asyncio.to_thread(self.refresh_thread_summaries, thread_ids)


class _HistoryWalk:
    """Accumulates a parent-chain walk, newest ancestor first, for several channels at once."""

    def __init__(self, channels: Sequence[str]) -> None:
        self.channels = list(dict.fromkeys(channels))
        self.remaining = set(self.channels)
        self._collected: dict[str, list[PendingWrite]] = {c: [] for c in self.channels}
        self._seeds: dict[str, Any] = {}

    def visit(self, tup: CheckpointTuple) -> None:
        self.visit_parts(tup.pending_writes or [], tup.checkpoint["channel_values"])

    def visit_parts(
        self, pending_writes: Sequence[PendingWrite], values: Mapping[str, Any]
    ) -> None:
        """One ancestor: its pending writes (oldest first) and its stored values; only the
        still-unseeded channels matter, so a saver may pass just those."""
        # The walk goes newest first: collect each checkpoint's writes reversed and flip
        # the whole list at the end.
        for write in reversed(pending_writes):
            if write[1] in self.remaining:
                self._collected[write[1]].append(write)
        for ch in list(self.remaining):
            if ch in values:
                self._seeds[ch] = values[ch]
                self.remaining.discard(ch)

    def result(self) -> dict[str, DeltaChannelHistory]:
        out: dict[str, DeltaChannelHistory] = {}
        for ch in self.channels:
            entry: DeltaChannelHistory = {"writes": self._collected[ch][::-1]}
            if ch in self._seeds:
                entry["seed"] = self._seeds[ch]
            out[ch] = entry
        return out
