"""Workload 1: a chat thread through real LangGraph, ours against the reference saver.

Per cell (backend, variant, N) each side builds its thread into fresh storage (timed, with
put/put_writes time and statements), then the reads are measured alternating sides, so
drift on a noisy machine hits both. An operation stops being repeated for a side once its
samples have used up `op_budget` seconds (at least one sample always).
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import io
import os
import pstats
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.backends import Backend, Store
from benchmarks.floors import Floor, history_payloads, open_floor
from benchmarks.graphs import chat_builder, first_input, make_messages, run_config
from benchmarks.instrument import COUNTER, SQLITE_TRACING, CallStats, Counted, TimedSaver
from benchmarks.results import METRICS, Row, chat_target
from benchmarks.targets import target_for

MB = 1024 * 1024
FLOOR_NOTE = "reference column = the raw-driver floor, measured in the same cell"
DEEP_HISTORY_N = 1000
"""From this N on, LangGraph's history of a never-snapshotting thread takes many seconds."""


def digest(values: dict[str, Any]) -> tuple[Any, ...]:
    """What identifies a chat state cheaply: message count, last message id, the two keys
    (and any other key whole: the `wide` variant's)."""
    messages = values.get("messages") or []
    last = messages[-1].get("id") if messages and isinstance(messages[-1], dict) else None
    others = sorted((k, repr(v)) for k, v in values.items() if k not in _CHAT_KEYS)
    return (len(messages), last, values.get("turn"), values.get("mood"), *others)


_CHAT_KEYS = frozenset({"messages", "turn", "mood"})


@dataclass
class ChatOptions:
    repeat: int = 3
    # Rounds of the cheap reads (one call per side each, sides alternating), within
    # `op_budget` per metric: a single cold get_tuple varies more than a build of N puts.
    read_rounds: int = 9
    op_budget: float = 5.0
    large_n: int = 1000
    large_build_repeat: int = 1
    deep_history_backends: frozenset[str] = frozenset({"sqlite"})
    full_history: bool = False
    profile_dir: str | None = None
    # Raw-driver floors (benchmarks/floors.py), measured in the cell at the large N as one
    # more side, alternating with the savers (fsync cost drifts on a shared disk).
    floors: bool = False
    floor_dir: str = ""
    pg_url: str = ""
    log: Callable[[str], None] = print


@dataclass
class _Side:
    name: str
    store: Store
    cp: TimedSaver
    stats: CallStats
    graph: Any
    cfg: dict[str, Any]


@dataclass
class CellResult:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Kept for workload 3: the reference side's samples (LangGraph + reference saver).
    ref_samples: dict[str, list[float]] = field(default_factory=dict)
    ref_digests: dict[str, Any] = field(default_factory=dict)


def _timed(fn: Callable[[], Any]) -> tuple[float, Counted, Any]:
    gc.collect()
    with COUNTER.measure() as counted:
        start = time.perf_counter()
        result = fn()
        elapsed = time.perf_counter() - start
    return elapsed, counted, result


def _collect(agen: Any) -> Any:
    async def run() -> list[Any]:
        return [item async for item in agen]

    return run()


def _open_side(
    backend: Backend, side: str, loop: asyncio.AbstractEventLoop | None, variant: str, steps: Any
) -> _Side:
    store = backend.open(side, loop)
    stats = CallStats()
    cp = TimedSaver(store.checkpointer, stats)
    graph = chat_builder(variant, steps).compile(checkpointer=cp)
    return _Side(side, store, cp, stats, graph, run_config(f"chat-{variant}", len(steps)))


def _floor_put(
    floor: Floor, loop: asyncio.AbstractEventLoop | None, variant: str, steps: Any, n: int
) -> float:
    """ms of put + put_writes per step of the put floor (`floors.FloorSaver`), built and
    timed as the savers are, on a fresh store."""
    made = floor.put_store(loop)
    store = Store(made.saver, loop, False, lambda: None, made.close)
    stats = CallStats()
    cp = TimedSaver(made.saver, stats)
    graph = chat_builder(variant, steps).compile(checkpointer=cp)
    side = _Side("floor", store, cp, stats, graph, run_config(f"chat-{variant}", len(steps)))
    try:
        _, put_s, _ = _build(side, n)
    finally:
        store.shutdown()
    return put_s / n * 1000


def _build(side: _Side, n: int) -> tuple[float, float, Counted]:
    """Run the N-step thread; returns wall seconds, put+put_writes seconds, statements."""
    side.stats.reset()
    inp = first_input(n)
    graph, cfg = side.graph, side.cfg
    with SQLITE_TRACING.off():  # see SqliteTracing: SQLite statements are counted on reads
        elapsed, counted, _ = _timed(
            lambda: side.store.run(
                lambda: graph.invoke(inp, cfg, durability="sync"),
                lambda: graph.ainvoke(inp, cfg, durability="sync"),
            )
        )
    return elapsed, side.stats.put_s + side.stats.writes_s, counted


def _read_ops(side: _Side, head: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    """Each read, ready to call on this side (sync or on the store's loop)."""
    cp, graph, cfg, store = side.store.checkpointer, side.graph, side.cfg, side.store
    return {
        "get_state": lambda: store.run(lambda: graph.get_state(cfg), lambda: graph.aget_state(cfg)),
        "get_tuple": lambda: store.run(lambda: cp.get_tuple(cfg), lambda: cp.aget_tuple(cfg)),
        "list": lambda: store.run(lambda: list(cp.list(cfg)), lambda: _collect(cp.alist(cfg))),
        "delta": lambda: store.run(
            lambda: cp.get_delta_channel_history(config=head, channels=["messages"]),
            lambda: cp.aget_delta_channel_history(config=head, channels=["messages"]),
        ),
        "history": lambda: store.run(
            lambda: list(graph.get_state_history(cfg)),
            lambda: _collect(graph.aget_state_history(cfg)),
        ),
    }


def _order(sides: tuple[str, ...], rep: int) -> tuple[str, ...]:
    """Alternate which side goes first, so drift on a noisy machine hits all sides."""
    return sides if rep % 2 == 0 else sides[::-1]


def run_chat_cell(backend: Backend, variant: str, n: int, opts: ChatOptions) -> CellResult:
    """Measure one (backend, variant, N) cell on every side (the reference and each of
    our configurations of this storage)."""
    all_sides = backend.sides
    loop = asyncio.new_event_loop() if backend.is_async else None
    steps = make_messages(n)
    result = CellResult()
    floor: Floor | None = None
    if opts.floors and n >= opts.large_n:
        try:
            floor = open_floor(backend.name, opts.floor_dir, opts.pg_url)
        except Exception as exc:  # the savers' cell still runs; the floor verdicts say why not
            result.notes.append(
                f"FAILED floor/{backend.name}/{variant}/N={n}: {type(exc).__name__}: {exc}"
            )
    build_sides = (*all_sides, "floor") if floor is not None else all_sides
    samples: dict[tuple[str, str], list[float]] = {}
    spent: dict[tuple[str, str], float] = {}
    sides: dict[str, _Side] = {}

    def add(metric: str, side: str, value: float, seconds: float = 0.0) -> None:
        samples.setdefault((metric, side), []).append(value)
        spent[(metric, side)] = spent.get((metric, side), 0.0) + seconds

    def wanted(metric: str, side: str, rep: int) -> bool:
        return rep == 0 or spent.get((metric, side), 0.0) < opts.op_budget

    try:
        # Builds: a fresh store each time; the last build of each side is kept for reads.
        # A large-N build is one sample of N puts already, and costs tens of seconds.
        builds = opts.repeat if n < opts.large_n else min(opts.repeat, opts.large_build_repeat)
        for rep in range(builds):
            for name in _order(build_sides, rep):
                if name == "floor" and floor is not None:
                    add("put", "floor", _floor_put(floor, loop, variant, steps, n))
                    continue
                if not wanted("wall", name, rep):
                    continue
                if name in sides:
                    sides.pop(name).store.shutdown()
                side = _open_side(backend, name, loop, variant, steps)
                sides[name] = side
                wall, put_s, counted = _build(side, n)
                add("wall", name, wall, wall)
                add("put", name, put_s / n * 1000)
                if side.store.counts_statements and not backend.name.endswith("sqlite"):
                    add("stmts_step", name, counted.statements / n)
                size = side.store.bytes_on_disk()
                if size is not None:
                    add("bytes", name, size / MB)
        for side in sides.values():
            side.store.settle()
        heads = {
            name: s.store.run(
                lambda s=s: s.store.checkpointer.get_tuple(s.cfg),
                lambda s=s: s.store.checkpointer.aget_tuple(s.cfg),
            ).config
            for name, s in sides.items()
        }
        ops = {name: _read_ops(s, heads[name]) for name, s in sides.items()}
        read_sides = all_sides
        if floor is not None and variant == "delta_never":
            ops["floor"] = {"delta": floor.history_reader(history_payloads(n))}
            ops["floor"]["delta"]()  # warm, as the savers' first read warmed their caches
            read_sides = (*all_sides, "floor")
        cheap = ["get_state", "get_tuple", "list"]
        if variant != "classic":
            cheap.append("delta")
        first: dict[tuple[str, str], Any] = {}
        for rep in range(max(opts.repeat, opts.read_rounds)):
            for name in _order(read_sides, rep):
                for metric in cheap:
                    if metric not in ops[name] or not wanted(metric, name, rep):
                        continue
                    elapsed, counted, value = _timed(ops[name][metric])
                    unit_scale = 1.0 if METRICS[metric][1] == "s" else 1000.0
                    add(metric, name, elapsed * unit_scale, elapsed)
                    if name in sides and sides[name].store.counts_statements:
                        add(f"{metric}_stmts", name, counted.statements)
                    first.setdefault((metric, name), value)
        history_skip = (
            variant == "delta_never"
            and n >= DEEP_HISTORY_N
            and not opts.full_history
            and backend.name not in opts.deep_history_backends
        )
        if history_skip:
            result.notes.append(
                f"chat/{backend.name}/{variant}/N={n}: get_state_history not measured "
                "(quadratic replay, minutes per side; run with --full-history)"
            )
        else:
            for rep in range(opts.repeat):
                for name in _order(all_sides, rep):
                    if not wanted("history", name, rep):
                        continue
                    elapsed, counted, value = _timed(ops[name]["history"])
                    add("history", name, elapsed, elapsed)
                    if sides[name].store.counts_statements:
                        add("history_stmts", name, counted.statements)
                    first.setdefault(("history", name), value)
        for side_name, column in backend.ours_sides.items():
            result.notes.extend(_check(column, variant, n, first, side_name))
        if ("get_state", "ref") in first:
            result.ref_digests["get_state"] = digest(first[("get_state", "ref")].values)
        if ("history", "ref") in first:
            result.ref_digests["history"] = [digest(s.values) for s in first[("history", "ref")]]
        if opts.profile_dir:
            first_ours = next(iter(backend.ours_sides))
            _profile(backend.name, variant, n, sides[first_ours], ops[first_ours], opts)
    finally:
        for side in sides.values():
            side.store.shutdown()
        if floor is not None:
            floor.close()
        if loop is not None:
            loop.close()

    for side, column in backend.ours_sides.items():
        for metric, (_, unit) in METRICS.items():
            ours = samples.get((metric, side), [])
            ref = samples.get((metric, "ref"), [])
            if not ours and not ref:
                continue
            target = chat_target(column, variant, n, metric, opts.large_n)
            result.rows.append(Row("chat", column, variant, n, metric, unit, ours, ref, target))
        for metric in ("put", "delta"):
            ours, ref = samples.get((metric, side), []), samples.get((metric, "floor"), [])
            if ref:
                name = f"{metric}_floor"
                target = target_for("floor", column, variant, n, name, opts.large_n)
                result.rows.append(
                    Row("floor", column, variant, n, name, "ms", ours, ref, target, FLOOR_NOTE)
                )
    result.ref_samples = {metric: v for (metric, side), v in samples.items() if side == "ref"}
    return result


def _check(
    column: str, variant: str, n: int, first: dict[tuple[str, str], Any], side: str = "ours"
) -> list[str]:
    """Both sides must have produced the same thread: a fast wrong answer is no result."""
    where = f"chat/{column}/{variant}/N={n}"
    problems: list[str] = []
    ours, ref = first.get(("get_state", side)), first.get(("get_state", "ref"))
    if ours is not None and ref is not None and ours.values != ref.values:
        problems.append(f"{where}: get_state values differ between ours and the reference")
    for metric in ("list", "history"):
        a, b = first.get((metric, side)), first.get((metric, "ref"))
        if a is not None and b is not None and len(a) != len(b):
            problems.append(f"{where}: {metric} returned {len(a)} items, reference {len(b)}")
    a, b = first.get(("history", side)), first.get(("history", "ref"))
    if a and b and [s.values for s in a] != [s.values for s in b]:
        problems.append(f"{where}: get_state_history values differ from the reference")
    a, b = first.get(("delta", side)), first.get(("delta", "ref"))
    if a is not None and b is not None:
        wa, wb = len(a["messages"]["writes"]), len(b["messages"]["writes"])
        if wa != wb or ("seed" in a["messages"]) != ("seed" in b["messages"]):
            problems.append(f"{where}: delta history differs (ours {wa} writes, reference {wb})")
    return [f"CHECK FAILED {p}" for p in problems]


def _profile(
    backend: str,
    variant: str,
    n: int,
    side: _Side,
    ops: dict[str, Callable[[], Any]],
    opts: ChatOptions,
) -> None:
    """cProfile each of our operations once (after measuring) for the hot-path report."""
    assert opts.profile_dir is not None
    os.makedirs(opts.profile_dir, exist_ok=True)
    todo = ["get_state", "list", "get_tuple"]
    if variant != "classic":
        todo.append("delta")
    if not (variant == "delta_never" and n >= opts.large_n):
        todo.append("history")
    for metric in todo:
        _dump_profile(opts.profile_dir, f"{backend}-{variant}-{n}-{metric}", ops[metric])
    # A second thread on the same store profiles put/put_writes (sizes are not measured).
    # Sync puts run on LangGraph's worker threads: each call is profiled where it runs.
    graph, cfg = side.graph, dict(side.cfg)
    cfg["configurable"] = {"thread_id": f"profile-{variant}"}
    inp = first_input(n)
    side.stats.profiles = [] if side.store.loop is None else None
    try:
        _dump_profile(
            opts.profile_dir,
            f"{backend}-{variant}-{n}-put",
            lambda: side.store.run(
                lambda: graph.invoke(inp, cfg, durability="sync"),
                lambda: graph.ainvoke(inp, cfg, durability="sync"),
            ),
            extra=side.stats.profiles,
        )
    finally:
        side.stats.profiles = None


def _dump_profile(
    directory: str,
    name: str,
    fn: Callable[[], Any],
    extra: list[cProfile.Profile] | None = None,
) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    try:
        fn()
    finally:
        profiler.disable()
    out = io.StringIO()
    # With `extra`, only the put / put_writes calls (on LangGraph's worker threads).
    stats = pstats.Stats(*extra, stream=out) if extra else pstats.Stats(profiler, stream=out)
    stats.sort_stats("cumulative").print_stats(35)
    stats.sort_stats("tottime").print_stats(25)
    with open(os.path.join(directory, f"{name}.txt"), "w") as fh:
        fh.write(out.getvalue())
