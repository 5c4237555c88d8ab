"""Data lifecycle on every saver, sync and async: retention policies and dry runs, pins,
pending interrupts, compaction, thread summaries, TTLs and sweeping, reclaiming space.

Sync savers are called through their sync methods and async savers through their `a`
methods (see `Harness`); threads are written by `ChainDriver`, in a worker thread for the
async savers (whose sync methods answer from other threads).
"""

from __future__ import annotations

import asyncio
import operator
import os
import sqlite3
import uuid
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from checkpointer.channels import BinaryOperatorAggregate, DeltaChannel, LastValue
from checkpointer.errors import CheckpointNotFoundError, ConfigError
from checkpointer.ids import next_channel_version, task_id_for
from checkpointer.lifecycle import IdleThreadTTL, KeepLast, MaxAge, RetentionReport
from checkpointer.savers.retention import parse_ts
from checkpointer.types import (
    ERROR,
    INTERRUPT,
    RunnableConfig,
    empty_checkpoint,
    make_config,
)
from tests.chain import ChainDriver, values_at
from tests.conftest import Harness, StatementCounter

pytestmark = pytest.mark.asyncio

T = TypeVar("T")


def extend(state: list[Any], batches: Sequence[list[Any]]) -> list[Any]:
    return [*state, *(item for batch in batches for item in batch)]


SPECS = {
    "msgs": DeltaChannel(extend, snapshot_frequency=4),
    "log": DeltaChannel(extend, snapshot_frequency=7),
    "total": BinaryOperatorAggregate(int, operator.add),
    "topic": LastValue(str),
}


async def call(h: Harness, name: str, *args: Any, **kwargs: Any) -> Any:
    """A lifecycle method, sync or async as the saver's users would call it."""
    if h.is_async:
        return await getattr(h.saver, "a" + name)(*args, **kwargs)
    return getattr(h.saver, name)(*args, **kwargs)


async def off_loop(h: Harness, fn: Callable[..., T], *args: Any) -> T:
    """Run sync driver code; for an async saver, from a worker thread."""
    if h.is_async:
        return await asyncio.to_thread(fn, *args)
    return fn(*args)


def cid(config: RunnableConfig) -> str:
    return str(config["configurable"]["checkpoint_id"])


def write_thread(saver: Any, thread_id: str, steps: int, ns: str = "") -> ChainDriver:
    driver = ChainDriver(saver, SPECS, thread_id=thread_id, checkpoint_ns=ns)
    for i in range(steps):
        tasks = [[("msgs", [f"m{i}"]), ("total", i)]]
        if i % 3 == 0:
            tasks.append([("log", [f"l{i}"]), ("topic", f"t{i}")])
        driver.run_step(tasks)
    return driver


async def ids(h: Harness, thread_id: str, ns: str = "") -> list[str]:
    tuples = await h.list(make_config(thread_id, ns))
    return sorted(cid(t.config) for t in tuples)


async def assert_reads_as_written(h: Harness, driver: ChainDriver) -> None:
    expected = {cid(config): values for config, values in driver.saved}
    thread_id = driver.config["configurable"]["thread_id"]
    ns = driver.config["configurable"]["checkpoint_ns"]
    kept = await ids(h, thread_id, ns)
    assert kept
    for checkpoint_id in kept:
        config = make_config(thread_id, ns, checkpoint_id)
        assert await off_loop(h, values_at, h.saver, SPECS, config) == expected[checkpoint_id]


def thread() -> str:
    return f"life-{uuid.uuid4().hex[:10]}"


@pytest.fixture
def h(harness: Harness) -> Harness:
    return harness


# ------------------------------------------------------------------ policies
async def test_keep_last_materializes_with_specs_and_keeps_history_without(h: Harness) -> None:
    plain, materialized = thread(), thread()
    drivers = {t: await off_loop(h, write_thread, h.saver, t, 30) for t in (plain, materialized)}

    cautious = await call(h, "apply_retention", KeepLast(3), thread_ids=[plain])
    assert isinstance(cautious, RetentionReport)
    kept = await ids(h, plain)
    assert len(kept) >= 3 and kept[-3:] == sorted(cid(c) for c, _ in drivers[plain].saved)[-3:]
    assert cautious.checkpoints_deleted == 30 - len(kept)
    assert cautious.kept_for_history == len(kept) - 3
    assert cautious.materialized == 0
    await assert_reads_as_written(h, drivers[plain])

    report = await call(
        h, "apply_retention", KeepLast(3), thread_ids=[materialized], channels=SPECS
    )
    assert len(await ids(h, materialized)) == 3
    assert report.checkpoints_deleted == 27 and report.kept_for_history == 0
    assert report.materialized == 1 and report.bytes_added > 0
    assert report.bytes_reclaimed == report.bytes_freed - report.bytes_added > 0
    await assert_reads_as_written(h, drivers[materialized])
    # The survivors keep working: the thread goes on from its head.
    await off_loop(h, drivers[materialized].run_step, [[("msgs", ["after"])]])
    await assert_reads_as_written(h, drivers[materialized])


async def test_dry_run_reports_exactly_what_the_run_does(h: Harness) -> None:
    t = thread()
    driver = await off_loop(h, write_thread, h.saver, t, 20)
    before = await ids(h, t)
    dry = await call(h, "apply_retention", KeepLast(2), channels=SPECS, dry_run=True)
    assert dry.dry_run and await ids(h, t) == before
    [outcome] = [o for o in dry.threads if o.thread_id == t]
    real = await call(h, "apply_retention", KeepLast(2), thread_ids=[t], channels=SPECS)
    [done] = real.threads
    assert (done.deleted, done.materialized, done.writes_deleted, done.blobs_deleted) == (
        outcome.deleted,
        outcome.materialized,
        outcome.writes_deleted,
        outcome.blobs_deleted,
    )
    assert (done.bytes_freed, done.bytes_added) == (outcome.bytes_freed, outcome.bytes_added)
    assert sorted(set(before) - set(await ids(h, t))) == sorted(c for _, c in done.deleted)
    await assert_reads_as_written(h, driver)
    assert "would delete" in dry.summary() and "deleted 18" in real.summary()


async def test_max_age_keeps_recent_checkpoints_and_the_head(h: Harness) -> None:
    t = thread()
    driver = await off_loop(h, write_thread, h.saver, t, 12)
    stamps = {}
    for config, _ in driver.saved:
        tup = await h.get_tuple(config)
        assert tup is not None
        stamps[cid(config)] = parse_ts(tup.checkpoint["ts"])
    ordered = sorted(stamps)
    pivot = stamps[ordered[8]]
    assert pivot is not None
    await call(h, "apply_retention", MaxAge(timedelta(days=1)), now=pivot + timedelta(days=1))
    kept = await ids(h, t)
    assert set(ordered[8:]) <= set(kept)
    await assert_reads_as_written(h, driver)
    # Everything is old now: only the head stays (with specs nothing is kept for history).
    far = datetime.now(UTC) + timedelta(days=30)
    await call(h, "apply_retention", MaxAge(timedelta(days=1)), channels=SPECS, now=far)
    assert await ids(h, t) == [ordered[-1]]
    await assert_reads_as_written(h, driver)


async def test_pins_and_pending_interrupts_survive_retention(h: Harness) -> None:
    t = thread()
    driver = await off_loop(h, write_thread, h.saver, t, 10)
    early = driver.saved[2][0]
    pinned = await call(h, "pin", early)
    assert cid(pinned) == cid(early)
    # An interrupt left waiting on an abandoned branch: a fork moved on elsewhere.
    waiting = driver.config
    await h.put_writes(waiting, [(INTERRUPT, {"question": "ship it?"})], str(uuid.uuid4()))
    tup = await h.get_tuple(waiting)
    assert tup is not None
    interrupt_writes = tup.pending_writes
    await off_loop(h, driver.fork_from, driver.saved[7][0])
    await off_loop(h, driver.run_step, [[("msgs", ["forked"])]])

    await call(h, "apply_retention", KeepLast(1), thread_ids=[t], channels=SPECS)
    kept = await ids(h, t)
    assert set(kept) == {cid(early), cid(waiting), cid(driver.config)}
    after = await h.get_tuple(waiting)
    assert after is not None and after.pending_writes == interrupt_writes
    await assert_reads_as_written(h, driver)
    assert [cid(c) for c in await call(h, "list_pinned", t)] == [cid(early)]

    await call(h, "unpin", early)
    assert await call(h, "list_pinned", t) == []
    await call(h, "apply_retention", KeepLast(1), thread_ids=[t], channels=SPECS)
    assert set(await ids(h, t)) == {cid(waiting), cid(driver.config)}


async def test_pin_without_checkpoint_raises_and_pin_latest(h: Harness) -> None:
    t = thread()
    with pytest.raises(CheckpointNotFoundError):
        await call(h, "pin", make_config(t))
    driver = await off_loop(h, write_thread, h.saver, t, 3)
    with pytest.raises(CheckpointNotFoundError):
        await call(h, "pin", make_config(t, "", "no-such-checkpoint"))
    latest = await call(h, "pin", make_config(t))
    assert cid(latest) == cid(driver.config)
    await call(h, "unpin", make_config(t, "", "no-such-checkpoint"))  # nothing to undo
    [summary] = await call(h, "list_threads", thread_ids=[t])
    assert summary.pinned == 1


async def test_compact_folds_history_into_a_snapshot(h: Harness) -> None:
    t = thread()
    driver = await off_loop(h, write_thread, h.saver, t, 25)
    report = await call(h, "compact", t, channels=SPECS, keep_recent=2)
    assert report.policy.startswith("compact") and report.materialized == 1
    assert len(await ids(h, t)) == 2
    await assert_reads_as_written(h, driver)


async def test_namespaces_are_trimmed_separately(h: Harness) -> None:
    t = thread()
    root = await off_loop(h, write_thread, h.saver, t, 8)
    child = await off_loop(h, write_thread, h.saver, t, 6, "sub:1")
    await call(h, "apply_retention", KeepLast(2), thread_ids=[t], channels=SPECS)
    assert len(await ids(h, t)) == 2 and len(await ids(h, t, "sub:1")) == 2
    await assert_reads_as_written(h, root)
    await assert_reads_as_written(h, child)


async def test_policy_arguments_are_validated(h: Harness) -> None:
    with pytest.raises(ConfigError):
        KeepLast(0)
    with pytest.raises(ConfigError):
        MaxAge(timedelta(0))
    with pytest.raises(ConfigError):
        IdleThreadTTL(timedelta(seconds=-1))
    with pytest.raises(ConfigError, match="unknown retention policy"):
        await call(h, "apply_retention", "keep_latest")
    with pytest.raises(ConfigError, match="unknown sort"):
        await call(h, "list_threads", sort="size")
    with pytest.raises(ConfigError, match="ttl"):
        await call(h, "set_thread_ttl", "t", timedelta(0))


# ------------------------------------------------------------------ TTL
async def test_idle_thread_ttl_spares_pinned_and_optionally_interrupted(h: Harness) -> None:
    plain, pinned, waiting = thread(), thread(), thread()
    for t in (plain, pinned, waiting):
        await off_loop(h, write_thread, h.saver, t, 3)
    await call(h, "pin", make_config(pinned))
    head = await h.get_tuple(make_config(waiting))
    assert head is not None
    await h.put_writes(head.config, [(INTERRUPT, "approve?")], str(uuid.uuid4()))
    ours = [plain, pinned, waiting]
    later = datetime.now(UTC) + timedelta(days=2)

    fresh = await call(h, "apply_retention", IdleThreadTTL(timedelta(days=3)), thread_ids=ours)
    assert fresh.threads == []
    dry = await call(
        h,
        "apply_retention",
        IdleThreadTTL(timedelta(days=1), keep_interrupted=True),
        thread_ids=ours,
        now=later,
        dry_run=True,
    )
    outcomes = {o.thread_id: o for o in dry.threads}
    assert outcomes[plain].thread_deleted and outcomes[plain].checkpoints_deleted == 3
    assert outcomes[pinned].skipped == "has a pinned checkpoint"
    assert outcomes[waiting].skipped == "waiting on an interrupt"
    assert dry.threads_deleted == [plain] and await ids(h, plain)

    report = await call(
        h, "apply_retention", IdleThreadTTL(timedelta(days=1)), thread_ids=ours, now=later
    )
    assert sorted(report.threads_deleted) == sorted([plain, waiting])
    done = {o.thread_id: o for o in report.threads}
    assert done[plain].bytes_freed == outcomes[plain].bytes_freed > 0
    assert report.bytes_reclaimed == done[plain].bytes_freed + done[waiting].bytes_freed
    assert await ids(h, plain) == [] and await ids(h, waiting) == []
    assert len(await ids(h, pinned)) == 3
    assert [s.thread_id for s in await call(h, "list_threads", thread_ids=ours)] == [pinned]


async def test_thread_ttl_and_sweep_expired(h: Harness) -> None:
    doomed, kept, pinned = thread(), thread(), thread()
    for t in (doomed, kept, pinned):
        await off_loop(h, write_thread, h.saver, t, 2)
    await call(h, "set_thread_ttl", doomed, timedelta(hours=1))
    await call(h, "set_thread_ttl", pinned, timedelta(hours=1))
    await call(h, "pin", make_config(pinned))
    [summary] = await call(h, "list_threads", thread_ids=[doomed])
    assert summary.ttl == timedelta(hours=1)
    assert summary.expires_at is not None
    assert abs(summary.expires_at - (summary.updated_at + timedelta(hours=1))) < timedelta(
        seconds=1
    )

    soon = await call(h, "sweep_expired")
    assert doomed not in soon.threads_deleted
    later = datetime.now(UTC) + timedelta(hours=2)
    dry = await call(h, "sweep_expired", now=later, dry_run=True)
    assert doomed in dry.threads_deleted and await ids(h, doomed)
    report = await call(h, "sweep_expired", now=later)
    assert doomed in report.threads_deleted and kept not in report.threads_deleted
    assert [o.skipped for o in report.threads if o.thread_id == pinned] == [
        "has a pinned checkpoint"
    ]
    assert await ids(h, doomed) == [] and len(await ids(h, pinned)) == 2

    # A TTL set before the first write applies once the thread starts; None clears it.
    fresh = thread()
    await call(h, "set_thread_ttl", fresh, timedelta(minutes=5))
    await off_loop(h, write_thread, h.saver, fresh, 1)
    [summary] = await call(h, "list_threads", thread_ids=[fresh])
    assert summary.ttl == timedelta(minutes=5) and summary.checkpoint_count == 1
    await call(h, "set_thread_ttl", fresh, None)
    [summary] = await call(h, "list_threads", thread_ids=[fresh])
    assert summary.ttl is None and summary.expires_at is None


# ------------------------------------------------------------------ summaries
async def test_list_threads_sorts_limits_and_pages(h: Harness) -> None:
    sizes = {thread(): n for n in (2, 5, 3)}
    for t, n in sizes.items():
        await off_loop(h, write_thread, h.saver, t, n)
        await asyncio.sleep(0.01)  # distinct last-update times, even at millisecond precision
    ours = list(sizes)
    by_count = await call(h, "list_threads", sort="count", thread_ids=ours)
    assert [s.thread_id for s in by_count] == sorted(ours, key=lambda t: -sizes[t])
    assert [s.checkpoint_count for s in by_count] == [5, 3, 2]
    assert all(s.bytes > 0 and s.head_checkpoint_id for s in by_count)
    by_bytes = await call(h, "list_threads", sort="bytes", descending=False, thread_ids=ours)
    assert [s.bytes for s in by_bytes] == sorted(s.bytes for s in by_count)
    by_id = await call(h, "list_threads", sort="id", descending=False, thread_ids=ours)
    assert [s.thread_id for s in by_id] == sorted(ours)
    page = await call(
        h, "list_threads", sort="id", descending=False, limit=1, offset=1, thread_ids=ours
    )
    assert [s.thread_id for s in page] == sorted(ours)[1:2]
    by_update = await call(h, "list_threads", thread_ids=ours)
    assert [s.thread_id for s in by_update] == ours[::-1]  # newest activity first
    everything = await call(h, "list_threads", limit=None)
    assert set(ours) <= {s.thread_id for s in everything}


async def test_summaries_track_every_write_and_delete(h: Harness) -> None:
    """The summary maintained on write equals one recomputed from the rows, whatever the
    mix of operations (re-put checkpoints, replacing writes, early writes, copies, runs
    deleted, prunes, retention)."""
    a, b = thread(), thread()
    driver = await off_loop(h, write_thread, h.saver, a, 9)
    # Re-saving a checkpoint (new metadata) and replacing special writes.
    tup = await h.get_tuple(driver.config)
    assert tup is not None
    parent = tup.parent_config
    assert parent is not None
    await h.put(parent, tup.checkpoint, {**tup.metadata, "note": "x" * 300}, {})
    task = task_id_for(3, "node")
    await h.put_writes(driver.config, [(ERROR, "boom")], task)
    await h.put_writes(driver.config, [(ERROR, "a much longer error " * 20)], task)
    await h.put_writes(driver.config, [("msgs", ["dup"])], task)
    await h.put_writes(driver.config, [("msgs", ["dup again"])], task)  # ignored re-send
    await h.put_writes(make_config(a, "", "not-saved-yet"), [("msgs", [1])], task)  # early
    await assert_summaries_exact(h, [a])

    await call(h, "pin", driver.saved[1][0])
    await h.copy_thread(a, b)
    await assert_summaries_exact(h, [a, b])
    cp = empty_checkpoint()
    cp["channel_versions"] = {"topic": next_channel_version(None)}
    cp["channel_values"] = {"topic": "other run"}
    await h.put(
        make_config(b, "ns2"), cp, {"run_id": "run-x", "step": 0}, dict(cp["channel_versions"])
    )
    await assert_summaries_exact(h, [b])
    await h.delete_for_runs(["run-x"])
    await h.prune([b])
    await assert_summaries_exact(h, [a, b])
    await call(h, "apply_retention", KeepLast(2), thread_ids=[a], channels=SPECS)
    await assert_summaries_exact(h, [a, b])
    await h.delete_thread(b)
    assert await call(h, "list_threads", thread_ids=[b]) == []


async def assert_summaries_exact(h: Harness, thread_ids: list[str]) -> None:
    maintained = await call(h, "list_threads", sort="id", thread_ids=thread_ids)
    await call(h, "refresh_thread_summaries", thread_ids)
    recomputed = await call(h, "list_threads", sort="id", thread_ids=thread_ids)
    assert maintained == recomputed
    for summary in maintained:
        tuples = await h.list({"configurable": {"thread_id": summary.thread_id}})
        assert summary.checkpoint_count == len(tuples)
        root = [cid(t.config) for t in tuples if t.config["configurable"]["checkpoint_ns"] == ""]
        assert summary.head_checkpoint_id == (max(root) if root else None)


@pytest.mark.parametrize("use_async", [False, True])
async def test_put_keeps_one_statement_on_postgres(
    pg_url: str, pg_schema: str, use_async: bool
) -> None:
    from checkpointer.savers.postgres import AsyncPostgresSaver, PostgresSaver

    saver: Any
    if use_async:
        saver = AsyncPostgresSaver(pg_url, schema=pg_schema)
        await saver.setup()
    else:
        saver = PostgresSaver(pg_url, schema=pg_schema)
        saver.setup()
    h = Harness(saver, "async_postgres" if use_async else "postgres")
    try:
        counter = StatementCounter(saver)
        cp = empty_checkpoint()
        cp["channel_versions"] = {"topic": next_channel_version(None)}
        cp["channel_values"] = {"topic": "x"}
        counter.reset()
        config = await h.put(make_config("t"), cp, {"step": 0}, dict(cp["channel_versions"]))
        assert counter.count == 1
        counter.reset()
        await h.put_writes(config, [("topic", "y"), ("msgs", [1])], task_id_for(1, "n"))
        assert counter.count == 1
        [summary] = await call(h, "list_threads", thread_ids=["t"])
        assert summary.checkpoint_count == 1 and summary.head_checkpoint_id == cid(config)
    finally:
        await (saver.aclose() if use_async else asyncio.to_thread(saver.close))


@pytest.mark.parametrize("use_async", [False, True])
async def test_sqlite_writes_leave_the_summary_to_triggers(
    tmp_path: Path, use_async: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On SQLite a put_writes is one statement and a put one per table: the summary's
    count, bytes and head follow by trigger; its last-write time moves once a second."""
    import checkpointer.savers.sql.sqlite_dialect as sqlite_dialect
    from checkpointer.savers.sqlite import AsyncSqliteSaver, SqliteSaver

    clock = [1000.0]
    monkeypatch.setattr(sqlite_dialect, "monotonic", lambda: clock[0])
    saver: Any
    if use_async:
        saver = AsyncSqliteSaver(tmp_path / "t.db")
        await saver.setup()
    else:
        saver = SqliteSaver(tmp_path / "t.db")
        saver.setup()
    h = Harness(saver, "async_sqlite" if use_async else "sqlite")
    try:
        counter = StatementCounter(saver)
        config = make_config("t")
        for step in range(3):
            cp = empty_checkpoint()
            cp["channel_versions"] = {"topic": next_channel_version(None)}
            cp["channel_values"] = {"topic": ["x"] * (step + 1)}  # a list: a value row
            counter.reset()
            config = await h.put(config, cp, {"step": step}, dict(cp["channel_versions"]))
            heads = [sql.split()[:2] for sql in counter.statements]
            activity = [["UPDATE", "checkpointer_threads"]] if step == 0 else []  # 1st this second
            assert heads == [
                ["INSERT", "INTO"],  # the value row
                ["INSERT", "INTO"],  # the checkpoint
                *activity,
            ]
            assert "checkpointer_blobs" in counter.statements[0]
            counter.reset()
            await h.put_writes(config, [("topic", "y"), ("msgs", [1])], task_id_for(step, "n"))
            assert [sql.split()[:3] for sql in counter.statements] == [
                ["INSERT", "INTO", "checkpointer_writes"]
            ]
        clock[0] += 1.5  # a second later, the next write moves the last-write time again
        counter.reset()
        await h.put_writes(config, [(ERROR, "boom")], task_id_for(3, "n"))
        assert [sql.split()[:2] for sql in counter.statements] == [
            ["INSERT", "INTO"],
            ["UPDATE", "checkpointer_threads"],
        ]
        [summary] = await call(h, "list_threads", thread_ids=["t"])
        assert summary.checkpoint_count == 3 and summary.head_checkpoint_id == cid(config)
        await assert_summaries_exact(h, ["t"])
    finally:
        await (saver.aclose() if use_async else asyncio.to_thread(saver.close))


# ------------------------------------------------------------------ space
@pytest.mark.parametrize("use_async", [False, True])
async def test_sqlite_reclaim_space_shrinks_the_file(tmp_path: Path, use_async: bool) -> None:
    from checkpointer.savers.sqlite import AsyncSqliteSaver, SqliteSaver

    path = tmp_path / "big.db"
    saver: Any
    if use_async:
        saver = AsyncSqliteSaver(path)
        await saver.setup()
    else:
        saver = SqliteSaver(path)
        saver.setup()
    h = Harness(saver, "async_sqlite" if use_async else "sqlite")
    try:
        threads = [thread() for _ in range(3)]
        for t in threads:
            await off_loop(h, big_thread, saver, t)
        await call(h, "reclaim_space")
        full_size = os.path.getsize(path)
        for t in threads:
            await h.delete_thread(t)
        report = await call(h, "reclaim_space")
        assert "PRAGMA incremental_vacuum" in report.actions
        assert report.before_bytes is not None and report.after_bytes is not None
        assert report.after_bytes < report.before_bytes / 2
        assert os.path.getsize(path) < full_size / 2
        assert os.path.getsize(str(path) + "-wal") == 0
    finally:
        await (saver.aclose() if use_async else asyncio.to_thread(saver.close))


def big_thread(saver: Any, thread_id: str) -> None:
    driver = ChainDriver(saver, SPECS, thread_id=thread_id)
    for _ in range(20):
        driver.run_step([[("msgs", [os.urandom(2000).hex()]), ("topic", os.urandom(500).hex())]])


async def test_reclaim_space_converts_an_old_file(tmp_path: Path) -> None:
    """A file created before auto_vacuum was set cannot shrink incrementally; a full
    reclaim rewrites it once and it can from then on."""
    from checkpointer.savers.sqlite import SqliteSaver

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE unrelated (x)")  # tables exist: auto_vacuum stays NONE
    with SqliteSaver.from_conn_string(path, setup=True) as saver:
        big_thread(saver, "t")
        saver.delete_thread("t")
        report = saver.reclaim_space()
        assert "full=True" in report.actions[0]
        full = saver.reclaim_space(full=True)
        assert full.actions[0] == "VACUUM"
        assert full.after_bytes is not None and full.before_bytes is not None
        assert full.after_bytes < full.before_bytes
        big_thread(saver, "t")
        saver.delete_thread("t")
        assert "PRAGMA incremental_vacuum" in saver.reclaim_space().actions


async def test_memory_reclaim_space_is_a_no_op() -> None:
    from checkpointer.savers.memory import InMemorySaver

    report = InMemorySaver().reclaim_space()
    assert report.reclaimed_bytes is None
