"""Structural safety of the savers (issue 16): parent-pointer loops end every walk with a
typed error, `put` refuses a parent it cannot reach and a re-put that moves a checkpoint,
a string is never taken for a list of ids, `copy_thread` never merges two histories, what
`put` accepts reads back, and a `list()` page is bounded by bytes."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import tracemalloc
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest

from checkpointer.channels import DeltaChannel
from checkpointer.errors import (
    CheckpointerError,
    ConfigError,
    CorruptHistoryError,
    ParentLoopError,
    ParentMismatchError,
    ThreadExistsError,
    ValueTooLarge,
)
from checkpointer.ids import new_checkpoint_id
from checkpointer.lifecycle import KeepLast
from checkpointer.savers.memory import InMemorySaver
from checkpointer.savers.postgres import PostgresSaver
from checkpointer.savers.sql import puts, reads
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.serde import frames
from checkpointer.types import Checkpoint, RunnableConfig, empty_checkpoint, make_config
from tests.conftest import PG_URL, Harness, require_postgres


def _checkpoint(step: int, values: dict[str, Any] | None = None) -> Checkpoint:
    cp = empty_checkpoint()
    cp["id"] = new_checkpoint_id()
    values = values if values is not None else {}
    cp["channel_values"] = dict(values)
    cp["channel_versions"] = {"d": f"{step + 1:08d}", **{ch: f"{step + 1:08d}" for ch in values}}
    return cp


async def _chain(h: Harness, thread: str, n: int, values: bool = False) -> list[str]:
    """`n` checkpoints, each with one write to the delta channel `d` (no stored seed)."""
    config: RunnableConfig = make_config(thread)
    ids = []
    for step in range(n):
        cp = _checkpoint(step, {"v": step} if values else None)
        meta: Any = {"step": step, "counters_since_delta_snapshot": {"d": (step + 1, step + 1)}}
        config = await h.put(
            config, cp, meta, {ch: cp["channel_versions"][ch] for ch in cp["channel_values"]}
        )
        await h.put_writes(config, [("d", step)], str(uuid.uuid4()))
        ids.append(cp["id"])
    return ids


def _run_sql(h: Harness, sql: str, params: tuple[Any, ...]) -> None:
    """Change the tables directly, as a hand edit would (a separate connection)."""
    if h.kind.endswith("postgres"):
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{h.saver._dialect.schema}"')
            conn.execute(sql.replace("?", "%s"), params)
        return
    with sqlite3.connect(h.saver._executor.path) as conn:
        conn.execute(sql, params)


def _set_parent(h: Harness, thread: str, checkpoint_id: str, parent: str) -> None:
    if h.kind == "memory":
        h.saver._threads[thread][""][checkpoint_id].parent_id = parent
        return
    _run_sql(
        h,
        "UPDATE checkpointer_checkpoints SET parent_checkpoint_id = ? "
        "WHERE thread_id = ? AND checkpoint_id = ?",
        (parent, thread, checkpoint_id),
    )


async def _call(h: Harness, name: str, *args: Any, **kwargs: Any) -> Any:
    if h.is_async:
        return await getattr(h.saver, "a" + name)(*args, **kwargs)
    return getattr(h.saver, name)(*args, **kwargs)


# ------------------------------------------------------------------ 1. loops
@pytest.mark.parametrize("shape", ["two", "self"])
async def test_a_parent_loop_ends_every_walk_with_a_typed_error(
    harness: Harness, shape: str
) -> None:
    ids = await _chain(harness, "loop", 6)
    if shape == "two":
        _set_parent(harness, "loop", ids[0], ids[-1])  # the root now points at the head
    else:
        _set_parent(harness, "loop", ids[2], ids[2])  # a row that is its own parent
    head = make_config("loop", "", ids[-1])
    with pytest.raises(CorruptHistoryError) as caught:
        await harness.delta(head, ["d"])
    err = caught.value
    assert err.thread_id == "loop" and err.checkpoint_ns == ""
    assert err.checkpoint_id in ids and "loop" in str(err)
    # Retention that replays delta channels meets the same loop: typed, never a hang.
    specs = {"d": DeltaChannel(lambda state, writes: [*(state or []), *writes])}
    with pytest.raises(CorruptHistoryError):
        await _call(harness, "compact", "loop", channels=specs)
    with pytest.raises(CorruptHistoryError):
        await _call(harness, "apply_retention", KeepLast(2), thread_ids=["loop"], channels=specs)
    # So does the check that deleting a run leaves the others' histories whole.
    late = _checkpoint(9)
    await harness.put(head, late, {"run_id": "late"}, {})
    with pytest.raises(CorruptHistoryError):
        await harness.delete_for_runs(["other"])  # no such run: nothing to check, no error
        await harness.delete_for_runs(["late"])
    # Nothing was lost on the way: every checkpoint still reads.
    assert len(await harness.list(make_config("loop"))) == 7


async def test_a_walk_through_a_stale_summary_is_not_taken_for_a_loop(harness: Harness) -> None:
    """The SQL walk is bounded by the summary's checkpoint count; one that undercounts only
    costs a second look, never a false error or a short history."""
    ids = await _chain(harness, "stale", 7)
    if harness.kind != "memory":
        _run_sql(
            harness,
            "UPDATE checkpointer_threads SET checkpoint_count = 1 WHERE thread_id = ?",
            ("stale",),
        )
    history = await harness.delta(make_config("stale", "", ids[-1]), ["d"])
    assert [w[2] for w in history["d"]["writes"]] == list(range(6))


def test_a_loop_on_postgres_stops_on_the_server() -> None:
    """The recursive statement itself stops at the bound: the error comes back at once and
    no backend is left walking the loop."""
    require_postgres()
    schema = f"cp_test_{uuid.uuid4().hex[:12]}"
    saver = PostgresSaver(PG_URL, schema=schema, min_size=1, max_size=2)
    try:
        saver.setup()
        config: RunnableConfig = make_config("pgloop")
        ids = []
        for step in range(3):
            cp = _checkpoint(step)
            config = saver.put(config, cp, {"counters_since_delta_snapshot": {"d": (1, 1)}}, {})
            ids.append(cp["id"])
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(
                f'UPDATE "{schema}".checkpointer_checkpoints SET parent_checkpoint_id = %s '
                "WHERE checkpoint_id = %s",
                (ids[-1], ids[0]),
            )
        with pytest.raises(CorruptHistoryError):
            saver.get_delta_channel_history(config=config, channels=["d"])
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            walking = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' "
                "AND query LIKE %s AND pid <> pg_backend_pid()",
                (f"%{schema}%RECURSIVE%",),
            ).fetchone()
        assert walking == (0,)
    finally:
        saver.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


async def test_a_parent_need_not_be_stored_but_no_put_closes_a_loop(harness: Harness) -> None:
    """LangGraph's savers take a child of a parent they never saw; so do ours. What keeps
    parent pointers loop-free is that a new checkpoint already named as a parent by a
    stored one is refused (`sql/parents.py`)."""
    ids = await _chain(harness, "p", 2)
    dangling = []
    for config in (
        make_config("p", "", "no-such-checkpoint"),
        make_config("other-thread", "", ids[0]),  # stored, but in another thread
        make_config("p", "sub", ids[0]),  # and in another namespace
    ):
        cp = _checkpoint(5, {"v": "x"})
        stored = await harness.put(config, cp, {}, {"v": cp["channel_versions"]["v"]})
        tup = await harness.get_tuple(stored)
        assert tup is not None and tup.checkpoint["channel_values"] == {"v": "x"}
        assert tup.parent_config is not None
        parent_id = config["configurable"]["checkpoint_id"]
        assert tup.parent_config["configurable"]["checkpoint_id"] == parent_id
        # The walk ends where the parent is missing: nothing of the other histories.
        assert (await harness.delta(stored, ["d"]))["d"] == {"writes": []}
        dangling.append((config, cp["id"]))
    # A checkpoint some stored one names as its parent can no longer be stored, under any
    # parent: nothing is written.
    for config, child_id in dangling:
        thread, ns = config["configurable"]["thread_id"], config["configurable"]["checkpoint_ns"]
        late = _checkpoint(6, {"v": "late"})
        late["id"] = config["configurable"]["checkpoint_id"]
        if thread == "p" and ns == "":
            with pytest.raises(ParentLoopError) as caught:
                await harness.put(make_config(thread, ns, child_id), late, {}, {"v": "7"})
            assert late["id"] in str(caught.value) and isinstance(caught.value, ConfigError)
            with pytest.raises(ParentLoopError):
                await harness.put(make_config(thread, ns), late, {}, {"v": "7"})
            assert await harness.get_tuple(make_config(thread, ns, late["id"])) is None
    # Two puts that would point at each other: the second one is refused.
    a, b = _checkpoint(0), _checkpoint(1)
    await harness.put(make_config("ab", "", b["id"]), a, {}, {})
    with pytest.raises(ParentLoopError):
        await harness.put(make_config("ab", "", a["id"]), b, {}, {})
    assert await harness.get_tuple(make_config("ab", "", b["id"])) is None
    # Re-saving a checkpoint that has children is no new checkpoint: allowed.
    await harness.put(make_config("p", "", ids[0]), _with_id(_checkpoint(1), ids[1]), {}, {})
    if harness.kind != "memory":
        summaries = await _call(
            harness, "list_threads", thread_ids=["p", "ab"], sort="id", descending=False
        )
        assert [(s.thread_id, s.checkpoint_count) for s in summaries] == [("ab", 1), ("p", 4)]


def _with_id(cp: Checkpoint, checkpoint_id: str) -> Checkpoint:
    cp["id"] = checkpoint_id
    return cp


# ------------------------------------------------------------------ 15. re-put
async def test_a_re_put_updates_in_place_and_never_moves_the_checkpoint(harness: Harness) -> None:
    ids = await _chain(harness, "re", 3)
    cp = _checkpoint(7, {"v": "first"})
    parent = make_config("re", "", ids[-1])
    meta: Any = {"n": 1}
    config = await harness.put(parent, cp, meta, {"v": cp["channel_versions"]["v"]})
    await harness.put_writes(config, [("x", 1)], str(uuid.uuid4()))
    # The same parent: an update in place (metadata replaced, writes kept).
    meta = {"n": 2}
    await harness.put(parent, cp, meta, {})
    tup = await harness.get_tuple(config)
    assert tup is not None and dict(tup.metadata)["n"] == 2 and len(tup.pending_writes or []) == 1
    # Another parent, or none: refused, nothing changes.
    for other in (make_config("re", "", ids[0]), make_config("re")):
        with pytest.raises(ParentMismatchError) as caught:
            await harness.put(other, cp, {"step": 3}, {})
        assert ids[-1] in str(caught.value)
    tup = await harness.get_tuple(config)
    assert tup is not None and dict(tup.metadata)["n"] == 2
    assert tup.parent_config is not None
    assert tup.parent_config["configurable"]["checkpoint_id"] == ids[-1]


# ------------------------------------------------------------------ 3. str ids
async def test_a_string_is_never_taken_for_a_list_of_ids(harness: Harness) -> None:
    for thread in ("a", "b", "c", "abc"):
        await _chain(harness, thread, 1)
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
        ("prune", ("abc",), {"strategy": "delete"}),
        ("prune", ("abc",), {}),
        ("delete_for_runs", ("run9",), {}),
        ("apply_retention", (KeepLast(1),), {"thread_ids": "abc"}),
        ("list_threads", (), {"thread_ids": "abc"}),
        ("refresh_thread_summaries", ("abc",), {}),
    ]
    for name, args, kwargs in calls:
        with pytest.raises(ConfigError, match="list of ids"):
            await _call(harness, name, *args, **kwargs)
    for thread in ("a", "b", "c", "abc"):
        assert await harness.get_tuple(make_config(thread)) is not None


def test_the_langgraph_adapter_keeps_the_guarantees() -> None:
    pytest.importorskip("langgraph")
    from checkpointer.langgraph import LangGraphSaver

    inner = InMemorySaver()
    saver = LangGraphSaver(inner)
    with pytest.raises(ConfigError):
        saver.prune("abc", strategy="delete")
    with pytest.raises(ConfigError):
        saver.delete_for_runs("run9")
    # copy_thread and the delta walk keep their guarantees through the adapter.
    for thread in ("a", "b"):
        root = _checkpoint(0)
        config = inner.put(make_config(thread), root, {}, {})
        inner.put(config, _checkpoint(1), {"counters_since_delta_snapshot": {"d": (1, 1)}}, {})
    with pytest.raises(ThreadExistsError):
        saver.copy_thread("a", "b")
    with pytest.raises(ThreadExistsError):
        asyncio.run(saver.acopy_thread("a", "b"))
    asyncio.run(saver.acopy_thread("a", "b", replace=True))
    assert [t.config for t in inner.list(make_config("b"))] == [
        {**t.config, "configurable": {**t.config["configurable"], "thread_id": "b"}}
        for t in inner.list(make_config("a"))
    ]
    ids = sorted(inner._threads["a"][""])
    inner._threads["a"][""][ids[0]].parent_id = ids[1]
    with pytest.raises(CorruptHistoryError):
        saver.get_delta_channel_history(config=make_config("a", "", ids[1]), channels=["d"])


# ------------------------------------------------------------------ 6. copy_thread
async def test_copy_thread_never_merges_two_histories(harness: Harness) -> None:
    src = await _chain(harness, "src", 3, values=True)
    dst = await _chain(harness, "dst", 2, values=True)
    with pytest.raises(ThreadExistsError) as caught:
        await _call(harness, "copy_thread", "src", "dst")
    assert caught.value.thread_id == "dst" and "replace=True" in str(caught.value)
    listed = await harness.list(make_config("dst"))
    assert [t.config["configurable"]["checkpoint_id"] for t in listed] == dst[::-1]
    # replace=True: the target becomes exactly the source.
    await _call(harness, "copy_thread", "src", "dst", replace=True)
    listed = await harness.list(make_config("dst"))
    assert [t.config["configurable"]["checkpoint_id"] for t in listed] == src[::-1]
    assert listed[0].checkpoint["channel_values"] == {"v": 2}
    history = await harness.delta(listed[0].config, ["d"])
    assert [w[2] for w in history["d"]["writes"]] == [0, 1]
    # A fresh target needs no flag (what LangGraph's server does).
    await _call(harness, "copy_thread", "src", "fresh")
    assert len(await harness.list(make_config("fresh"))) == 3
    if harness.kind != "memory":
        summaries = await _call(harness, "list_threads", thread_ids=["dst"])
        assert summaries[0].checkpoint_count == 3


# ------------------------------------------------------------------ 2. sizes
async def test_a_value_over_the_decompression_bound_reads_back(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compressible value bigger than what reads decompress is stored uncompressed
    (here with the bound lowered to 1 MiB; the default is 256 MiB)."""
    monkeypatch.setattr(frames, "DEFAULT_MAX_DECOMPRESSED_SIZE", 1024 * 1024)
    big = "a" * (3 * 1024 * 1024)
    cp = _checkpoint(0, {"v": big, "w": "b" * 5000})
    config = await harness.put(make_config("big"), cp, {}, dict(cp["channel_versions"]))
    tup = await harness.get_tuple(config)
    assert tup is not None and tup.checkpoint["channel_values"]["v"] == big
    if harness.kind != "memory":  # SQL savers compress by default: the small one still is
        rows = _stored_types(harness)
        assert rows == {"v": "msgpack", "w": "msgpack+zstd"}


def _stored_types(h: Harness) -> dict[str, str]:
    sql = "SELECT channel, type FROM checkpointer_blobs WHERE thread_id = 'big'"
    if h.kind.endswith("postgres"):
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{h.saver._dialect.schema}"')
            return dict(conn.execute(sql).fetchall())
    with sqlite3.connect(h.saver._executor.path) as conn:
        return dict(conn.execute(sql).fetchall())


async def test_a_value_over_the_storage_limit_is_refused_with_nothing_written(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    if harness.kind == "memory":
        pytest.skip("the in-memory saver has no storage limit")
    monkeypatch.setattr(puts, "MAX_STORED_VALUE_BYTES", 64 * 1024)
    parent = await harness.put(make_config("limit"), _checkpoint(0), {}, {})
    cp = _checkpoint(1, {"small": 1, "v": os.urandom(100 * 1024)})
    with pytest.raises(ValueTooLarge) as caught:
        await harness.put(parent, cp, {}, dict(cp["channel_versions"]))
    assert caught.value.limit == 64 * 1024 and caught.value.size >= 100 * 1024
    assert "'v'" in str(caught.value)
    assert await harness.get_tuple(make_config("limit", "", cp["id"])) is None
    with pytest.raises(ValueTooLarge):
        await harness.put_writes(parent, [("v", os.urandom(100 * 1024))], str(uuid.uuid4()))
    tup = await harness.get_tuple(parent)
    assert tup is not None and tup.pending_writes == []


# ------------------------------------------------------------------ 14. list memory
def _peak_of_first_item(saver: Any, config: RunnableConfig | None) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        start = tracemalloc.get_traced_memory()[0]
        it = iter(saver.list(config))
        first = next(it)
        peak = tracemalloc.get_traced_memory()[1] - start
        del first, it
    finally:
        tracemalloc.stop()
    return peak


def _fill_big(saver: Any, thread: str, n: int, shared: bool) -> None:
    """`n` checkpoints of about 1 MB each: a new random value per checkpoint, or one
    value that every checkpoint shares (stored once, in every checkpoint when read)."""
    config: RunnableConfig = make_config(thread)
    blob = os.urandom(1024 * 1024)
    for step in range(n):
        cp = empty_checkpoint()
        cp["id"] = new_checkpoint_id()
        version = "00000001" if shared else f"{step + 1:08d}"
        cp["channel_versions"] = {"v": version}
        cp["channel_values"] = {"v": blob if shared else os.urandom(1024 * 1024)}
        new = {"v": version} if (not shared or step == 0) else {}
        config = saver.put(config, cp, {"step": step}, new)


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
@pytest.mark.parametrize("shared", [False, True], ids=["distinct", "shared"])
def test_list_pages_are_bounded_by_bytes(
    backend: str, shared: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """40 checkpoints of 1 MB with a 4 MiB page budget: reaching the first item holds a
    few megabytes, not the 40 a count-bounded page (or a whole-thread one) would."""
    monkeypatch.setattr(reads, "LIST_PAGE_BYTES", 4 * 1024 * 1024)
    schema = f"cp_test_{uuid.uuid4().hex[:12]}"
    saver: Any
    if backend == "sqlite":
        saver = SqliteSaver(tmp_path / "big.db")
    else:
        require_postgres()
        saver = PostgresSaver(PG_URL, schema=schema, min_size=1, max_size=2)
    try:
        saver.setup()
        _fill_big(saver, "big", 40, shared)
        peak = _peak_of_first_item(saver, make_config("big"))
        assert peak < 16 * 1024 * 1024, f"first item of list() took {peak / 2**20:.1f} MiB"
        peak = _peak_of_first_item(saver, None)  # across threads likewise
        assert peak < 16 * 1024 * 1024, f"list(None) took {peak / 2**20:.1f} MiB"
        assert len(list(saver.list(None))) == 40
        listed = list(saver.list(make_config("big")))
        assert [t.metadata["step"] for t in listed] == list(range(39, -1, -1))
    finally:
        saver.close()
        if backend == "postgres":
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def test_errors_are_the_library_s_own() -> None:
    for cls in (CorruptHistoryError, ParentLoopError, ParentMismatchError, ThreadExistsError):
        assert issubclass(cls, CheckpointerError)


def test_get_state_and_history_end_on_a_loop(tmp_path: Path) -> None:
    """The runtime's state reads go through the same walk: typed error, no hang."""
    from collections import Counter

    from tests.test_graph import linear_builder

    for saver in (InMemorySaver(), SqliteSaver(tmp_path / "graph.db")):
        if isinstance(saver, SqliteSaver):
            saver.setup()
        graph = linear_builder(Counter()).compile(checkpointer=saver)
        config: Any = {"configurable": {"thread_id": "g"}}
        graph.invoke({"messages": ["hi"], "topic": "x"}, config)
        ids = sorted(t.config["configurable"]["checkpoint_id"] for t in saver.list(config))
        if isinstance(saver, InMemorySaver):
            saver._threads["g"][""][ids[-2]].parent_id = ids[-1]
        else:
            with sqlite3.connect(tmp_path / "graph.db") as conn:
                conn.execute(
                    "UPDATE checkpointer_checkpoints SET parent_checkpoint_id = ? "
                    "WHERE checkpoint_id = ?",
                    (ids[-1], ids[-2]),
                )
        # The head's parent now points back at the head.
        with pytest.raises(CorruptHistoryError):
            graph.get_state(config)
        with pytest.raises(CorruptHistoryError):
            list(graph.get_state_history(config))
        if isinstance(saver, SqliteSaver):
            saver.close()
