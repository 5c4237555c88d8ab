"""The single-writer guard: two workers resuming one thread, exactly one runs it.

Measured, not assumed: nodes record their executions, runs are held open while a second
worker tries, and locks are checked to be released on normal exit, on error, and when
the holding process is killed (SIGKILL), on every saver kind.
"""

from __future__ import annotations

import asyncio
import operator
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest

from checkpointer.errors import ConfigError, ThreadBusy, ThreadLockLost
from checkpointer.graph import END, START, CompiledStateGraph, StateGraph
from checkpointer.graph.guard import LOCK_APPLICATION_NAME, acquire_thread_lock, lock_key
from checkpointer.savers.memory import InMemorySaver
from tests import crash_worker as cw
from tests.conftest import PG_URL, drop_schema, require_postgres

_ctx = cw.forkserver_context()


class S(TypedDict):
    log: Annotated[list[str], operator.add]


class Gate:
    """Holds a node open until released; counts how often it ran."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.release = threading.Event()
        self.runs = 0
        self.fail = False

    def node(self, state: dict[str, Any]) -> dict[str, Any]:
        self.runs += 1
        self.started.set()
        if not self.release.wait(30):
            raise TimeoutError("gate never released")
        if self.fail:
            raise RuntimeError("node failed")
        return {"log": ["work"]}


def gated(gate: Gate, saver: Any, *, single_writer: bool = True) -> CompiledStateGraph:
    builder = StateGraph(S)
    builder.add_node("work", gate.node)
    builder.add_node("done", lambda state: {"log": ["done"]})
    builder.add_edge(START, "work")
    builder.add_edge("work", "done")
    builder.add_edge("done", END)
    return builder.compile(checkpointer=saver, single_writer=single_writer)


def config(thread_id: str, **extra: Any) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id, **extra}}


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    kind = request.param
    if kind == "memory":
        yield InMemorySaver()
        return
    if kind == "sqlite":
        from checkpointer.savers.sqlite import SqliteSaver

        s = SqliteSaver(tmp_path / "guard.db")
        s.setup()
        try:
            yield s
        finally:
            s.close()
        return
    require_postgres()
    from checkpointer.savers.postgres import PostgresSaver

    schema = f"cp_guard_{uuid.uuid4().hex[:10]}"
    s = PostgresSaver(PG_URL, schema=schema, max_size=2)
    s.setup()
    try:
        yield s
    finally:
        s.close()
        drop_schema(schema)


def hold(graph: CompiledStateGraph, gate: Gate, cfg: dict[str, Any]) -> Any:
    """Start `graph.invoke` in a thread and wait until its node is running."""
    pool = ThreadPoolExecutor(1)
    future = pool.submit(graph.invoke, {"log": ["in"]}, cfg)
    pool.shutdown(wait=False)
    assert gate.started.wait(10), "the holding run never started its node"
    return future


# ----------------------------------------------------------------- one process
def test_second_run_of_a_busy_thread_gets_thread_busy(saver: Any) -> None:
    gate = Gate()
    graph = gated(gate, saver)
    cfg = config(f"t-{uuid.uuid4().hex[:8]}")
    future = hold(graph, gate, cfg)
    started = time.monotonic()
    with pytest.raises(ThreadBusy, match="another worker") as info:
        graph.invoke(None, cfg)
    assert time.monotonic() - started < 5  # refused at once, not after waiting
    assert info.value.thread_id == cfg["configurable"]["thread_id"]
    with pytest.raises(ThreadBusy):
        graph.update_state(cfg, {"log": ["edit"]}, as_node="work")
    other = config(f"other-{uuid.uuid4().hex[:8]}")  # other threads are not blocked
    free = Gate()
    free.release.set()
    assert gated(free, saver).invoke({"log": ["x"]}, other)["log"] == ["x", "work", "done"]
    gate.release.set()
    assert future.result(10)["log"] == ["in", "work", "done"]
    assert gate.runs == 1
    # Released on normal exit: the thread can be run again.
    gate.started.clear()
    assert graph.invoke({"log": ["again"]}, cfg)["log"][-3:] == ["again", "work", "done"]


def test_lock_is_released_when_the_run_fails(saver: Any) -> None:
    gate = Gate()
    gate.fail = True
    gate.release.set()
    graph = gated(gate, saver)
    cfg = config(f"t-{uuid.uuid4().hex[:8]}")
    with pytest.raises(RuntimeError, match="node failed"):
        graph.invoke({"log": ["in"]}, cfg)
    gate.fail = False
    assert graph.invoke(None, cfg)["log"] == ["in", "work", "done"]


def test_exclusive_config_overrides_the_compiled_default(saver: Any) -> None:
    gate = Gate()
    graph = gated(gate, saver, single_writer=False)
    cfg = config(f"t-{uuid.uuid4().hex[:8]}", exclusive=True)
    future = hold(graph, gate, cfg)
    with pytest.raises(ThreadBusy):
        graph.invoke(None, cfg)
    with pytest.raises(ThreadBusy):  # the lock API sees the same lock
        acquire_thread_lock(saver, cfg["configurable"]["thread_id"])
    gate.release.set()
    future.result(10)


def test_exclusive_false_opts_out(saver: Any) -> None:
    """Without the lock two workers run the same pending task: what the guard prevents."""
    gate = Gate()
    graph = gated(gate, saver)
    thread_id = f"t-{uuid.uuid4().hex[:8]}"
    future = hold(graph, gate, config(thread_id))
    with ThreadPoolExecutor(1) as pool:
        second = pool.submit(graph.invoke, None, config(thread_id, exclusive=False))
        deadline = time.monotonic() + 10
        while gate.runs < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        gate.release.set()
        second.result(10)
    future.result(10)
    assert gate.runs == 2


def test_exclusive_must_be_a_bool() -> None:
    graph = gated(Gate(), InMemorySaver())
    with pytest.raises(ConfigError, match="exclusive"):
        graph.invoke({"log": []}, config("t", exclusive="yes"))


def test_stream_holds_the_lock_until_closed(saver: Any) -> None:
    gate = Gate()
    gate.release.set()
    graph = gated(gate, saver)
    cfg = config(f"t-{uuid.uuid4().hex[:8]}")
    stream = graph.stream({"log": ["in"]}, cfg)
    assert next(stream) == {"work": {"log": ["work"]}}
    with pytest.raises(ThreadBusy):
        graph.invoke(None, cfg)
    stream.close()  # abandoning the stream releases the thread
    assert graph.invoke(None, cfg)["log"] == ["in", "work", "done"]


def test_threads_race_to_resume_exactly_one_runs(saver: Any) -> None:
    """Eight threads resume one interrupted thread at once: one runs the pending task, the
    others get ThreadBusy, and the task ran once."""
    gate = Gate()
    graph = gated(gate, saver)
    cfg = config(f"t-{uuid.uuid4().hex[:8]}")
    gate.fail = True
    gate.release.set()
    with pytest.raises(RuntimeError):
        graph.invoke({"log": ["in"]}, cfg)  # leaves `work` pending
    gate.fail, gate.runs = False, 0
    gate.release.clear()
    barrier = threading.Barrier(8)

    def resume(_: int) -> str:
        barrier.wait()
        try:
            graph.invoke(None, cfg)
            return "ran"
        except ThreadBusy:
            return "busy"

    with ThreadPoolExecutor(8) as pool:
        futures = [pool.submit(resume, i) for i in range(8)]
        assert gate.started.wait(10)
        time.sleep(0.2)  # let every contender try while the winner holds the lock
        gate.release.set()
        outcomes = sorted(f.result(10) for f in futures)
    assert outcomes == ["busy"] * 7 + ["ran"]
    assert gate.runs == 1
    assert graph.get_state(cfg).values["log"] == ["in", "work", "done"]


async def test_async_runs_are_guarded_too(tmp_path: Path) -> None:
    from checkpointer.savers.sqlite import AsyncSqliteSaver

    async with AsyncSqliteSaver.from_conn_string(tmp_path / "a.db") as saver:
        started, release = asyncio.Event(), asyncio.Event()

        async def work(state: dict[str, Any]) -> dict[str, Any]:
            started.set()
            await release.wait()
            return {"log": ["work"]}

        builder = StateGraph(S)
        builder.add_node("work", work)
        builder.add_edge(START, "work")
        graph = builder.compile(checkpointer=saver, single_writer=True)
        cfg = config("async-thread")
        task = asyncio.create_task(graph.ainvoke({"log": ["in"]}, cfg))
        await asyncio.wait_for(started.wait(), 10)
        with pytest.raises(ThreadBusy):
            await graph.ainvoke(None, cfg)
        release.set()
        assert (await task)["log"] == ["in", "work"]
        assert (await graph.ainvoke({"log": ["b"]}, cfg))["log"][-1] == "work"


async def test_async_postgres_saver_is_guarded(pg_url: str, pg_schema: str) -> None:
    from checkpointer.savers.postgres import AsyncPostgresSaver

    async with AsyncPostgresSaver.from_conn_string(pg_url, schema=pg_schema, setup=True) as saver:
        started, release = asyncio.Event(), asyncio.Event()

        async def work(state: dict[str, Any]) -> dict[str, Any]:
            started.set()
            await release.wait()
            return {"log": ["work"]}

        builder = StateGraph(S)
        builder.add_node("work", work)
        builder.add_edge(START, "work")
        graph = builder.compile(checkpointer=saver, single_writer=True)
        cfg = config("async-thread")
        task = asyncio.create_task(graph.ainvoke({"log": ["in"]}, cfg))
        await asyncio.wait_for(started.wait(), 10)
        with pytest.raises(ThreadBusy, match="advisory lock"):
            await graph.ainvoke(None, cfg)
        release.set()
        assert (await task)["log"] == ["in", "work"]


def test_lock_keys_differ_by_schema_and_thread() -> None:
    keys = {lock_key(s, t) for s in ("public", "other") for t in ("a", "b", "a\x00", "\ud800")}
    assert len(keys) == 8
    assert all(-(2**63) <= k < 2**63 for k in keys)


def test_sqlite_lock_files_are_removed_after_release(tmp_path: Path) -> None:
    from checkpointer.savers.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(tmp_path / "x.db") as saver:
        gate = Gate()
        gate.release.set()
        graph = gated(gate, saver)
        for i in range(3):
            graph.invoke({"log": [str(i)]}, config(f"thread-{i}"))
        lock_dir = tmp_path / "x.db.locks"
        assert lock_dir.is_dir() and list(lock_dir.iterdir()) == []


def test_postgres_lock_lost_stops_the_run(pg_url: str, pg_schema: str) -> None:
    """Killing the lock's session mid-run: the run stops with ThreadLockLost before its
    next save, and a resume finishes it without re-running the finished task."""
    import psycopg

    from checkpointer.savers.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, setup=True) as saver:
        gate = Gate()
        graph = gated(gate, saver)
        cfg = config("lost-lock")
        future = hold(graph, gate, cfg)
        key = lock_key(pg_schema, "lost-lock")
        with psycopg.connect(pg_url, autocommit=True) as admin:
            killed = admin.execute(
                "SELECT pg_terminate_backend(a.pid) FROM pg_stat_activity a "
                "JOIN pg_locks l ON l.pid = a.pid AND l.locktype = 'advisory' "
                "WHERE a.application_name = %s AND l.objsubid = 1 "
                "AND ((l.classid::bigint << 32) | l.objid::bigint) = %s",
                (LOCK_APPLICATION_NAME, key),
            ).fetchall()
        assert killed == [(True,)]
        gate.release.set()
        with pytest.raises(ThreadLockLost, match="lost the single-writer lock"):
            future.result(10)
        assert gate.runs == 1
        out = graph.invoke(None, cfg)
        assert out["log"] == ["in", "work", "done"]
        assert gate.runs == 1  # work's writes were saved before the lock was found lost


# --------------------------------------------------------------- two processes
def _start(spec: dict[str, Any]) -> Any:
    process = _ctx.Process(target=cw.gated_run, args=(spec,), daemon=True)
    process.start()
    return process


def _wait_for(predicate: Any, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.01)


def _outcomes(gate: Path) -> list[str]:
    return sorted(p.read_text() for p in gate.glob("outcome-*"))


@pytest.fixture(params=["sqlite", "postgres"])
def db_spec(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    gate = tmp_path / "gate"
    gate.mkdir()
    spec: dict[str, Any] = {"backend": request.param, "dir": str(gate), "thread": "shared"}
    schema = None
    if request.param == "sqlite":
        spec["db"] = str(tmp_path / "guard.db")
    else:
        require_postgres()
        schema = f"cp_guard_{uuid.uuid4().hex[:10]}"
        spec.update(url=PG_URL, schema=schema)
    cw.open_saver(spec, setup=True).close()
    try:
        yield spec
    finally:
        if schema is not None:
            drop_schema(schema)


def test_two_processes_exactly_one_runs(db_spec: dict[str, Any]) -> None:
    gate = Path(db_spec["dir"])
    first = _start({**db_spec, "input": {"messages": ["go"]}})
    _wait_for(lambda: any(gate.glob("started-*")))
    second = _start({**db_spec, "input": None})
    second.join(20)
    assert second.exitcode == 0
    assert _outcomes(gate) == ["busy"]
    (gate / "release").touch()
    first.join(20)
    assert first.exitcode == 0
    assert _outcomes(gate) == ["busy", "ran"]
    assert len((gate / "runs.txt").read_text().split()) == 1


def test_lock_dies_with_a_killed_process(db_spec: dict[str, Any]) -> None:
    """SIGKILL the holder mid-node: the lock is gone at once (no stale lock, no timeout),
    and the next worker resumes the thread."""
    gate = Path(db_spec["dir"])
    first = _start({**db_spec, "input": {"messages": ["go"]}})
    _wait_for(lambda: any(gate.glob("started-*")))
    os.kill(first.pid, signal.SIGKILL)
    first.join(10)
    assert first.exitcode == -signal.SIGKILL
    (gate / "release").touch()
    deadline = time.monotonic() + 10
    while True:  # PostgreSQL notices the dead session within milliseconds
        second = _start({**db_spec, "input": None})
        second.join(20)
        if _outcomes(gate) == ["ran"] or time.monotonic() > deadline:
            break
        for p in gate.glob("outcome-*"):
            p.unlink()
        time.sleep(0.05)
    assert _outcomes(gate) == ["ran"]
    saver = cw.open_saver(db_spec, setup=False)
    try:
        state = saver.get_tuple(cw.thread_config("shared"))
        assert state is not None and state.metadata["step"] == 1  # input, work, done
        assert state.checkpoint["channel_values"]["n"] == 1
    finally:
        saver.close()
