"""Concurrency: many graph runs at once through one pooled PostgreSQL saver, several
processes on one SQLite file, and what a too-small busy timeout does.

Every run is the crash scenario (tests/crash_worker.py) on its own thread, so each final
state is compared against the uncrashed reference, not just "no exception".
"""

from __future__ import annotations

import sqlite3
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from checkpointer.errors import StorageBusyError
from checkpointer.ids import next_channel_version, task_id_for
from checkpointer.savers.postgres import PostgresSaver
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.types import empty_checkpoint, make_config
from tests import crash_worker as cw
from tests.test_crash import reference

_ctx = cw.forkserver_context()

PG_THREADS = 16
SQLITE_PROCESSES = 4
SQLITE_THREADS_PER_PROCESS = 3


def check_final(saver: Any, thread_ids: list[str]) -> None:
    graph = cw.build_graph(cw.Hooks(None), saver)
    expected = reference().after_phases
    for thread_id in thread_ids:
        config = cw.thread_config(thread_id)
        assert graph.get_state(config).values == expected, thread_id
        history = list(graph.get_state_history(config))
        assert len(history) == 10
        assert [h.values for h in history] == [graph.get_state(h.config).values for h in history]


def test_sixteen_runs_through_one_pooled_postgres_saver(pg_url: str, pg_schema: str) -> None:
    """16 graph runs at once through a pool of 4 connections, with the single-writer guard
    on (one lock session per run): no errors, no waiting forever, every state exact."""
    with PostgresSaver.from_conn_string(
        pg_url, schema=pg_schema, min_size=1, max_size=4, setup=True
    ) as saver:
        graph = cw.build_graph(cw.Hooks(None), saver)
        graph.single_writer = True
        threads = [f"pg-{i}" for i in range(PG_THREADS)]
        barrier = threading.Barrier(PG_THREADS)

        def run(thread_id: str) -> None:
            barrier.wait()
            cw.run_phases(graph, thread_id)

        with ThreadPoolExecutor(PG_THREADS) as pool:
            for future in [pool.submit(run, t) for t in threads]:
                future.result(60)
        check_final(saver, threads)


def test_processes_share_one_sqlite_file(tmp_path: Path) -> None:
    """4 processes x 3 threads run graphs on one SQLite file at once: the default busy
    timeout absorbs the contention ("database is locked" never escapes)."""
    db = tmp_path / "shared.db"
    SqliteSaver.from_conn_string(db).__enter__().close()
    side = tmp_path / "side"
    side.mkdir()
    processes = []
    all_threads: list[str] = []
    for p in range(SQLITE_PROCESSES):
        threads = [f"p{p}-t{t}" for t in range(SQLITE_THREADS_PER_PROCESS)]
        all_threads += threads
        spec = {"backend": "sqlite", "db": str(db), "dir": str(side), "threads": threads}
        process = _ctx.Process(target=cw.concurrent_runs, args=(spec,), daemon=True)
        process.start()
        processes.append(process)
    for process in processes:
        process.join(120)
        assert process.exitcode == 0
    errors = [line for f in side.glob("errors-*.txt") for line in f.read_text().splitlines()]
    assert errors == []
    assert len(list(side.glob("errors-*.txt"))) == SQLITE_PROCESSES
    with SqliteSaver.from_conn_string(db) as saver:
        check_final(saver, all_threads)


# ------------------------------------------------------------------ busy timeouts
def _hold_write_lock(db: Path, seconds: float, locked: threading.Event) -> None:
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        locked.set()
        time.sleep(seconds)
        conn.execute("ROLLBACK")
    finally:
        conn.close()


def _checkpoint(step: int) -> tuple[Any, dict[str, Any], dict[str, str]]:
    version = next_channel_version(None)
    cp = empty_checkpoint()
    cp["channel_values"] = {"x": step}
    cp["channel_versions"] = {"x": version}
    return cp, {"step": step}, {"x": version}


def _blocked_put(tmp_path: Path) -> tuple[BaseException, float, SqliteSaver, Any]:
    db = tmp_path / "busy.db"
    saver = SqliteSaver(db, busy_timeout=0.05)
    saver.setup()
    locked = threading.Event()
    holder = threading.Thread(target=_hold_write_lock, args=(db, 1.0, locked))
    holder.start()
    assert locked.wait(5)
    cp, meta, versions = _checkpoint(0)
    started = time.monotonic()
    try:
        saver.put(make_config("busy"), cp, meta, versions)
    except BaseException as exc:
        error: BaseException = exc
    else:
        raise AssertionError("put succeeded while another connection held the write lock")
    finally:
        elapsed = time.monotonic() - started
        holder.join()
    return error, elapsed, saver, cp


def test_small_busy_timeout_fails_fast_and_writes_nothing(tmp_path: Path) -> None:
    """busy_timeout=50 ms against a writer holding the lock for 1 s: the put fails within
    the timeout (bounded, not after the holder is done), stores nothing, and succeeds once
    the lock is free."""
    error, elapsed, saver, cp = _blocked_put(tmp_path)
    try:
        assert elapsed < 0.75, f"waited {elapsed:.2f}s with busy_timeout=0.05"
        assert "locked" in str(error) or "busy" in str(error).lower()
        assert saver.get_tuple(make_config("busy")) is None  # nothing half-written
        saver.put(make_config("busy"), cp, {"step": 0}, {"x": cp["channel_versions"]["x"]})
        tup = saver.get_tuple(make_config("busy"))
        assert tup is not None and tup.checkpoint["channel_values"] == {"x": 0}
    finally:
        saver.close()


def test_busy_error_is_typed_and_names_the_timeout(tmp_path: Path) -> None:
    error, _, saver, _ = _blocked_put(tmp_path)
    saver.close()
    assert isinstance(error, StorageBusyError), repr(error)
    assert "busy.db" in str(error) and "0.05" in str(error)


def test_contended_writes_never_lose_an_acknowledged_one(tmp_path: Path) -> None:
    """Six threads write checkpoints and pending writes to one file with a 1 ms busy
    timeout: some operations fail, each failure is raised to its caller, and every
    operation that returned is stored."""
    db = tmp_path / "contended.db"
    with SqliteSaver.from_conn_string(db):
        pass
    acked: list[tuple[str, str, int]] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def writer(w: int) -> None:
        saver = SqliteSaver(db, busy_timeout=0.001)
        try:
            config = make_config(f"w{w}")
            for step in range(40):
                cp, meta, versions = _checkpoint(step)
                try:
                    new = saver.put(config, cp, meta, versions)
                except Exception as exc:
                    with lock:
                        failures.append(exc)
                    continue
                with lock:
                    acked.append(("put", cp["id"], step))
                config = new
                try:
                    saver.put_writes(new, [("x", step), ("y", -step)], task_id_for(step, "w"))
                except Exception as exc:
                    with lock:
                        failures.append(exc)
                    continue
                with lock:
                    acked.append(("writes", cp["id"], step))
        finally:
            saver.close()

    with ThreadPoolExecutor(6) as pool:
        list(pool.map(writer, range(6)))
    with SqliteSaver.from_conn_string(db) as saver:
        stored = {
            t.config["configurable"]["checkpoint_id"]: t
            for w in range(6)
            for t in saver.list(make_config(f"w{w}"))
        }
    for kind, checkpoint_id, step in acked:
        assert checkpoint_id in stored, f"acknowledged checkpoint {checkpoint_id} lost"
        tup = stored[checkpoint_id]
        assert tup.checkpoint["channel_values"] == {"x": step}
        if kind == "writes":
            assert [w[1:] for w in tup.pending_writes or []] == [("x", step), ("y", -step)]
    assert len(stored) == sum(1 for a in acked if a[0] == "put")  # nothing unacknowledged
    for exc in failures:
        assert "locked" in str(exc) or "busy" in str(exc).lower(), repr(exc)
    print(f"\n{len(acked)} acknowledged operations, {len(failures)} refused as busy")
