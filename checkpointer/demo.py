"""`checkpointer demo`: one chat thread that shows what the persistence layer is for.

A fake assistant (no network) answers a few dozen turns on SQLite (or PostgreSQL). On the
way the demo crashes a node in the middle of a superstep and resumes (the sibling that had
finished is not run again), pauses a turn for human approval and resumes it, lists the
history, forks from an earlier checkpoint, and compares the bytes the delta message list
stored against what a full snapshot at every checkpoint would have cost.

`run_demo` returns the measured figures as a `DemoReport`, so tests assert on them.
"""

from __future__ import annotations

import re
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

from rich.console import Console
from rich.panel import Panel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from checkpointer.channels import DeltaChannel
from checkpointer.graph import END, START, CompiledStateGraph, StateGraph, StateSnapshot
from checkpointer.savers.base import BaseCheckpointSaver
from checkpointer.types import RunnableConfig, make_config

DEFAULT_DB = "checkpointer-demo.db"
Message = dict[str, str]

_REPLIES = (
    "Here is a summary of what we covered so far, with the open questions listed at the end.",
    "I checked the notes from earlier in the thread; the second option fits the constraints.",
    "Breaking it down: first the data model, then the migration, then the rollout plan.",
    "That works. I would add a test for the edge case you mentioned before shipping it.",
    "Good question. The short answer is yes, with one caveat about concurrent writers.",
)


# --------------------------------------------------------------------- the graph
def append_messages(state: list[Message], writes: Sequence[list[Message]]) -> list[Message]:
    """Batched reducer of the message list (batching-invariant, as DeltaChannel requires)."""
    return [*state, *(message for batch in writes for message in batch)]


class ChatState(TypedDict):
    messages: Annotated[list[Message], DeltaChannel(append_messages, snapshot_frequency=25)]
    context: str
    needs_approval: bool


class SimulatedCrash(RuntimeError):
    """Raised once by the `draft` node to play a crash in the middle of a superstep."""


@dataclass
class ChatBot:
    """The demo's nodes, with counters that prove which ones actually ran."""

    runs: Counter[str] = field(default_factory=Counter)
    crash_next_draft: bool = False

    def retrieve(self, state: ChatState) -> dict[str, Any]:
        """Runs beside `draft`: gathers context from the thread so far."""
        self.runs["retrieve"] += 1
        return {"context": f"{len(state['messages'])} messages so far"}

    def draft(self, state: ChatState) -> dict[str, Any]:
        """Writes the assistant's reply; crashes once when told to."""
        self.runs["draft"] += 1
        if self.crash_next_draft:
            self.crash_next_draft = False
            time.sleep(0.02)  # the parallel `retrieve` finishes and is saved first
            raise SimulatedCrash("the model server went away mid-step")
        turn = sum(1 for m in state["messages"] if m["role"] == "user")
        reply = f"(turn {turn}) {_REPLIES[turn % len(_REPLIES)]}"
        return {"messages": [{"role": "assistant", "content": reply}]}

    def review(self, state: ChatState) -> dict[str, Any]:
        """Flags replies to requests that need a human's approval."""
        self.runs["review"] += 1
        last_user = next(m for m in reversed(state["messages"]) if m["role"] == "user")
        return {"needs_approval": "refund" in last_user["content"].lower()}

    def approve(self, state: ChatState) -> dict[str, Any]:
        """Runs only after a human resumed the paused thread."""
        self.runs["approve"] += 1
        return {"messages": [{"role": "system", "content": "refund approved by a human"}]}

    def build(self, saver: BaseCheckpointSaver) -> CompiledStateGraph:
        """START -> retrieve & draft (parallel) -> review -> approve? -> END."""
        builder = StateGraph(ChatState)
        builder.add_node("retrieve", self.retrieve)
        builder.add_node("draft", self.draft)
        builder.add_node("review", self.review)
        builder.add_node("approve", self.approve)
        builder.add_edge(START, "retrieve")
        builder.add_edge(START, "draft")
        builder.add_edge(["retrieve", "draft"], "review")
        builder.add_conditional_edges(
            "review", lambda s: "approve" if s["needs_approval"] else END, ["approve", END]
        )
        builder.add_edge("approve", END)
        return builder.compile(checkpointer=saver, interrupt_before=["approve"])


def user_message(turn: int, *, refund: bool = False) -> Message:
    text = f"Question {turn}: can you help me with part {turn} of the migration plan?"
    if refund:
        text = f"Question {turn}: I was double charged, please issue a refund."
    return {"role": "user", "content": text}


# -------------------------------------------------------------------- the report
@dataclass
class DemoReport:
    """The figures the demo measured."""

    backend: str
    thread_id: str
    turns: int
    messages: int
    checkpoints: int
    crash_turn: int
    runs_at_crash: dict[str, int]
    runs_after_resume: dict[str, int]
    approval_turn: int
    approval_paused_before: tuple[str, ...]
    approved: bool
    fork_from_step: int
    fork_messages: int
    original_messages: int
    original_intact: bool
    history_rows: int
    history_delta_calls: int
    delta_bytes: int
    full_snapshot_bytes: int
    elapsed_seconds: float

    @property
    def finished_task_rerun(self) -> bool:
        """Whether resuming ran `retrieve` again although it had finished before the crash."""
        return self.runs_after_resume.get("retrieve", 0) != self.runs_at_crash.get("retrieve", 0)

    @property
    def crashed_task_rerun(self) -> bool:
        return self.runs_after_resume.get("draft", 0) == self.runs_at_crash.get("draft", 0) + 1

    @property
    def savings(self) -> float:
        """Full-snapshot bytes per delta byte."""
        return self.full_snapshot_bytes / self.delta_bytes if self.delta_bytes else float("inf")


# ----------------------------------------------------------------------- savers
def _masked(url: str) -> str:
    return re.sub(r"(//[^:/@]+:)[^@]*@", r"\1***@", url)


def url_schema(url: str) -> str:
    """The schema a PostgreSQL URL chooses, as the CLI reads it: the first schema of its
    search path (`?options=-csearch_path%3Dmyschema`), existing or not; else `public`."""
    from checkpointer.inspect_db import postgres_connection

    conn = postgres_connection(url, readonly=True)
    try:
        row = conn.execute("SELECT current_schema(), current_setting('search_path')").fetchone()
    finally:
        conn.close()
    if row and row[0]:
        return str(row[0])
    for part in str(row[1] if row else "").split(","):
        name = part.strip()
        if name and name != '"$user"':
            return name[1:-1].replace('""', '"') if name.startswith('"') else name
    return "public"


@contextmanager
def open_saver(
    db_path: str | None, url: str | None, schema: str | None = None
) -> Iterator[tuple[BaseCheckpointSaver, str]]:
    """The demo's saver and a label for it: SQLite file by default, or the URL's database
    (PostgreSQL: in `schema`, else the schema the URL's search path names, else public)."""
    if db_path is not None and url is not None:
        raise ValueError("give either db_path or url, not both")
    if url is not None and url.startswith(("postgres://", "postgresql://")):
        from checkpointer.savers.postgres import PostgresSaver

        schema = schema or url_schema(url)
        with PostgresSaver.from_conn_string(url, setup=True, schema=schema) as pg:
            yield pg, f"{_masked(url)} (schema {schema})"
        return
    if url == "memory":
        from checkpointer.savers.memory import InMemorySaver

        yield InMemorySaver(), "memory"
        return
    from checkpointer.savers.sqlite import SqliteSaver

    target = url if url is not None else str(Path(db_path or DEFAULT_DB))
    with SqliteSaver.from_conn_string(target, setup=True) as sqlite:
        yield sqlite, f"sqlite {target}"


@contextmanager
def _counting(saver: BaseCheckpointSaver, method: str) -> Iterator[Counter[str]]:
    """Count calls of one saver method for the duration of the block."""
    calls: Counter[str] = Counter()
    original: Callable[..., Any] = getattr(saver, method)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[method] += 1
        return original(*args, **kwargs)

    setattr(saver, method, counted)
    try:
        yield calls
    finally:
        delattr(saver, method)


def storage_figures(
    saver: BaseCheckpointSaver, thread: RunnableConfig, snapshots: Sequence[StateSnapshot]
) -> tuple[int, int]:
    """(bytes the delta message list stored, bytes full snapshots would have taken).

    Delta: every stored `messages` snapshot and every pending write to `messages`.
    Full: the whole message list serialized at every checkpoint, by the same serializer.
    """
    serde = saver.serde
    delta = 0
    for tup in saver.list(thread):
        if "messages" in tup.checkpoint["channel_values"]:
            delta += len(serde.dumps_typed(tup.checkpoint["channel_values"]["messages"])[1])
        for _, channel, value in tup.pending_writes or ():
            if channel == "messages":
                delta += len(serde.dumps_typed(value)[1])
    full = sum(len(serde.dumps_typed(s.values.get("messages", []))[1]) for s in snapshots)
    return delta, full


# ------------------------------------------------------------------------- demo
def run_demo(
    db_path: str | None = None,
    url: str | None = None,
    console: Console | None = None,
    *,
    turns: int = 36,
    schema: str | None = None,
) -> DemoReport:
    """Run the demo thread and print what happens; returns the figures."""
    if turns < 12:
        raise ValueError("the demo needs at least 12 turns")
    console = console or Console()
    started = time.perf_counter()
    crash_turn, approval_turn, fork_turn = turns // 3, (2 * turns) // 3, 5
    with open_saver(db_path, url, schema) as (saver, backend):
        bot = ChatBot()
        app = bot.build(saver)
        thread_id = f"demo-{uuid.uuid4().hex[:8]}"
        config = make_config(thread_id)
        console.rule(f"[bold]checkpointer demo[/] · {backend} · thread {thread_id}")

        runs_at_crash: dict[str, int] = {}
        runs_after_resume: dict[str, int] = {}
        paused: tuple[str, ...] = ()
        fork_config: RunnableConfig | None = None
        columns = (
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
        )
        with Progress(*columns, console=console, transient=True) as progress:
            task = progress.add_task("chatting", total=turns)
            for turn in range(1, turns + 1):
                message = user_message(turn, refund=turn == approval_turn)
                if turn == crash_turn:
                    bot.crash_next_draft = True
                    try:
                        app.invoke({"messages": [message]}, config)
                    except SimulatedCrash as exc:
                        runs_at_crash = dict(bot.runs)
                        console.print(
                            f"[red]turn {turn}: draft crashed[/] ({exc}); retrieve, "
                            "running beside it, had finished and its writes are saved"
                        )
                    app.invoke(None, config)
                    runs_after_resume = dict(bot.runs)
                    console.print(
                        f"[green]turn {turn}: resumed[/] · retrieve ran "
                        f"{runs_at_crash['retrieve']} -> {runs_after_resume['retrieve']} times, "
                        f"draft {runs_at_crash['draft']} -> {runs_after_resume['draft']}"
                    )
                elif turn == approval_turn:
                    app.invoke({"messages": [message]}, config)
                    paused = app.get_state(config).next
                    console.print(
                        f"[yellow]turn {turn}: paused before {list(paused)}[/] for a human; "
                        "a reviewer adds a note and resumes"
                    )
                    note = {"role": "reviewer", "content": "checked the charge: duplicate"}
                    app.update_state(config, {"messages": [note]}, as_node="review")
                    app.invoke(None, config)
                else:
                    app.invoke({"messages": [message]}, config)
                if turn == fork_turn:
                    fork_config = app.get_state(config).config
                progress.update(task, advance=1, description=f"turn {turn}/{turns}")

        latest = app.get_state(config)
        with _counting(saver, "get_delta_channel_history") as calls:
            history = list(app.get_state_history(latest.config))
        _print_history(console, history)

        assert fork_config is not None
        original_before = latest.values
        fork_point = app.get_state(fork_config)
        forked = app.invoke(
            {"messages": [{"role": "user", "content": "Let's start over from here instead."}]},
            fork_config,
        )
        original_after = app.get_state(latest.config).values
        fork_step = int((fork_point.metadata or {}).get("step", -1))
        console.print(
            f"[cyan]forked[/] from step {fork_step} ({len(fork_point.values['messages'])} "
            f"messages): the new branch has {len(forked['messages'])} messages, the original "
            f"still has {len(original_after['messages'])}"
            + (" (unchanged)" if original_after == original_before else " [red](CHANGED!)[/]")
        )

        everything = list(app.get_state_history(config))
        delta_bytes, full_bytes = storage_figures(saver, config, everything)
        approved = any(
            m["content"] == "refund approved by a human" for m in latest.values["messages"]
        )
        report = DemoReport(
            backend=backend,
            thread_id=thread_id,
            turns=turns,
            messages=len(latest.values["messages"]),
            checkpoints=len(everything),
            crash_turn=crash_turn,
            runs_at_crash=runs_at_crash,
            runs_after_resume=runs_after_resume,
            approval_turn=approval_turn,
            approval_paused_before=paused,
            approved=approved,
            fork_from_step=fork_step,
            fork_messages=len(forked["messages"]),
            original_messages=len(original_after["messages"]),
            original_intact=original_after == original_before,
            history_rows=len(history),
            history_delta_calls=calls["get_delta_channel_history"],
            delta_bytes=delta_bytes,
            full_snapshot_bytes=full_bytes,
            elapsed_seconds=time.perf_counter() - started,
        )
    _print_figures(console, report)
    return report


def _print_history(console: Console, history: Sequence[StateSnapshot], shown: int = 12) -> None:
    table = Table(title=f"history (newest {min(shown, len(history))} of {len(history)})")
    for column in ("step", "source", "nodes", "messages", "next"):
        table.add_column(column, justify="right" if column in ("step", "messages") else "left")
    for snapshot in history[:shown]:
        meta: Mapping[str, Any] = snapshot.metadata or {}
        table.add_row(
            str(meta.get("step", "")),
            str(meta.get("source", "")),
            ", ".join(map(str, meta.get("nodes") or ())),
            str(len(snapshot.values.get("messages", []))),
            ", ".join(snapshot.next),
        )
    console.print(table)


def _print_figures(console: Console, report: DemoReport) -> None:
    rerun = "[red]yes[/]" if report.finished_task_rerun else "[green]no[/]"
    lines = [
        f"turns: {report.turns} · messages: {report.messages} · "
        f"checkpoints (both branches): {report.checkpoints}",
        f"crash at turn {report.crash_turn}: finished task re-run on resume: {rerun}",
        f"approval at turn {report.approval_turn}: paused before "
        f"{list(report.approval_paused_before)}, approved after resume: {report.approved}",
        f"fork from step {report.fork_from_step}: new branch {report.fork_messages} messages, "
        f"original {report.original_messages} messages, intact: {report.original_intact}",
        f"history of {report.history_rows} checkpoints rebuilt in one forward pass: "
        f"{report.history_delta_calls} delta-history call(s), not one per checkpoint",
        f"message storage: {report.delta_bytes:,} bytes as deltas vs "
        f"{report.full_snapshot_bytes:,} bytes as full snapshots "
        f"({report.savings:.1f}x smaller)",
        f"done in {report.elapsed_seconds:.2f}s",
    ]
    console.print(Panel("\n".join(lines), title="figures", expand=False))
