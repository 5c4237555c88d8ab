"""In-memory saver: the whole API without a database, for tests and short-lived processes.

Values are stored serialized, as a database would hold them, so a caller mutating a value
after `put` cannot change what was saved, and a type the serializer cannot round-trip fails
here as it would in production. Reads hand out fresh objects: decoded for the call, or
copied from values decoded before when that is cheap and exact (`memory_values`).
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from functools import partial
from operator import itemgetter
from typing import Any

from checkpointer.errors import (
    CheckpointerError,
)
from checkpointer.savers.base import (
    BaseCheckpointSaver,
    history_loop,
    metadata_matches,
    parent_id_for_put,
    put_parent_loop,
    put_parent_mismatch,
    validate_limit,
    validate_metadata_filter,
)
from checkpointer.savers.memory_history import HistoryMemo, Visit
from checkpointer.savers.memory_lifecycle import MemoryLifecycle
from checkpointer.savers.memory_store import (
    WRITE_ORDER,
    BlobKey,
    Namespace,
    StoredCheckpoint,
    StoredWrite,
    ThreadMeta,
    Typed,
    delta_channels_fast,
    metadata_json,
    ordered_writes,
    run_id_of,
    stored_metadata,
    write_location,
)
from checkpointer.savers.memory_values import DecodedValues
from checkpointer.serde import Serializer
from checkpointer.serde.located import (
    ValueLocation,
    batch_loader,
    dumps_at,
    is_located,
    plain_batch_loader,
    value_reader,
)
from checkpointer.serde.msgpack_serde import MsgpackSerializer
from checkpointer.serde.value_types import TAG_MSGPACK
from checkpointer.types import (
    MAX_ID_BYTES,
    WRITES_IDX_MAP,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    RunnableConfig,
    check_id,
    check_put_ids,
    checkpoint_id_of,
    checkpoint_ns_of,
    config_address,
    thread_id_of,
    write_idx,
)


class InMemorySaver(MemoryLifecycle, BaseCheckpointSaver):
    """Keeps every thread in process memory; thread-safe, lost when the process ends."""

    passes_value_locations = True
    """Every value and checkpoint record is stored and read with its `ValueLocation`
    (metadata is JSON text, as in the SQL savers: filterable, never encrypted)."""
    returns_own_tuples = True
    """Every tuple `get_tuple` and `list` return is made for that call, decoded from the
    stored bytes and text or copied from what was decoded before (`memory_values`):
    nothing mutable in it is shared with the saver or another caller (the LangGraph
    adapter then converts in place)."""

    def __init__(self, *, serde: Serializer | None = None) -> None:
        super().__init__(serde=serde)
        self._lock = threading.RLock()
        self._threads: dict[str, dict[str, Namespace]] = {}
        self._blobs: dict[BlobKey, Typed] = {}
        # Writes may arrive before their checkpoint (no foreign key, as in SQL).
        self._orphan_writes: dict[tuple[str, str, str], dict[tuple[str, int], StoredWrite]] = {}
        self._meta: dict[str, ThreadMeta] = {}
        # Values decoded before, handed out as fresh copies (see `memory_values`).
        self._decoded = DecodedValues()
        # Delta histories of walks just made, answering their ancestors' (`memory_history`).
        self._histories = HistoryMemo(self._decoded.max_bytes)

    def _touch(self, thread_id: str) -> None:
        """Record a write to the thread (its summary's `updated_at`); caller holds the lock."""
        now = datetime.now(UTC)
        meta = self._meta.get(thread_id)
        if meta is None:
            self._meta[thread_id] = ThreadMeta(now, now)
        else:
            meta.updated_at = now

    def _dump(self, value: Any, location: Callable[[], ValueLocation]) -> Typed:
        """`value` serialized for `location()`, which is only built when the serializer
        binds values to their location (most do not, and puts are a hot path)."""
        if is_located(self.serde):
            return dumps_at(self.serde, value, location())
        return self.serde.dumps_typed(value)

    # ------------------------------------------------------------- reading
    def _fast_loader(self) -> _ValueLoader | None:
        """The serializer's batch loader for one read operation; None when it binds values
        to their location (each value is then read at its `ValueLocation`).

        With our own msgpack serializer (any other may decode the same bytes differently
        over time) it goes through the decoded values the saver keeps (`memory_values`).
        Called as `load(data)`, or `load(data, (thread, ns, channel))` for a stored channel
        value (caller holds the lock)."""
        fast = batch_loader(self.serde)
        if fast is None:
            return None
        if type(self.serde) is MsgpackSerializer and self._decoded.max_bytes:
            return partial(self._decoded.load, fast)
        return partial(_unkept, fast)

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
        rows.sort(key=_ROW_ID, reverse=True)
        remaining = limit
        fast = self._fast_loader()
        kept = self._decoded
        # `_load`'s first step, taken here without its calls: most rows of a thread read
        # again have a template (see `memory_values`).
        from_template = (
            kept.from_template
            if fast is not None and type(self.serde) is MsgpackSerializer and not wanted
            else None
        )
        # The lock is taken per item, never across a yield: a caller may use the saver
        # while iterating.
        for thread_id, ns, checkpoint_id in rows:
            if remaining is not None and remaining <= 0:
                return
            with self._lock:
                namespaces = self._threads.get(thread_id)
                namespace = namespaces.get(ns) if namespaces is not None else None
                stored = namespace.get(checkpoint_id) if namespace is not None else None
                if stored is None:
                    continue
                parts = from_template(stored, self._blobs) if from_template else None
                if parts is not None:
                    tup = self._tuple(
                        thread_id, ns, checkpoint_id, stored, parts[0], parts[1], parts[2]
                    )
                else:
                    # Decoded once: the filter's copy is the one handed out.
                    metadata = kept.metadata(stored.metadata) if wanted else None
                    if metadata is not None and not metadata_matches(metadata, wanted):
                        continue
                    tup = self._load(thread_id, ns, checkpoint_id, stored, fast, metadata)
            if remaining is not None:
                remaining -= 1
            yield tup

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        if not channels:
            return {}
        thread_id, ns, target_id = config_address(config)
        wanted = list(dict.fromkeys(channels))
        remaining = set(wanted)
        # Ancestors newest first, each with what the walk still needed there: its writes
        # to channels without a seed yet (in the order they were applied) and the stored
        # values it holds of those channels (the seeds). Nothing is decoded until the
        # walk is over: the loop below is the whole per-ancestor cost.
        visits: builtins.list[Visit] = []
        with self._lock:
            namespace = self._threads.get(thread_id, {}).get(ns) or Namespace()
            blobs = self._blobs
            target_id = target_id or (namespace.head() if namespace else None)
            target = namespace.get(target_id) if target_id else None
            if target_id is None or target is None:  # nothing to walk
                return self._history_result(thread_id, ns, wanted, visits)
            # Kept decoded only with our own serializer (see `_fast_loader`).
            memo = self._histories if type(self.serde) is MsgpackSerializer else None
            if memo is not None:
                answered = memo.answer(thread_id, ns, target_id, wanted)
                if answered is not None:
                    return answered
            cursor = target.parent_id
            # Every checkpoint passed, by position: -1 the target, then its ancestors.
            positions = {target_id: -1}
            while cursor is not None and remaining:
                stored = namespace.get(cursor)
                if stored is None:
                    break
                if cursor in positions:
                    raise history_loop(thread_id, ns, cursor)
                positions[cursor] = len(positions) - 1
                writes = [w for w in stored.writes.values() if w.channel in remaining]
                if len(writes) > 1:
                    writes.sort(key=WRITE_ORDER)
                found: builtins.list[tuple[str, str, Typed]] = []
                versions = stored.channel_versions
                for channel in remaining:
                    version = versions.get(channel)
                    if version is not None:
                        blob = blobs.get((thread_id, ns, channel, str(version)))
                        if blob is not None:
                            found.append((channel, str(version), blob))
                if writes or found:
                    visits.append((cursor, found, writes))
                    if found:
                        remaining = remaining.difference([channel for channel, _, _ in found])
                cursor = stored.parent_id
            result = self._history_result(thread_id, ns, wanted, visits)
            if memo is not None:
                memo.remember(
                    thread_id,
                    ns,
                    wanted,
                    positions,
                    visits,
                    partial(self._history_result, thread_id, ns),
                )
            return result

    def _history_result(
        self, thread_id: str, ns: str, wanted: builtins.list[str], visits: builtins.list[Visit]
    ) -> dict[str, DeltaChannelHistory]:
        """The walk's visits decoded into one history per channel: writes oldest first,
        and the seed where one was found (caller holds the lock)."""
        fast = self._fast_loader()
        decoded: builtins.list[tuple[dict[str, Any], builtins.list[PendingWrite]]] | None = None
        if fast is not None:
            load = self._write_values(visits, fast)
            try:
                decoded = [
                    (
                        {channel: fast(blob) for channel, _, blob in found},
                        [(w.task_id, w.channel, load(w.value)) for w in writes],
                    )
                    for _, found, writes in visits
                ]
            except Exception:
                decoded = None  # read again below, where a damaged value is named
        if decoded is None:
            decoded = [
                self._ancestor_located(thread_id, ns, cid, found, writes)
                for cid, found, writes in visits
            ]
        collected: dict[str, builtins.list[PendingWrite]] = {c: [] for c in wanted}
        seeds: dict[str, Any] = {}
        for values, parts in reversed(decoded):  # oldest ancestor first
            if len(collected) == 1:
                collected[wanted[0]].extend(parts)
            else:
                for part in parts:
                    collected[part[1]].append(part)
            seeds.update(values)
        out: dict[str, DeltaChannelHistory] = {}
        for channel in wanted:
            entry: DeltaChannelHistory = {"writes": collected[channel]}
            if channel in seeds:
                entry["seed"] = seeds[channel]
            out[channel] = entry
        return out

    def _write_values(
        self, visits: builtins.list[Visit], fast: Callable[[Typed], Any]
    ) -> Callable[[Typed], Any]:
        """A loader for the writes of a history walk: their msgpack payloads decoded by one
        call where the serializer can (`plain_batch_loader`: each checked to be exactly one
        plain object), handed out in walk order; `fast` for the rest (None, bytes...), and
        for all of them when the batch cannot be read in one go."""
        plain = plain_batch_loader(self.serde)
        if plain is None:
            return fast
        raws = [w.value[1] for _, _, writes in visits for w in writes if _in_batch(w.value)]
        values = plain(raws) if raws else None
        if values is None:
            return fast
        # `_history_result` asks for the writes' values in the order they were joined.
        return partial(_batched_value, iter(values), fast)

    def _ancestor_located(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        found: builtins.list[tuple[str, str, Typed]],
        writes: builtins.list[StoredWrite],
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
        stored: StoredCheckpoint,
        fast: _ValueLoader | None,
        metadata: dict[str, Any] | None = None,
    ) -> CheckpointTuple:
        """The stored checkpoint as a tuple (caller holds the lock). `fast` (from
        `_fast_loader`) decodes every value; if one fails, the whole checkpoint is read
        again value by value, so that the damaged one raises an error naming it.
        `metadata`: the stored metadata if the caller has already decoded it."""
        if fast is None:
            return self._load_located(thread_id, ns, checkpoint_id, stored, metadata)
        kept = self._decoded
        if type(self.serde) is MsgpackSerializer:  # see `_fast_loader`
            parts = kept.from_template(stored, self._blobs)
            if parts is not None:
                if metadata is None:
                    metadata = parts[2]
                return self._tuple(
                    thread_id, ns, checkpoint_id, stored, parts[0], parts[1], metadata
                )
        try:
            checkpoint: Checkpoint = fast(stored.record)
            blobs = self._blobs
            values: dict[str, Any] = {}
            for channel, version in stored.channel_versions.items():
                blob = blobs.get((thread_id, ns, channel, str(version)))
                if blob is not None:
                    values[channel] = fast(blob, (thread_id, ns, channel))
            pending: builtins.list[PendingWrite] = [
                (w.task_id, w.channel, fast(w.value)) for w in ordered_writes(stored.writes)
            ]
        except Exception:
            return self._load_located(thread_id, ns, checkpoint_id, stored, metadata)
        checkpoint["channel_values"] = values
        if metadata is None:
            metadata = kept.metadata(stored.metadata)
        if type(self.serde) is MsgpackSerializer:
            kept.remember(thread_id, ns, stored, self._blobs)
        return self._tuple(thread_id, ns, checkpoint_id, stored, checkpoint, pending, metadata)

    def _load_located(
        self,
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        stored: StoredCheckpoint,
        metadata: dict[str, Any] | None = None,
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
            for w in ordered_writes(stored.writes)
        ]
        return self._tuple(thread_id, ns, checkpoint_id, stored, checkpoint, pending, metadata)

    @staticmethod
    def _tuple(
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        stored: StoredCheckpoint,
        checkpoint: Checkpoint,
        pending: builtins.list[PendingWrite],
        metadata: dict[str, Any] | None = None,
    ) -> CheckpointTuple:
        # `make_config`, inlined: two per listed checkpoint.
        parent_id = stored.parent_id
        parent: RunnableConfig | None = None
        if parent_id is not None:
            parent = {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": parent_id,
                }
            }
        return CheckpointTuple(
            {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": checkpoint_id,
                }
            },
            checkpoint,
            stored_metadata(stored) if metadata is None else metadata,  # type: ignore[arg-type]
            parent,
            pending,
        )

    def _read_write(
        self,
        read: Callable[..., Any],
        thread_id: str,
        ns: str,
        checkpoint_id: str,
        write: StoredWrite,
        located: bool,
    ) -> Any:
        """A pending write's value, read where it was stored: its checkpoint and task."""
        return read(
            write.value,
            write_location(thread_id, ns, checkpoint_id, write) if located else None,
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
        checkpoint_id = checkpoint.get("id") if type(checkpoint) is dict else None
        if (
            type(metadata) is not dict
            or "run_id" in metadata
            or type(checkpoint_id) is not str
            or not _plain_id(checkpoint_id)
            or not checkpoint_id
        ):
            check_put_ids(checkpoint, metadata)  # the general case, with its errors
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
        # Only a channel with a value here and no new version can need one stored: most
        # puts move every channel they hold a value of (one set comparison, in C).
        restore = (
            None
            if values.keys() <= new_versions.keys()
            else self._unstored_values(thread_id, ns, parent_id, checkpoint, new_versions)
        )
        unchanged = self._dump_blobs(thread_id, ns, restore) if restore else None
        stored = StoredCheckpoint(  # positional: the fields in order, pinned left False
            dumped,
            metadata_json(metadata),  # refuses what every saver refuses
            parent_id,
            dict(checkpoint["channel_versions"]),
            run_id_of(metadata),
            {},
            checkpoint.get("ts"),
            False,
            delta_channels_fast(metadata.get("counters_since_delta_snapshot")),
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
            self._histories.forget(thread_id)  # a re-put may change an ancestor
            meta = self._meta.get(thread_id)
            if meta is None:
                self._touch(thread_id)
            else:
                meta.updated_at = datetime.now(UTC)
            if unchanged:  # values kept for unchanged channels: written only if absent
                for key, blob in unchanged.items():
                    self._blobs.setdefault(key, blob)
            self._blobs.update(blobs)
            orphans = self._orphan_writes
            early = orphans.pop((thread_id, ns, checkpoint_id), None) if orphans else None
            if previous is not None:
                # Re-saving a checkpoint updates it in place; it keeps its place in the tree,
                # its pin and its writes.
                stored.pinned = previous.pinned
                stored.writes = {**(early or {}), **previous.writes}
            elif early is not None:
                stored.writes = early
            namespace[checkpoint_id] = stored
        # `make_config`, inlined
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }

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
        if (
            type(task_id) is not str
            or type(task_path) is not str
            or not _plain_id(task_id + task_path)
        ):
            check_id(task_id, "task_id")
            check_id(task_path, "task_path")
        if checkpoint_id is None:
            raise CheckpointerError("put_writes needs a config that names a checkpoint_id")
        # `is_special_batch`: a batch made only of special channels replaces stored rows.
        replace = bool(writes)
        for channel, _ in writes:
            if channel not in WRITES_IDX_MAP:
                replace = False
                break
        serde = self.serde
        if is_located(serde):
            rows = [
                StoredWrite(
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
                StoredWrite(task_id, idx_of(channel, position), channel, dump(value), task_path)
                for position, (channel, value) in enumerate(writes)
            ]
        with self._lock:
            self._decoded.forget_templates()  # a checkpoint's writes change
            self._histories.forget(thread_id)  # and so may its descendants' histories
            meta = self._meta.get(thread_id)
            if meta is None:
                self._touch(thread_id)
            else:
                meta.updated_at = datetime.now(UTC)
            namespaces = self._threads.get(thread_id)
            namespace = namespaces.get(ns) if namespaces is not None else None
            stored = namespace.get(checkpoint_id) if namespace is not None else None
            if stored is not None:
                target = stored.writes
            else:
                target = self._orphan_writes.setdefault((thread_id, ns, checkpoint_id), {})
            for row in rows:
                key = (task_id, row.idx)
                if replace or key not in target:
                    target[key] = row


_ValueLoader = Callable[..., Any]


def _unkept(fast: Callable[[Typed], Any], data: Typed, channel: object = None) -> Any:
    return fast(data)


def _in_batch(data: Typed) -> bool:
    """Whether a stored value goes into a batch for `plain_batch_loader`."""
    return data[0] == TAG_MSGPACK and type(data[1]) is bytes


def _batched_value(values: Iterator[Any], fast: Callable[[Typed], Any], data: Typed) -> Any:
    """The batch's next value if `data` went into it (`_in_batch`), else `fast(data)`."""
    if data[0] == TAG_MSGPACK and type(data[1]) is bytes:
        return next(values)
    return fast(data)


def _plain_id(value: str) -> bool:
    """Whether an id needs none of `check_id`'s work (the common case, checked inline)."""
    return value.isascii() and len(value) <= MAX_ID_BYTES and "\x00" not in value


_ROW_ID = itemgetter(2)
"""A listed row's checkpoint id: rows of every thread sort by it, newest first."""
