"""Shared fixtures: databases for the savers, and one harness that drives any saver.

PostgreSQL: `CHECKPOINTER_TEST_PG_URL` (default postgresql://postgres@127.0.0.1:5432/test).
When it is unreachable the PostgreSQL tests skip, except under `CI=true`, where they fail:
CI must never pass by silently testing nothing. Each test gets its own PostgreSQL schema,
dropped afterwards; SQLite databases live in `tmp_path`.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from checkpointer.types import (
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    RunnableConfig,
)

PG_URL = os.environ.get("CHECKPOINTER_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/test")
SAVER_KINDS = ("memory", "sqlite", "async_sqlite", "postgres", "async_postgres")
ASYNC_KINDS = {"async_sqlite", "async_postgres"}
PG_KINDS = {"postgres", "async_postgres"}

_pg_status: str | None = None


def _pg_problem() -> str | None:
    """None when PostgreSQL answers, else why not (checked once per session)."""
    global _pg_status
    if _pg_status is None:
        try:
            import psycopg

            with psycopg.connect(PG_URL, connect_timeout=3, autocommit=True) as conn:
                conn.execute("SELECT 1")
            _pg_status = ""
        except Exception as exc:
            _pg_status = f"PostgreSQL at {PG_URL} is unreachable: {exc}"
    return _pg_status or None


def require_postgres() -> str:
    """The test URL, or skip (fail under CI=true) when PostgreSQL is unreachable."""
    problem = _pg_problem()
    if problem:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(problem + " (CI=true: PostgreSQL tests must run)")
        pytest.skip(problem)
    return PG_URL


@pytest.fixture
def pg_url() -> str:
    return require_postgres()


def drop_schema(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')


@pytest.fixture
def pg_schema(pg_url: str) -> Iterator[str]:
    """A fresh schema name for one test; the schema is dropped afterwards."""
    name = f"cp_test_{uuid.uuid4().hex[:12]}"
    try:
        yield name
    finally:
        drop_schema(name)


@pytest.fixture
def sqlite_path(tmp_path: Path) -> Path:
    return tmp_path / "checkpoints.db"


class Harness:
    """Drives a saver the way its users would: sync savers through their sync methods,
    async savers through their async methods. Tests are written once against this."""

    def __init__(self, saver: Any, kind: str) -> None:
        self.saver = saver
        self.kind = kind
        self.is_async = kind in ASYNC_KINDS

    async def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        if self.is_async:
            return await self.saver.aput(config, checkpoint, metadata, new_versions)
        return self.saver.put(config, checkpoint, metadata, new_versions)  # type: ignore[no-any-return]

    async def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        if self.is_async:
            await self.saver.aput_writes(config, writes, task_id, task_path)
        else:
            self.saver.put_writes(config, writes, task_id, task_path)

    async def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        if self.is_async:
            return await self.saver.aget_tuple(config)  # type: ignore[no-any-return]
        return self.saver.get_tuple(config)  # type: ignore[no-any-return]

    async def list(self, config: RunnableConfig | None, **kwargs: Any) -> list[CheckpointTuple]:
        if self.is_async:
            return [t async for t in self.saver.alist(config, **kwargs)]
        return list(self.saver.list(config, **kwargs))

    async def delete_thread(self, thread_id: str) -> None:
        if self.is_async:
            await self.saver.adelete_thread(thread_id)
        else:
            self.saver.delete_thread(thread_id)

    async def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        if self.is_async:
            await self.saver.adelete_for_runs(run_ids)
        else:
            self.saver.delete_for_runs(run_ids)

    async def copy_thread(self, source: str, target: str) -> None:
        if self.is_async:
            await self.saver.acopy_thread(source, target)
        else:
            self.saver.copy_thread(source, target)

    async def prune(self, thread_ids: Sequence[str], strategy: str = "keep_latest") -> None:
        if self.is_async:
            await self.saver.aprune(thread_ids, strategy=strategy)
        else:
            self.saver.prune(thread_ids, strategy=strategy)

    async def delta(
        self, config: RunnableConfig, channels: Sequence[str]
    ) -> dict[str, DeltaChannelHistory]:
        if self.is_async:
            result = await self.saver.aget_delta_channel_history(config=config, channels=channels)
        else:
            result = self.saver.get_delta_channel_history(config=config, channels=channels)
        return dict(result)


async def open_saver(kind: str, tmp_path: Path, schema: str | None) -> Any:
    """A set-up saver of `kind` (PostgreSQL ones in `schema`)."""
    if kind == "memory":
        from checkpointer.savers.memory import InMemorySaver

        return InMemorySaver()
    if kind == "sqlite":
        from checkpointer.savers.sqlite import SqliteSaver

        saver: Any = SqliteSaver(tmp_path / f"{uuid.uuid4().hex}.db")
        saver.setup()
        return saver
    if kind == "async_sqlite":
        from checkpointer.savers.sqlite import AsyncSqliteSaver

        saver = AsyncSqliteSaver(tmp_path / f"{uuid.uuid4().hex}.db")
        await saver.setup()
        return saver
    assert schema is not None
    if kind == "postgres":
        from checkpointer.savers.postgres import PostgresSaver

        saver = PostgresSaver(PG_URL, schema=schema, min_size=1, max_size=4)
        saver.setup()
        return saver
    if kind == "async_postgres":
        from checkpointer.savers.postgres import AsyncPostgresSaver

        saver = AsyncPostgresSaver(PG_URL, schema=schema, min_size=1, max_size=4)
        await saver.setup()
        return saver
    raise ValueError(kind)


async def close_saver(kind: str, saver: Any) -> None:
    if kind in ASYNC_KINDS:
        await saver.aclose()
    elif kind != "memory":
        saver.close()


@asynccontextmanager
async def opened_saver(kind: str, tmp_path: Path) -> AsyncIterator[Any]:
    """A set-up saver of `kind` for one test (PostgreSQL ones in a fresh schema), closed
    and its schema dropped afterwards."""
    schema = None
    if kind in PG_KINDS:
        require_postgres()
        schema = f"cp_test_{uuid.uuid4().hex[:12]}"
    saver = await open_saver(kind, tmp_path, schema)
    try:
        yield saver
    finally:
        await close_saver(kind, saver)
        if schema is not None:
            drop_schema(schema)


@pytest_asyncio.fixture(params=SAVER_KINDS)
async def harness(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Harness]:
    """Each contract test runs once per saver kind."""
    async with opened_saver(request.param, tmp_path) as saver:
        yield Harness(saver, request.param)


class StatementCounter:
    """Counts the statements an SQL saver sends (wraps its execute layer)."""

    def __init__(self, saver: Any) -> None:
        self.statements: list[str] = []
        saver._executor.trace = self.statements.append

    def reset(self) -> None:
        self.statements.clear()

    @property
    def count(self) -> int:
        return len(self.statements)
