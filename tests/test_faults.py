"""Faults: PostgreSQL connections killed under a running saver (pg_terminate_backend on
this test's own connections only, found by the application_name the test sets).

What holds: a pooled saver re-runs an operation that is safe to repeat (reads, setup, put,
put_writes) on a fresh connection, at most `retries` times, so a killed connection costs
the caller nothing; an operation that is not safe to repeat (delete, copy, ...) is never
re-run once it reached the server; every connection failure the saver does not recover
from is a `StorageUnavailableError` naming the database; a put whose COMMIT the saver never
heard back about is stored once, not twice; nothing acknowledged is ever lost, and resuming
a run after a failure finishes it without re-running a finished task. Sync and async alike.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from checkpointer.errors import SchemaVersionError, StorageUnavailableError
from checkpointer.ids import next_channel_version
from checkpointer.savers.postgres import AsyncPostgresSaver, PostgresSaver
from checkpointer.savers.sql.plan import Stmt, read_op
from checkpointer.savers.sql.schema import BLOBS, CHECKPOINTS, THREADS, WRITES
from checkpointer.types import empty_checkpoint, make_config
from tests import crash_worker as cw
from tests.conftest import PG_URL, Harness, drop_schema, require_postgres
from tests.test_crash import Checker, Point, node_keys_in, read_acks, read_runs, reference

MAX_ATTEMPTS = 8
"""Resume attempts a caller needs at most: one per dead pooled connection, plus one."""


def terminate(application_name: str, pid: int | None = None) -> int:
    """Kill every backend of this test's saver (or only its backend `pid`), and only those;
    wait until they are gone, so that nothing sent afterwards can still run on them. How
    many were killed."""
    with psycopg.connect(PG_URL, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND pid <> pg_backend_pid() "
            "AND (%s::int IS NULL OR pid = %s::int)",
            (application_name, pid, pid),
        ).fetchall()
        killed = [p for p, ok in rows if ok]
        deadline = time.monotonic() + 10
        while killed:
            found = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)", (killed,)
            ).fetchone()
            if not found or not found[0]:
                break
            assert time.monotonic() < deadline, f"backends {killed} did not exit"
            time.sleep(0.005)
    return len(killed)


class FaultHooks(cw.Hooks):
    """Logs runs and acks like the crash worker; kills the pool's connections the first
    time each node named in `at` runs (while no connection is checked out)."""

    def __init__(self, side: Path, app: str, at: set[str]) -> None:
        super().__init__(side)
        self.app = app
        self.at = at
        self.killed = 0
        # Task runs and acknowledged put_writes, in the order they happened (node threads
        # and the driver's thread append under one lock).
        self.timeline: list[tuple[str, str]] = []
        self._order = threading.Lock()

    def node_ran(self, key: str) -> None:
        with self._order:
            self.timeline.append(("ran", key))
        super().node_ran(key)
        if key in self.at:
            self.at.discard(key)  # once: a re-run of the task must be able to succeed
            self.killed += terminate(self.app)

    def ack(self, record: dict[str, Any]) -> None:
        super().ack(record)
        if record.get("op") == "put_writes":
            with self._order:
                for channel, value in record["writes"]:
                    for key in node_keys_in(value) if channel == "messages" else ():
                        self.timeline.append(("acked", key))

    def reran_after_ack(self) -> list[str]:
        """Tasks that ran again after their writes had been acknowledged: what a retry
        must never cause (a task whose put_writes failed, or never ran because a sibling's
        failed first, may run again)."""
        acked: set[str] = set()
        out = []
        for event, key in self.timeline:
            if event == "acked":
                acked.add(key)
            elif key in acked:
                out.append(key)
        return out


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[dict[str, Any]]:
    require_postgres()
    app = f"cp-fault-{uuid.uuid4().hex[:8]}"
    schema = f"cp_fault_{uuid.uuid4().hex[:10]}"
    side = tmp_path / "side"
    side.mkdir()
    spec = {
        "backend": "postgres",
        "url": f"{PG_URL}?application_name={app}",
        "schema": schema,
        "dir": str(side),
        "thread": "faulty",
        "app": app,
    }
    try:
        yield spec
    finally:
        drop_schema(schema)


def _saver(spec: dict[str, Any], **kwargs: Any) -> PostgresSaver:
    saver = PostgresSaver(spec["url"], schema=spec["schema"], min_size=3, max_size=3, **kwargs)
    saver.setup()
    return saver


def _resume_until_done(graph: Any, thread_id: str, errors: list[BaseException]) -> None:
    config = cw.thread_config(thread_id)
    for _ in range(MAX_ATTEMPTS):
        try:
            graph.invoke(None, config)
            for phase in cw.PHASES:
                if phase["messages"][0] not in graph.get_state(config).values["messages"]:
                    graph.invoke(phase, config)
            return
        except Exception as exc:
            errors.append(exc)
    raise AssertionError(f"never recovered: {errors}")


def _is_lost_connection(exc: BaseException) -> bool:
    """A typed connection failure, caused by the driver reporting a dead session."""
    return (
        isinstance(exc, StorageUnavailableError)
        and isinstance(exc.__cause__, psycopg.OperationalError)
        and ("terminat" in str(exc) or "closed" in str(exc))
    )


def test_killed_pool_connections_lose_nothing(pg: dict[str, Any]) -> None:
    """With retries off, kill all of the pool's connections twice mid-run: every failure
    is a StorageUnavailableError the caller sees (never silent loss), the pool reconnects,
    and resuming finishes the run with every acknowledged write kept and no finished task
    run twice."""
    saver = _saver(pg, retries=0)
    side = Path(pg["dir"])
    hooks = FaultHooks(side, pg["app"], {"right:1", "left:3"})
    try:
        cw.instrument(saver, hooks)
        graph = cw.build_graph(hooks, saver)
        errors: list[BaseException] = []
        try:
            cw.run_phases(graph, "faulty", hooks)
        except Exception as exc:
            errors.append(exc)
        _resume_until_done(graph, "faulty", errors)
        assert hooks.killed >= 2
        assert errors, "the faults went unnoticed: were the connections really killed?"
        for exc in errors:  # typed connection errors, not wrong data or a crash elsewhere
            assert _is_lost_connection(exc), repr(exc)
        checker = Checker({**pg, "mode": "run"}, Point("run", {"at": "node", "n": 0}))
        checker.check_acks(saver)
        stored = checker.check_thread(saver, graph, "faulty")
        assert graph.get_state(cw.thread_config("faulty")).values == reference().after_phases
        runs = read_runs(side)
        assert set(runs) == set(cw.NODE_KEYS)
        assert set(stored) == set(cw.NODE_KEYS)
        # A task may run again only if its writes were never acknowledged: its own
        # put_writes failed, or a sibling's in the same superstep failed before its own was
        # sent (left and right run in parallel, so one error can stand for two re-runs).
        assert hooks.reran_after_ack() == [], hooks.timeline
        assert sum(n - 1 for n in runs.values()) <= 2 * len(errors), (runs, errors)
        assert sum(a["op"] == "put" for a in read_acks(side)) == len(
            list(saver.list(cw.thread_config("faulty")))
        )
        print(
            f"\nkilled {hooks.killed} pooled connections in 2 rounds; {len(errors)} operations "
            f"failed and were resumed ({sum(n - 1 for n in runs.values())} task re-runs, none "
            f"after its writes were acknowledged); {len(read_acks(side))} acknowledged writes "
            "all kept"
        )
    finally:
        saver.close()


def test_idempotent_operations_are_retried_on_a_fresh_connection(pg: dict[str, Any]) -> None:
    """The same kills with the default retries: the run never notices."""
    saver = _saver(pg)
    hooks = FaultHooks(Path(pg["dir"]), pg["app"], {"left:1", "join:2"})
    try:
        graph = cw.build_graph(hooks, saver)
        cw.run_phases(graph, "faulty")  # must not raise
        assert hooks.killed >= 2
        drawn = saver._executor._pool.get_stats().get("returns_bad", 0)
        assert drawn >= 1  # dead connections were drawn, and the operations re-run
        assert graph.get_state(cw.thread_config("faulty")).values == reference().after_phases
        assert read_runs(Path(pg["dir"])) == {k: 1 for k in cw.NODE_KEYS}
        print(
            f"\nkilled {hooks.killed} pooled connections in 2 rounds; {drawn} operations met a "
            "dead connection and were re-run; 0 errors; no task ran twice; final state exact"
        )
    finally:
        saver.close()


def test_unrecoverable_connection_loss_is_a_typed_error(pg: dict[str, Any]) -> None:
    """A saver on one connection (no pool to reconnect from) whose session was killed."""
    with PostgresSaver.from_conn_string(
        pg["url"], schema=pg["schema"], pool=False, setup=True
    ) as saver:
        assert saver.get_tuple(cw.thread_config("x")) is None
        assert terminate(pg["app"]) == 1
        with pytest.raises(StorageUnavailableError, match=pg["schema"]) as info:
            saver.get_tuple(cw.thread_config("x"))
        assert _is_lost_connection(info.value)
        assert "one connection" in str(info.value)
        with pytest.raises(StorageUnavailableError, match="connection is closed"):
            saver.get_tuple(cw.thread_config("x"))  # and so is every later operation


async def test_async_saver_recovers_after_connections_are_killed(pg: dict[str, Any]) -> None:
    """Retries off: the failure is typed, resuming finishes, no finished task re-runs."""
    saver = AsyncPostgresSaver(pg["url"], schema=pg["schema"], min_size=3, max_size=3, retries=0)
    await saver._executor.open()
    await saver.setup()
    side = Path(pg["dir"])
    hooks = FaultHooks(side, pg["app"], {"join:0"})
    try:
        graph = cw.build_graph(hooks, saver)
        config = cw.thread_config("faulty")
        errors: list[BaseException] = []
        for attempt in range(MAX_ATTEMPTS):
            try:
                if attempt == 0:
                    await graph.ainvoke(cw.PHASES[0], config)
                else:
                    await graph.ainvoke(None, config)
                break
            except Exception as exc:
                errors.append(exc)
                await asyncio.sleep(0)
        assert errors and hooks.killed
        assert all(_is_lost_connection(exc) for exc in errors), errors
        state = await graph.aget_state(config)
        assert state.values["messages"] == reference().after_phases["messages"][:7]
        assert read_runs(side)["left:0"] == 1
    finally:
        await saver.aclose()


async def test_async_idempotent_operations_are_retried(pg: dict[str, Any]) -> None:
    saver = AsyncPostgresSaver(pg["url"], schema=pg["schema"], min_size=2, max_size=2)
    await saver._executor.open()
    await saver.setup()
    try:
        config = cw.thread_config("x")
        assert await saver.aget_tuple(config) is None
        assert terminate(pg["app"]) >= 1
        assert await saver.aget_tuple(config) is None  # must not raise
    finally:
        await saver.aclose()


# ------------------------------------------------- sync and async, one body each
KINDS = ("postgres", "async_postgres")


@asynccontextmanager
async def pg_saver(
    kind: str,
    spec: dict[str, Any],
    *,
    url: str | None = None,
    schema: str | None = None,
    pool: bool = True,
    setup: bool = True,
    **kwargs: Any,
) -> AsyncIterator[Harness]:
    """A saver of `kind` on this test's schema: a pool of 2 connections (all of them die at
    a kill), or one connection."""
    url = url or spec["url"]
    options: dict[str, Any] = {"schema": schema or spec["schema"], **kwargs}
    if pool:
        options.update(min_size=2, max_size=2)
    async with AsyncExitStack() as stack:
        saver: Any
        if kind == "postgres":
            if pool:
                saver = PostgresSaver(url, **options)
                stack.callback(saver.close)
            else:
                saver = stack.enter_context(
                    PostgresSaver.from_conn_string(url, pool=False, **options)
                )
            if setup:
                saver.setup()
        else:
            if pool:
                saver = AsyncPostgresSaver(url, **options)
                stack.push_async_callback(saver.aclose)
                await saver._executor.open()
            else:
                saver = await stack.enter_async_context(
                    AsyncPostgresSaver.from_conn_string(url, pool=False, **options)
                )
            if setup:
                await saver.setup()
        yield Harness(saver, kind)


class Faults:
    """Wraps a saver's executor: records each statement it sends; kills all of the saver's
    connections just before each of the next `kill_before` statements; kills the session
    of each of the next `kill_after` statements right after it ran (and, in autocommit,
    committed), before the saver hears back."""

    def __init__(self, saver: Any, app: str) -> None:
        self.app = app
        self.sent: list[str] = []
        self.kill_before = 0
        self.kill_after = 0
        executor = saver._executor
        original = executor._execute

        async def execute_async(cur: Any, stmt: Stmt) -> Any:
            self._before(stmt)
            rows = await original(cur, stmt)
            if self._after(cur):
                await cur.execute("SELECT 1")  # the session is gone: this raises
            return rows

        def execute_sync(cur: Any, stmt: Stmt) -> Any:
            self._before(stmt)
            rows = original(cur, stmt)
            if self._after(cur):
                cur.execute("SELECT 1")
            return rows

        executor._execute = execute_async if inspect.iscoroutinefunction(original) else execute_sync

    def _before(self, stmt: Stmt) -> None:
        self.sent.append(stmt.sql)
        if self.kill_before > 0:
            self.kill_before -= 1
            assert terminate(self.app) >= 1

    def _after(self, cur: Any) -> bool:
        if self.kill_after <= 0:
            return False
        self.kill_after -= 1
        assert terminate(self.app, cur.connection.info.backend_pid) == 1
        return True


async def run_op(h: Harness, op: Any) -> Any:
    result = h.saver._executor.run(op)
    return await result if inspect.isawaitable(result) else result


def _checkpoint(run_id: str = "run-1") -> tuple[Any, dict[str, Any], dict[str, str]]:
    version = next_channel_version(None)
    cp = empty_checkpoint()
    cp["channel_values"] = {"x": "a value that takes some bytes" * 4}
    cp["channel_versions"] = {"x": version}
    return cp, {"step": 0, "run_id": run_id}, {"x": version}


def stored(schema: str, thread_id: str) -> dict[str, Any]:
    """What a thread occupies: row counts, and its summary row (count, bytes, head)."""
    out: dict[str, Any] = {}
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        for table in (CHECKPOINTS, BLOBS, WRITES):
            row = conn.execute(
                f'SELECT count(*) FROM "{schema}".{table} WHERE thread_id = %s', (thread_id,)
            ).fetchone()
            out[table] = row[0] if row else None
        out[THREADS] = conn.execute(
            f'SELECT checkpoint_count, bytes, head_checkpoint_id FROM "{schema}".{THREADS} '
            "WHERE thread_id = %s",
            (thread_id,),
        ).fetchall()
    return out


def test_retry_settings_are_checked() -> None:
    """Nonsense settings fail at construction, before any connection is opened."""
    for bad in ({"retries": -1}, {"retries": 1.5}, {"retry_backoff": -0.1}):
        with pytest.raises(ValueError, match="retr"):
            PostgresSaver("postgresql://nobody@127.0.0.1:1/none", **bad)
        with pytest.raises(ValueError, match="retr"):
            AsyncPostgresSaver("postgresql://nobody@127.0.0.1:1/none", **bad)


@pytest.mark.parametrize("retries", [0, 1, 3])
@pytest.mark.parametrize("kind", KINDS)
async def test_retries_are_bounded_and_configurable(
    pg: dict[str, Any], kind: str, retries: int
) -> None:
    """A connection that dies on every attempt: a read is sent exactly retries + 1 times,
    then fails with a StorageUnavailableError that names the database (never the
    password). Once the fault is gone the same saver works again."""
    password = conninfo_to_dict(PG_URL).get("password") or "no-such-secret-42"
    url = make_conninfo(PG_URL, password=password, application_name=pg["app"])
    async with pg_saver(kind, pg, url=url, retries=retries, retry_backoff=0.01) as h:
        faults = Faults(h.saver, pg["app"])
        faults.kill_before = 100
        with pytest.raises(StorageUnavailableError) as info:
            await h.get_tuple(make_config("x"))
        assert len(faults.sent) == retries + 1
        message = str(info.value)
        assert _is_lost_connection(info.value), message
        assert f"schema {pg['schema']!r}" in message
        assert f"retries={retries}" in message
        dsn = conninfo_to_dict(PG_URL)
        assert f"dbname={dsn['dbname']}" in message and f"port={dsn.get('port', 5432)}" in message
        assert password not in message
        faults.kill_before = 0
        assert await h.get_tuple(make_config("x")) is None


UNSAFE: dict[str, Callable[[Harness], Awaitable[None]]] = {
    "delete_thread": lambda h: h.delete_thread("src"),
    "copy_thread": lambda h: h.copy_thread("src", "dst"),
    "delete_for_runs": lambda h: h.delete_for_runs(["run-1"]),
}


@pytest.mark.parametrize("name", sorted(UNSAFE))
@pytest.mark.parametrize("kind", KINDS)
async def test_operations_unsafe_to_repeat_are_not_retried(
    pg: dict[str, Any], kind: str, name: str
) -> None:
    """The connection dies during a delete or copy: it fails at once (one attempt, though
    retries are on) with a typed error saying it was not re-run; nothing was changed."""
    async with pg_saver(kind, pg, retries=3, retry_backoff=0.01) as h:
        cp, meta, versions = _checkpoint()
        await h.put(make_config("src"), cp, meta, versions)
        faults = Faults(h.saver, pg["app"])
        faults.kill_before = 100
        with pytest.raises(StorageUnavailableError, match="not re-run") as info:
            await UNSAFE[name](h)
        assert len(faults.sent) == 1
        assert _is_lost_connection(info.value)
        faults.kill_before = 0
        assert (await h.get_tuple(make_config("src"))) is not None
        assert (await h.get_tuple(make_config("dst"))) is None
        await UNSAFE[name](h)  # the pool reconnected; the operation works again


@pytest.mark.parametrize("kind", KINDS)
async def test_a_connection_that_died_idle_is_swapped_before_an_unsafe_operation(
    pg: dict[str, Any], kind: str
) -> None:
    """Connections killed while idle (server restart, idle timeout): a delete, which is
    never re-run, still gets a live connection, since nothing of it had been sent."""
    async with pg_saver(kind, pg) as h:
        cp, meta, versions = _checkpoint()
        await h.put(make_config("src"), cp, meta, versions)
        assert terminate(pg["app"]) == 2
        await h.delete_thread("src")
        assert (await h.get_tuple(make_config("src"))) is None


@pytest.mark.parametrize("kind", KINDS)
async def test_sql_errors_are_neither_wrapped_nor_retried(pg: dict[str, Any], kind: str) -> None:
    """Only a lost connection is retried and typed: an error in the SQL stays the driver's
    own error after one attempt, and a missing schema stays a SchemaVersionError."""
    async with pg_saver(kind, pg, retries=3) as h:
        faults = Faults(h.saver, pg["app"])
        with pytest.raises(psycopg.errors.DivisionByZero):
            await run_op(h, read_op(Stmt("SELECT 1/0", fetch=True)))
        assert len(faults.sent) == 1
    async with pg_saver(kind, pg, schema=pg["schema"] + "_none", setup=False) as h:
        with pytest.raises(SchemaVersionError):
            await h.get_tuple(make_config("x"))


@pytest.mark.parametrize("kind", KINDS)
async def test_writes_whose_commit_was_lost_are_stored_once(pg: dict[str, Any], kind: str) -> None:
    """The session dies right after put / put_writes committed, before the saver heard
    back. The retry runs them again, and the faulty thread ends up exactly like a thread
    written once without faults: same rows, same checkpoint count and byte total. Then
    every connection dies: the acknowledged writes are all read back."""
    async with pg_saver(kind, pg) as h:
        faults = Faults(h.saver, pg["app"])
        cp, meta, versions = _checkpoint()
        task = str(uuid.uuid4())
        for thread_id, kills in (("control", 0), ("faulty", 1)):
            faults.sent.clear()
            faults.kill_after = kills
            saved = await h.put(make_config(thread_id), cp, meta, versions)
            faults.kill_after = kills
            await h.put_writes(saved, [("x", "w1"), ("y", "w2")], task)
            faults.kill_after = kills
            await h.put_writes(saved, [("__interrupt__", "w3")], task)  # a replacing batch
            assert len(faults.sent) == 3 * (1 + kills)
        control, faulty = stored(pg["schema"], "control"), stored(pg["schema"], "faulty")
        assert faulty == control
        assert control[CHECKPOINTS] == 1 and control[WRITES] == 3
        assert control[THREADS][0][0] == 1
        assert terminate(pg["app"]) >= 1
        got = await h.get_tuple(make_config("faulty"))
        assert got is not None and got.checkpoint["id"] == cp["id"]
        assert sorted(v for _, _, v in got.pending_writes) == ["w1", "w2", "w3"]


@pytest.mark.parametrize("kind", KINDS)
async def test_single_connection_loss_is_typed(pg: dict[str, Any], kind: str) -> None:
    """Async parity of test_unrecoverable_connection_loss_is_a_typed_error."""
    async with pg_saver(kind, pg, pool=False) as h:
        assert (await h.get_tuple(make_config("x"))) is None
        assert terminate(pg["app"]) == 1
        with pytest.raises(StorageUnavailableError, match="one connection") as info:
            await h.get_tuple(make_config("x"))
        assert _is_lost_connection(info.value)
        assert pg["schema"] in str(info.value)


@pytest.mark.parametrize("kind", KINDS)
async def test_cannot_connect_is_typed(pg: dict[str, Any], kind: str) -> None:
    """A single-connection saver whose server does not answer: typed, names the database."""
    url = make_conninfo(PG_URL, port=1, connect_timeout=2)
    with pytest.raises(StorageUnavailableError, match="cannot connect") as info:
        async with pg_saver(kind, pg, url=url, pool=False, setup=False):
            pass
    assert "port=1" in str(info.value) and pg["schema"] in str(info.value)


@pytest.mark.parametrize("kind", KINDS)
async def test_no_pooled_connection_in_time_is_typed(pg: dict[str, Any], kind: str) -> None:
    """A pool that cannot reach its server: after the pool's timeout, a typed error that
    names the database (not a bare PoolTimeout)."""
    url = make_conninfo(PG_URL, port=1, connect_timeout=2)
    async with pg_saver(kind, pg, url=url, setup=False, pool_kwargs={"timeout": 0.3}) as h:
        with pytest.raises(StorageUnavailableError, match="no pooled connection") as info:
            await h.get_tuple(make_config("x"))
    assert "port=1" in str(info.value) and pg["schema"] in str(info.value)
    assert isinstance(info.value.__cause__, psycopg.OperationalError)
