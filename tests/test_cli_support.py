"""Shared by the CLI tests (no tests here): graphs that write threads, with our runtime and
with LangGraph through the drop-in, the databases they make, and a CLI runner.

The graphs live at module level so `--graph tests.test_cli_support:CHAT` can name them.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypedDict

from click.testing import CliRunner, Result

from checkpointer.channels import DeltaChannel
from checkpointer.cli import main
from checkpointer.graph import END, START, StateGraph, interrupt
from checkpointer.savers.sql.saver import SyncSqlSaver
from tests.conftest import PG_URL, drop_schema, require_postgres


@dataclass(frozen=True)
class Ticket:
    """A user class in state: loads only when its module is allowed."""

    title: str
    priority: int


def add_messages(state: list[Any], batches: list[list[Any]]) -> list[Any]:
    """Batched reducer of the message list."""
    return [*state, *(m for batch in batches for m in batch)]


class Chat(TypedDict):
    messages: Annotated[list, DeltaChannel(add_messages, snapshot_frequency=3)]
    turn: int


def bot(state: dict[str, Any]) -> dict[str, Any]:
    turn = state.get("turn", 0) + 1
    return {"messages": [f"reply {turn}"], "turn": turn}


def ask(state: dict[str, Any]) -> dict[str, Any]:
    answer = interrupt({"question": "ship it?"})
    return {"messages": [f"answer: {answer}"]}


def chat_builder() -> StateGraph:
    builder = StateGraph(Chat)
    builder.add_node("bot", bot)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", END)
    return builder


def ask_builder() -> StateGraph:
    builder = StateGraph(Chat)
    builder.add_node("bot", bot)
    builder.add_node("ask", ask)
    builder.add_edge(START, "bot")
    builder.add_edge("bot", "ask")
    builder.add_edge("ask", END)
    return builder


CHAT = chat_builder()
"""Our runtime's builder, for `--graph tests.test_cli_support:CHAT`."""

TURNS = 5
LG_TURNS = 6


def cfg(thread_id: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        configurable["checkpoint_id"] = checkpoint_id
    return {"configurable": configurable}


def write_ours(saver: Any) -> None:
    """Thread "chat": TURNS turns (delta snapshots every 3 updates); thread "ask": paused
    on an `interrupt()`."""
    chat = CHAT.compile(checkpointer=saver)
    for turn in range(TURNS):
        chat.invoke({"messages": [f"hi {turn}"]}, cfg("chat"))
    ask_builder().compile(checkpointer=saver).invoke({"messages": ["deploy?"]}, cfg("ask"))


def write_langgraph(saver: Any) -> None:
    """Thread "lg-chat" (delta message list of LangChain messages) and "lg-ask" (paused on
    a LangGraph interrupt), through the drop-in."""
    from langchain_core.messages import HumanMessage

    from checkpointer.langgraph import LangGraphSaver
    from tests.lg_graphs import ChatFew, approval_graph, chat_graph

    lg = LangGraphSaver(saver)
    chat_graph(ChatFew, LG_TURNS).compile(checkpointer=lg).invoke(
        {"messages": [HumanMessage(content="hi", id="h")], "turn": 0}, cfg("lg-chat")
    )
    approval_graph().compile(checkpointer=lg).invoke(
        {"messages": [HumanMessage(content="go", id="g")]}, cfg("lg-ask")
    )


def lg_chat_graph(saver: Any) -> Any:
    from checkpointer.langgraph import LangGraphSaver
    from tests.lg_graphs import ChatFew, chat_graph

    return chat_graph(ChatFew, LG_TURNS).compile(checkpointer=LangGraphSaver(saver))


# --------------------------------------------------------------------------- databases
@dataclass
class Db:
    """A database made for a test: SQLite file or PostgreSQL schema."""

    kind: str
    url: str
    schema: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def args(self) -> list[str]:
        return ["--url", self.url, *(["--schema", self.schema] if self.schema else [])]

    @contextmanager
    def saver(self) -> Iterator[SyncSqlSaver]:
        if self.kind == "sqlite":
            from checkpointer.savers.sqlite import SqliteSaver

            with SqliteSaver.from_conn_string(self.url) as sqlite:
                yield sqlite
        else:
            from checkpointer.savers.postgres import PostgresSaver

            with PostgresSaver.from_conn_string(
                self.url, schema=self.schema or "public", pool=False
            ) as pg:
                yield pg


@contextmanager
def make_db(kind: str, tmp: Path, *, ours: bool = True, langgraph: bool = True) -> Iterator[Db]:
    """A migrated database of `kind` holding the test threads; dropped afterwards."""
    if kind == "sqlite":
        db = Db("sqlite", str(tmp / f"{uuid.uuid4().hex[:8]}.db"))
    else:
        require_postgres()
        db = Db("postgres", PG_URL, f"cp_cli_{uuid.uuid4().hex[:12]}")
    try:
        with db.saver() as saver:
            saver.setup()
            if ours:
                write_ours(saver)
            if langgraph:
                write_langgraph(saver)
        yield db
    finally:
        if db.schema:
            drop_schema(db.schema)


@contextmanager
def empty_db(kind: str, tmp: Path, *, migrated: bool = True) -> Iterator[Db]:
    if kind == "sqlite":
        db = Db("sqlite", str(tmp / f"empty-{uuid.uuid4().hex[:8]}.db"))
        if not migrated:
            Path(db.url).touch()
    else:
        require_postgres()
        db = Db("postgres", PG_URL, f"cp_cli_{uuid.uuid4().hex[:12]}")
    try:
        if migrated:
            with db.saver() as saver:
                saver.setup()
        yield db
    finally:
        if db.schema:
            drop_schema(db.schema)


# --------------------------------------------------------------------------- running
def run(*args: str) -> Result:
    """The CLI in-process; stdout and stderr kept apart. COLUMNS is cleared, as in a plain
    pipe: the output is then as wide as its tables (pytest-xdist sets COLUMNS=80 in its
    workers, which would wrap it)."""
    return CliRunner().invoke(main, list(args), catch_exceptions=False, env={"COLUMNS": None})


def run_json(*args: str) -> Any:
    result = run(*args, "--json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def assert_one_line_error(result: Result, *needles: str) -> str:
    """Exit code != 0, exactly one line on stderr (`error: ...`), no traceback."""
    assert result.exit_code != 0, result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: "), lines[0]
    assert "Traceback" not in result.stderr + result.stdout
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def test_usage_errors_under_json_print_the_json_error_shape(tmp_path: Path) -> None:
    """A bad option value or an unknown option is click's usage error (usage and `Error:`
    on stderr, exit code 2); with --json, stdout also carries {"error": {"message"}}."""
    for args in (
        ["threads", "--sort", "nope", "--url", str(tmp_path / "x.db"), "--json"],
        ["history", "t", "--json", "--limit", "many"],
        ["show", "--json", "-o", str(tmp_path)],
    ):
        result = run(*args)
        assert result.exit_code == 2, (args, result.stdout, result.stderr)
        error = json.loads(result.stdout)["error"]["message"]
        assert error and "\n" not in error
        assert "Usage:" in result.stderr and "Error:" in result.stderr
    plain = run("threads", "--sort", "nope")
    assert plain.exit_code == 2 and plain.stdout == ""
    after_dashes = run("show", "--", "--json", "-o")
    assert after_dashes.stdout == ""
