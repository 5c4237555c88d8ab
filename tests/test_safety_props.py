"""Random sequences of public saver calls with hostile arguments (issue 16).

Hypothesis drives each saver (memory, SQLite, async SQLite, PostgreSQL, async PostgreSQL)
through puts with unknown, looping and changed parents, re-puts, hand-made loops in the
stored parent pointers, strings where lists of ids belong, copies onto existing threads,
values over the size limits, and the reads and lifecycle calls that walk the history.

Checked after every call: it returned, or raised one of the library's own errors, within a
generous time bound (a hang fails the test; nothing is timed beyond that); and every
acknowledged write that no later call removed still reads back exactly.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import sqlite3
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpointer.channels import DeltaChannel
from checkpointer.errors import CheckpointerError
from checkpointer.ids import new_checkpoint_id
from checkpointer.lifecycle import KeepLast
from checkpointer.savers.sql import puts
from checkpointer.serde import frames
from checkpointer.types import empty_checkpoint, make_config
from tests.conftest import (
    ASYNC_KINDS,
    PG_KINDS,
    PG_URL,
    SAVER_KINDS,
    close_saver,
    drop_schema,
    open_saver,
    require_postgres,
)
from tests.test_fuzz import example_settings

CALL_TIMEOUT = 120.0
"""Seconds one call may take before it counts as a hang (generous: a loaded machine)."""

SMALL_LIMIT = 64 * 1024
"""The storage and decompression limits during the test, lowered so "huge" stays cheap."""

THREADS = ("t0", "t1", "t2")
SPECS = {"d": DeltaChannel(lambda state, writes: [*(state or []), *writes])}

huge = st.sampled_from(["compressible", "incompressible"])
small_value = st.one_of(st.integers(), st.text(max_size=20), st.binary(max_size=20))
value = st.one_of(small_value, small_value, huge)
parent_choice = st.sampled_from(["last", "any", "none", "unknown", "other-thread", "self"])
ids_arg = st.one_of(
    st.sampled_from(THREADS),  # a lone string: always refused
    st.lists(st.sampled_from(THREADS), max_size=2),
)

put = st.tuples(st.just("put"), st.sampled_from(THREADS), parent_choice, value)
put_writes = st.tuples(st.just("put_writes"), st.sampled_from(THREADS), value)
history = st.tuples(st.just("history"), st.sampled_from(THREADS))
op = st.one_of(  # puts weigh more: most other calls need a history to work on
    put,
    put,
    put,
    put_writes,
    history,
    st.tuples(st.just("reput"), st.sampled_from(THREADS), parent_choice, st.integers(0, 9)),
    st.tuples(st.just("loop"), st.sampled_from(THREADS), st.integers(0, 9)),
    st.tuples(st.just("list"), st.sampled_from(THREADS)),
    st.tuples(st.just("prune"), ids_arg, st.sampled_from(["delete", "keep_latest"])),
    st.tuples(st.just("delete_for_runs"), st.one_of(st.just("run1"), st.just(["run1"]))),
    st.tuples(
        st.just("copy"),
        st.sampled_from(THREADS),
        st.sampled_from(["existing", "fresh", "self"]),
        st.booleans(),
    ),
    st.tuples(st.just("compact"), st.sampled_from(THREADS)),
    st.tuples(st.just("retention"), ids_arg),
)


def _materialize(kind: str) -> Any:
    if kind == "compressible":
        return "a" * (2 * SMALL_LIMIT)  # compresses below the limits, expands over them
    if kind == "incompressible":
        return os.urandom(2 * SMALL_LIMIT)  # over the storage limit even compressed
    return kind


class Runner:
    """Calls a saver's sync or async method with a time bound, from a worker thread (sync)
    or an event loop in its own thread (async), so a hang fails instead of blocking."""

    def __init__(self, kind: str) -> None:
        self.is_async = kind in ASYNC_KINDS
        self.pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro_or_fn: Any) -> Any:
        if asyncio.iscoroutine(coro_or_fn):
            future: Any = asyncio.run_coroutine_threadsafe(coro_or_fn, self.loop)
        else:
            future = self.pool.submit(coro_or_fn)
        try:
            return future.result(timeout=CALL_TIMEOUT)
        except concurrent.futures.TimeoutError:
            pytest.fail(f"a saver call did not return within {CALL_TIMEOUT:.0f}s")

    def call(self, saver: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        if self.is_async:
            method = getattr(saver, "a" + name)
            if name == "list":

                async def collect() -> list[Any]:
                    return [t async for t in method(*args, **kwargs)]

                return self.run(collect())
            return self.run(method(*args, **kwargs))
        method = getattr(saver, name)
        if name == "list":
            return self.run(lambda: list(method(*args, **kwargs)))
        return self.run(lambda: method(*args, **kwargs))

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()
        self.pool.shutdown(wait=True)


def _set_parent(kind: str, saver: Any, thread: str, cid: str, parent: str) -> None:
    """A hand edit of one row's parent (what the library itself never writes)."""
    if kind == "memory":
        saver._threads[thread][""][cid].parent_id = parent
        return
    sql = (
        "UPDATE checkpointer_checkpoints SET parent_checkpoint_id = ? "
        "WHERE thread_id = ? AND checkpoint_id = ?"
    )
    if kind in PG_KINDS:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{saver._dialect.schema}"')
            conn.execute(sql.replace("?", "%s"), (parent, thread, cid))
        return
    with sqlite3.connect(saver._executor.path) as conn:
        conn.execute(sql, (parent, thread, cid))


class Model:
    """What was acknowledged, per thread: checkpoint id -> (parent id, stored value)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.threads: dict[str, dict[str, tuple[str | None, Any]]] = {}
        self.step = 0

    def tid(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def ids(self, name: str) -> list[str]:
        return sorted(self.threads.get(name, {}))


def _one_call(kind: str, saver: Any, runner: Runner, model: Model, operation: tuple[Any, ...]):
    """Run one operation and update the model with what it acknowledged."""
    name = operation[0]
    call: Callable[..., Any] = lambda method, *a, **k: runner.call(saver, method, *a, **k)  # noqa: E731
    model.step += 1
    if name in ("put", "reput"):
        thread, choice = operation[1], operation[2]
        known = model.ids(thread)
        if name == "reput":
            if not known:
                return
            cid = known[operation[3] % len(known)]
            stored_value = model.threads[thread][cid][1]
        else:
            cid = new_checkpoint_id()
            stored_value = _materialize(operation[3])
        parents = {
            "last": known[-1] if known else None,
            "any": known[model.step % len(known)] if known else None,
            "none": None,
            "unknown": "no-such-checkpoint",
            "other-thread": next(
                (model.ids(t)[0] for t in THREADS if t != thread and model.ids(t)), "none-yet"
            ),
            "self": cid,
        }
        parent = parents[choice]
        cp = empty_checkpoint()
        cp["id"] = cid
        cp["channel_versions"] = {"v": f"{model.step:08d}", "d": f"{model.step:08d}"}
        cp["channel_values"] = {"v": stored_value}
        meta: Any = {"run_id": "run1", "counters_since_delta_snapshot": {"d": (1, 1)}}
        config = make_config(model.tid(thread), "", parent)
        call("put", config, cp, meta, {"v": cp["channel_versions"]["v"]})
        # Acknowledged: a new checkpoint, or the same one with its own parent.
        model.threads.setdefault(thread, {})[cid] = (parent, stored_value)
    elif name == "put_writes":
        thread = operation[1]
        known = model.ids(thread)
        if known:
            config = make_config(model.tid(thread), "", known[-1])
            call("put_writes", config, [("d", _materialize(operation[2]))], str(uuid.uuid4()))
    elif name == "loop":
        thread = operation[1]
        known = model.ids(thread)
        if known:
            target = known[operation[2] % len(known)]
            _set_parent(kind, saver, model.tid(thread), target, known[-1])
            parent, stored_value = model.threads[thread][target]
            model.threads[thread][target] = (known[-1], stored_value)
    elif name == "history":
        thread = operation[1]
        if model.ids(thread):
            config = make_config(model.tid(thread))
            call("get_delta_channel_history", config=config, channels=["d"])
    elif name == "list":
        call("list", make_config(model.tid(operation[1])))
    elif name == "prune":
        ids, strategy = operation[1], operation[2]
        arg = model.tid(ids) if isinstance(ids, str) else [model.tid(t) for t in ids]
        call("prune", arg, strategy=strategy)
        for thread in ids:  # only reached for a list: a string raised above
            if strategy == "delete":
                model.threads.pop(thread, None)
        if strategy == "keep_latest":
            _resync(runner, saver, model, ids)
    elif name == "delete_for_runs":
        call("delete_for_runs", operation[1])
        for thread in THREADS:
            model.threads.pop(thread, None)
    elif name == "copy":
        src, target, replace = operation[1], operation[2], operation[3]
        # Onto a thread that holds checkpoints, one that does not, or the source itself.
        others = [t for t in THREADS if t != src]
        existing = [t for t in others if model.threads.get(t)] or others
        fresh = [t for t in others if not model.threads.get(t)] or others
        dst = {"existing": existing[0], "fresh": fresh[0], "self": src}[target]
        call("copy_thread", model.tid(src), model.tid(dst), replace=replace)
        if src != dst:
            model.threads[dst] = dict(model.threads.get(src, {}))
            if not model.threads[dst]:
                del model.threads[dst]
    elif name == "compact":
        thread = operation[1]
        call("compact", model.tid(thread), channels=SPECS)
        _resync(runner, saver, model, [thread])
    elif name == "retention":
        ids = operation[1]
        arg = model.tid(ids) if isinstance(ids, str) else [model.tid(t) for t in ids]
        call("apply_retention", KeepLast(2), thread_ids=arg, channels=SPECS)
        _resync(runner, saver, model, ids)


def _resync(runner: Runner, saver: Any, model: Model, threads: Any) -> None:
    """After a retention call: what it removed leaves the model; its head must stay."""
    for thread in threads:
        known = model.threads.get(thread)
        if not known:
            continue
        listed = runner.call(saver, "list", make_config(model.tid(thread)))
        kept = {t.config["configurable"]["checkpoint_id"] for t in listed}
        assert max(known) in kept, "retention removed the head of a namespace"
        model.threads[thread] = {cid: entry for cid, entry in known.items() if cid in kept}


def _check_model(runner: Runner, saver: Any, model: Model) -> None:
    """Every acknowledged checkpoint still reads back, with its value and its parent."""
    for thread, checkpoints in model.threads.items():
        for cid, (parent, stored_value) in checkpoints.items():
            tup = runner.call(saver, "get_tuple", make_config(model.tid(thread), "", cid))
            assert tup is not None, f"acknowledged checkpoint {cid} of {thread} is gone"
            assert tup.checkpoint["channel_values"].get("v") == stored_value
            got = tup.parent_config["configurable"]["checkpoint_id"] if tup.parent_config else None
            assert got == parent


@pytest.fixture(params=SAVER_KINDS)
def live_saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Any, Runner]]:
    kind: str = request.param
    schema = None
    if kind in PG_KINDS:
        require_postgres()
        schema = f"cp_test_{uuid.uuid4().hex[:12]}"
    runner = Runner(kind)
    saver = runner.run(open_saver(kind, tmp_path, schema))
    try:
        yield kind, saver, runner
    finally:
        runner.run(close_saver(kind, saver))
        runner.close()
        if schema is not None:
            drop_schema(schema)


def test_hostile_call_sequences_end_typed_and_lose_nothing(
    live_saver: tuple[str, Any, Runner], monkeypatch: pytest.MonkeyPatch
) -> None:
    kind, saver, runner = live_saver
    monkeypatch.setattr(puts, "MAX_STORED_VALUE_BYTES", SMALL_LIMIT)
    monkeypatch.setattr(frames, "DEFAULT_MAX_DECOMPRESSED_SIZE", SMALL_LIMIT)

    @example_settings(15)
    @given(st.lists(op, min_size=10, max_size=40))
    def run(operations: list[tuple[Any, ...]]) -> None:
        model = Model(uuid.uuid4().hex[:8])
        for operation in operations:
            # Refused with one of the library's own errors: allowed (and nothing written).
            with contextlib.suppress(CheckpointerError):
                _one_call(kind, saver, runner, model, operation)
            _check_model(runner, saver, model)

    run()
