"""The saver operations written once as *programs* (generators of operations) on top of
the sans-I/O plans (`plan.py` and the operation modules); `saver.py` drives them with a
thin sync or async driver.

A program yields `Op`s (each run by the executor on one borrowed connection, inside one
transaction when it asks for it) and does its decoding between them, after the connection
has been released: deserializing values never holds a lock or a pooled connection.
"""

from __future__ import annotations

import builtins
from collections.abc import (
    Callable,
    Generator,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Protocol, TypeVar

from checkpointer.channels import BaseChannel
from checkpointer.errors import CheckpointerError, CheckpointNotFoundError, CorruptValueError
from checkpointer.lifecycle import (
    IdleThreadTTL,
    KeepLast,
    RetentionPolicy,
    RetentionReport,
    SpaceReport,
    ThreadOutcome,
    ThreadSummary,
    validate_policy,
)
from checkpointer.savers.base import (
    history_loop,
    resolve_now,
    validate_prune_strategy,
    validate_thread_listing,
    validate_ttl,
)
from checkpointer.savers.sql import lifecycle as lc
from checkpointer.savers.sql import reads
from checkpointer.savers.sql.deletion import delete_for_runs_plan
from checkpointer.savers.sql.delta import (
    confirm_walk_loop,
    decode_delta_history,
    delta_history_chunks,
    delta_history_stmt,
    delta_runs_stmt,
    order_runs_rows,
    parent_pointers_stmt,
    tail_seeds,
)
from checkpointer.savers.sql.delta_runs import RUNS_FALLBACK
from checkpointer.savers.sql.delta_sql import WALK_BOUND_REACHED
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.history_reuse import HistoryReuse
from checkpointer.savers.sql.inline import Parent, RecentInline, serde_inlines
from checkpointer.savers.sql.inline import carried as inline_carried
from checkpointer.savers.sql.migration import check_revision
from checkpointer.savers.sql.plan import (
    Op,
    Row,
    StatementHook,
    Stmt,
    read_op,
    read_plan,
    repeatable,
)
from checkpointer.savers.sql.puts import (
    decode_inline_sources,
    inline_sources_stmt,
    put_op,
    put_writes_op,
    record_stmt,
    record_versions_and_inline,
    unchanged_channels,
)
from checkpointer.savers.sql.reads import (
    ListQuery,
    ReadContext,
    base_rows,
    decode_tuples,
    get_tuple_stmt,
    list_page_stmt,
    missing_bases,
    page_limit_of,
    read_context,
)
from checkpointer.savers.sql.records import version_text
from checkpointer.savers.sql.tails import (
    BaseKey,
    Bases,
    ListTails,
    bases_plan,
)
from checkpointer.savers.sql.transfer import (
    copy_thread_guarded_plan,
    copy_thread_relocating_plan,
)
from checkpointer.savers.sql.unstored import restored, unversioned_inline
from checkpointer.serde import Serializer
from checkpointer.serde.located import is_located
from checkpointer.serde.value_cache import ValueCache
from checkpointer.types import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    RunnableConfig,
    check_id,
    check_ids,
    check_put_ids,
    checkpoint_id_of,
    checkpoint_ns_of,
    config_address,
    make_config,
    thread_id_of,
)

T = TypeVar("T")
M = TypeVar("M")
Program = Generator[Op[Any], Any, T]

DEFAULT_PAGE_SIZE = 1000
"""Checkpoints per `list()` statement: one statement for a page, never one per checkpoint."""

FIRST_CROSS_THREAD_PAGE = 8
"""Checkpoints in the first page of a listing across threads; later pages are sized by
what it weighed (up to `reads.LIST_PAGE_BYTES` and `page_size`)."""


class SyncExecutor(Protocol):
    trace: StatementHook | None

    def run(self, op: Op[T]) -> T: ...

    def close(self) -> None: ...


class AsyncExecutor(Protocol):
    trace: StatementHook | None

    async def run(self, op: Op[T]) -> T: ...

    async def close(self) -> None: ...


_INLINE_SOURCES_CHUNK = 32
"""Channels looked up per statement when a put resolves values kept in other records."""


class SqlPrograms:
    """Every saver operation, independent of sync or async execution."""

    _dialect: Dialect
    serde: Serializer
    page_size: int
    passes_value_locations = True
    """Every value is stored and read with its `ValueLocation` (see `serde.located`)."""
    returns_own_tuples = True
    """Every tuple `get_tuple` and `list` return is decoded for that call: nothing in it is
    shared with the saver or another caller (the LangGraph adapter then converts in place)."""

    def _made(self, name: str, make: Callable[[], M]) -> M:
        """The per-saver helper object `name`, made on first use (savers are built by
        subclasses whose `__init__` this class does not own)."""
        found: M | None = self.__dict__.get(name)
        if found is None:
            found = self.__dict__.setdefault(name, make())
        return found

    @property
    def _recent_inline(self) -> RecentInline:
        """What the last puts kept inline (see `inline.RecentInline`)."""
        return self._made("_recent_inline_cache", RecentInline)

    @property
    def _list_tails(self) -> ListTails:
        """The lists this saver last wrote whole, to write later versions as tails of them
        (see `tails.py`)."""
        return self._made("_list_tails_cache", ListTails)

    @property
    def _history_reuse(self) -> HistoryReuse:
        """Delta histories just read, answering their ancestors' (`history_reuse.py`)."""
        return self._made("_history_reuse_cache", HistoryReuse)

    @property
    def value_cache(self) -> ValueCache:
        """Decompressed values read by this saver (see `serde.value_cache`), made on first
        use; `saver.value_cache.resize(0)` turns it off."""
        return self._made("_value_cache", ValueCache)

    def _serde_traits(self) -> tuple[bool, bool]:
        """(`serde_inlines`, `is_located`) of the saver's serializer, asked once per
        serializer: each is an attribute read through its wrappers (a Python `__getattr__`
        per layer), which every put and put_writes asked several times."""
        serde = self.serde
        traits: tuple[Any, bool, bool] | None = self.__dict__.get("_serde_traits_cache")
        if traits is None or traits[0] is not serde:
            traits = (serde, serde_inlines(serde), is_located(serde))
            self.__dict__["_serde_traits_cache"] = traits
        return traits[1], traits[2]

    def _read_context(self) -> ReadContext:
        """What reads ask of the serializer (see `reads.ReadContext`), asked again only when
        the saver's serializer is replaced (the LangGraph adapter extends it)."""
        context: ReadContext | None = self.__dict__.get("_read_context_cache")
        if context is None or context.serde is not self.serde:
            context = self.__dict__["_read_context_cache"] = read_context(self.serde, self._dialect)
        return context

    def _where(self) -> str:
        return self._dialect.describe()

    def _p_check_schema(self) -> Program[None]:
        found = yield read_plan(self._dialect.version_plan)
        check_revision(found, where=self._where())

    def _p_setup(self) -> Program[None]:
        if self._dialect.file_setup_plan() is not None:
            # Idempotent settings, outside any transaction (journal_mode cannot change in one).
            yield repeatable(lambda: Op(self._dialect.file_setup_plan(), write=True))  # type: ignore[arg-type]
        # Repeatable: one transaction that reads the schema version before changing anything,
        # so a repeat after a lost COMMIT finds the schema current and does nothing.
        yield repeatable(lambda: Op(self._dialect.setup_plan(), txn=True))

    def _p_read(self, stmt: Callable[[Dialect], Stmt]) -> Program[list[Row]]:
        """The rows of `stmt(dialect)`. When it fails on a damaged checkpoint record (SQLite:
        text that is not JSON), once more with the guarded dialect, which reads around the
        damage so that the decoders can name it: the hot path runs the plain statement."""
        try:
            rows: list[Row] = yield read_op(stmt(self._dialect))
        except Exception as exc:
            if not self._dialect.json_damage(exc):
                raise
            rows = yield read_op(stmt(self._dialect.guarded()))
        return rows

    def _p_get_tuple(self, config: RunnableConfig) -> Program[CheckpointTuple | None]:
        rows = yield from self._p_read(lambda d: get_tuple_stmt(d, config))
        rows = yield from self._p_with_bases(rows)
        return next(
            decode_tuples(rows, self.serde, self._dialect, self.value_cache, self._read_context()),
            None,
        )

    def _p_with_bases(
        self, rows: list[Row], missing: list[BaseKey] | None = None
    ) -> Program[list[Row]]:
        """`rows` of `reads._tuples_sql`, with the bases it could not bring (tails.py);
        `missing`: `reads.missing_bases(rows)`, when the caller has it."""
        if missing is None:
            missing = missing_bases(rows)
        if not missing:
            return rows
        return rows + base_rows((yield from self._p_tail_bases(missing)))

    def _p_tail_bases(self, keys: Iterable[BaseKey]) -> Program[Bases]:
        """The bases of tail rows (`tails.py`), for the decoders."""
        wanted = list(keys)
        found: Bases = yield read_plan(lambda: bases_plan(self._dialect, wanted))
        return found

    def _p_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Program[RunnableConfig]:
        inlines, located = self._serde_traits()
        thread_id, ns, parent_id = config_address(config)
        check_put_ids(checkpoint, metadata)
        self._history_reuse.forget((thread_id,))
        carried: dict[str, Any] | None = None
        carried_hints: dict[str, str] | None = None
        restore = None
        unchanged = unchanged_channels(checkpoint, new_versions)
        if not inlines:  # only a value held here can need storing (`unstored.py`)
            values = checkpoint["channel_values"]
            unchanged = {ch for ch in unchanged if ch in values}
        if unchanged:
            versions = checkpoint["channel_versions"]
            parent = None
            if parent_id is not None:
                parent = yield from self._p_parent_inline(thread_id, ns, parent_id)
            carried = inline_carried(parent, versions, unchanged) if inlines else {}
            if parent is not None and parent[2]:  # tails.TAILS_KEY, for unchanged values
                carried_hints = {
                    ch: base
                    for ch, base in parent[2].items()
                    if ch in unchanged and ch in versions and parent[0].get(ch) == versions[ch]
                }
            # Unchanged channels at a version the parent's record does not hold (a copy
            # written beside its original, a re-put, a root or orphan with values): their
            # values are wherever that version was stored, maybe inline in another record,
            # to be carried here too, else in a value row, written now if there is none.
            parent_versions = parent[0] if parent is not None else {}
            wanted = [
                (ch, version_text(versions[ch]))
                for ch in sorted(unchanged)
                if parent_versions.get(ch) != versions[ch]
            ]
            if wanted:
                if inlines:
                    carried.update((yield from self._p_inline_sources(thread_id, ns, wanted)))
                restore = restored(checkpoint, wanted, carried)
        if inlines:
            unversioned = unversioned_inline(checkpoint, new_versions)
            if unversioned:
                carried = {**(carried or {}), **unversioned}
        op, next_config, inline, hints = put_op(
            self._dialect,
            self.serde,
            config,
            checkpoint,
            metadata,
            new_versions,
            carried,
            restore,
            inlines=inlines,
            located=located,
            tails=self._list_tails,
            carried_hints=carried_hints,
        )
        yield op
        # The versions steer the next put's carry (and its inline values, when kept).
        self._recent_inline.remember(
            (thread_id, ns, checkpoint["id"]), checkpoint["channel_versions"], inline, hints
        )
        return next_config

    def _p_parent_inline(self, thread_id: str, ns: str, parent_id: str) -> Program[Parent | None]:
        """The parent's versions, inline values and tail hints: remembered from the last
        puts, or read back (None when there is no such checkpoint)."""
        parent = self._recent_inline.get((thread_id, ns, parent_id))
        if parent is None:
            rows = yield from self._p_read(lambda d: record_stmt(d, thread_id, ns, parent_id))
            where = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": parent_id}
            parent = record_versions_and_inline(rows, where)
        return parent

    def _p_inline_sources(
        self, thread_id: str, ns: str, wanted: Sequence[tuple[str, str]]
    ) -> Program[dict[str, Any]]:
        """The inline values of `wanted` (channel, version) pairs kept in any record of the
        thread (see `puts.inline_sources_stmt`), in chunks of a bounded statement size."""
        found: dict[str, Any] = {}
        where = {"thread_id": thread_id, "checkpoint_ns": ns}
        for start in range(0, len(wanted), _INLINE_SOURCES_CHUNK):
            chunk = wanted[start : start + _INLINE_SOURCES_CHUNK]
            rows = yield from self._p_read(
                lambda d, chunk=chunk: inline_sources_stmt(d, thread_id, ns, chunk)  # type: ignore[misc]
            )
            found.update(decode_inline_sources(rows, chunk, where))
        return found

    def _p_put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
    ) -> Program[None]:
        check_id(task_id, "task_id")
        check_id(task_path, "task_path")
        self._history_reuse.forget((thread_id_of(config),))
        located = self._serde_traits()[1]
        op = put_writes_op(
            self._dialect, self.serde, config, writes, task_id, task_path, located=located
        )
        if op is not None:
            yield op

    def _p_delete_thread(self, thread_id: str) -> Program[None]:
        self._history_reuse.forget()  # histories may change (history_reuse.py)
        thread_id = check_id(thread_id, "thread_id")
        self._recent_inline.clear()  # its checkpoint ids may come back with other values
        self.value_cache.drop_threads((thread_id,))
        yield self._dialect.delete_thread_plan(thread_id)

    def _p_delete_for_runs(self, run_ids: Sequence[str]) -> Program[None]:
        self._history_reuse.forget()  # histories may change (history_reuse.py)
        runs = check_ids(run_ids, "run_ids")
        if runs:
            yield Op(delete_for_runs_plan(self._dialect, runs), txn=True)
            self.value_cache.clear()

    def _p_copy_thread(
        self, source_thread_id: str, target_thread_id: str, replace: bool
    ) -> Program[None]:
        self._history_reuse.forget()  # histories may change (history_reuse.py)
        source = check_id(source_thread_id, "source_thread_id")
        target = check_id(target_thread_id, "target_thread_id")
        if source == target:
            return
        d = self._dialect
        if is_located(self.serde):
            # Values bound to their thread are re-sealed for the copy, not copied as bytes.
            copy = copy_thread_relocating_plan(d, self.serde, source, target)
        else:
            copy = d.copy_thread_plan(source, target).plan
        if replace:
            self._recent_inline.clear()  # the target's checkpoint ids come back changed
            self.value_cache.drop_threads((target,))
        yield Op(copy_thread_guarded_plan(d, source, target, copy, replace=replace), txn=True)

    def _p_prune(self, thread_ids: Sequence[str], strategy: str) -> Program[None]:
        self._history_reuse.forget()  # histories may change (history_reuse.py)
        validate_prune_strategy(strategy)
        threads = list(dict.fromkeys(check_ids(thread_ids, "thread_ids")))
        if not threads:
            return
        self.value_cache.drop_threads(threads)
        if strategy == "delete":
            for thread_id in threads:
                yield self._dialect.delete_thread_plan(thread_id)
        else:
            # The head of each namespace, and whatever keeps every kept checkpoint readable.
            yield from self._p_apply_retention(KeepLast(1), threads, None, False, None)

    def _p_delta_history(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> Program[Mapping[str, DeltaChannelHistory]]:
        if not channels:
            return {}
        out: dict[str, DeltaChannelHistory] = {}
        where = {"thread_id": thread_id_of(config), "checkpoint_ns": checkpoint_ns_of(config)}
        records = is_located(self.serde)  # verify the sealed records the walk passes
        target = checkpoint_id_of(config)
        chunks = delta_history_chunks(channels)
        reuse = None if records or target is None or len(chunks) > 1 else self._history_reuse
        if reuse is not None and target is not None:
            known = reuse.answer(where["thread_id"], where["checkpoint_ns"], target, chunks[0])
            if known is not None:
                return known
        for chunk in chunks:
            rows = None
            if not records:  # by runs (`delta_runs.py`) where they stand in for the walk
                rows = yield from self._p_read(
                    partial(delta_runs_stmt, config=config, channels=chunk)
                )
                rows = None if rows and rows[0][0] == RUNS_FALLBACK else order_runs_rows(rows)
            if rows is None:
                stmt = partial(delta_history_stmt, config=config, channels=chunk, records=records)
                rows = yield from self._p_read(stmt)
            if rows and rows[0][0] == WALK_BOUND_REACHED:
                # A loop in parent pointers, or a summary that undercounts the thread.
                thread_id, ns = where["thread_id"], where["checkpoint_ns"]
                pointers = yield read_op(parent_pointers_stmt(self._dialect, thread_id, ns))
                bound = confirm_walk_loop(pointers, thread_id, ns, checkpoint_id_of(config))
                stmt = partial(
                    delta_history_stmt, config=config, channels=chunk, bound=bound, records=records
                )
                rows = yield from self._p_read(stmt)
                if rows and rows[0][0] == WALK_BOUND_REACHED:
                    raise history_loop(thread_id, ns, str(rows[0][8]))
            cache = self.value_cache
            rows, bases, missing = tail_seeds(rows, **where)
            if missing:  # bases the statement did not bring
                bases.update((yield from self._p_tail_bases(missing)))
            decode = partial(
                _decode_history,
                serde=self.serde,
                d=self._dialect,
                where=where,
                cache=cache,
                bases=bases,
            )
            out.update(decode(rows, chunk))
            if reuse is not None and target is not None:
                reuse.remember(
                    where["thread_id"], where["checkpoint_ns"], target, chunk, rows, decode
                )
        return out

    # ------------------------------------------------------------ lifecycle
    def _p_apply_retention(
        self,
        policy: RetentionPolicy,
        thread_ids: Sequence[str] | None,
        channels: Mapping[str, BaseChannel] | None,
        dry_run: bool,
        now: datetime | None,
    ) -> Program[RetentionReport]:
        self._history_reuse.forget()  # histories may change (history_reuse.py)
        policy = validate_policy(policy)
        if thread_ids is not None:
            thread_ids = check_ids(thread_ids, "thread_ids")
        at = resolve_now(now)
        d = self._dialect
        report = RetentionReport(policy.describe(), dry_run)
        if isinstance(policy, IdleThreadTTL):
            cutoff = at - policy.ttl
            candidates = yield read_plan(lambda: lc.idle_threads_plan(d, cutoff, thread_ids))
            still = f"updated_at < {d.typed(d.p('cutoff'), 'ts')}"
            report.threads = yield from self._p_delete_whole(
                candidates,
                still,
                {"cutoff": d.ts_param(cutoff)},
                dry_run,
                spare_interrupted=policy.keep_interrupted,
            )
            return report
        threads = yield read_plan(lambda: lc.thread_ids_plan(d, thread_ids))
        for thread_id in threads:
            plan = lc.retain_thread_plan(
                d, self.serde, thread_id, policy, specs=channels, now=at, dry_run=dry_run
            )
            outcome = yield Op(plan, txn=not dry_run)
            if outcome is not None:
                report.threads.append(outcome)
        return report

    def _p_delete_whole(
        self,
        candidates: list[lc.Candidate],
        still: str,
        params: dict[str, Any],
        dry_run: bool,
        *,
        spare_interrupted: bool,
    ) -> Program[builtins.list[ThreadOutcome]]:
        self._history_reuse.forget()  # histories may change (history_reuse.py)
        d = self._dialect
        out: builtins.list[ThreadOutcome] = []
        for candidate in candidates:
            skipped = None
            if candidate.pinned:
                skipped = "has a pinned checkpoint"
            elif spare_interrupted and (
                yield read_plan(partial(lc.pending_interrupt_plan, d, candidate.thread_id))
            ):
                skipped = "waiting on an interrupt"
            if skipped is not None:
                out.append(
                    ThreadOutcome(
                        candidate.thread_id,
                        checkpoints_before=candidate.checkpoints,
                        skipped=skipped,
                    )
                )
                continue
            plan = lc.delete_whole_thread_plan(
                d, candidate, still=still, params=params, dry_run=dry_run
            )
            out.append((yield Op(plan, txn=not dry_run)))
        return out

    def _p_sweep_expired(self, now: datetime | None, dry_run: bool) -> Program[RetentionReport]:
        self._history_reuse.forget()  # histories may change (history_reuse.py)
        at = resolve_now(now)
        d = self._dialect
        report = RetentionReport("delete threads past their TTL", dry_run)
        candidates = yield read_plan(lambda: lc.expired_threads_plan(d, at))
        still = f"expires_at <= {d.typed(d.p('now'), 'ts')}"
        report.threads = yield from self._p_delete_whole(
            candidates, still, {"now": d.ts_param(at)}, dry_run, spare_interrupted=False
        )
        return report

    def _p_set_pin(self, config: RunnableConfig, pinned: bool) -> Program[RunnableConfig]:
        thread_id, ns = thread_id_of(config), checkpoint_ns_of(config)
        checkpoint_id = checkpoint_id_of(config)
        found = yield Op(
            lc.set_pin_plan(self._dialect, thread_id, ns, checkpoint_id, pinned), txn=True
        )
        if found is None:
            if not pinned:
                return make_config(thread_id, ns, checkpoint_id)
            raise CheckpointNotFoundError(
                f"no checkpoint to pin at thread {thread_id!r}, namespace {ns!r}"
                + (f", id {checkpoint_id!r}" if checkpoint_id else "")
            )
        return make_config(thread_id, ns, found)

    def _p_list_pinned(self, thread_id: str) -> Program[builtins.list[RunnableConfig]]:
        thread_id = check_id(thread_id, "thread_id")
        rows = yield read_plan(lambda: lc.list_pinned_plan(self._dialect, thread_id))
        return [make_config(thread_id, ns, cid) for ns, cid in rows]

    def _p_list_threads(
        self,
        sort: str,
        descending: bool,
        limit: int | None,
        offset: int,
        thread_ids: Sequence[str] | None,
    ) -> Program[builtins.list[ThreadSummary]]:
        validate_thread_listing(sort, limit, offset)
        if thread_ids is not None:
            thread_ids = check_ids(thread_ids, "thread_ids")
        summaries = yield read_plan(
            lambda: lc.list_threads_plan(
                self._dialect,
                sort=sort,
                descending=descending,
                limit=limit,
                offset=offset,
                thread_ids=thread_ids,
            )
        )
        return summaries

    def _p_set_thread_ttl(self, thread_id: str, ttl: timedelta | None) -> Program[None]:
        thread_id = check_id(thread_id, "thread_id")
        seconds = validate_ttl(ttl)
        yield Op(lc.set_ttl_plan(self._dialect, thread_id, seconds, resolve_now(None)))

    def _p_reclaim_space(self, full: bool) -> Program[SpaceReport]:
        if self._dialect.name == "sqlite":
            report = yield Op(lc.sqlite_reclaim_plan(full))
        else:
            report = yield Op(lc.postgres_reclaim_plan(self._dialect, full))
        return report

    def _p_refresh(self, thread_ids: Sequence[str] | None) -> Program[int]:
        if thread_ids is not None:
            thread_ids = check_ids(thread_ids, "thread_ids")
        count = yield Op(lc.refresh_plan(self._dialect, thread_ids, resolve_now(None)), txn=True)
        return count

    def _list_page(
        self,
        query: ListQuery,
        after: tuple[str, str, str] | None,
        remaining: int | None,
        cap: int | None = None,
    ) -> tuple[Callable[[Dialect], Stmt], int] | None:
        """The statement of the next page (per dialect, see `_p_read`) and its size."""
        size = self.page_size if remaining is None else min(remaining, self.page_size)
        if cap is not None:
            size = min(size, cap)
        if size <= 0:
            return None
        return (lambda d: list_page_stmt(d, query, after, size, remaining)), size


def _decode_history(
    rows: list[Row],
    channels: Sequence[str],
    *,
    serde: Serializer,
    d: Dialect,
    where: Mapping[str, str],
    cache: ValueCache,
    bases: Any,
) -> dict[str, DeltaChannelHistory]:
    """`decode_delta_history` as `history_reuse` calls it again on part of the rows."""
    return decode_delta_history(
        rows,
        channels,
        serde,
        d,
        thread_id=where["thread_id"],
        checkpoint_ns=where["checkpoint_ns"],
        cache=cache,
        bases=bases,
    )


class ListPager:
    """Where one `list()` is across its pages, for the sync and the async saver alike."""

    def __init__(self, programs: SqlPrograms, query: ListQuery) -> None:
        self.programs, self.query = programs, query
        self.remaining = query.limit
        self.after: tuple[str, str, str] | None = None
        self.size = 0
        # Across threads the statement only knows average weights: a first page of a few
        # checkpoints measures the real one (see `tuples`) before pages grow.
        self.cap: int | None = FIRST_CROSS_THREAD_PAGE if query.thread_id is None else None
        self.done = False

    def next_stmt(self) -> Callable[[Dialect], Stmt] | None:
        """The statement of the next page, or None when the listing is complete."""
        page = (
            None
            if self.done
            else self.programs._list_page(self.query, self.after, self.remaining, self.cap)
        )
        if page is None:
            return None
        stmt, self.size = page
        return stmt

    def next_page(self) -> Program[list[Row]] | None:
        """The read of the next page, or None when the listing is complete."""
        stmt = self.next_stmt()
        return None if stmt is None else self._p_page(stmt)

    def _p_page(self, stmt: Callable[[Dialect], Stmt]) -> Program[list[Row]]:
        rows = yield from self.programs._p_read(stmt)
        return (yield from self.programs._p_with_bases(rows))

    def tuples(self, rows: list[Row]) -> Iterator[CheckpointTuple]:
        """The page's checkpoints, each decoded when reached (a corrupt one hides none
        before it); then where the next page starts, or that there is none."""
        size = page_limit_of(rows) or self.size  # a small thread comes whole in one page
        count, last = 0, None
        programs = self.programs
        if self.query.thread_id is not None:  # a timeline's pointers (`history_reuse.py`)
            programs._history_reuse.links((r[2], r[3], r[4], r[5]) for r in rows if r[1] == 0)
        for last in decode_tuples(
            rows,
            programs.serde,
            programs._dialect,
            programs.value_cache,
            programs._read_context(),
        ):
            count += 1
            yield last
        if count < size or last is None:
            self.done = True
            return
        key = last.config["configurable"]
        self.after = (key["checkpoint_id"], key["thread_id"], key["checkpoint_ns"])
        # Another page follows: size it by what this one weighed (the statement sizes it
        # from summaries, which know nothing of values shared across checkpoints).
        weight = sum(len(row[7]) for row in rows if row[7] is not None) // max(count, 1)
        self.cap = max(1, reads.LIST_PAGE_BYTES // max(weight, 1))
        if self.remaining is not None:
            self.remaining -= count


def typed_damage(dialect: Dialect, exc: Exception) -> Exception:
    """A statement that failed on a damaged checkpoint record as CorruptValueError.

    Reads name the damaged row themselves (`_p_read`); this covers the operations that read
    records wholesale (retention, fork, lifecycle reports), whose transaction has rolled
    back, so nothing was changed."""
    if isinstance(exc, CheckpointerError) or not dialect.json_damage(exc):
        return exc
    return CorruptValueError(
        f"a checkpoint record this operation read is damaged ({exc}); nothing was changed. "
        "`get_tuple` / `list` name the damaged checkpoint"
    )
