"""In-memory saver: the whole API without a database, for tests and short-lived processes.

Values are stored serialized, as a database would hold them, so a caller mutating a value
after `put` cannot change what was saved, and a type the serializer cannot round-trip fails
here as it would in production.
"""

from __future__ import annotations

import builtins
import json
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from dataclasses import replace as _replace
from datetime import UTC, datetime, timedelta
from functools import partial
from operator import attrgetter, itemgetter
from typing import Any

from checkpointer.channels import BaseChannel
from checkpointer.errors import (
    CheckpointerError,
    CheckpointNotFoundError,
    CorruptHistoryError,
    ThreadExistsError,
)
from checkpointer.lifecycle import (
    IdleThreadTTL,
    KeepLast,
    RetentionPolicy,
    RetentionReport,
    ThreadOutcome,
    ThreadSort,
    ThreadSummary,
    validate_policy,
)
from checkpointer.savers.base import (
    BaseCheckpointSaver,
    _HistoryWalk,
    dumps_json,
    history_loop,
    metadata_counters_as_pairs,
    metadata_matches,
    parent_id_for_put,
    put_parent_loop,
    put_parent_mismatch,
    resolve_now,
    validate_limit,
    validate_metadata_filter,
    validate_prune_strategy,
    validate_thread_listing,
    validate_ttl,
)
from checkpointer.savers.retention import (
    NamespaceShape,
    NodeShape,
    ThreadPlan,
    ThreadShape,
    delta_channels_of,
    has_pending_interrupt,
    materialize_values,
    parse_ts,
    plan_thread,
    thread_summary_order,
    ttl_outcome,
)
from checkpointer.serde import Serializer
from checkpointer.serde.located import (
    ValueLocation,
    batch_loader,
    dumps_at,
    is_located,
    relocate,
    value_reader,
)
from checkpointer.types import (
    INTERRUPT,
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    RunnableConfig,
    check_id,
    check_ids,
    check_put_ids,
    checkpoint_id_of,
    checkpoint_ns_of,
    config_address,
    is_special_batch,
    make_config,
    thread_id_of,
    write_idx,
)

Typed = tuple[str, bytes]
BlobKey = tuple[str, str, str, str]  # thread, namespace, channel, version
BlobSizes = dict[tuple[str, str], dict[tuple[str, str], int]]
"""(thread, namespace) -> (channel, version) -> bytes of the stored value."""


@dataclass(slots=True)
class _StoredWrite:
    task_id: str
    idx: int
    channel: str
    value: Typed
    task_path: str


@dataclass(slots=True)
class _StoredCheckpoint:
    """A checkpoint row: the record without its values, which live in the blob store."""

    record: Typed
    metadata: str  # JSON text, as the SQL savers store it: one encoding, the same round trip
    parent_id: str | None
    channel_versions: ChannelVersions
    run_id: str | None
    writes: dict[tuple[str, int], _StoredWrite] = field(default_factory=dict)
    ts: str | None = None
    pinned: bool = False
    delta_channels: frozenset[str] = frozenset()


@dataclass(slots=True)
class _ThreadMeta:
    """What the SQL savers keep in their summary table: first and last write, TTL."""

    created_at: datetime
    updated_at: datetime
    ttl: timedelta | None = None

    @property
    def expires_at(self) -> datetime | None:
        return None if self.ttl is None else self.updated_at + self.ttl


class Namespace(dict[str, _StoredCheckpoint]):
    """A namespace's checkpoints by id, knowing its newest id: the head, where every read
    without an id starts, and `max` over a long thread costs more than the read itself.

    The head is kept (None: not known yet) as either absent or newer than every id here:
    an added id newer than it replaces it, and `head()` recomputes it if it was deleted.
    """

    __slots__ = ("_children", "_head")

    def __init__(self) -> None:
        super().__init__()
        self._head: str | None = None
        # How many checkpoints name each parent id (None: not counted yet). Kept by
        # `__setitem__`, dropped by every other change and counted again when asked.
        self._children: Counter[str] | None = None

    def __setitem__(self, checkpoint_id: str, stored: _StoredCheckpoint) -> None:
        children = self._children
        if children is not None:
            old = self.get(checkpoint_id)
            if old is not None and old.parent_id is not None:
                children[old.parent_id] -= 1
            if stored.parent_id is not None:
                children[stored.parent_id] += 1
        super().__setitem__(checkpoint_id, stored)
        head = self._head
        if head is not None and checkpoint_id > head:
            self._head = checkpoint_id

    def __delitem__(self, checkpoint_id: str) -> None:
        self._children = None
        super().__delitem__(checkpoint_id)

    def pop(self, *args: Any) -> Any:
        self._children = None
        return super().pop(*args)

    def popitem(self) -> tuple[str, _StoredCheckpoint]:
        self._children = None
        return super().popitem()

    def clear(self) -> None:
        self._children = None
        super().clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self._head = None
        self._children = None

    def setdefault(self, checkpoint_id: str, stored: _StoredCheckpoint) -> _StoredCheckpoint:
        self._head = None
        self._children = None
        return super().setdefault(checkpoint_id, stored)

    def __ior__(self, other: Any) -> Namespace:  # type: ignore[override,misc]
        self._head = None
        self._children = None
        return super().__ior__(other)

    def is_named_as_parent(self, checkpoint_id: str) -> bool:
        """Whether a checkpoint stored here names `checkpoint_id` as its parent (the loop
        rule of `put`, see `sql/parents.py`)."""
        children = self._children
        if children is None:
            children = self._children = Counter(
                s.parent_id for s in self.values() if s.parent_id is not None
            )
        return children[checkpoint_id] > 0

    def head(self) -> str:
        """The newest checkpoint id (ValueError when there is none, as `max`)."""
        head = self._head
        if head is None or head not in self:
            head = self._head = max(self)
        return head


class InMemorySaver(BaseCheckpointSaver):
    """Keeps every thread in process memory; thread-safe, lost when the process ends."""

    passes_value_locations = True
    """Every value and checkpoint record is stored and read with its `ValueLocation`
    (metadata is JSON text, as in the SQL savers: filterable, never encrypted)."""

    def __init__(self, *, serde: Serializer | None = None) -> None:
        super().__init__(serde=serde)
        self._lock = threading.RLock()
        self._threads: dict[str, dict[str, Namespace]] = {}
        self._blobs: dict[BlobKey, Typed] = {}
        # Writes may arrive before their checkpoint (no foreign key, as in SQL).
        self._orphan_writes: dict[tuple[str, str, str], dict[tuple[str, int], _StoredWrite]] = {}
        self._meta: dict[str, _ThreadMeta] = {}

    def _touch(self, thread_id: str) -> None:
        """Record a write to the thread (its summary's `updated_at`); caller holds the lock."""
        now = datetime.now(UTC)
        meta = self._meta.get(thread_id)
        if meta is None:
            self._meta[thread_id] = _ThreadMeta(now, now)
        else:
            meta.updated_at = now

    def _dump(self, value: Any, location: Callable[[], ValueLocation]) -> Typed:
        """`value` serialized for `location()`, which is only built when the serializer
        binds values to their location (most do not, and puts are a hot path)."""
        if is_located(self.serde):
            return dumps_at(self.serde, value, location())
        return self.serde.dumps_typed(value)

    # ------------------------------------------------------------- reading
    def _fast_loader(self) -> Callable[[Typed], Any] | None:
        """The serializer's batch loader for one read operation; None when it binds values
        to their location (each value is then read at its `ValueLocation`)."""
        return batch_loader(self.serde)

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        thread_id, ns, checkpoint_id = config_address(config)
        with self._lock:
            namespace = self._threads.get(thread_id, {}).get(ns)
            if not namespace:
                return None
            if checkpoint_id is None:
                checkpoint_id = namespace.head()
            stored = namespace.get(checkpoint_id)
            if stored is None:
                return None
            return self._load(thread_id, ns, checkpoint_id, stored, self._fast_loader())

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        wanted = validate_metadata_filter(filter)
        limit = validate_limit(limit)
        before_id = checkpoint_id_of(before) if before else None
        thread_filter = thread_id_of(config) if config is not None else None
        ns_filter = None
        exact_id = None
        if config is not None:
            configurable = config["configurable"]
            if "checkpoint_ns" in configurable:
                ns_filter = checkpoint_ns_of(config)
            exact_id = checkpoint_id_of(config)
        with self._lock:
            if thread_filter is None:
                threads: Iterable[tuple[str, dict[str, Namespace]]] = self._threads.items()
            else:
                found = self._threads.get(thread_filter)
                threads = () if found is None else ((thread_filter, found),)
            rows = [
                (thread_id, ns, checkpoint_id)
                for thread_id, namespaces in threads
                for ns, namespace in namespaces.items()
                if ns_filter is None or ns == ns_filter
                for checkpoint_id in namespace
                if (exact_id is None or checkpoint_id == exact_id)
                and (before_id is None or checkpoint_id < before_id)
            ]
        rows.sort(key=_row_checkpoint_id, reverse=True)
        remaining = limit
        fast = self._fast_loader()
        # The lock is taken per item, never across a yield: a caller may use the saver
        # while iterating.
        for thread_id, ns, checkpoint_id in rows:
            if remaining is not None and remaining <= 0:
                return
            with self._lock:
                namespace = self._threads.get(thread_id, {}).get(ns)
                stored = namespace.get(checkpoint_id) if namespace is not None else None
                if stored is None:
                    continue
                if wanted and not metadata_matches(_metadata(stored), wanted):
                    continue
                tup = self._load(thread_id, ns, checkpoint_id, stored, fast)
            if remaining is not None:
                remaining -= 1
            yield tup

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        if not channels:
            return {}
        thread_id, ns, target_id = config_address(config)
        walk = _HistoryWalk(channels)
        fast = self._fast_loader()
        with self._lock:
            namespace = self._threads.get(thread_id, {}).get(ns) or Namespace()
            blobs = self._blobs
            target_id = target_id or (namespace.head() if namespace else None)
            target = namespace.get(target_id) if target_id else None
            cursor = target.parent_id if target else None
            seen = {target_id} if target else set()
            while cursor is not None and walk.remaining:
                stored = namespace.get(cursor)
                if stored is None:
                    break
                if cursor in seen:
                    raise history_loop(thread_id, ns, cursor)
                seen.add(cursor)
                remaining = walk.remaining
                # Decode only what the walk still needs: writes to, and stored values of,
                # the channels without a seed yet.
                writes = [w for w in stored.writes.values() if w.channel in remaining]
                if len(writes) > 1:
                    writes.sort(key=_WRITE_ORDER)
                found: builtins.list[tuple[str, str, Typed]] = []
                for channel in remaining:
                    version = stored.channel_versions.get(channel)
                    if version is not None:
                        blob = blobs.get((thread_id, ns, channel, str(version)))
                        if blob is not None:
                            found.append((channel, str(version), blob))
                parts: builtins.list[PendingWrite] | None = None
                if fast is not None:
                    try:
                        values = {channel: fast(blob) for channel, _, blob in found}
                        parts = [(w.task_id, w.channel, fast(w.value)) for w in writes]
                    except Exception:
                        parts = None  # read again below, where a damaged value is named
                if parts is None:
                    values, parts = self._ancestor_located(thread_id, ns, cursor, found, writes)
                walk.visit_parts(parts, values)
                cursor = stored.parent_id
        return walk.result()

    def _ancestor_located(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        found: builtins.list[tuple[str, str, Typed]],
        writes: builtins.list[_StoredWrite],
    ) -> tuple[dict[str, Any], builtins.list[PendingWrite]]:
        """One ancestor's stored values and writes, each read at its location: for a
        serializer that binds locations, or when the batch loader failed (the damaged value
        then raises an error naming where it is)."""
        located = is_located(self.serde)
        read = value_reader(self.serde)
        values = {}
        for channel, version, blob in found:
            where = ValueLocation.blob(thread_id, ns, channel, version)
            values[channel] = read(
                blob,
                where if located else None,
                **{**where.where(), "checkpoint_id": checkpoint_id},
            )
        # Each write is read where it was stored: its own checkpoint and task.
        parts = [
            (
                w.task_id,
                w.channel,
                self._read_write(read, thread_id, ns, checkpoint_id, w, located),
            )
            for w in writes
        ]
        return values, parts

    def _load(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        stored: _StoredCheckpoint,
        fast: Callable[[Typed], Any] | None,
    ) -> CheckpointTuple:
        """The stored checkpoint as a tuple (caller holds the lock). `fast` (from
        `_fast_loader`) decodes every value; if one fails, the whole checkpoint is read
        again value by value, so that the damaged one raises an error naming it."""
        if fast is None:
            return self._load_located(thread_id, ns, checkpoint_id, stored)
        try:
            checkpoint: Checkpoint = fast(stored.record)
            blobs = self._blobs
            values: dict[str, Any] = {}
            for channel, version in stored.channel_versions.items():
                blob = blobs.get((thread_id, ns, channel, str(version)))
                if blob is not None:
                    values[channel] = fast(blob)
            pending: builtins.list[PendingWrite] = [
                (w.task_id, w.channel, fast(w.value)) for w in _ordered(stored.writes)
            ]
        except Exception:
            return self._load_located(thread_id, ns, checkpoint_id, stored)
        checkpoint["channel_values"] = values
        return self._tuple(thread_id, ns, checkpoint_id, stored, checkpoint, pending)

    def _load_located(
        self, thread_id: str, ns: str, checkpoint_id: str, stored: _StoredCheckpoint
    ) -> CheckpointTuple:
        """`_load`, reading each value at its location (with a located error if it fails)."""
        located = is_located(self.serde)
        read = value_reader(self.serde)
        where = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
        checkpoint: Checkpoint = read(
            stored.record,
            ValueLocation.checkpoint(thread_id, ns, checkpoint_id) if located else None,
            **where,
        )
        values: dict[str, Any] = {}
        for channel, version in stored.channel_versions.items():
            blob = self._blobs.get((thread_id, ns, channel, str(version)))
            if blob is not None:
                values[channel] = read(
                    blob,
                    ValueLocation.blob(thread_id, ns, channel, str(version)) if located else None,
                    **where,
                    channel=channel,
                    version=str(version),
                )
        checkpoint["channel_values"] = values
        pending: builtins.list[PendingWrite] = [
            (w.task_id, w.channel, self._read_write(read, thread_id, ns, checkpoint_id, w, located))
            for w in _ordered(stored.writes)
        ]
        return self._tuple(thread_id, ns, checkpoint_id, stored, checkpoint, pending)

    @staticmethod
    def _tuple(
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        stored: _StoredCheckpoint,
        checkpoint: Checkpoint,
        pending: builtins.list[PendingWrite],
    ) -> CheckpointTuple:
        parent = (
            make_config(thread_id, ns, stored.parent_id) if stored.parent_id is not None else None
        )
        return CheckpointTuple(
            make_config(thread_id, ns, checkpoint_id),
            checkpoint,
            _metadata(stored),  # type: ignore[arg-type]
            parent,
            pending,
        )

    def _read_write(
        self,
        read: Callable[..., Any],
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        write: _StoredWrite,
        located: bool,
    ) -> Any:
        """A pending write's value, read where it was stored: its checkpoint and task."""
        return read(
            write.value,
            _write_location(thread_id, ns, checkpoint_id, write) if located else None,
            thread_id=thread_id,
            checkpoint_ns=ns,
            checkpoint_id=checkpoint_id,
            channel=write.channel,
            task_id=write.task_id,
        )

    # ------------------------------------------------------------- writing
    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        thread_id, ns, parent_id = config_address(config)
        check_put_ids(checkpoint, metadata)
        checkpoint_id = checkpoint["id"]
        if parent_id is not None and parent_id == checkpoint_id:
            parent_id_for_put(config, checkpoint)  # raises: not its own parent
        values = checkpoint["channel_values"]
        record = dict(checkpoint)
        del record["channel_values"]
        serde = self.serde
        # Only channels whose version moved and that have a value here get a new blob;
        # the others keep pointing at older ones.
        if is_located(serde):
            blobs = {
                (thread_id, ns, channel, str(version)): dumps_at(
                    serde, values[channel], ValueLocation.blob(thread_id, ns, channel, str(version))
                )
                for channel, version in new_versions.items()
                if channel in values
            }
            dumped = dumps_at(serde, record, ValueLocation.checkpoint(thread_id, ns, checkpoint_id))
        else:
            dump = serde.dumps_typed
            blobs = {
                (thread_id, ns, channel, str(version)): dump(values[channel])
                for channel, version in new_versions.items()
                if channel in values
            }
            dumped = dump(record)
        restore = self._unstored_values(thread_id, ns, parent_id, checkpoint, new_versions)
        if restore:
            blobs = {**self._dump_blobs(thread_id, ns, restore), **blobs}
        stored = _StoredCheckpoint(  # positional: the fields in order, pinned left False
            dumped,
            # refuses what every saver refuses
            dumps_json(metadata if type(metadata) is dict else dict(metadata)),
            parent_id,
            dict(checkpoint["channel_versions"]),
            _run_id(metadata),
            {},
            checkpoint.get("ts"),
            False,
            _delta_channels(metadata.get("counters_since_delta_snapshot")),
        )
        with self._lock:
            namespaces = self._threads.get(thread_id)
            namespace = namespaces.get(ns) if namespaces is not None else None
            previous = namespace.get(checkpoint_id) if namespace is not None else None
            # Checked before anything changes (the rule of `sql/parents.py`): a re-put never
            # moves a checkpoint, and a new one that a stored one names as its parent
            # could close a loop of parent pointers. A parent need not be stored.
            if previous is not None and previous.parent_id != parent_id:
                raise put_parent_mismatch(
                    thread_id, ns, checkpoint_id, previous.parent_id, parent_id
                )
            if (
                previous is None
                and namespace is not None
                and namespace.is_named_as_parent(checkpoint_id)
            ):
                raise put_parent_loop(thread_id, ns, checkpoint_id)
            if namespace is None:
                namespace = self._threads.setdefault(thread_id, {})[ns] = Namespace()
            self._touch(thread_id)
            for key, blob in blobs.items():
                if key[2] in new_versions:
                    self._blobs[key] = blob
                else:  # a value kept for an unchanged channel: written only if absent
                    self._blobs.setdefault(key, blob)
            early = self._orphan_writes.pop((thread_id, ns, checkpoint_id), None)
            if previous is not None:
                # Re-saving a checkpoint updates it in place; it keeps its place in the tree,
                # its pin and its writes.
                stored.pinned = previous.pinned
                stored.writes = {**(early or {}), **previous.writes}
            elif early is not None:
                stored.writes = early
            namespace[checkpoint_id] = stored
        return make_config(thread_id, ns, checkpoint_id)

    def _unstored_values(
        self,
        thread_id: str,
        ns: str,
        parent_id: str | None,
        checkpoint: Checkpoint,
        new_versions: ChannelVersions,
    ) -> dict[str, tuple[str, Any]]:
        """(version, value) of the unchanged channels with a value here, at a version the
        parent does not hold, and no value stored at it: stored by this put, as the SQL
        savers do (`sql/unstored.py`)."""
        values, versions = checkpoint["channel_values"], checkpoint["channel_versions"]
        namespace = self._threads.get(thread_id, {}).get(ns)
        parent = None
        if parent_id is not None and namespace is not None:
            parent = namespace.get(parent_id)
        parent_versions = parent.channel_versions if parent is not None else {}
        return {
            ch: (str(versions[ch]), value)
            for ch, value in values.items()
            if ch not in new_versions
            and ch in versions
            and parent_versions.get(ch) != versions[ch]
            and (thread_id, ns, ch, str(versions[ch])) not in self._blobs
        }

    def _dump_blobs(
        self, thread_id: str, ns: str, values: Mapping[str, tuple[str, Any]]
    ) -> dict[BlobKey, Typed]:
        serde = self.serde
        if is_located(serde):
            return {
                (thread_id, ns, ch, v): dumps_at(
                    serde, value, ValueLocation.blob(thread_id, ns, ch, v)
                )
                for ch, (v, value) in values.items()
            }
        return {
            (thread_id, ns, ch, v): serde.dumps_typed(value) for ch, (v, value) in values.items()
        }

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        thread_id, ns, checkpoint_id = config_address(config)
        check_id(task_id, "task_id")
        check_id(task_path, "task_path")
        if checkpoint_id is None:
            raise CheckpointerError("put_writes needs a config that names a checkpoint_id")
        replace = is_special_batch([channel for channel, _ in writes])
        serde = self.serde
        if is_located(serde):
            rows = [
                _StoredWrite(
                    task_id=task_id,
                    idx=(idx := write_idx(channel, position)),
                    channel=channel,
                    value=dumps_at(
                        serde,
                        value,
                        ValueLocation.write(thread_id, ns, checkpoint_id, task_id, idx, channel),
                    ),
                    task_path=task_path,
                )
                for position, (channel, value) in enumerate(writes)
            ]
        else:
            dump, idx_of = serde.dumps_typed, WRITES_IDX_MAP.get  # `write_idx`, inlined
            rows = [
                _StoredWrite(task_id, idx_of(channel, position), channel, dump(value), task_path)
                for position, (channel, value) in enumerate(writes)
            ]
        with self._lock:
            self._touch(thread_id)
            namespace = self._threads.get(thread_id, {}).get(ns)
            stored = namespace.get(checkpoint_id) if namespace is not None else None
            if stored is not None:
                target = stored.writes
            else:
                target = self._orphan_writes.setdefault((thread_id, ns, checkpoint_id), {})
            for row in rows:
                key = (row.task_id, row.idx)
                if replace or key not in target:
                    target[key] = row

    # ----------------------------------------------------------- lifecycle
    def delete_thread(self, thread_id: str) -> None:
        check_id(thread_id, "thread_id")
        with self._lock:
            self._threads.pop(thread_id, None)
            self._meta.pop(thread_id, None)
            self._blobs = {k: v for k, v in self._blobs.items() if k[0] != thread_id}
            self._orphan_writes = {
                k: v for k, v in self._orphan_writes.items() if k[0] != thread_id
            }

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        doomed_runs = set(check_ids(run_ids, "run_ids"))
        if not doomed_runs:
            return
        with self._lock:
            for thread_id, namespaces in self._threads.items():
                for ns, namespace in namespaces.items():
                    doomed = {cid for cid, s in namespace.items() if s.run_id in doomed_runs}
                    if not doomed:
                        continue
                    _refuse_if_history_severed(thread_id, ns, namespace, doomed, self._blobs)
                    for cid in doomed:
                        del namespace[cid]
            self._drop_unreferenced_blobs()

    def copy_thread(
        self, source_thread_id: str, target_thread_id: str, *, replace: bool = False
    ) -> None:
        """Copy every checkpoint, value and pending write. When the serializer binds values
        to their location, each is re-sealed for the target thread (the bytes of the source
        would not decrypt there). A target that holds checkpoints is refused unless
        `replace`, which deletes it first (two histories never merge)."""
        source_id = check_id(source_thread_id, "source_thread_id")
        target_id = check_id(target_thread_id, "target_thread_id")
        if source_id == target_id:
            return
        relocating = is_located(self.serde) and source_id != target_id

        def moved(data: Typed, where: ValueLocation) -> Typed:
            if not relocating:
                return data
            return relocate(self.serde, data, where, _replace(where, thread_id=target_id))

        with self._lock:
            if any(self._threads.get(target_id, {}).values()) and not replace:
                raise ThreadExistsError(target_id)
            if replace:
                self.delete_thread(target_id)
            source = self._threads.get(source_id, {})
            target = self._threads.setdefault(target_id, {})
            for ns, namespace in source.items():
                copied = target.setdefault(ns, Namespace())
                for cid, stored in namespace.items():
                    copied[cid] = _StoredCheckpoint(
                        record=moved(stored.record, ValueLocation.checkpoint(source_id, ns, cid)),
                        metadata=stored.metadata,
                        parent_id=stored.parent_id,
                        channel_versions=dict(stored.channel_versions),
                        run_id=stored.run_id,
                        writes={
                            key: _replace(
                                w, value=moved(w.value, _write_location(source_id, ns, cid, w))
                            )
                            for key, w in stored.writes.items()
                        },
                        ts=stored.ts,
                        pinned=stored.pinned,
                        delta_channels=stored.delta_channels,
                    )
            for (thread_id, ns, channel, version), blob in list(self._blobs.items()):
                if thread_id == source_id:
                    self._blobs[(target_id, ns, channel, version)] = moved(
                        blob, ValueLocation.blob(source_id, ns, channel, version)
                    )
            if source:
                self._touch(target_id)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        validate_prune_strategy(strategy)
        thread_ids = check_ids(thread_ids, "thread_ids")
        with self._lock:
            for thread_id in thread_ids:
                if strategy == "delete":
                    self.delete_thread(thread_id)
            self._drop_unreferenced_blobs()
            if strategy == "keep_latest":
                # The head of each namespace, and whatever keeps every kept one readable.
                self.apply_retention(KeepLast(1), thread_ids=list(thread_ids))

    # ----------------------------------------------------- retention, summaries
    def apply_retention(
        self,
        policy: RetentionPolicy,
        *,
        thread_ids: Sequence[str] | None = None,
        channels: Mapping[str, BaseChannel] | None = None,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> RetentionReport:
        policy = validate_policy(policy)
        if thread_ids is not None:
            thread_ids = check_ids(thread_ids, "thread_ids")
        at = resolve_now(now)
        report = RetentionReport(policy.describe(), dry_run)
        with self._lock:
            threads = self._thread_ids() if thread_ids is None else _unique(thread_ids)
            sizes = self._blob_sizes()  # keyed by thread: each thread changes only its own
            for thread_id in threads:
                if isinstance(policy, IdleThreadTTL):
                    outcome = self._expire(thread_id, policy, at, dry_run, sizes)
                else:
                    outcome = self._retain(thread_id, policy, at, channels, dry_run, sizes)
                if outcome is not None:
                    report.threads.append(outcome)
        return report

    def sweep_expired(
        self, *, now: datetime | None = None, dry_run: bool = False
    ) -> RetentionReport:
        at = resolve_now(now)
        report = RetentionReport("delete threads past their TTL", dry_run)
        with self._lock:
            sizes = self._blob_sizes()
            for thread_id in sorted(self._meta):
                expires = self._meta[thread_id].expires_at
                if expires is None or expires > at:
                    continue
                outcome = self._delete_whole(thread_id, dry_run, sizes, spare_interrupted=False)
                report.threads.append(outcome)
        return report

    def _thread_ids(self) -> builtins.list[str]:
        return sorted(set(self._threads) | set(self._meta))

    def _retain(
        self,
        thread_id: str,
        policy: RetentionPolicy,
        now: datetime,
        specs: Mapping[str, BaseChannel] | None,
        dry_run: bool,
        sizes: BlobSizes,
    ) -> ThreadOutcome | None:
        shape = self._shape(thread_id, sizes)
        if not shape.namespaces:
            return None
        unmaterializable: dict[str, set[tuple[str, str]]] = {}
        while True:
            plan = plan_thread(
                shape, policy, now=now, specs=specs, unmaterializable=unmaterializable
            )
            blobs, failed = self._materialize(thread_id, plan, specs)
            if not failed:
                break
            for ns, cid, channel in failed:
                unmaterializable.setdefault(ns, set()).add((cid, channel))
        plan.outcome.bytes_added = sum(len(blob[1]) for blob in blobs.values())
        if not dry_run:
            self._blobs.update(blobs)
            for ns, doomed in plan.delete.items():
                namespace = self._threads[thread_id][ns]
                for cid in doomed:
                    del namespace[cid]
            for ns, refs in plan.garbage.items():
                for channel, version in refs:
                    self._blobs.pop((thread_id, ns, channel, version), None)
        return plan.outcome

    def _materialize(
        self, thread_id: str, plan: ThreadPlan, specs: Mapping[str, BaseChannel] | None
    ) -> tuple[dict[BlobKey, Typed], builtins.list[tuple[str, str, str]]]:
        """Serialized snapshots the plan asks for, and what could not be rebuilt."""
        blobs: dict[BlobKey, Typed] = {}
        failed: builtins.list[tuple[str, str, str]] = []
        for item in plan.materialize:
            assert specs is not None
            stored = self._threads[thread_id][item.ns][item.checkpoint_id]
            config = make_config(thread_id, item.ns, item.checkpoint_id)
            try:
                histories = self.get_delta_channel_history(config=config, channels=item.channels)
            except CorruptHistoryError:
                raise  # a loop in parent pointers: no plan for this thread can be trusted
            except CheckpointerError:
                histories = {}
            values, missing = materialize_values(specs, item.channels, histories)
            failed.extend((item.ns, item.checkpoint_id, ch) for ch in missing)
            for channel, value in values.items():
                version = str(stored.channel_versions[channel])
                where = partial(ValueLocation.blob, thread_id, item.ns, channel, version)
                blobs[(thread_id, item.ns, channel, version)] = self._dump(value, where)
        return blobs, failed

    def _expire(
        self,
        thread_id: str,
        policy: IdleThreadTTL,
        now: datetime,
        dry_run: bool,
        sizes: BlobSizes,
    ) -> ThreadOutcome | None:
        meta = self._meta.get(thread_id)
        if meta is None or meta.updated_at >= now - policy.ttl:
            return None
        return self._delete_whole(
            thread_id, dry_run, sizes, spare_interrupted=policy.keep_interrupted
        )

    def _delete_whole(
        self,
        thread_id: str,
        dry_run: bool,
        sizes: BlobSizes,
        *,
        spare_interrupted: bool,
    ) -> ThreadOutcome:
        shape = self._shape(thread_id, sizes)
        outcome = ttl_outcome(shape)
        orphans = [
            w for k, ws in self._orphan_writes.items() if k[0] == thread_id for w in ws.values()
        ]
        outcome.writes_deleted += len(orphans)
        outcome.bytes_freed += sum(len(w.value[1]) for w in orphans)
        if any(n.pinned for ns in shape.namespaces.values() for n in ns.nodes.values()):
            return _skipped(outcome, "has a pinned checkpoint")
        if spare_interrupted and has_pending_interrupt(shape):
            return _skipped(outcome, "waiting on an interrupt")
        if not dry_run:
            self.delete_thread(thread_id)
        return outcome

    def _blob_sizes(self) -> BlobSizes:
        """Stored value sizes by (thread, namespace), built once per operation."""
        out: dict[tuple[str, str], dict[tuple[str, str], int]] = {}
        for (thread_id, ns, channel, version), blob in self._blobs.items():
            out.setdefault((thread_id, ns), {})[(channel, version)] = len(blob[1])
        return out

    def _shape(self, thread_id: str, sizes: BlobSizes) -> ThreadShape:
        """The thread as the planner sees it (caller holds the lock)."""
        shape = ThreadShape(thread_id)
        for ns, namespace in self._threads.get(thread_id, {}).items():
            if not namespace:
                continue
            nodes = {
                cid: NodeShape(
                    parent_id=stored.parent_id,
                    versions={ch: str(v) for ch, v in stored.channel_versions.items()},
                    ts=parse_ts(stored.ts),
                    pinned=stored.pinned,
                    size=len(stored.record[1]) + len(stored.metadata.encode()),
                    writes=len(stored.writes),
                    writes_size=sum(len(w.value[1]) for w in stored.writes.values()),
                    interrupted=any(w.channel == INTERRUPT for w in stored.writes.values()),
                    delta_channels=stored.delta_channels,
                )
                for cid, stored in namespace.items()
            }
            shape.namespaces[ns] = NamespaceShape(nodes, dict(sizes.get((thread_id, ns), {})))
        return shape

    # ---------------------------------------------------------------- pins
    def pin(self, config: RunnableConfig) -> RunnableConfig:
        return self._set_pin(config, True)

    def unpin(self, config: RunnableConfig) -> None:
        self._set_pin(config, False)

    def _set_pin(self, config: RunnableConfig, pinned: bool) -> RunnableConfig:
        thread_id, ns = thread_id_of(config), checkpoint_ns_of(config)
        checkpoint_id = checkpoint_id_of(config)
        with self._lock:
            namespace = self._threads.get(thread_id, {}).get(ns) or Namespace()
            if checkpoint_id is None and namespace:
                checkpoint_id = namespace.head()
            stored = namespace.get(checkpoint_id) if checkpoint_id else None
            if stored is None or checkpoint_id is None:
                if not pinned:
                    return make_config(thread_id, ns, checkpoint_id)
                raise CheckpointNotFoundError(
                    f"no checkpoint to pin at thread {thread_id!r}, namespace {ns!r}"
                    + (f", id {checkpoint_id!r}" if checkpoint_id else "")
                )
            stored.pinned = pinned
        return make_config(thread_id, ns, checkpoint_id)

    def list_pinned(self, thread_id: str) -> builtins.list[RunnableConfig]:
        check_id(thread_id, "thread_id")
        with self._lock:
            found = [
                (cid, ns)
                for ns, namespace in self._threads.get(str(thread_id), {}).items()
                for cid, stored in namespace.items()
                if stored.pinned
            ]
        return [make_config(str(thread_id), ns, cid) for cid, ns in sorted(found, reverse=True)]

    # ----------------------------------------------------------- summaries
    def list_threads(
        self,
        *,
        sort: ThreadSort = "updated",
        descending: bool = True,
        limit: int | None = 100,
        offset: int = 0,
        thread_ids: Sequence[str] | None = None,
    ) -> builtins.list[ThreadSummary]:
        validate_thread_listing(sort, limit, offset)
        if thread_ids is not None:
            thread_ids = check_ids(thread_ids, "thread_ids")
        with self._lock:
            wanted = self._thread_ids() if thread_ids is None else _unique(thread_ids)
            sizes = self._blob_sizes()
            summaries = [s for t in wanted if (s := self._summary(t, sizes)) is not None]
        summaries.sort(key=thread_summary_order(sort), reverse=descending)
        end = None if limit is None else offset + limit
        return summaries[offset:end]

    def _summary(self, thread_id: str, sizes: BlobSizes) -> ThreadSummary | None:
        meta = self._meta.get(thread_id)
        if meta is None:
            return None
        shape = self._shape(thread_id, sizes)
        orphans = sum(
            len(w.value[1])
            for key, ws in self._orphan_writes.items()
            if key[0] == thread_id
            for w in ws.values()
        )
        root = shape.namespaces.get("")
        return ThreadSummary(
            thread_id=thread_id,
            head_checkpoint_id=max(root.nodes) if root and root.nodes else None,
            checkpoint_count=shape.checkpoint_count,
            bytes=ttl_outcome(shape).bytes_freed + orphans,
            created_at=meta.created_at,
            updated_at=meta.updated_at,
            ttl=meta.ttl,
            expires_at=meta.expires_at,
            pinned=sum(n.pinned for ns in shape.namespaces.values() for n in ns.nodes.values()),
        )

    def set_thread_ttl(self, thread_id: str, ttl: timedelta | None) -> None:
        check_id(thread_id, "thread_id")
        validate_ttl(ttl)
        with self._lock:
            meta = self._meta.get(str(thread_id))
            if meta is None:
                now = resolve_now(None)
                meta = self._meta[str(thread_id)] = _ThreadMeta(now, now)
            meta.ttl = ttl

    def refresh_thread_summaries(self, thread_ids: Sequence[str] | None = None) -> int:
        """Summaries are computed when read; nothing can drift."""
        if thread_ids is not None:
            thread_ids = check_ids(thread_ids, "thread_ids")
        with self._lock:
            return len(self._thread_ids() if thread_ids is None else _unique(thread_ids))

    def _drop_unreferenced_blobs(self) -> None:
        referenced = {
            (thread_id, ns, channel, str(version))
            for thread_id, namespaces in self._threads.items()
            for ns, namespace in namespaces.items()
            for stored in namespace.values()
            for channel, version in stored.channel_versions.items()
        }
        self._blobs = {k: v for k, v in self._blobs.items() if k in referenced}


def _write_location(
    thread_id: str, ns: str, checkpoint_id: str, write: _StoredWrite
) -> ValueLocation:
    return ValueLocation.write(
        thread_id, ns, checkpoint_id, write.task_id, write.idx, write.channel
    )


def _unique(thread_ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(check_ids(thread_ids, "thread_ids")))


def _skipped(outcome: ThreadOutcome, reason: str) -> ThreadOutcome:
    return ThreadOutcome(
        outcome.thread_id, checkpoints_before=outcome.checkpoints_before, skipped=reason
    )


def _metadata(stored: _StoredCheckpoint) -> dict[str, Any]:
    """A checkpoint's metadata, decoded as the SQL savers decode theirs."""
    return metadata_counters_as_pairs(json.loads(stored.metadata))


_WRITE_ORDER = attrgetter("task_path", "task_id", "idx")
"""The order the runtime applies a checkpoint's pending writes in (empty paths first)."""

_row_checkpoint_id = itemgetter(2)


def _ordered(writes: Mapping[tuple[str, int], _StoredWrite]) -> list[_StoredWrite]:
    """A checkpoint's pending writes in `_WRITE_ORDER` (most have one or none)."""
    if len(writes) < 2:
        return list(writes.values())
    return sorted(writes.values(), key=_WRITE_ORDER)


def _delta_channels(counters: Any) -> frozenset[str]:
    """`delta_channels_of`, without its checks for the two shapes every put brings."""
    if counters is None:
        return frozenset()
    if type(counters) is dict:
        return frozenset(map(str, counters))
    return delta_channels_of(counters)


def _run_id(metadata: Mapping[str, Any]) -> str | None:
    value = metadata.get("run_id")
    return None if value is None else str(value)


def _unstored_channels(
    thread_id: str, ns: str, stored: _StoredCheckpoint, blobs: Mapping[BlobKey, Typed]
) -> set[str]:
    """Delta channels with a version but no value here: their value comes from ancestors."""
    return {
        channel
        for channel, version in stored.channel_versions.items()
        if channel in stored.delta_channels and (thread_id, ns, channel, str(version)) not in blobs
    }


def _history_ancestors(
    thread_id: str,
    ns: str,
    namespace: Namespace,
    checkpoint_id: str,
    blobs: Mapping[BlobKey, Typed],
) -> list[str]:
    """Ancestors whose writes or values the delta channels of `checkpoint_id` replay."""
    stored = namespace[checkpoint_id]
    remaining = _unstored_channels(thread_id, ns, stored, blobs)
    chain: list[str] = []
    seen = {checkpoint_id}
    cursor = stored.parent_id
    while remaining and cursor is not None and cursor in namespace:
        if cursor in seen:
            raise history_loop(thread_id, ns, cursor)
        seen.add(cursor)
        chain.append(cursor)
        ancestor = namespace[cursor]
        remaining = {
            channel
            for channel in remaining
            if (thread_id, ns, channel, str(ancestor.channel_versions.get(channel))) not in blobs
        }
        cursor = ancestor.parent_id
    return chain


def _refuse_if_history_severed(
    thread_id: str,
    ns: str,
    namespace: Namespace,
    doomed: set[str],
    blobs: Mapping[BlobKey, Typed],
) -> None:
    """Deleting a run must not leave another run's checkpoint unable to rebuild its state."""
    for cid in namespace:
        if cid in doomed:
            continue
        needed = doomed.intersection(_history_ancestors(thread_id, ns, namespace, cid, blobs))
        if needed:
            raise CheckpointerError(
                f"cannot delete these runs: checkpoint {cid} of thread {thread_id!r} "
                f"rebuilds its delta channels from checkpoint(s) {sorted(needed)} they "
                "created; delete the later runs too, or prune the thread first"
            )
