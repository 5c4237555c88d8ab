"""The SQL savers: thin sync and async drivers of the programs in `programs.py` (which
say how a program runs its operations)."""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Iterator,
    Mapping,
    Sequence,
)
from datetime import datetime, timedelta
from typing import Any, TypeVar

from checkpointer.channels import BaseChannel
from checkpointer.errors import CheckpointerError
from checkpointer.lifecycle import (
    RetentionPolicy,
    RetentionReport,
    SpaceReport,
    ThreadSort,
    ThreadSummary,
)
from checkpointer.savers.base import (
    BaseCheckpointSaver,
)
from checkpointer.savers.sql.dialect import Dialect
from checkpointer.savers.sql.plan import (
    Row,
    Stmt,
    read_op,
)
from checkpointer.savers.sql.programs import (
    DEFAULT_PAGE_SIZE,
    AsyncExecutor,
    ListPager,
    Program,
    SqlPrograms,
    SyncExecutor,
    typed_damage,
)
from checkpointer.savers.sql.reads import (
    ListQuery,
    decode_tuples,
    get_tuple_stmt,
    missing_bases,
)
from checkpointer.serde import Serializer
from checkpointer.serde.compression import database_default_serializer
from checkpointer.types import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    RunnableConfig,
)

T = TypeVar("T")


class SyncSqlSaver(SqlPrograms, BaseCheckpointSaver):
    """Sync SQL saver; async methods come from the base class (run in a worker thread)."""

    _executor: SyncExecutor

    def __init__(self, *, serde: Serializer | None, page_size: int = DEFAULT_PAGE_SIZE) -> None:
        super().__init__(serde=serde if serde is not None else database_default_serializer())
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self.page_size = page_size
        self._schema_ok = False

    def _drive(self, program: Program[T], *, check: bool = True) -> T:
        if check and not self._schema_ok:
            self._drive(self._p_check_schema(), check=False)
            self._schema_ok = True
        try:
            op = next(program)
            while True:
                try:
                    result = self._executor.run(op)
                except Exception as exc:  # the program may handle it (see _p_read)
                    op = program.throw(exc)
                else:
                    op = program.send(result)
        except StopIteration as stop:
            return stop.value
        except Exception as exc:
            typed = typed_damage(self._dialect, exc)
            if typed is exc:
                raise
            raise typed from exc
        finally:
            program.close()

    def setup(self) -> None:
        """Create or upgrade the schema. Idempotent; safe from several processes at once."""
        self._drive(self._p_setup(), check=False)
        self._schema_ok = True

    def close(self) -> None:
        self._executor.close()

    def _read(self, stmt: Callable[[Dialect], Stmt]) -> list[Row]:
        """`_drive(_p_read(stmt))` without the program layers, for the read path's one
        statement per call (get_tuple, a list page): the same retry with the guarded
        dialect on a damaged record, the same typing of what still fails."""
        if not self._schema_ok:
            return self._drive(self._p_read(stmt))
        executor = self._executor
        fetch = getattr(executor, "fetch", None)
        try:
            try:
                first = stmt(self._dialect)
                return fetch(first) if fetch is not None else executor.run(read_op(first))
            except Exception as exc:
                if not self._dialect.json_damage(exc):
                    raise
            guarded = stmt(self._dialect.guarded())
            return fetch(guarded) if fetch is not None else executor.run(read_op(guarded))
        except Exception as exc:
            typed = typed_damage(self._dialect, exc)
            if typed is exc:
                raise
            raise typed from exc

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        rows = self._read(lambda d: get_tuple_stmt(d, config))
        if missing := missing_bases(rows):  # tails whose records name no base (`tails.py`)
            rows = self._drive(self._p_with_bases(rows, missing))
        return next(
            decode_tuples(rows, self.serde, self._dialect, self.value_cache, self._read_context()),
            None,
        )

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        query = ListQuery.from_args(config, filter, before, limit)
        return self._iter_list(query)

    def _iter_list(self, query: ListQuery) -> Iterator[CheckpointTuple]:
        pager = ListPager(self, query)
        while (stmt := pager.next_stmt()) is not None:
            # No lock and no connection is held while the caller consumes the page.
            rows = self._read(stmt)
            if missing := missing_bases(rows):  # tails whose records name no base
                rows = self._drive(self._p_with_bases(rows, missing))
            yield from pager.tuples(rows)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._drive(self._p_put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._drive(self._p_put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._drive(self._p_delete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._drive(self._p_delete_for_runs(run_ids))

    def copy_thread(
        self, source_thread_id: str, target_thread_id: str, *, replace: bool = False
    ) -> None:
        self._drive(self._p_copy_thread(source_thread_id, target_thread_id, replace))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._drive(self._p_prune(thread_ids, strategy))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self._drive(self._p_delta_history(config, channels))

    def apply_retention(
        self,
        policy: RetentionPolicy,
        *,
        thread_ids: Sequence[str] | None = None,
        channels: Mapping[str, BaseChannel] | None = None,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> RetentionReport:
        return self._drive(self._p_apply_retention(policy, thread_ids, channels, dry_run, now))

    def sweep_expired(
        self, *, now: datetime | None = None, dry_run: bool = False
    ) -> RetentionReport:
        return self._drive(self._p_sweep_expired(now, dry_run))

    def pin(self, config: RunnableConfig) -> RunnableConfig:
        return self._drive(self._p_set_pin(config, True))

    def unpin(self, config: RunnableConfig) -> None:
        self._drive(self._p_set_pin(config, False))

    def list_pinned(self, thread_id: str) -> builtins.list[RunnableConfig]:
        return self._drive(self._p_list_pinned(thread_id))

    def list_threads(
        self,
        *,
        sort: ThreadSort = "updated",
        descending: bool = True,
        limit: int | None = 100,
        offset: int = 0,
        thread_ids: Sequence[str] | None = None,
    ) -> builtins.list[ThreadSummary]:
        return self._drive(self._p_list_threads(sort, descending, limit, offset, thread_ids))

    def set_thread_ttl(self, thread_id: str, ttl: timedelta | None) -> None:
        self._drive(self._p_set_thread_ttl(thread_id, ttl))

    def reclaim_space(self, *, full: bool = False) -> SpaceReport:
        return self._drive(self._p_reclaim_space(full))

    def refresh_thread_summaries(self, thread_ids: Sequence[str] | None = None) -> int:
        return self._drive(self._p_refresh(thread_ids))

    def __enter__(self) -> SyncSqlSaver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _then_raise(items: builtins.list[T], error: Exception | None) -> Iterator[T]:
    """`items`, then `error` if there was one (as a streaming list() would have)."""
    yield from items
    if error is not None:
        raise error


class AsyncSqlSaver(SqlPrograms, BaseCheckpointSaver):
    """Async SQL saver. Its sync methods run the async ones on the saver's event loop from
    another thread; called from that loop itself they raise instead of deadlocking."""

    _executor: AsyncExecutor

    def __init__(self, *, serde: Serializer | None, page_size: int = DEFAULT_PAGE_SIZE) -> None:
        super().__init__(serde=serde if serde is not None else database_default_serializer())
        if page_size < 1:
            raise ValueError("page_size must be at least 1")
        self.page_size = page_size
        self._schema_ok = False
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            self.loop = None

    def _bind_loop(self) -> None:
        if self.loop is None or self.loop.is_closed():
            self.loop = asyncio.get_running_loop()

    async def _adrive(self, program: Program[T], *, check: bool = True) -> T:
        self._bind_loop()
        if check and not self._schema_ok:
            await self._adrive(self._p_check_schema(), check=False)
            self._schema_ok = True
        try:
            op = next(program)
            while True:
                try:
                    result = await self._executor.run(op)
                except Exception as exc:  # the program may handle it (see _p_read)
                    op = program.throw(exc)
                else:
                    op = program.send(result)
        except StopIteration as stop:
            return stop.value
        except Exception as exc:
            typed = typed_damage(self._dialect, exc)
            if typed is exc:
                raise
            raise typed from exc
        finally:
            program.close()

    def _sync(self, name: str, coro: Coroutine[Any, Any, T]) -> T:
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        loop = self.loop
        if running is not None and (loop is None or running is loop):
            coro.close()
            raise CheckpointerError(
                f"{type(self).__name__}.{name}() was called from the event loop the saver "
                f"runs on, which would deadlock; use `await saver.a{name}(...)` there, or "
                "call the sync method from another thread"
            )
        if loop is None or loop.is_closed() or not loop.is_running():
            coro.close()
            raise CheckpointerError(
                f"{type(self).__name__}.{name}() needs the saver's event loop running in "
                "another thread; in async code use the a-prefixed methods"
            )
        return asyncio.run_coroutine_threadsafe(coro, loop).result()

    async def setup(self) -> None:
        """Create or upgrade the schema. Idempotent; safe from several processes at once."""
        await self._adrive(self._p_setup(), check=False)
        self._schema_ok = True

    async def aclose(self) -> None:
        await self._executor.close()

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._adrive(self._p_get_tuple(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        pager = ListPager(self, ListQuery.from_args(config, filter, before, limit))
        while (program := pager.next_page()) is not None:
            for tup in pager.tuples(await self._adrive(program)):
                yield tup

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._adrive(self._p_put(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        await self._adrive(self._p_put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._adrive(self._p_delete_thread(thread_id))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._adrive(self._p_delete_for_runs(run_ids))

    async def acopy_thread(
        self, source_thread_id: str, target_thread_id: str, *, replace: bool = False
    ) -> None:
        await self._adrive(self._p_copy_thread(source_thread_id, target_thread_id, replace))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._adrive(self._p_prune(thread_ids, strategy))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return await self._adrive(self._p_delta_history(config, channels))

    async def aapply_retention(
        self,
        policy: RetentionPolicy,
        *,
        thread_ids: Sequence[str] | None = None,
        channels: Mapping[str, BaseChannel] | None = None,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> RetentionReport:
        return await self._adrive(
            self._p_apply_retention(policy, thread_ids, channels, dry_run, now)
        )

    async def asweep_expired(
        self, *, now: datetime | None = None, dry_run: bool = False
    ) -> RetentionReport:
        return await self._adrive(self._p_sweep_expired(now, dry_run))

    async def apin(self, config: RunnableConfig) -> RunnableConfig:
        return await self._adrive(self._p_set_pin(config, True))

    async def aunpin(self, config: RunnableConfig) -> None:
        await self._adrive(self._p_set_pin(config, False))

    async def alist_pinned(self, thread_id: str) -> builtins.list[RunnableConfig]:
        return await self._adrive(self._p_list_pinned(thread_id))

    async def alist_threads(
        self,
        *,
        sort: ThreadSort = "updated",
        descending: bool = True,
        limit: int | None = 100,
        offset: int = 0,
        thread_ids: Sequence[str] | None = None,
    ) -> builtins.list[ThreadSummary]:
        return await self._adrive(self._p_list_threads(sort, descending, limit, offset, thread_ids))

    async def aset_thread_ttl(self, thread_id: str, ttl: timedelta | None) -> None:
        await self._adrive(self._p_set_thread_ttl(thread_id, ttl))

    async def areclaim_space(self, *, full: bool = False) -> SpaceReport:
        return await self._adrive(self._p_reclaim_space(full))

    async def arefresh_thread_summaries(self, thread_ids: Sequence[str] | None = None) -> int:
        return await self._adrive(self._p_refresh(thread_ids))

    # Sync bridges (from another thread only).
    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._sync("get_tuple", self.aget_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        async def collect() -> tuple[list[CheckpointTuple], Exception | None]:
            out: list[CheckpointTuple] = []
            try:
                async for t in self.alist(config, filter=filter, before=before, limit=limit):
                    out.append(t)
            except Exception as exc:  # re-raised after the checkpoints before it
                return out, exc
            return out, None

        found, error = self._sync("list", collect())
        if error is not None and not found:
            raise error
        return _then_raise(found, error)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._sync("put", self.aput(config, checkpoint, metadata, new_versions))

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        self._sync("put_writes", self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._sync("delete_thread", self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._sync("delete_for_runs", self.adelete_for_runs(run_ids))

    def copy_thread(
        self, source_thread_id: str, target_thread_id: str, *, replace: bool = False
    ) -> None:
        self._sync(
            "copy_thread",
            self.acopy_thread(source_thread_id, target_thread_id, replace=replace),
        )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        self._sync("prune", self.aprune(thread_ids, strategy=strategy))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        return self._sync(
            "get_delta_channel_history",
            self.aget_delta_channel_history(config=config, channels=channels),
        )

    def apply_retention(
        self,
        policy: RetentionPolicy,
        *,
        thread_ids: Sequence[str] | None = None,
        channels: Mapping[str, BaseChannel] | None = None,
        dry_run: bool = False,
        now: datetime | None = None,
    ) -> RetentionReport:
        return self._sync(
            "apply_retention",
            self.aapply_retention(
                policy, thread_ids=thread_ids, channels=channels, dry_run=dry_run, now=now
            ),
        )

    def sweep_expired(
        self, *, now: datetime | None = None, dry_run: bool = False
    ) -> RetentionReport:
        return self._sync("sweep_expired", self.asweep_expired(now=now, dry_run=dry_run))

    def pin(self, config: RunnableConfig) -> RunnableConfig:
        return self._sync("pin", self.apin(config))

    def unpin(self, config: RunnableConfig) -> None:
        self._sync("unpin", self.aunpin(config))

    def list_pinned(self, thread_id: str) -> builtins.list[RunnableConfig]:
        return self._sync("list_pinned", self.alist_pinned(thread_id))

    def list_threads(
        self,
        *,
        sort: ThreadSort = "updated",
        descending: bool = True,
        limit: int | None = 100,
        offset: int = 0,
        thread_ids: Sequence[str] | None = None,
    ) -> builtins.list[ThreadSummary]:
        return self._sync(
            "list_threads",
            self.alist_threads(
                sort=sort,
                descending=descending,
                limit=limit,
                offset=offset,
                thread_ids=thread_ids,
            ),
        )

    def set_thread_ttl(self, thread_id: str, ttl: timedelta | None) -> None:
        self._sync("set_thread_ttl", self.aset_thread_ttl(thread_id, ttl))

    def reclaim_space(self, *, full: bool = False) -> SpaceReport:
        return self._sync("reclaim_space", self.areclaim_space(full=full))

    def refresh_thread_summaries(self, thread_ids: Sequence[str] | None = None) -> int:
        return self._sync("refresh_thread_summaries", self.arefresh_thread_summaries(thread_ids))

    async def __aenter__(self) -> AsyncSqlSaver:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
