"""Workload 3: the chat thread on our own runtime (`checkpointer.graph` + our SqliteSaver)
against LangGraph with the reference SqliteSaver.

Our runtime rebuilds `get_state_history` in one forward pass; LangGraph hydrates each
checkpoint separately (a delta-history walk per checkpoint, quadratic without snapshots).
The reference side is exactly workload 1's sqlite reference (same graph, same saver): when
that ran in this process its samples are reused, so only our side is run here.
"""

from __future__ import annotations

import gc
import operator
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, TypedDict

from benchmarks.backends import SIDES, SqliteBackend, sqlite_bytes
from benchmarks.chat import digest
from benchmarks.graphs import (
    NEVER,
    add_batches,
    chat_builder,
    first_input,
    make_messages,
    run_config,
)
from benchmarks.results import Row, runtime_target

# workload-1 metric -> workload-3 metric, for the reused reference samples
REUSED = {
    "wall": "runtime_wall",
    "get_state": "runtime_get_state",
    "history": "runtime_history",
    "bytes": "runtime_bytes",
}


def runtime_available() -> str | None:
    """None when `checkpointer.graph` imports, else why not."""
    try:
        import checkpointer.graph  # noqa: F401
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@dataclass
class RuntimeOptions:
    repeat: int = 3
    op_budget: float = 8.0
    large_n: int = 1000
    large_build_repeat: int = 1
    sqlite_synchronous: str | None = None
    reuse: dict[tuple[str, int], dict[str, list[float]]] = field(default_factory=dict)
    # digests of the reference's get_state / history from workload 1, for the checks
    digests: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    log: Callable[[str], None] = print


def _our_schema(variant: str) -> Any:
    """The workload's state schema with our channels (functional TypedDict: built at run
    time, so the import of our runtime stays optional)."""
    from checkpointer.channels import DeltaChannel

    if variant == "classic":
        messages: Any = Annotated[list, operator.add]
    else:
        frequency = 100 if variant == "delta100" else NEVER
        messages = Annotated[list, DeltaChannel(add_batches, snapshot_frequency=frequency)]
    return TypedDict(f"Our{variant.title()}Chat", {"messages": messages, "turn": int, "mood": str})


def our_graph(variant: str, steps: list[list[dict[str, Any]]], saver: Any) -> Any:
    """The same graph as `benchmarks.graphs.chat_builder`, on our runtime."""
    from checkpointer.graph import END, START, StateGraph

    n = len(steps)

    def chat(state: dict[str, Any]) -> dict[str, Any]:
        turn = state["turn"]
        return {"messages": steps[turn], "turn": turn + 1, "mood": "fine" if turn % 2 else "ok"}

    def route(state: dict[str, Any]) -> str:
        return END if state["turn"] >= n else "chat"

    builder = StateGraph(_our_schema(variant))
    builder.add_node("chat", chat)
    builder.add_edge(START, "chat")
    builder.add_conditional_edges("chat", route, ["chat", END])
    return builder.compile(checkpointer=saver)


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    gc.collect()
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


def run_runtime_cell(variant: str, n: int, opts: RuntimeOptions) -> tuple[list[Row], list[str]]:
    from checkpointer.savers.sqlite import SqliteSaver

    steps = make_messages(n)
    backend = SqliteBackend()
    samples: dict[tuple[str, str], list[float]] = {}
    spent: dict[tuple[str, str], float] = {}
    notes: list[str] = []
    closers: list[Callable[[], None]] = []
    reused = opts.reuse.get((variant, n), {})
    sides = SIDES
    if all(reused.get(metric) for metric in REUSED):
        sides = ("ours",)
        for metric, target_metric in REUSED.items():
            samples[(target_metric, "ref")] = list(reused[metric])
        notes.append(
            f"runtime/sqlite/{variant}/N={n}: reference samples are workload 1's "
            "(LangGraph + reference SqliteSaver, same graph, same run)"
        )

    def add(metric: str, side: str, value: float, seconds: float) -> None:
        samples.setdefault((metric, side), []).append(value)
        spent[(metric, side)] = spent.get((metric, side), 0.0) + seconds

    def wanted(metric: str, side: str, rep: int) -> bool:
        return rep == 0 or spent.get((metric, side), 0.0) < opts.op_budget

    def order(rep: int) -> tuple[str, ...]:
        return sides if rep % 2 == 0 else sides[::-1]

    graphs: dict[str, Any] = {}
    cfg = run_config(f"runtime-{variant}", n)
    builds = opts.repeat if n < opts.large_n else min(opts.repeat, opts.large_build_repeat)
    try:
        for rep in range(builds):
            for side in order(rep):
                if not wanted("runtime_wall", side, rep):
                    continue
                inp = first_input(n)
                if side == "ours":
                    path = os.path.join(backend.directory, f"runtime-ours-{rep}.db")
                    kwargs = {}
                    if opts.sqlite_synchronous:
                        kwargs["synchronous"] = opts.sqlite_synchronous
                    saver = SqliteSaver(path, **kwargs)
                    saver.setup()
                    closers.append(saver.close)
                    graph = our_graph(variant, steps, saver)
                    elapsed, _ = _timed(lambda g=graph, i=inp: g.invoke(i, cfg))
                    size = sqlite_bytes(path)
                else:
                    store = backend.open("ref", None)
                    closers.append(store.shutdown)
                    graph = chat_builder(variant, steps).compile(checkpointer=store.checkpointer)
                    elapsed, _ = _timed(lambda g=graph, i=inp: g.invoke(i, cfg, durability="sync"))
                    size = store.bytes_on_disk() or 0
                samples.setdefault(("runtime_bytes", side), []).append(size / 2**20)
                graphs[side] = graph
                add("runtime_wall", side, elapsed, elapsed)
        first: dict[str, Any] = {}
        for metric, unit_scale, call in (
            ("runtime_get_state", 1000.0, lambda g: g.get_state(cfg)),
            ("runtime_history", 1.0, lambda g: list(g.get_state_history(cfg))),
        ):
            for rep in range(opts.repeat):
                for side in order(rep):
                    if wanted(metric, side, rep):
                        elapsed, value = _timed(lambda s=side, c=call: c(graphs[s]))
                        add(metric, side, elapsed * unit_scale, elapsed)
                        first.setdefault(f"{metric}-{side}", value)
        ref_state = first.get("runtime_get_state-ref")
        ref_history = first.get("runtime_history-ref")
        expected = {
            "get_state": digest(ref_state.values) if ref_state is not None else None,
            "history": [digest(x.values) for x in ref_history] if ref_history else None,
        }
        for key, value in opts.digests.get((variant, n), {}).items():
            expected[key] = expected[key] or value
        notes.extend(_check(variant, n, first, expected))
    finally:
        for close in reversed(closers):
            close()
        backend.cleanup()

    rows = []
    for metric, unit in (
        ("runtime_wall", "s"),
        ("runtime_get_state", "ms"),
        ("runtime_history", "s"),
        ("runtime_bytes", "MB"),
    ):
        ours = samples.get((metric, "ours"), [])
        ref = samples.get((metric, "ref"), [])
        if ours or ref:
            target = runtime_target(variant, n, metric, opts.large_n)
            rows.append(Row("runtime", "sqlite", variant, n, metric, unit, ours, ref, target))
    return rows, notes


def _check(variant: str, n: int, first: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """Our runtime must reach LangGraph's states. LangGraph writes one more checkpoint (an
    empty step -1 before the input is applied), so histories are compared newest first over
    our length, and a count difference of exactly that one is reported, not failed."""
    where = f"runtime/sqlite/{variant}/N={n}"
    notes = []
    state = first.get("runtime_get_state-ours")
    want = expected.get("get_state")
    if state is not None and want is not None and digest(state.values) != want:
        notes.append(f"CHECK FAILED {where}: get_state differs from LangGraph's")
    history = first.get("runtime_history-ours")
    ref = expected.get("history")
    if history is not None and ref is not None:
        ours = [digest(x.values) for x in history]
        if ours != ref[: len(ours)]:
            notes.append(f"CHECK FAILED {where}: history states differ from LangGraph's")
        elif len(ref) - len(ours) == 1:
            notes.append(
                f"{where}: our runtime writes one checkpoint fewer than LangGraph (LangGraph's "
                "oldest, step -1 with empty values and next=__start__, has no counterpart: ours "
                "applies the input in its step -1 checkpoint, so its steps are numbered one "
                "lower); all other states match"
            )
        elif len(ref) != len(ours):
            notes.append(
                f"CHECK FAILED {where}: history has {len(ours)} snapshots, LangGraph {len(ref)}"
            )
    return notes
