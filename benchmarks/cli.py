"""`python -m benchmarks`: run the workloads and write benchmarks/results/<name>.md + .json.

python -m benchmarks                      # default: N = 200 and 1000, 3 repeats, every cell
python -m benchmarks --n 200 --n 1000 --repeat 3
python -m benchmarks --quick              # about two minutes
python -m benchmarks --backends memory,sqlite --workloads chat --n 50
python -m benchmarks --profile            # also cProfile our side into results/profiles
python -m benchmarks --long-thread 10000   # also list per checkpoint at 10,000 vs 1,000 steps

Columns: memory | sqlite (ours at its default synchronous=NORMAL) | sqlite_full (ours at
synchronous=FULL, the reference's durability; the SQLite targets are held here) |
async_sqlite (ours at FULL) | postgres | async_postgres. The targets are the table GOALS in
benchmarks/targets.py; every issue-#17 target gets PASS, MISS or "not measured".
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import os
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

from benchmarks.backends import (
    ALL_BACKENDS,
    DEFAULT_PG_URL,
    POSTGRES_BACKENDS,
    SQLITE_BACKENDS,
    PgAdmin,
    make_backends,
    postgres_available,
)
from benchmarks.graphs import CHAT_VARIANTS, VARIANTS
from benchmarks.results import METRICS, Row
from benchmarks.targets import Expected, expected_verdicts

RESULTS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
WORKLOADS = ("chat", "floor", "growth", "concurrency", "runtime")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--n", type=int, action="append", help="thread length (repeatable); default 200 and 1000"
    )
    p.add_argument(
        "--repeat", type=int, default=None, help="samples per metric and side (default 3)"
    )
    p.add_argument(
        "--read-rounds",
        type=int,
        default=None,
        help="alternating rounds of the reads (get_tuple, get_state, list, delta history), "
        "each one call per side, while a metric's --op-budget lasts (default 9, quick 1; "
        "never fewer than --repeat): single cold calls of a millisecond need more samples "
        "than builds of a thousand steps",
    )
    p.add_argument(
        "--quick", action="store_true", help="short run: N=100, 1 repeat, small concurrency"
    )
    p.add_argument(
        "--backends",
        default=",".join(ALL_BACKENDS),
        help="comma list of " + ", ".join(ALL_BACKENDS),
    )
    p.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma list of " + ", ".join(VARIANTS)
    )
    p.add_argument(
        "--workloads", default=",".join(WORKLOADS), help="comma list of " + ", ".join(WORKLOADS)
    )
    p.add_argument(
        "--op-budget",
        type=float,
        default=None,
        help="seconds per metric and side after which repeats stop (default 5, quick 2)",
    )
    p.add_argument(
        "--large-build-repeat",
        type=int,
        default=1,
        help="builds per side at N >= 1000 (default 1: one build is already N puts)",
    )
    p.add_argument(
        "--full-history",
        action="store_true",
        help="measure get_state_history of the never-snapshotting thread at large N on "
        "every backend (minutes each)",
    )
    p.add_argument(
        "--deep-history-backends",
        default=",".join(ALL_BACKENDS),
        help="backends that measure that history without --full-history (comma list; "
        "default all: the issue holds get_state_history to a target in every variant)",
    )
    p.add_argument(
        "--sqlite-synchronous",
        choices=("NORMAL", "FULL"),
        default=None,
        help="PRAGMA synchronous for ours in the `sqlite` column (default: the saver's own, "
        "NORMAL); the sqlite_full and async_sqlite columns always run ours at FULL",
    )
    p.add_argument(
        "--growth-threads",
        type=int,
        default=None,
        help="threads in the store for the growth cell (default 10000, quick 200)",
    )
    p.add_argument(
        "--growth-steps", type=int, default=10, help="steps of each thread in the growth cell"
    )
    p.add_argument(
        "--growth-samples",
        type=int,
        default=None,
        help="get_tuple calls per side and store size in the growth cell (default 200, quick 50)",
    )
    p.add_argument(
        "--long-thread",
        type=int,
        default=0,
        metavar="STEPS",
        help="also measure list per checkpoint on a STEPS-step thread vs a STEPS/10-step one "
        "(10000 for the issue's target; slow, off by default)",
    )
    p.add_argument(
        "--pg-url",
        default=DEFAULT_PG_URL,
        help="PostgreSQL database for the benchmark (created if missing)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=16,
        help="concurrent threads on the pooled async Postgres saver",
    )
    p.add_argument(
        "--thread-steps",
        type=int,
        default=None,
        help="steps per concurrent thread (default 40, quick 15)",
    )
    p.add_argument(
        "--pg-latency-ms",
        default="0,1",
        help="comma list of delays added each way between the pooled savers and PostgreSQL "
        "(a TCP proxy standing for a network); 0 = direct (default 0,1; quick 0)",
    )
    p.add_argument(
        "--pool-size", type=int, default=8, help="connection pool size, same for both sides"
    )
    p.add_argument("--processes", type=int, default=4, help="processes sharing one SQLite file")
    p.add_argument(
        "--process-steps",
        type=int,
        default=None,
        help="steps per thread in each process (default 25, quick 10)",
    )
    p.add_argument("--out", default=RESULTS_DIR, help="output directory")
    p.add_argument("--name", default="latest", help="output file name without extension")
    p.add_argument(
        "--profile", action="store_true", help="write cProfile reports of our side to OUT/profiles"
    )
    args = p.parse_args(argv)
    quick = args.quick
    args.n = sorted(set(args.n or ([100] if quick else [200, 1000])))
    args.repeat = args.repeat or (1 if quick else 3)
    args.read_rounds = max(args.read_rounds or (1 if quick else 9), args.repeat)
    args.op_budget = args.op_budget if args.op_budget is not None else (2.0 if quick else 5.0)
    args.thread_steps = args.thread_steps or (15 if quick else 40)
    if quick and args.pg_latency_ms == "0,1":
        args.pg_latency_ms = "0"
    args.pg_latency_ms = [float(x) for x in args.pg_latency_ms.split(",") if x.strip()]
    args.process_steps = args.process_steps or (10 if quick else 25)
    args.growth_threads = args.growth_threads or (200 if quick else 10_000)
    args.growth_samples = args.growth_samples or (50 if quick else 200)
    args.backends = _names(args.backends, ALL_BACKENDS, "backend")
    args.variants = _names(args.variants, VARIANTS, "variant")
    args.workloads = _names(args.workloads, WORKLOADS, "workload")
    args.deep_history_backends = frozenset(
        _names(args.deep_history_backends, ALL_BACKENDS, "backend")
    )
    return args


def _names(text: str, allowed: Sequence[str], what: str) -> list[str]:
    names = [t.strip() for t in text.split(",") if t.strip()]
    for name in names:
        if name not in allowed:
            raise SystemExit(f"unknown {what} {name!r}; expected one of {', '.join(allowed)}")
    return names


_CELL_NOTE = re.compile(r"^(\w+)/(\w+)/(\w+)/N=(\d+): (.*)$", re.DOTALL)


def merge_notes(notes: list[str]) -> list[str]:
    """One line per distinct remark: "chat/x/v/N=1: text" repeated over cells becomes
    "chat (x/v/N=1, y/w/N=2): text". Failures and checks stay one per cell."""
    merged: dict[tuple[str, str], list[str]] = {}
    out: list[str | tuple[str, str]] = []
    for note in notes:
        match = _CELL_NOTE.match(note)
        if match is None:
            out.append(note)
            continue
        workload, backend, variant, n, text = match.groups()
        key = (workload, text)
        if key not in merged:
            merged[key] = []
            out.append(key)
        merged[key].append(f"{backend}/{variant}/N={n}")
    lines = []
    for item in out:
        if isinstance(item, str):
            lines.append(item)
        else:
            cells = merged[item]
            where = cells[0] if len(cells) == 1 else ", ".join(cells)
            lines.append(f"{item[0]} ({where}): {item[1]}")
    return lines


def _failure(where: str, exc: BaseException) -> str:
    """A failed cell is reported, not fatal: the other cells still say something."""
    detail = traceback.format_exception_only(type(exc), exc)[-1].strip()
    log(f"  FAILED {where}: {detail}")
    return f"FAILED {where}: {detail[:300]}"


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def method_notes(args: argparse.Namespace, large_n: int) -> list[str]:
    return [
        'workload 1: one StateGraph node looping N times on one thread, durability="sync"; each '
        "step appends 1-2 plain-dict messages of 200-500 bytes (seeded prose-like text that "
        "zstd compresses to ~35-40%, like real chat) and sets two "
        "LastValue keys. Variants: classic = Annotated[list, operator.add]; delta100 = "
        "DeltaChannel(snapshot_frequency=100); delta_never = "
        "DeltaChannel(snapshot_frequency=10**9); wide = delta100 plus 16 dict-valued keys "
        "(100-200 bytes each), every one rewritten at every step (no targets: it shows what "
        "a structured agent state costs).",
        "ours = our saver wrapped in checkpointer.langgraph.LangGraphSaver; reference = "
        "langgraph InMemorySaver / SqliteSaver / AsyncSqliteSaver / PostgresSaver / "
        "AsyncPostgresSaver. "
        "Async backends run ainvoke / aget_state / aget_state_history / alist.",
        "put + put_writes: time inside the checkpointer's put/put_writes (a forwarding wrapper), "
        "summed, divided by N. Wall time: the whole invoke.",
        "bytes on disk: SQLite file + WAL after PRAGMA wal_checkpoint(TRUNCATE); PostgreSQL "
        "pg_total_relation_size (heap, TOAST, indexes) of every table in the side's schema "
        "(bench_ours / bench_ref), tables truncated before each build.",
        "statements: counted where the driver sees them. SQLite: sqlite3 set_trace_callback on "
        "every connection the saver uses (ours is opened from a path, as its from_conn_string "
        "does, and opens one connection per thread; executemany counts each row). PostgreSQL: a "
        "psycopg cursor_factory counting execute and each executemany parameter set "
        "(pg_stat_statements is not preloaded on this server). BEGIN/COMMIT/SAVEPOINT are not "
        "counted. Memory: not applicable.",
        "get_delta_channel_history: at the head checkpoint, channels=['messages'] "
        "(delta variants).",
        f"builds (fresh storage each): {args.repeat} per side below N={large_n}, "
        f"{args.large_build_repeat} at N>={large_n}. "
        f"repeats: {args.repeat} per metric and side, alternating which side goes first; a metric "
        f"stops repeating for a side after {args.op_budget:g} s of samples (at least one). "
        "Medians.",
        "workload 2: pooled async PostgreSQL = "
        f"{args.threads} conversation threads run at once as asyncio tasks (ainvoke, "
        f"{args.thread_steps} steps each, delta100) through one AsyncPostgresSaver on an "
        f"AsyncConnectionPool of {args.pool_size} connections (same pool size for both sides); "
        f"SQLite = {args.processes} processes, each running 4 threads x {args.process_steps} "
        "steps into one database file, released together once all have started. "
        f"Pooled runs with added latency ({', '.join(f'{x:g}' for x in args.pg_latency_ms)} ms "
        "each way) go through benchmarks/latency_proxy.py, a TCP proxy standing for a network "
        "between the application and the database. Client CPU per step shows the ceiling: "
        "one process cannot exceed 1000 / (CPU ms per step) steps/s.",
        "durability: the reference SqliteSaver runs WAL with sqlite3's default "
        "synchronous=FULL (an fsync per commit); the reference AsyncSqliteSaver never enables "
        "WAL (rollback journal, FULL). Column sqlite_full runs our SqliteSaver at FULL and "
        "async_sqlite our AsyncSqliteSaver at FULL: equal durability, where the SQLite targets "
        "are held. Column sqlite runs our SqliteSaver at "
        f"{args.sqlite_synchronous or 'its default, NORMAL'} (WAL; durable against a process "
        "crash, not a power loss), reported without verdicts. sqlite and sqlite_full are "
        "measured in one cell against one reference, the three sides alternating.",
        "bytes on Postgres: pg_total_relation_size (heap + TOAST + indexes, dead tuples "
        "included) summed over each side's tables, measured right after its build into "
        "truncated tables; not the summed payload sizes.",
        "floors (benchmarks/floors.py, at the large N, raw drivers, measured inside each chat "
        "cell as one more side alternating with the savers): put = a bare LangGraph "
        "checkpointer (FloorSaver) built and timed as the savers are, through the same graph: "
        "each put / put_writes serializes with LangGraph's serde and inserts the rows it was "
        "handed under their natural keys, one transaction per call (SQLite: sqlite3 or "
        "aiosqlite, WAL + synchronous=FULL; PostgreSQL: psycopg, one statement per call), "
        "reading nothing back; put + put_writes time / N. delta history = the message "
        "channel's N + 1 writes fetched by one primary-key range scan and decoded with "
        "ormsgpack (PostgreSQL: binary rows). Rows show ours (the chat cell's samples) "
        "against the floor in the reference column.",
        f"growth: per storage, each side keeps two stores: one with a single "
        f"{args.growth_steps}-step delta100 thread, one with that thread and its rows copied in "
        f"SQL to {args.growth_threads - 1:,} more thread ids (every table with a thread_id "
        "column; PostgreSQL tables ANALYZEd). get_tuple and list (a quarter as many) are timed "
        f"in 4 alternating rounds, {args.growth_samples} get_tuple calls per side and store: "
        "the single thread, random threads of the big store, and the first thread again in the "
        "big store (a diagnostic). Growth = median(random threads, big store) / median(single "
        "thread), per side; the target is on ours. With --long-thread STEPS: list time per "
        "checkpoint of a STEPS-step thread over a STEPS/10-step one.",
        "workload 3: the same graph on checkpointer.graph with our SqliteSaver vs LangGraph with "
        "the reference SqliteSaver. When workload 1 ran the sqlite backend, its reference samples "
        "(same graph, same saver, same run) are the reference here, and only our side is run.",
    ]


def _growth_columns(backends: Sequence[str]) -> list[str]:
    """The growth cell runs per storage: sqlite if any SQLite column was asked for, etc."""
    out = []
    if set(backends) & SQLITE_BACKENDS:
        out.append("sqlite")
    if set(backends) & POSTGRES_BACKENDS:
        out.append("postgres")
    return out


def not_measured(rows: list[Row], expected: list[Expected]) -> list[Row]:
    """A "not measured" row for every verdict owed that no measured row gives."""
    have = {
        (r.workload, r.backend, r.variant, r.n, r.metric)
        for r in rows
        if r.target is not None and (r.ours_samples or r.ref_samples)
    }
    out = []
    for e in expected:
        if (e.workload, e.column, e.variant, e.n, e.metric) in have:
            continue
        unit = METRICS.get(e.metric, (e.metric, ""))[1]
        out.append(Row(e.workload, e.column, e.variant, e.n, e.metric, unit, target=e.target))
    return out


def _preload() -> None:
    """Import what the run will use, so it is loaded before `gc.freeze()`."""
    import importlib

    for module in (
        "benchmarks.chat",
        "benchmarks.concurrency",
        "benchmarks.runtime",
        "checkpointer.langgraph",
        "checkpointer.savers.sqlite",
        "checkpointer.savers.postgres",
        "langgraph.checkpoint.sqlite",
        "langgraph.checkpoint.sqlite.aio",
        "langgraph.checkpoint.postgres",
        "langgraph.checkpoint.postgres.aio",
    ):
        # A module that fails to import is reported by the cell that needs it.
        with contextlib.suppress(ImportError):
            importlib.import_module(module)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    _preload()
    # Everything loaded so far lives for the whole run: keep it out of the collections
    # that precede each timed operation (a full collection of LangGraph's heap costs ~0.1 s).
    gc.collect()
    gc.freeze()
    try:
        return _run(args, argv, started)
    finally:
        gc.unfreeze()


def _run(args: argparse.Namespace, argv: Sequence[str] | None, started: float) -> int:
    with tempfile.TemporaryDirectory(prefix="bench-floor-") as scratch:
        return _run_in(args, argv, started, scratch)


def _run_in(
    args: argparse.Namespace, argv: Sequence[str] | None, started: float, scratch: str
) -> int:
    from benchmarks import report
    from benchmarks.chat import ChatOptions, run_chat_cell
    from benchmarks.concurrency import ConcurrencyOptions, run_pg_concurrency, run_sqlite_processes
    from benchmarks.runtime import RuntimeOptions, run_runtime_cell, runtime_available

    rows: list[Row] = []
    notes: list[str] = []
    large_n = min(1000, max(args.n))

    pg_problem = None
    if set(args.backends) & POSTGRES_BACKENDS:
        pg_problem = postgres_available(args.pg_url)
        if pg_problem:
            notes.append(
                f"PostgreSQL not usable at {args.pg_url}: {pg_problem}; its backends skipped"
            )
    backends = [b for b in args.backends if not (pg_problem and b in POSTGRES_BACKENDS)]

    reuse: dict[tuple[str, int], dict[str, list[float]]] = {}
    digests: dict[tuple[str, int], dict[str, Any]] = {}
    if "chat" in args.workloads:
        opts = ChatOptions(
            repeat=args.repeat,
            read_rounds=args.read_rounds,
            op_budget=args.op_budget,
            large_n=large_n,
            large_build_repeat=args.large_build_repeat,
            deep_history_backends=args.deep_history_backends,
            full_history=args.full_history,
            profile_dir=os.path.join(args.out, "profiles") if args.profile else None,
            floors="floor" in args.workloads,
            floor_dir=scratch,
            pg_url=args.pg_url,
            log=log,
        )
        for backend in make_backends(backends, args.pg_url, args.sqlite_synchronous):
            name = backend.name
            try:
                for n in args.n:
                    for variant in args.variants:
                        t0 = time.perf_counter()
                        log(f"chat {name} {variant} N={n} ...")
                        try:
                            cell = run_chat_cell(backend, variant, n, opts)
                        except Exception as exc:
                            notes.append(_failure(f"chat/{name}/{variant}/N={n}", exc))
                            continue
                        rows += cell.rows
                        notes += cell.notes
                        if name == "sqlite":
                            reuse[(variant, n)] = cell.ref_samples
                            digests[(variant, n)] = cell.ref_digests
                        log(f"  done in {time.perf_counter() - t0:.1f} s")
            finally:
                backend.cleanup()

    growth_columns = _growth_columns(args.backends)
    if "growth" in args.workloads:
        from benchmarks.growth import GrowthOptions, run_growth

        gopts = GrowthOptions(
            threads=args.growth_threads,
            steps=args.growth_steps,
            samples=args.growth_samples,
            long_steps=args.long_thread,
            pg_url=args.pg_url,
            log=log,
        )
        runnable = [c for c in growth_columns if not (pg_problem and c == "postgres")]
        got, more = run_growth(runnable, gopts)
        rows += got
        notes += more

    if "concurrency" in args.workloads:
        copts = ConcurrencyOptions(
            repeat=args.repeat,
            pg_url=args.pg_url,
            threads=args.threads,
            thread_steps=args.thread_steps,
            pool_size=args.pool_size,
            processes=args.processes,
            process_steps=args.process_steps,
            sqlite_synchronous=args.sqlite_synchronous,
            log=log,
        )
        # The backends list picks the concurrency runs too.
        runs: list[tuple[str, Callable[[ConcurrencyOptions], tuple[list[Row], list[str]]]]] = []
        if pg_problem is None and "async_postgres" in backends:
            for latency in args.pg_latency_ms:
                runs.append(
                    (
                        f"pooled async postgres, +{latency:g} ms each way",
                        functools.partial(run_pg_concurrency, latency_ms=latency),
                    )
                )
        if {"sqlite", "sqlite_full"} & set(backends):
            runs.append(("sqlite processes", run_sqlite_processes))
        for what, fn in runs:
            log(f"concurrency: {what} ...")
            try:
                got, more = fn(copts)
            except Exception as exc:
                notes.append(_failure(f"concurrency/{what}", exc))
                continue
            rows += got
            notes += more

    if "runtime" in args.workloads:
        problem = runtime_available()
        if problem:
            notes.append(f"workload 3 not run: checkpointer.graph does not import ({problem})")
        else:
            ropts = RuntimeOptions(
                repeat=args.repeat,
                op_budget=args.op_budget,
                large_n=large_n,
                large_build_repeat=args.large_build_repeat,
                sqlite_synchronous=args.sqlite_synchronous,
                reuse=reuse,
                digests=digests,
                log=log,
            )
            for n in args.n:
                for variant in args.variants:
                    if variant not in CHAT_VARIANTS:
                        continue  # our runtime's workload has the chat keys only
                    t0 = time.perf_counter()
                    log(f"runtime {variant} N={n} ...")
                    try:
                        got, more = run_runtime_cell(variant, n, ropts)
                    except Exception as exc:
                        notes.append(_failure(f"runtime/sqlite/{variant}/N={n}", exc))
                        continue
                    rows += got
                    notes += more
                    log(f"  done in {time.perf_counter() - t0:.1f} s")

    rows += not_measured(
        rows,
        expected_verdicts(
            [*args.backends, *growth_columns], args.variants, large_n, args.workloads
        ),
    )

    pg_version = None
    if pg_problem is None and set(backends) & POSTGRES_BACKENDS:
        admin = PgAdmin(args.pg_url)
        pg_version = admin.server_version()
        admin.close()
    env = report.environment(pg_version)
    run = {
        "command": report.main_argv() if argv is None else "python -m benchmarks " + " ".join(argv),
        "args": {k: (sorted(v) if isinstance(v, frozenset) else v) for k, v in vars(args).items()},
        "duration_s": time.perf_counter() - started,
        "large_n": large_n,
        "method": method_notes(args, large_n),
    }
    md_path, json_path = report.write(args.out, args.name, rows, env, run, merge_notes(notes))
    log(f"wrote {md_path} and {json_path} in {run['duration_s'] / 60:.1f} min")
    return 0
