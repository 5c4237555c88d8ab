"""Crash consistency: a graph run killed with SIGKILL at many points loses nothing.

A worker process (tests/crash_worker.py) runs a thread of our runtime (a DeltaChannel
message list, parallel nodes, a loop, two invocations) and kills itself at one chosen
point: at the n-th saver call (before it, or after it returned but before the run logged
the acknowledgement), inside the n-th node execution, or inside a multi-statement
transaction (setup / migration, put, put_writes, copy_thread, prune). After each kill:

1. the database opens and `setup()` completes (even after a kill inside setup);
2. every write the worker logged as acknowledged (fsync'd before it continued) is there;
3. every checkpoint's parent exists and every checkpoint's state rebuilds (delta history
   intact) and equals the state an uncrashed run had at that step;
4. resuming (`invoke(None, config)`, then any invocation that never started) finishes the
   run with the uncrashed run's final state, and no task whose writes were stored before
   the resume ran twice.

By default a handful of points per backend run (chosen from a census of the scenario, so
they stay meaningful when the saver's statements change). `CHECKPOINTER_CRASH_POINTS=all`
runs every point the census finds (several hundred; minutes).
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from checkpointer.errors import SchemaVersionError
from checkpointer.graph import CompiledStateGraph
from checkpointer.savers.memory import InMemorySaver
from checkpointer.savers.sql.migration import render_upgrade_sql, split_statements
from checkpointer.savers.sql.schema import KNOWN_REVISIONS
from checkpointer.types import make_config
from tests import crash_worker as cw
from tests.conftest import PG_URL, drop_schema, require_postgres

ALL = os.environ.get("CHECKPOINTER_CRASH_POINTS", "").lower() == "all"
EXTRA_PHASE: dict[str, Any] = {"messages": ["more"]}
"""Run after recovery: the thread keeps working (and the reference covers it)."""
PREVIOUS_REVISION = KNOWN_REVISIONS[-2] if len(KNOWN_REVISIONS) > 1 else None

_ctx = cw.forkserver_context()


@dataclass(frozen=True)
class Point:
    mode: str
    kill: dict[str, Any]

    @property
    def label(self) -> str:
        k = self.kill
        if k["at"] == "call":
            return f"{self.mode}:{k['method']}#{k['n']}:{k['when']}"
        if k["at"] == "node":
            return f"{self.mode}:node#{k['n']}"
        return f"{self.mode}:txn#{k['n']}/stmt{k['stmt']}"


# ------------------------------------------------------------------ reference run
@dataclass
class Reference:
    by_step: dict[int, dict[str, Any]]
    final: dict[str, Any]
    after_phases: dict[str, Any]


_reference: Reference | None = None


def reference() -> Reference:
    """The scenario without crashes, in memory: the state at every step."""
    global _reference
    if _reference is None:
        graph = cw.build_graph(cw.Hooks(None), InMemorySaver())
        config = cw.thread_config("reference")
        cw.run_phases(graph, "reference")
        after_phases = graph.get_state(config).values
        graph.invoke(EXTRA_PHASE, config)
        history = list(graph.get_state_history(config))
        by_step = {s.metadata["step"]: s.values for s in history if s.metadata}
        assert len(by_step) == len(history)
        _reference = Reference(by_step, history[0].values, after_phases)
    return _reference


# ----------------------------------------------------------------------- workers
def run_worker(spec: dict[str, Any], timeout: float = 60) -> int | None:
    """Run the worker in a process forked from a preloaded server; its exit code."""
    process = _ctx.Process(target=cw.main, args=(spec,), daemon=True)
    process.start()
    process.join(timeout)
    if process.is_alive():
        process.kill()
        process.join()
        pytest.fail(f"crash worker hung: {spec}")
    return process.exitcode


class Backend:
    """One database per kill point (a SQLite file, or a PostgreSQL schema)."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.schemas: list[str] = []
        self.specs: dict[str, dict[str, Any]] = {}

    def fresh_spec(self, name: str) -> dict[str, Any]:
        """The database named `name` (created on first use; the same one after that)."""
        if name in self.specs:
            return dict(self.specs[name])
        side = self.tmp_path / name
        side.mkdir(parents=True, exist_ok=True)
        spec: dict[str, Any] = {
            "backend": self.kind,
            "dir": str(side),
            "thread": "crash-thread",
            "copy_to": "crash-copy",
        }
        if self.kind == "sqlite":
            spec["db"] = str(side / "db.sqlite")
        else:
            schema = f"cp_crash_{uuid.uuid4().hex[:10]}"
            self.schemas.append(schema)
            spec.update(url=PG_URL, schema=schema)
        self.specs[name] = spec
        return dict(spec)

    def cleanup(self) -> None:
        for schema in self.schemas:
            drop_schema(schema)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    if request.param == "postgres":
        require_postgres()
    b = Backend(request.param, tmp_path)
    try:
        yield b
    finally:
        b.cleanup()


# -------------------------------------------------------- old-schema databases
def _columns(conn: Any, kind: str, schema: str | None, table: str) -> list[str]:
    if kind == "sqlite":
        return [r[1] for r in conn.execute(f"PRAGMA {schema or 'main'}.table_info({table})")]
    rows = conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
        "AND table_name = %s ORDER BY ordinal_position",
        (schema, table),
    ).fetchall()
    return [r[0] for r in rows]


def prepare_old_database(backend: Backend, spec: dict[str, Any]) -> None:
    """A database at the previous schema revision holding the scenario's thread: written
    with the current code elsewhere, then its core rows copied over."""
    assert PREVIOUS_REVISION is not None
    source = backend.fresh_spec(Path(spec["dir"]).name + "-source")
    saver = cw.open_saver(source, setup=True)
    try:
        cw.run_phases(cw.build_graph(cw.Hooks(None), saver), spec["thread"])
    finally:
        saver.close()
    tables = ("checkpointer_checkpoints", "checkpointer_blobs", "checkpointer_writes")
    if backend.kind == "sqlite":
        script = render_upgrade_sql("sqlite", None, None, PREVIOUS_REVISION)
        conn = sqlite3.connect(spec["db"], isolation_level=None)
        try:
            for stmt in split_statements(script):
                conn.execute(stmt)
            conn.execute("ATTACH DATABASE ? AS src", (source["db"],))
            for table in tables:
                old = _columns(conn, "sqlite", "main", table)
                cols = [c for c in _columns(conn, "sqlite", "src", table) if c in old]
                names = ", ".join(cols)
                conn.execute(f"INSERT INTO main.{table} ({names}) SELECT {names} FROM src.{table}")
            conn.execute("DETACH DATABASE src")
        finally:
            conn.close()
        return
    import psycopg

    schema = spec["schema"]
    script = render_upgrade_sql("postgresql", schema, None, PREVIOUS_REVISION)
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        for stmt in split_statements(script):
            conn.execute(stmt)  # type: ignore[arg-type]
        for table in tables:
            old = _columns(conn, "postgres", schema, table)
            cols = [c for c in _columns(conn, "postgres", source["schema"], table) if c in old]
            names = ", ".join(cols)
            conn.execute(
                f'INSERT INTO "{schema}".{table} ({names}) '  # type: ignore[arg-type]
                f'SELECT {names} FROM "{source["schema"]}".{table}'
            )


# ------------------------------------------------------------------- kill points
_census: dict[tuple[str, str], dict[str, Any]] = {}


def census(backend: Backend, mode: str) -> dict[str, Any]:
    """How many calls, node runs and transactions (with their sizes) a mode passes
    (measured once per backend and mode; `run` and `migrate` need a database of their own,
    `copy` and `prune` share one)."""
    key = (backend.kind, mode)
    if key not in _census:
        name = "census-shared" if mode in ("copy", "prune") else f"census-{mode}"
        spec = backend.fresh_spec(name)
        if mode == "migrate":
            prepare_old_database(backend, spec)
        spec = {**spec, "mode": mode, "thread": f"census-{mode}", "copy_to": f"census-{mode}-to"}
        _census[key] = cw.run_scenario(spec, cw.Hooks(None))
    return _census[key]


def _txn_points(mode: str, sizes: list[int]) -> list[Point]:
    return [
        Point(mode, {"at": "txn", "n": i + 1, "stmt": k})
        for i, size in enumerate(sizes)
        for k in range(2, size + 1)
    ]


def all_points(backend: Backend) -> list[Point]:
    modes = ["run", "copy", "prune"] + (["migrate"] if PREVIOUS_REVISION else [])
    points: list[Point] = []
    for mode in modes:
        found = census(backend, mode)
        for key, count in found["counts"].items():
            if key.startswith("call:"):
                _, method, when = key.split(":")
                if method == "setup" and when == "before":
                    continue  # nothing has happened yet
                points += [
                    Point(mode, {"at": "call", "method": method, "n": n, "when": when})
                    for n in range(1, count + 1)
                ]
            elif key == "node":
                points += [Point(mode, {"at": "node", "n": n}) for n in range(1, count + 1)]
        points += _txn_points(mode, found["txn_sizes"])
    return points


def default_points(backend: Backend) -> list[Point]:
    """A representative handful, each one reached (asserted), chosen from the census."""
    run = census(backend, "run")
    sizes = run["txn_sizes"]
    points = [
        Point("run", {"at": "txn", "n": 1, "stmt": max(2, sizes[0] // 2)}),  # inside setup
        Point("run", {"at": "call", "method": "put_writes", "n": 2, "when": "before"}),
        Point("run", {"at": "call", "method": "put_writes", "n": 6, "when": "after"}),
        Point("run", {"at": "call", "method": "put", "n": 3, "when": "after"}),
        Point("run", {"at": "node", "n": 8}),
    ]
    # Inside the transaction of a put or put_writes, when the backend uses one.
    multi = [i for i, size in enumerate(sizes[1:], start=2) if size >= 2]
    if multi:
        n = multi[len(multi) // 2]
        points.append(Point("run", {"at": "txn", "n": n, "stmt": sizes[n - 1]}))
    for mode, method in (("copy", "copy_thread"), ("prune", "prune")):
        found = census(backend, mode)
        txns = [i for i, size in enumerate(found["txn_sizes"], start=1) if size >= 2]
        if txns:
            n = txns[0]
            stmt = max(2, found["txn_sizes"][n - 1] - 1)
            points.append(Point(mode, {"at": "txn", "n": n, "stmt": stmt}))
        else:  # one atomic statement: the interesting window is after commit, before ack
            points.append(Point(mode, {"at": "call", "method": method, "n": 1, "when": "after"}))
    if PREVIOUS_REVISION:
        found = census(backend, "migrate")
        size = found["txn_sizes"][0]
        points.append(Point("migrate", {"at": "txn", "n": 1, "stmt": max(2, size // 2)}))
    return points


# -------------------------------------------------------------------- verification
def read_acks(side: Path) -> list[dict[str, Any]]:
    path = side / "acks.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def read_runs(side: Path) -> Counter[str]:
    path = side / "runs.txt"
    return Counter(path.read_text().split()) if path.exists() else Counter()


def node_keys_in(value: Any) -> set[str]:
    if isinstance(value, list):
        return {v for v in value if isinstance(v, str) and v in cw.NODE_KEYS}
    return set()


class Checker:
    def __init__(self, spec: dict[str, Any], point: Point) -> None:
        self.spec = spec
        self.point = point
        self.side = Path(spec["dir"])
        self.ref = reference()

    def open(self) -> tuple[Any, CompiledStateGraph]:
        if self.spec["backend"] == "sqlite":
            conn = sqlite3.connect(self.spec["db"])
            try:
                assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
            finally:
                conn.close()
        saver = cw.open_saver(self.spec, setup=True)  # completes an interrupted setup
        return saver, cw.build_graph(cw.Hooks(self.side), saver)

    def check_acks(self, saver: Any) -> None:
        pruned = self.point.mode == "prune"
        for ack in read_acks(self.side):
            if ack["op"] not in ("put", "put_writes"):
                continue
            config = make_config(**ack["config"])
            tup = saver.get_tuple(config)
            if pruned and tup is None:
                continue  # prune may have removed it (and the state checks still hold)
            assert tup is not None, f"{self.point.label}: acknowledged {ack} is missing"
            if ack["op"] == "put":
                parent = (
                    tup.parent_config["configurable"]["checkpoint_id"]
                    if (tup.parent_config)
                    else None
                )
                assert parent == ack["parent"]
            else:
                stored = {(w[0], w[1], json.dumps(w[2])) for w in tup.pending_writes or []}
                for channel, value in ack["writes"]:
                    assert (ack["task_id"], channel, json.dumps(value)) in stored, (
                        f"{self.point.label}: acknowledged write {channel}={value} of task "
                        f"{ack['task_id']} is missing"
                    )

    def check_thread(self, saver: Any, graph: CompiledStateGraph, thread_id: str) -> set[str]:
        """Every checkpoint rebuilds to the reference state of its step; returns the node
        keys whose writes are stored (applied or pending).

        After a prune the oldest kept checkpoints may point at deleted parents (by design);
        what they rebuild to must still be exact."""
        config = cw.thread_config(thread_id)
        tuples = list(saver.list(config))
        ids = {t.config["configurable"]["checkpoint_id"] for t in tuples}
        steps = [t.metadata["step"] for t in tuples]
        assert len(steps) == len(set(steps)), f"{self.point.label}: a step was saved twice"
        pruned = self.point.mode == "prune" and len(tuples) < self.saved_checkpoints()
        stored: set[str] = set()
        for tup in tuples:
            if tup.parent_config is not None and not pruned:
                parent = tup.parent_config["configurable"]["checkpoint_id"]
                assert parent in ids, f"{self.point.label}: parent {parent} is missing"
            state = graph.get_state(tup.config)
            assert state.values == self.ref.by_step[tup.metadata["step"]], (
                f"{self.point.label}: checkpoint at step {tup.metadata['step']} rebuilds to "
                f"{state.values}"
            )
            stored |= node_keys_in(state.values.get("messages"))
            for _, channel, value in tup.pending_writes or []:
                if channel == "messages":
                    stored |= node_keys_in(value)
        history = list(graph.get_state_history(config))
        assert [h.values for h in history] == [graph.get_state(t.config).values for t in tuples]
        return stored

    def saved_checkpoints(self) -> int:
        return sum(a["op"] == "put" for a in read_acks(self.side))

    def finish(self, graph: CompiledStateGraph, thread_id: str) -> None:
        """Resume: complete the interrupted invocation, then run those that never began."""
        config = cw.thread_config(thread_id)
        graph.invoke(None, config)
        for phase in cw.PHASES:
            messages = graph.get_state(config).values.get("messages", [])
            if phase["messages"][0] not in messages:
                graph.invoke(phase, config)

    def verify(self) -> None:
        thread_id = self.spec["thread"]
        saver, graph = self.open()
        try:
            self.check_acks(saver)
            finished = self.check_thread(saver, graph, thread_id)
            acked = {
                key
                for ack in read_acks(self.side)
                if ack["op"] == "put_writes"
                for channel, value in ack["writes"]
                if channel == "messages"
                for key in node_keys_in(value)
            }
            if self.point.mode != "prune":
                assert acked <= finished
            if self.point.mode == "copy":
                self.check_copy(saver, graph)
            if self.point.mode == "prune":
                saver.prune([thread_id])  # a prune killed midway can be run again
            self.finish(graph, thread_id)
            config = cw.thread_config(thread_id)
            assert graph.get_state(config).values == self.ref.after_phases
            runs = read_runs(self.side)
            if self.point.mode == "migrate":
                assert not runs  # the thread was written before the migration: nothing reran
            else:
                assert set(runs) == set(cw.NODE_KEYS), f"{self.point.label}: runs {runs}"
                twice = {key for key in finished if runs[key] != 1}
                assert not twice, f"{self.point.label}: finished tasks ran again: {twice}"
                assert sum(runs.values()) - len(cw.NODE_KEYS) <= 2, runs
            self.check_acks(saver)
            self.check_thread(saver, graph, thread_id)
            graph.invoke(EXTRA_PHASE, config)  # and the thread keeps working
            assert graph.get_state(config).values == self.ref.final
            self.check_thread(saver, graph, thread_id)
        finally:
            saver.close()

    def check_copy(self, saver: Any, graph: CompiledStateGraph) -> None:
        """A killed copy left nothing, or everything; running it again completes it."""
        src, dst = self.spec["thread"], self.spec["copy_to"]
        ids_of = [t.config["configurable"]["checkpoint_id"] for t in saver.list(make_config(src))]
        copied = [t.config["configurable"]["checkpoint_id"] for t in saver.list(make_config(dst))]
        assert copied in ([], ids_of), f"{self.point.label}: partial copy {len(copied)}"
        saver.copy_thread(src, dst)
        self.check_thread(saver, graph, dst)
        assert graph.get_state(cw.thread_config(dst)).values == self.ref.after_phases


def crash_and_verify(backend: Backend, point: Point) -> None:
    spec = backend.fresh_spec(point.label.replace(":", "_").replace("#", "").replace("/", "_"))
    if point.mode == "migrate":
        prepare_old_database(backend, spec)
    code = run_worker({**spec, "mode": point.mode, "kill": point.kill})
    assert code == -signal.SIGKILL, f"{point.label}: worker exited with {code}, not killed"
    Checker(spec, point).verify()


# -------------------------------------------------------------------------- tests
def test_reference_scenario_is_deterministic() -> None:
    """What every crash is compared against: each task once, delta snapshots included."""
    ref = reference()
    assert ref.after_phases["n"] == 4
    assert ref.after_phases["messages"][:4] == ["hello", "left:0", "right:0", "join:0"]
    assert [m for m in ref.after_phases["messages"] if m in cw.NODE_KEYS] == sorted(
        cw.NODE_KEYS,
        key=lambda k: (int(k.split(":")[1]), ["left", "right", "join"].index(k.split(":")[0])),
    )


def test_crash_points(backend: Backend) -> None:
    points = all_points(backend) if ALL else default_points(backend)
    survived = []
    for point in points:
        crash_and_verify(backend, point)
        survived.append(point.label)
    print(f"\n{backend.kind}: survived {len(survived)} kill points: {', '.join(survived)}")


def test_worker_runs_to_completion_without_a_kill_point(backend: Backend) -> None:
    """The harness itself: with no kill the worker exits 0 and acknowledges everything."""
    spec = backend.fresh_spec("no-kill")
    assert run_worker({**spec, "mode": "run", "kill": None}) == 0
    acks = read_acks(Path(spec["dir"]))
    assert read_runs(Path(spec["dir"])) == Counter(cw.NODE_KEYS)
    saver = cw.open_saver(spec, setup=False)
    try:
        stored = list(saver.list(cw.thread_config(spec["thread"])))
    finally:
        saver.close()
    assert sum(a["op"] == "put" for a in acks) == len(stored) == 10
    assert sum(a["op"] == "put_writes" for a in acks) == 13


def test_setup_killed_at_its_first_statement_is_completed_by_the_next(backend: Backend) -> None:
    spec = backend.fresh_spec("setup-kill")
    code = run_worker({**spec, "mode": "run", "kill": {"at": "txn", "n": 1, "stmt": 2}})
    assert code == -signal.SIGKILL
    saver = cw.open_saver(spec, setup=False)
    try:
        with pytest.raises(SchemaVersionError):  # nothing half-made passes for a schema
            saver.get_tuple(cw.thread_config(spec["thread"]))
        saver.setup()
        assert saver.get_tuple(cw.thread_config(spec["thread"])) is None
    finally:
        saver.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_prune_keeps_only_checkpoints_that_rebuild(kind: str, tmp_path: Path) -> None:
    """Whatever prune keeps must still read back as it did before the prune."""
    if kind == "memory":
        saver: Any = InMemorySaver()
        schema = None
    else:
        if kind == "postgres":
            require_postgres()
        backend = Backend(kind, tmp_path)
        spec = backend.fresh_spec("prune")
        schema = spec.get("schema")
        saver = cw.open_saver(spec, setup=True)
    try:
        graph = cw.build_graph(cw.Hooks(None), saver)
        cw.run_phases(graph, "t")
        before = {
            t.config["configurable"]["checkpoint_id"]: graph.get_state(t.config).values
            for t in saver.list(cw.thread_config("t"))
        }
        saver.prune(["t"])
        after = {
            t.config["configurable"]["checkpoint_id"]: graph.get_state(t.config).values
            for t in saver.list(cw.thread_config("t"))
        }
        assert 1 <= len(after) <= len(before)
        assert after == {cid: before[cid] for cid in after}
    finally:
        if kind != "memory":
            saver.close()
        if schema is not None:
            drop_schema(schema)
