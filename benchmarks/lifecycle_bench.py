"""Data lifecycle benchmark: one long chat thread trimmed by each retention policy.

`python -m benchmarks.lifecycle_bench [--turns 500] [--pg postgresql://...]`

A chat graph (our runtime, a delta message list snapshotting every 25 updates) writes one
thread of `2 * turns` checkpoints (an input and a loop checkpoint per turn) into SQLite.
Each policy then runs on its own copy of that file; for each we print the checkpoints and
stored payload bytes before and after (the thread summary), the file size before and after
`reclaim_space()`, and the time retention and reclaiming took. With `--pg`, the same
policies run on PostgreSQL (payload bytes and time; relation sizes after VACUUM FULL).
A last row writes the thread through `CompressingSerializer` to show what zstd saves.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any, TypedDict

from checkpointer.channels import DeltaChannel
from checkpointer.graph import END, START, CompiledStateGraph, StateGraph
from checkpointer.lifecycle import IdleThreadTTL, KeepLast, MaxAge, RetentionReport
from checkpointer.savers.base import BaseCheckpointSaver
from checkpointer.savers.retention import parse_ts
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.serde import Serializer
from checkpointer.serde.compression import CompressingSerializer
from checkpointer.types import make_config

THREAD = "long-chat"
Message = dict[str, str]


def append_messages(state: list[Message], writes: Sequence[list[Message]]) -> list[Message]:
    return [*state, *(message for batch in writes for message in batch)]


class Chat(TypedDict):
    messages: Annotated[list[Message], DeltaChannel(append_messages, snapshot_frequency=25)]
    topic: str


def reply(state: Chat) -> dict[str, Any]:
    n = len(state["messages"])
    text = f"Reply {n}: here is what we settled on so far, and the open questions. " * 3
    return {"messages": [{"role": "assistant", "content": text}], "topic": f"turn {n}"}


def chat_graph(saver: BaseCheckpointSaver) -> CompiledStateGraph:
    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


def write_thread(saver: BaseCheckpointSaver, turns: int) -> CompiledStateGraph:
    graph = chat_graph(saver)
    config = make_config(THREAD)
    for turn in range(turns):
        message = {"role": "user", "content": f"Question {turn}: how does this part work?"}
        graph.invoke({"messages": [message]}, config)
    return graph


@dataclass
class Row:
    policy: str
    checkpoints: tuple[int, int]
    payload: tuple[int, int]
    file: tuple[int | None, int | None]
    retention_s: float
    reclaim_s: float
    note: str = ""


def file_size(path: Path) -> int:
    wal = Path(str(path) + "-wal")
    return path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)


def thread_state(saver: BaseCheckpointSaver) -> tuple[int, int]:
    found = saver.list_threads(thread_ids=[THREAD])
    return (found[0].checkpoint_count, found[0].bytes) if found else (0, 0)


def middle_now(saver: BaseCheckpointSaver, max_age: timedelta) -> datetime:
    """A clock under which the oldest 43% of the thread is past `max_age` (not a multiple
    of the snapshot interval, so kept checkpoints need some history)."""
    stamps = sorted(
        stamp
        for t in saver.list({"configurable": {"thread_id": THREAD}})
        if (stamp := parse_ts(t.checkpoint["ts"])) is not None
    )
    return stamps[len(stamps) * 43 // 100] + max_age


Policy = Callable[[BaseCheckpointSaver, CompiledStateGraph, datetime], RetentionReport]
"""(saver, graph lending its channel specs, a clock at which the oldest 43% are old)."""


def policies() -> list[tuple[str, Policy]]:
    day = timedelta(days=1)
    return [
        ("KeepLast(110)", lambda s, g, now: s.apply_retention(KeepLast(110))),
        (
            "KeepLast(110), channels",
            lambda s, g, now: s.apply_retention(KeepLast(110), channels=g.spec.channels),
        ),
        ("MaxAge(oldest 43%)", lambda s, g, now: s.apply_retention(MaxAge(day), now=now)),
        (
            "MaxAge(oldest 43%), chan.",
            lambda s, g, now: s.apply_retention(MaxAge(day), channels=g.spec.channels, now=now),
        ),
        (
            "compact(keep_recent=10)",
            lambda s, g, now: s.compact(THREAD, channels=g.spec.channels, keep_recent=10),
        ),
        (
            "IdleThreadTTL(1 day)",
            lambda s, g, now: s.apply_retention(
                IdleThreadTTL(day), now=datetime.now(UTC) + 2 * day
            ),
        ),
    ]


def run_sqlite(turns: int, workdir: Path, log: Callable[[str], None]) -> list[Row]:
    base = workdir / "base.db"
    started = time.perf_counter()
    with SqliteSaver.from_conn_string(base, setup=True) as saver:
        graph = write_thread(saver, turns)
        saver.reclaim_space()
    log(f"wrote {turns} turns to SQLite in {time.perf_counter() - started:.1f}s")
    rows: list[Row] = []
    for name, apply in policies():
        path = workdir / f"{uuid.uuid4().hex}.db"
        shutil.copyfile(base, path)
        with SqliteSaver.from_conn_string(path, setup=False) as saver:
            before_n, before_b = thread_state(saver)
            before_file = file_size(path)
            now = middle_now(saver, timedelta(days=1))
            t0 = time.perf_counter()
            report = apply(saver, graph, now)  # the graph only lends its channel specs
            t1 = time.perf_counter()
            saver.reclaim_space()
            t2 = time.perf_counter()
            after_n, after_b = thread_state(saver)
            rows.append(
                Row(
                    name,
                    (before_n, after_n),
                    (before_b, after_b),
                    (before_file, file_size(path)),
                    t1 - t0,
                    t2 - t1,
                    _note(report),
                )
            )
        path.unlink()
    rows.append(compression_row(turns, workdir))
    return rows


def compression_row(turns: int, workdir: Path) -> Row:
    path = workdir / "compressed.db"
    serde: Serializer = CompressingSerializer(threshold=1024)
    with SqliteSaver.from_conn_string(path, setup=True, serde=serde) as saver:
        t0 = time.perf_counter()
        write_thread(saver, turns)
        elapsed = time.perf_counter() - t0
        saver.reclaim_space()
        n, size = thread_state(saver)
    return Row(
        "(written with zstd > 1 KiB)",
        (n, n),
        (size, size),
        (file_size(path), file_size(path)),
        elapsed,
        0.0,
        "write time in the retention column",
    )


def run_postgres(url: str, turns: int, log: Callable[[str], None]) -> list[Row]:
    from checkpointer.savers.postgres import PostgresSaver

    rows: list[Row] = []
    for name, apply in policies():
        schema = f"lifecycle_bench_{uuid.uuid4().hex[:8]}"
        with PostgresSaver.from_conn_string(url, schema=schema, setup=True) as saver:
            try:
                started = time.perf_counter()
                graph = write_thread(saver, turns)
                elapsed = time.perf_counter() - started
                log(f"{name}: wrote {turns} turns to PostgreSQL in {elapsed:.1f}s")
                before_n, before_b = thread_state(saver)
                before_rel = saver.reclaim_space(full=True).after_bytes
                now = middle_now(saver, timedelta(days=1))
                t0 = time.perf_counter()
                report = apply(saver, graph, now)
                t1 = time.perf_counter()
                after_rel = saver.reclaim_space(full=True).after_bytes
                t2 = time.perf_counter()
                after_n, after_b = thread_state(saver)
                rows.append(
                    Row(
                        name,
                        (before_n, after_n),
                        (before_b, after_b),
                        (before_rel, after_rel),
                        t1 - t0,
                        t2 - t1,
                        _note(report),
                    )
                )
            finally:
                _drop_schema(url, schema)
    return rows


def _drop_schema(url: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _note(report: RetentionReport) -> str:
    parts = []
    if report.materialized:
        parts.append(f"{report.materialized} snapshot(s) stored")
    if report.kept_for_history:
        parts.append(f"{report.kept_for_history} kept for delta history")
    if report.threads_deleted:
        parts.append("thread deleted")
    return ", ".join(parts)


def _kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:,.0f}"


def render(title: str, rows: list[Row], size_label: str) -> str:
    header = (
        f"{'policy':<26} {'checkpoints':>13} {'payload KiB':>19} {size_label:>21} "
        f"{'retention':>10} {'reclaim':>8}  note"
    )
    lines = [title, header, "-" * len(header)]
    for r in rows:
        lines.append(
            f"{r.policy:<26} {r.checkpoints[0]:>5} -> {r.checkpoints[1]:<5} "
            f"{_kib(r.payload[0]):>8} -> {_kib(r.payload[1]):<8} "
            f"{_kib(r.file[0]):>8} -> {_kib(r.file[1]):<10} "
            f"{r.retention_s * 1000:>8.0f}ms {r.reclaim_s * 1000:>6.0f}ms  {r.note}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--turns", type=int, default=500, help="chat turns (2 checkpoints each)")
    parser.add_argument("--pg", default=None, help="also run on this PostgreSQL URL")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        rows = run_sqlite(args.turns, Path(tmp), print)
    print()
    print(render(f"SQLite, one thread of {2 * args.turns} checkpoints", rows, "file KiB"))
    if args.pg:
        pg_rows = run_postgres(args.pg, args.turns, print)
        print()
        print(
            render(
                f"PostgreSQL, one thread of {2 * args.turns} checkpoints",
                pg_rows,
                "relations KiB",
            )
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
