"""The in-memory saver's lifecycle operations: delete, copy, prune, retention, pins and
thread summaries, each delta-safe (no delta channel is left without its seed and the writes
after it). A mixin over the stores `InMemorySaver` owns; every method takes its lock.
"""

from __future__ import annotations

import builtins
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace as _replace
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

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
    history_loop,
    resolve_now,
    runs_still_needed,
    validate_prune_strategy,
    validate_thread_listing,
    validate_ttl,
)
from checkpointer.savers.memory_history import HistoryMemo
from checkpointer.savers.memory_store import (
    BlobKey,
    BlobSizes,
    Namespace,
    StoredCheckpoint,
    StoredWrite,
    ThreadMeta,
    Typed,
    write_location,
)
from checkpointer.savers.memory_values import DecodedValues
from checkpointer.savers.retention import (
    NamespaceShape,
    NodeShape,
    ThreadPlan,
    ThreadShape,
    has_pending_interrupt,
    materialize_values,
    parse_ts,
    plan_thread,
    thread_summary_order,
    ttl_outcome,
)
from checkpointer.serde import Serializer
from checkpointer.serde.located import ValueLocation, is_located, relocate
from checkpointer.types import (
    INTERRUPT,
    DeltaChannelHistory,
    RunnableConfig,
    check_id,
    check_ids,
    checkpoint_id_of,
    checkpoint_ns_of,
    make_config,
    thread_id_of,
)


class MemoryLifecycle:
    """Lifecycle, retention, pins and summaries of `InMemorySaver` (see the module doc)."""

    serde: Serializer
    _lock: threading.RLock
    _threads: dict[str, dict[str, Namespace]]
    _blobs: dict[BlobKey, Typed]
    _orphan_writes: dict[tuple[str, str, str], dict[tuple[str, int], StoredWrite]]
    _meta: dict[str, ThreadMeta]
    _decoded: DecodedValues
    _histories: HistoryMemo

    if TYPE_CHECKING:

        def _touch(self, thread_id: str) -> None: ...

        def _dump(self, value: Any, location: Callable[[], ValueLocation]) -> Typed: ...

        def get_delta_channel_history(
            self, *, config: RunnableConfig, channels: Sequence[str]
        ) -> Mapping[str, DeltaChannelHistory]: ...

    def _forget_decoded(self) -> None:
        """Drop every decoded value and kept walk: stored values were deleted or replaced
        (caller holds the lock)."""
        self._decoded.clear()
        self._histories.forget()

    # ----------------------------------------------------------- lifecycle
    def delete_thread(self, thread_id: str) -> None:
        check_id(thread_id, "thread_id")
        with self._lock:
            self._threads.pop(thread_id, None)
            self._meta.pop(thread_id, None)
            self._forget_decoded()  # lets the deleted values go (kept ones hold them)
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
            self._histories.forget(target_id)
            source = self._threads.get(source_id, {})
            target = self._threads.setdefault(target_id, {})
            for ns, namespace in source.items():
                copied = target.setdefault(ns, Namespace())
                for cid, stored in namespace.items():
                    copied[cid] = StoredCheckpoint(
                        record=moved(stored.record, ValueLocation.checkpoint(source_id, ns, cid)),
                        metadata=stored.metadata,
                        parent_id=stored.parent_id,
                        channel_versions=dict(stored.channel_versions),
                        run_id=stored.run_id,
                        writes={
                            key: _replace(
                                w, value=moved(w.value, write_location(source_id, ns, cid, w))
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
            self._forget_decoded()
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
                meta = self._meta[str(thread_id)] = ThreadMeta(now, now)
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
        self._forget_decoded()


def _unique(thread_ids: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(check_ids(thread_ids, "thread_ids")))


def _skipped(outcome: ThreadOutcome, reason: str) -> ThreadOutcome:
    return ThreadOutcome(
        outcome.thread_id, checkpoints_before=outcome.checkpoints_before, skipped=reason
    )


def _unstored_channels(
    thread_id: str, ns: str, stored: StoredCheckpoint, blobs: Mapping[BlobKey, Typed]
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
            raise runs_still_needed(thread_id, cid, needed)
