"""Workload 2: concurrency.

- Pooled async PostgreSQL: 16 conversation threads run at once (asyncio tasks, each an
  `ainvoke` of a multi-step chat) through ONE async saver on a connection pool; ours and the
  reference get pools of the same size. Throughput in supersteps/s, and failed runs.
- SQLite: 4 processes write their own threads into ONE database file at the same time.

Sides alternate over repeats; throughput is the median, errors are summed over repeats.
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from benchmarks.backends import SCHEMAS, SIDES, PgAdmin, ours_pg_kwargs, ref_pg_kwargs
from benchmarks.graphs import chat_builder, first_input, make_messages, run_config
from benchmarks.results import Row, concurrency_target

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
"""The directory holding the `benchmarks` package: worker processes import it from there."""


@dataclass
class ConcurrencyOptions:
    repeat: int = 3
    variant: str = "delta100"
    pg_url: str = ""
    threads: int = 16
    thread_steps: int = 40
    pool_size: int = 8
    processes: int = 4
    process_invokes: int = 4
    process_steps: int = 25
    sqlite_synchronous: str | None = None
    log: Callable[[str], None] = print


@dataclass
class RunResult:
    steps: int
    errors: int
    seconds: float
    messages: list[str] = field(default_factory=list)
    cpu_s: float = 0.0
    """Client CPU seconds (user + system) spent during the run, all client processes."""

    @property
    def cpu_ms_per_step(self) -> float:
        return self.cpu_s / self.steps * 1000 if self.steps else 0.0

    @property
    def throughput(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0


# ----------------------------------------------------------------- pooled Postgres
async def _pg_run(side: str, opts: ConcurrencyOptions, admin: PgAdmin, url: str) -> RunResult:
    from psycopg_pool import AsyncConnectionPool

    schema = SCHEMAS[side]
    kwargs = ours_pg_kwargs(url) if side == "ours" else ref_pg_kwargs(schema)
    pool = AsyncConnectionPool(
        url,
        min_size=opts.pool_size,
        max_size=opts.pool_size,
        kwargs=kwargs,
        open=False,
    )
    await pool.open(wait=True)
    try:
        if side == "ours":
            from checkpointer.langgraph import LangGraphSaver
            from checkpointer.savers.postgres import AsyncPostgresSaver

            saver = AsyncPostgresSaver(pool, schema=schema)
            await saver.setup()
            checkpointer: Any = LangGraphSaver(saver)
        else:
            from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver as RefAsyncPg

            checkpointer = RefAsyncPg(pool)
            await checkpointer.setup()
        admin.truncate(schema)
        steps = make_messages(opts.thread_steps)
        graph = chat_builder(opts.variant, steps).compile(checkpointer=checkpointer)
        messages: list[str] = []

        async def one(i: int) -> int:
            cfg = run_config(f"conc-{side}-{i}", opts.thread_steps)
            try:
                await graph.ainvoke(first_input(opts.thread_steps), cfg, durability="sync")
            except Exception as exc:
                messages.append(f"{type(exc).__name__}: {exc}")
                return 0
            return opts.thread_steps

        cpu = _cpu()
        start = time.perf_counter()
        done = await asyncio.gather(*(one(i) for i in range(opts.threads)))
        elapsed = time.perf_counter() - start
        return RunResult(sum(done), done.count(0), elapsed, messages, _cpu() - cpu)
    finally:
        await pool.close()


def run_pg_concurrency(
    opts: ConcurrencyOptions, latency_ms: float = 0.0
) -> tuple[list[Row], list[str]]:
    """`latency_ms` > 0 routes the savers' connections through `latency_proxy`, adding that
    much delay each way (a database across a network); the harness's own admin connection
    stays direct."""
    admin = PgAdmin(opts.pg_url)
    results: dict[str, list[RunResult]] = {s: [] for s in SIDES}
    proxy = None
    url = opts.pg_url
    try:
        for schema in SCHEMAS.values():  # run alone (`--workloads concurrency`), none exists yet
            admin.ensure_schema(schema)
        if latency_ms > 0:
            proxy, url = _start_proxy(opts.pg_url, latency_ms)
        for rep in range(opts.repeat):
            for side in SIDES if rep % 2 == 0 else SIDES[::-1]:
                run = asyncio.run(_pg_run(side, opts, admin, url))
                opts.log(
                    f"    async_postgres pool (+{latency_ms:g} ms) {side}: "
                    f"{run.throughput:.0f} steps/s, {run.errors} errors"
                )
                results[side].append(run)
        for schema in SCHEMAS.values():
            admin.truncate(schema)
    finally:
        admin.close()
        if proxy is not None:
            proxy.kill()
            proxy.wait()
    backend = "async_postgres_pool" + (f"+{latency_ms:g}ms" if latency_ms > 0 else "")
    label = f"{opts.threads} threads x {opts.thread_steps} steps, pool {opts.pool_size}"
    if latency_ms > 0:
        label += f", +{latency_ms:g} ms each way (TCP proxy)"
    return _rows(backend, label, opts.variant, results), _messages(backend, results)


def _start_proxy(url: str, latency_ms: float) -> tuple[subprocess.Popen[str], str]:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(url)
    host = str(params.get("host") or "127.0.0.1")
    port = int(params.get("port") or 5432)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        listen = sock.getsockname()[1]
    command = [sys.executable, "-m", "benchmarks.latency_proxy", str(listen), host]
    command += [str(port), str(latency_ms)]
    proxy = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=_worker_env(),
    )
    assert proxy.stdout is not None
    if proxy.stdout.readline().strip() != "ready":
        proxy.kill()
        raise RuntimeError("latency proxy did not start")
    params.update(host="127.0.0.1", port=str(listen))
    return proxy, make_conninfo(**params)


def _worker_env() -> dict[str, str]:
    """Environment for child processes: `benchmarks` importable from ROOT."""
    path = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


# ----------------------------------------------------------------- SQLite processes
def _sqlite_worker(
    side: str, path: str, variant: str, index: int, invokes: int, steps: int, synchronous: str
) -> None:
    """One process (`python -m benchmarks.concurrency worker ...`): prints "ready", waits
    for "go" on stdin, runs `invokes` chats of `steps` steps each on its own thread, and
    prints one JSON line with what it did."""
    if side == "ours":
        from checkpointer.langgraph import LangGraphSaver
        from checkpointer.savers.sqlite import SqliteSaver

        kwargs = {"synchronous": synchronous} if synchronous != "default" else {}
        checkpointer: Any = LangGraphSaver(SqliteSaver(path, **kwargs))
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver as RefSqlite

        checkpointer = RefSqlite(sqlite3.connect(path, check_same_thread=False))
    messages = make_messages(steps)
    graph = chat_builder(variant, messages).compile(checkpointer=checkpointer)
    print("ready", flush=True)
    sys.stdin.readline()
    done, errors, failures = 0, 0, []
    cpu = _cpu()
    start = time.time()
    for k in range(invokes):
        cfg = run_config(f"proc-{index}-{k}", steps)
        try:
            graph.invoke(first_input(steps), cfg, durability="sync")
            done += steps
        except Exception as exc:
            errors += 1
            failures.append(f"{type(exc).__name__}: {exc}")
    end = time.time()
    report = {
        "done": done,
        "errors": errors,
        "start": start,
        "end": end,
        "cpu": _cpu() - cpu,
        "messages": failures,
    }
    print(json.dumps(report), flush=True)


def _cpu() -> float:
    """This process's CPU seconds (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _sqlite_setup(side: str, path: str) -> None:
    if side == "ours":
        from checkpointer.savers.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(path, setup=True):
            pass
    else:
        from langgraph.checkpoint.sqlite import SqliteSaver as RefSqlite

        conn = sqlite3.connect(path, check_same_thread=False)
        RefSqlite(conn).setup()
        conn.close()


def _sqlite_run(side: str, opts: ConcurrencyOptions, directory: str, rep: int) -> RunResult:
    """Start the workers, wait until every one has imported and compiled, then release
    them together; elapsed time is first start to last end (wall clock)."""
    path = os.path.join(directory, f"procs-{side}-{rep}.db")
    _sqlite_setup(side, path)
    args = [
        opts.variant,
        str(opts.process_invokes),
        str(opts.process_steps),
        opts.sqlite_synchronous or "default",
    ]
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "benchmarks.concurrency", "worker", side, path, str(i), *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env=_worker_env(),
        )
        for i in range(opts.processes)
    ]
    messages: list[str] = []
    reports: list[dict[str, Any]] = []
    try:
        ready = [
            p for p in procs if p.stdout is not None and p.stdout.readline().strip() == "ready"
        ]
        for proc in ready:
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
        for proc in procs:
            out, err = proc.communicate(timeout=900)
            line = out.strip().splitlines()[-1] if out.strip() else ""
            if proc.returncode == 0 and line.startswith("{"):
                reports.append(json.loads(line))
            else:
                messages.append(f"worker exited {proc.returncode}: {err.strip()[-300:]}")
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    failed_workers = opts.processes - len(reports)
    done = sum(r["done"] for r in reports)
    errors = sum(r["errors"] for r in reports) + failed_workers * opts.process_invokes
    elapsed = max(r["end"] for r in reports) - min(r["start"] for r in reports) if reports else 0.0
    cpu = sum(r.get("cpu", 0.0) for r in reports)
    for r in reports:
        messages.extend(r["messages"])
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.remove(path + suffix)
    return RunResult(done, errors, elapsed, messages, cpu)


def run_sqlite_processes(opts: ConcurrencyOptions) -> tuple[list[Row], list[str]]:
    results: dict[str, list[RunResult]] = {s: [] for s in SIDES}
    directory = tempfile.mkdtemp(prefix="bench-procs-")
    try:
        for rep in range(opts.repeat):
            for side in SIDES if rep % 2 == 0 else SIDES[::-1]:
                run = _sqlite_run(side, opts, directory, rep)
                opts.log(
                    f"    sqlite {opts.processes} processes {side}: "
                    f"{run.throughput:.0f} steps/s, {run.errors} errors"
                )
                results[side].append(run)
    finally:
        shutil.rmtree(directory, ignore_errors=True)
    backend = "sqlite_processes"
    label = (
        f"{opts.processes} processes x {opts.process_invokes} threads x {opts.process_steps} steps"
    )
    return _rows(backend, label, opts.variant, results), _messages(backend, results)


# ------------------------------------------------------------------------- common
def _rows(backend: str, label: str, variant: str, results: dict[str, list[RunResult]]) -> list[Row]:
    throughput = Row(
        "concurrency",
        backend,
        variant,
        None,
        "throughput",
        "steps/s",
        [r.throughput for r in results["ours"]],
        [r.throughput for r in results["ref"]],
        concurrency_target(backend, "throughput"),
        note=label,
    )
    errors = Row(
        "concurrency",
        backend,
        variant,
        None,
        "errors",
        "count",
        [float(sum(r.errors for r in results["ours"]))],
        [float(sum(r.errors for r in results["ref"]))],
        concurrency_target(backend, "errors"),
        note=f"{label}; failed runs summed over repeats",
    )
    cpu = Row(
        "concurrency",
        backend,
        variant,
        None,
        "client_cpu",
        "ms",
        [r.cpu_ms_per_step for r in results["ours"]],
        [r.cpu_ms_per_step for r in results["ref"]],
        None,
        note=f"{label}; CPU of the client process(es) per step: throughput cannot exceed "
        "cores / CPU per step",
    )
    return [throughput, errors, cpu]


def _messages(backend: str, results: dict[str, list[RunResult]]) -> list[str]:
    notes = []
    for side, runs in results.items():
        seen: list[str] = []
        for run in runs:
            for message in run.messages:
                first = message.strip().splitlines()[0][:200] if message.strip() else message
                if first not in seen:
                    seen.append(first)
        for message in seen[:5]:
            notes.append(f"concurrency/{backend}/{side} error: {message}")
    return notes


if __name__ == "__main__" and len(sys.argv) == 9 and sys.argv[1] == "worker":
    # worker SIDE PATH INDEX VARIANT INVOKES STEPS SYNCHRONOUS
    _sqlite_worker(
        sys.argv[2],
        sys.argv[3],
        sys.argv[5],
        int(sys.argv[4]),
        int(sys.argv[6]),
        int(sys.argv[7]),
        sys.argv[8],
    )
