"""Concurrency: many threads/tasks through one saver, several processes on one SQLite file,
and concurrent setup(). Nothing may be lost and nothing may raise."""

from __future__ import annotations

import asyncio
import multiprocessing
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from checkpointer.ids import next_channel_version, task_id_for
from checkpointer.savers.postgres import AsyncPostgresSaver, PostgresSaver
from checkpointer.savers.sqlite import AsyncSqliteSaver, SqliteSaver
from checkpointer.types import empty_checkpoint, make_config
from tests.conftest import PG_URL

STEPS = 25


def write_thread(saver: Any, thread_id: str, steps: int = STEPS) -> None:
    """A run of `steps` checkpoints, each with two pending writes."""
    config = make_config(thread_id)
    version = None
    for step in range(steps):
        version = next_channel_version(version)
        cp = empty_checkpoint()
        cp["channel_versions"] = {"n": version}
        cp["channel_values"] = {"n": step}
        config = saver.put(config, cp, {"step": step}, {"n": version})
        saver.put_writes(config, [("n", step), ("m", -step)], task_id_for(step, thread_id))


async def awrite_thread(saver: Any, thread_id: str, steps: int = STEPS) -> None:
    config = make_config(thread_id)
    version = None
    for step in range(steps):
        version = next_channel_version(version)
        cp = empty_checkpoint()
        cp["channel_versions"] = {"n": version}
        cp["channel_values"] = {"n": step}
        config = await saver.aput(config, cp, {"step": step}, {"n": version})
        await saver.aput_writes(config, [("n", step), ("m", -step)], task_id_for(step, thread_id))


def check_thread(saver: Any, thread_id: str, steps: int = STEPS) -> None:
    items = list(saver.list(make_config(thread_id)))
    assert [t.metadata["step"] for t in items] == list(range(steps))[::-1]
    for tup in items:
        step = tup.metadata["step"]
        assert tup.checkpoint["channel_values"] == {"n": step}
        assert [w[1:] for w in tup.pending_writes or []] == [("n", step), ("m", -step)]


def run_in_threads(fn: Callable[[int], None], n: int) -> None:
    """Start n threads together (a barrier), re-raise the first error."""
    barrier = threading.Barrier(n)

    def go(i: int) -> None:
        barrier.wait()
        fn(i)

    with ThreadPoolExecutor(n) as pool:
        for future in [pool.submit(go, i) for i in range(n)]:
            future.result()


# ------------------------------------------------------------------ threads and tasks
def test_pg_pooled_saver_eight_threads(pg_url: str, pg_schema: str) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, max_size=8, setup=True) as saver:
        threads = [f"pg-{i}-{uuid.uuid4().hex[:6]}" for i in range(8)]
        run_in_threads(lambda i: write_thread(saver, threads[i]), 8)
        for thread_id in threads:
            check_thread(saver, thread_id)


def test_pg_single_connection_saver_eight_threads(pg_url: str, pg_schema: str) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, pool=False, setup=True) as saver:
        threads = [f"pg1-{i}" for i in range(8)]
        run_in_threads(lambda i: write_thread(saver, threads[i], 10), 8)
        for thread_id in threads:
            check_thread(saver, thread_id, 10)


async def test_async_pg_pooled_saver_eight_tasks(pg_url: str, pg_schema: str) -> None:
    async with AsyncPostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, max_size=8, setup=True
    ) as saver:
        threads = [f"apg-{i}" for i in range(8)]
        await asyncio.gather(*(awrite_thread(saver, t) for t in threads))
        # Sync methods from another thread run on the saver's loop.
        for thread_id in threads:
            await asyncio.to_thread(check_thread, saver, thread_id)


def test_sqlite_saver_eight_threads(tmp_path: Path) -> None:
    with SqliteSaver.from_conn_string(tmp_path / "t.db", setup=True) as saver:
        threads = [f"sq-{i}" for i in range(8)]
        run_in_threads(lambda i: write_thread(saver, threads[i]), 8)
        for thread_id in threads:
            check_thread(saver, thread_id)


def test_sqlite_memory_saver_threads(tmp_path: Path) -> None:
    with SqliteSaver.from_conn_string(":memory:", setup=True) as saver:
        threads = [f"mem-{i}" for i in range(4)]
        run_in_threads(lambda i: write_thread(saver, threads[i], 10), 4)
        for thread_id in threads:
            check_thread(saver, thread_id, 10)


async def test_async_sqlite_saver_eight_tasks(tmp_path: Path) -> None:
    async with AsyncSqliteSaver.from_conn_string(tmp_path / "a.db", setup=True) as saver:
        threads = [f"asq-{i}" for i in range(8)]
        await asyncio.gather(*(awrite_thread(saver, t) for t in threads))
        for thread_id in threads:
            await asyncio.to_thread(check_thread, saver, thread_id)


def test_nested_calls_while_listing_do_not_deadlock(tmp_path: Path) -> None:
    """The reference holds a lock across list(); a call inside the loop then deadlocks."""
    with SqliteSaver.from_conn_string(":memory:", setup=True, page_size=2) as saver:
        write_thread(saver, "t", 5)
        for tup in saver.list(make_config("t")):
            assert saver.get_tuple(tup.config) == tup
            write_thread(saver, f"inner-{tup.metadata['step']}", 1)


def test_pg_nested_calls_while_listing_do_not_deadlock(pg_url: str, pg_schema: str) -> None:
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, pool=False, setup=True, page_size=2
    ) as saver:
        write_thread(saver, "t", 5)
        for tup in saver.list(make_config("t")):
            assert saver.get_tuple(tup.config) == tup


# ------------------------------------------------------------------ processes
def _sqlite_worker(path: str, worker: int, shared_checkpoint: str) -> None:
    with SqliteSaver.from_conn_string(path, busy_timeout=30) as saver:
        write_thread(saver, f"proc-{worker}", 40)
        config = make_config("shared", "", shared_checkpoint)
        for i in range(40):
            saver.put_writes(config, [("w", (worker, i))], task_id_for(i, str(worker)))


def _spawn(target: Callable[..., None], args_list: list[tuple[Any, ...]]) -> None:
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=target, args=args) for args in args_list]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    assert [p.exitcode for p in procs] == [0] * len(procs)


def test_two_processes_write_one_sqlite_file(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    with SqliteSaver.from_conn_string(path, setup=True) as saver:
        cp = empty_checkpoint()
        shared = saver.put(make_config("shared"), cp, {}, {})
    _spawn(_sqlite_worker, [(path, 0, cp["id"]), (path, 1, cp["id"])])
    with SqliteSaver.from_conn_string(path) as saver:
        for worker in (0, 1):
            check_thread_steps = [
                t.metadata["step"] for t in saver.list(make_config(f"proc-{worker}"))
            ]
            assert check_thread_steps == list(range(40))[::-1]
        tup = saver.get_tuple(shared)
        assert tup is not None
        assert sorted(w[2] for w in tup.pending_writes or []) == sorted(
            (w, i) for w in (0, 1) for i in range(40)
        )


def _setup_sqlite(path: str) -> None:
    with SqliteSaver.from_conn_string(path, busy_timeout=30) as saver:
        saver.setup()
        write_thread(saver, f"after-setup-{uuid.uuid4().hex}", 2)


def _setup_pg(schema: str) -> None:
    with PostgresSaver.from_conn_string(PG_URL, schema=schema, pool=False) as saver:
        saver.setup()
        write_thread(saver, f"after-setup-{uuid.uuid4().hex}", 2)


def test_concurrent_setup_sqlite_processes_and_threads(tmp_path: Path) -> None:
    path = str(tmp_path / "setup.db")
    _spawn(_setup_sqlite, [(path,)] * 3)
    run_in_threads(lambda i: _setup_sqlite(path), 4)
    with SqliteSaver.from_conn_string(path) as saver:
        assert len(list(saver.list(None))) == 14


def test_concurrent_setup_pg_processes_and_threads(pg_url: str, pg_schema: str) -> None:
    _spawn(_setup_pg, [(pg_schema,)] * 3)
    other = pg_schema + "_t"
    try:
        run_in_threads(lambda i: _setup_pg(other), 4)
    finally:
        from tests.conftest import drop_schema

        drop_schema(other)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as saver:
        assert len(list(saver.list(None))) == 6


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_sync_call_on_async_saver_from_its_loop_raises(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from checkpointer.errors import CheckpointerError

    if kind == "sqlite":
        cm: Any = AsyncSqliteSaver.from_conn_string(tmp_path / "x.db", setup=True)
    else:
        schema = request.getfixturevalue("pg_schema")
        cm = AsyncPostgresSaver.from_conn_string(PG_URL, schema=schema, setup=True)
    async with cm as saver:
        with pytest.raises(CheckpointerError, match="aget_tuple"):
            saver.get_tuple(make_config("t"))
        with pytest.raises(CheckpointerError, match="alist"):
            saver.list(make_config("t"))
        # From another thread, the same call works.
        assert await asyncio.to_thread(saver.get_tuple, make_config("t")) is None
