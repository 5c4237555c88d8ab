"""A graph run that can be killed (SIGKILL) at a chosen point: the subprocess side of the
crash-consistency tests (tests/test_crash.py).

The scenario is fixed and deterministic: a thread of our runtime with a `DeltaChannel`
message list (snapshot every 3 updates, so both snapshots and deltas are on disk), two
parallel nodes and a join that loops, run as two invocations (`PHASES`). Every node
execution is appended to `runs.txt`, and every saver call that returned is appended to
`acks.jsonl`, both with fsync *before* the run continues: whatever the log says was
acknowledged must survive the kill.

Kill points (`spec["kill"]`), counted from the moment they are armed:
- `{"at": "call", "method": "put", "n": 3, "when": "before" | "after"}`: at the n-th call
  of a saver method, before it runs or after it returned but before the acknowledgement;
- `{"at": "node", "n": 5}`: inside the n-th node execution (after it was recorded);
- `{"at": "txn", "n": 2, "stmt": 2}`: inside the n-th multi-statement transaction, just
  before its `stmt`-th statement (so statements 1..stmt-1 ran and the transaction is open).

Modes: `run` (setup + the phases), `copy` / `prune` (the phases, then copy_thread / prune
with the kill point armed), `migrate` (setup() upgrading an older schema), and `census`
(no kill; prints how many of each point the scenario passes, so tests can enumerate them).

Run by hand: `python -m tests.crash_worker '<json spec>'`; the tests fork it from a
preloaded server instead (no interpreter start per kill point).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

from checkpointer.channels import DeltaChannel
from checkpointer.graph import END, START, CompiledStateGraph, StateGraph

ROUNDS_PER_PHASE = 2
PHASES: list[dict[str, Any]] = [{"messages": ["hello"], "n": 0}, {"messages": ["again"]}]
"""The inputs of the scenario's invocations, in order."""
NODE_KEYS = [f"{node}:{n}" for n in range(4) for node in ("left", "right", "join")]
"""Every task the full scenario runs exactly once without a crash."""


def extend(state: list[str], writes: list[list[str]]) -> list[str]:
    """Batched, batching-invariant reducer of the delta message list."""
    return [*state, *(item for write in writes for item in write)]


class State(TypedDict):
    messages: Annotated[list[str], DeltaChannel(extend, snapshot_frequency=3)]
    n: int


def _append_synced(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")
        fh.flush()
        os.fsync(fh.fileno())


class Hooks:
    """Where the scenario reports to: execution log, acknowledgements, kill points."""

    def __init__(self, side_dir: Path | None, kill: dict[str, Any] | None = None) -> None:
        self.side_dir = side_dir
        self.kill = kill
        self.armed = False
        self.counts: Counter[str] = Counter()
        self.txn_sizes: list[int] = []
        self.txn_base = 0
        self._lock = threading.Lock()

    def arm(self) -> None:
        """Start counting kill points (transactions are numbered from here)."""
        with self._lock:
            self.armed = True
            self.txn_base = len(self.txn_sizes)

    def _due(self, key: str) -> bool:
        """Count one passage of `key` (when armed); True when it is the kill point."""
        with self._lock:
            if not self.armed:
                return False
            self.counts[key] += 1
            count = self.counts[key]
        kill = self.kill
        if kill is None:
            return False
        if kill["at"] == "call":
            wanted = f"call:{kill['method']}:{kill['when']}"
        elif kill["at"] == "node":
            wanted = "node"
        else:
            return False
        return key == wanted and count == kill["n"]

    def die_if(self, key: str) -> None:
        if self._due(key):
            os.kill(os.getpid(), signal.SIGKILL)

    def node_ran(self, key: str) -> None:
        if self.side_dir is not None:
            _append_synced(self.side_dir / "runs.txt", key)
        self.die_if("node")

    def ack(self, record: dict[str, Any]) -> None:
        if self.side_dir is not None:
            _append_synced(self.side_dir / "acks.jsonl", json.dumps(record))


def build_graph(hooks: Hooks, checkpointer: Any) -> CompiledStateGraph:
    """left and right in parallel, then join (n += 1); loop until n is even again."""

    def left(state: dict[str, Any]) -> dict[str, Any]:
        hooks.node_ran(f"left:{state['n']}")
        return {"messages": [f"left:{state['n']}"]}

    def right(state: dict[str, Any]) -> dict[str, Any]:
        hooks.node_ran(f"right:{state['n']}")
        return {"messages": [f"right:{state['n']}"]}

    def join(state: dict[str, Any]) -> dict[str, Any]:
        hooks.node_ran(f"join:{state['n']}")
        return {"n": state["n"] + 1, "messages": [f"join:{state['n']}"]}

    def again(state: dict[str, Any]) -> list[str] | str:
        return END if state["n"] % ROUNDS_PER_PHASE == 0 else ["left", "right"]

    builder = StateGraph(State)
    builder.add_node("left", left)
    builder.add_node("right", right)
    builder.add_node("join", join)
    builder.add_edge(START, "left")
    builder.add_edge(START, "right")
    builder.add_edge(["left", "right"], "join")
    builder.add_conditional_edges("join", again, ["left", "right", END])
    return builder.compile(checkpointer=checkpointer)


def thread_config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def run_phases(graph: CompiledStateGraph, thread_id: str, hooks: Hooks | None = None) -> None:
    config = thread_config(thread_id)
    for i, phase in enumerate(PHASES):
        graph.invoke(phase, config)
        if hooks is not None:
            hooks.ack({"op": "phase", "phase": i})


# ------------------------------------------------------------------ instrumentation
def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=repr))


def instrument(saver: Any, hooks: Hooks) -> None:
    """Wrap the saver's methods (instance attributes: no saver code changes) to log
    acknowledgements and die at call kill points; wrap its executor for txn kill points."""

    def wrap(name: str, record: Callable[[tuple[Any, ...], Any], dict[str, Any] | None]) -> None:
        original = getattr(saver, name)

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            hooks.die_if(f"call:{name}:before")
            result = original(*args, **kwargs)
            hooks.die_if(f"call:{name}:after")
            entry = record(args, result)
            if entry is not None:
                hooks.ack(entry)
            return result

        setattr(saver, name, wrapped)

    wrap(
        "put_writes",
        lambda a, r: {
            "op": "put_writes",
            "config": a[0]["configurable"],
            "task_id": a[2],
            "writes": _jsonable([list(w) for w in a[1]]),
        },
    )
    wrap(
        "put",
        lambda a, r: {
            "op": "put",
            "config": r["configurable"],
            "parent": a[0]["configurable"].get("checkpoint_id"),
            "step": a[2].get("step"),
        },
    )
    wrap("copy_thread", lambda a, r: {"op": "copy_thread", "src": a[0], "dst": a[1]})
    wrap("prune", lambda a, r: {"op": "prune", "threads": list(a[0])})
    wrap("setup", lambda a, r: {"op": "setup"})

    executor = saver._executor
    run = executor.run

    def counted_run(op: Any) -> Any:
        if not op.txn:
            return run(op)
        with hooks._lock:
            index = len(hooks.txn_sizes)
            hooks.txn_sizes.append(0)
        kill = hooks.kill
        target = (
            kill is not None
            and kill["at"] == "txn"
            and hooks.armed
            and kill["n"] == index + 1 - hooks.txn_base
        )

        def plan() -> Iterator[Any]:
            inner = op.plan
            rows: Any = None
            try:
                stmt = next(inner)
                while True:
                    hooks.txn_sizes[index] += 1
                    if target and hooks.txn_sizes[index] == kill["stmt"]:
                        os.kill(os.getpid(), signal.SIGKILL)
                    rows = yield stmt
                    stmt = inner.send(rows)
            except StopIteration as stop:
                return stop.value
            finally:
                inner.close()

        return run(dataclasses.replace(op, plan=plan()))

    executor.run = counted_run


# ------------------------------------------------------------------------ backends
def open_saver(spec: dict[str, Any], *, setup: bool) -> Any:
    if spec["backend"] == "sqlite":
        from checkpointer.savers.sqlite import SqliteSaver

        saver: Any = SqliteSaver(spec["db"])
    else:
        from checkpointer.savers.postgres import PostgresSaver

        saver = PostgresSaver(spec["url"], schema=spec["schema"], min_size=1, max_size=4)
    if setup:
        saver.setup()
    return saver


def run_scenario(spec: dict[str, Any], hooks: Hooks) -> dict[str, Any]:
    """Run the scenario of `spec` with `hooks`; returns what was counted after arming."""
    mode = spec["mode"]
    thread_id = spec["thread"]
    if mode not in ("run", "census", "migrate", "copy", "prune"):
        raise ValueError(f"unknown mode {mode!r}")
    saver = open_saver(spec, setup=False)
    try:
        instrument(saver, hooks)
        if mode in ("run", "census", "migrate"):
            hooks.arm()
        saver.setup()
        graph = build_graph(hooks, saver)
        if mode in ("run", "census"):
            run_phases(graph, thread_id, hooks)
        elif mode in ("copy", "prune"):
            run_phases(graph, thread_id, hooks)
            hooks.arm()
            if mode == "copy":
                saver.copy_thread(thread_id, spec["copy_to"])
            else:
                saver.prune([thread_id], strategy="keep_latest")
    finally:
        saver.close()
    return {"counts": dict(hooks.counts), "txn_sizes": hooks.txn_sizes[hooks.txn_base :]}


def main(spec: dict[str, Any]) -> None:
    """Run the scenario of `spec`; the kill point, if reached, ends the process."""
    side = Path(spec["dir"]) if spec.get("dir") else None
    counted = run_scenario(spec, Hooks(side, spec.get("kill")))
    if spec["mode"] == "census":
        print(json.dumps(counted))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))


# ---------------------------------------------------------- single-writer workers
def build_gated_graph(gate: Path, checkpointer: Any, *, single_writer: bool) -> Any:
    """`work` records that it started (gate/started-<pid>) and waits for gate/release;
    `done` runs after it. Lets a test hold a run open while a second worker tries."""
    import time

    def work(state: dict[str, Any]) -> dict[str, Any]:
        _append_synced(gate / "runs.txt", f"work:{os.getpid()}")
        (gate / f"started-{os.getpid()}").touch()
        deadline = time.monotonic() + 60
        while not (gate / "release").exists():
            if time.monotonic() > deadline:
                raise TimeoutError("never released")
            time.sleep(0.01)
        return {"messages": ["work"]}

    def done(state: dict[str, Any]) -> dict[str, Any]:
        return {"messages": ["done"], "n": state.get("n", 0) + 1}

    builder = StateGraph(State)
    builder.add_node("work", work)
    builder.add_node("done", done)
    builder.add_edge(START, "work")
    builder.add_edge("work", "done")
    builder.add_edge("done", END)
    return builder.compile(checkpointer=checkpointer, single_writer=single_writer)


def gated_run(spec: dict[str, Any]) -> None:
    """Run (or resume, `spec["input"] is None`) the gated graph on the thread; write the
    outcome ("ran" or "busy") to gate/outcome-<pid>."""
    from checkpointer.errors import ThreadBusy

    gate = Path(spec["dir"])
    saver = open_saver(spec, setup=False)
    try:
        graph = build_gated_graph(gate, saver, single_writer=True)
        try:
            graph.invoke(spec.get("input"), thread_config(spec["thread"]))
            outcome = "ran"
        except ThreadBusy:
            outcome = "busy"
        (gate / f"outcome-{os.getpid()}").write_text(outcome)
    finally:
        saver.close()


def concurrent_runs(spec: dict[str, Any]) -> None:
    """Run the scenario on `spec["threads"]` graph threads at once (one OS thread each) in
    this process, on one saver; write any errors to dir/errors-<pid>.txt."""
    from concurrent.futures import ThreadPoolExecutor

    side = Path(spec["dir"])
    saver = open_saver(spec, setup=False)
    errors: list[str] = []
    try:
        graph = build_graph(Hooks(None), saver)

        def one(thread_id: str) -> None:
            try:
                run_phases(graph, thread_id)
            except Exception as exc:
                errors.append(f"{thread_id}: {type(exc).__module__}.{type(exc).__name__}: {exc}")

        with ThreadPoolExecutor(len(spec["threads"])) as pool:
            list(pool.map(one, spec["threads"]))
    finally:
        saver.close()
    (side / f"errors-{os.getpid()}.txt").write_text("\n".join(errors))


PRELOAD = [
    "tests.crash_worker",
    "checkpointer.savers.sqlite",
    "checkpointer.savers.postgres",
    "psycopg_pool",
    "alembic.command",
    "alembic.config",
    "alembic.runtime.migration",
]
"""Imported once by the fork server, so a forked worker starts in milliseconds."""


def forkserver_context() -> Any:
    """The multiprocessing context the tests start workers from: processes forked from a
    single-threaded server that has already imported everything (no interpreter start per
    kill point, and no fork of a multi-threaded pytest process)."""
    import multiprocessing

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx
