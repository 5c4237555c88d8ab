"""Shared by the viewer's tests: demo databases, extra threads with awkward values, and the
browser (Debian's chromium, never a downloaded one)."""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypedDict

import pytest
from rich.console import Console

from checkpointer.cli.graphs import load_graph
from checkpointer.demo import run_demo
from checkpointer.graph import END, START, StateGraph, interrupt
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.types import make_config
from checkpointer.ui.data import ReaderSource, open_source

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts" / "ui"
SCRIPT = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
SCRIPT_THREAD = "xss-thread"
WAITING_THREAD = "waiting-thread"


class NoteState(TypedDict):
    note: str


def build_demo(path: Path) -> str:
    """The demo thread (a fork, a delta message list) in a SQLite file; its thread id."""
    report = run_demo(db_path=str(path), console=Console(file=io.StringIO()), turns=12)
    return report.thread_id


def add_script_thread(path: Path) -> None:
    """A thread whose state holds markup and script, which must show as text."""
    builder = StateGraph(NoteState)
    builder.add_node("write", lambda s: {"note": s["note"] + " (seen)"})
    builder.add_edge(START, "write")
    builder.add_edge("write", END)
    with SqliteSaver.from_conn_string(str(path)) as saver:
        builder.compile(checkpointer=saver).invoke({"note": SCRIPT}, make_config(SCRIPT_THREAD))


def add_waiting_thread(path: Path) -> None:
    """A thread paused by interrupt(): a human's answer is pending."""

    def ask(state: NoteState) -> dict[str, Any]:
        answer = interrupt("approve the refund?")
        return {"note": str(answer)}

    builder = StateGraph(NoteState)
    builder.add_node("ask", ask)
    builder.add_edge(START, "ask")
    builder.add_edge("ask", END)
    with SqliteSaver.from_conn_string(str(path)) as saver:
        builder.compile(checkpointer=saver).invoke({"note": "hi"}, make_config(WAITING_THREAD))


def demo_specs() -> dict[str, Any]:
    """The demo's channels: the message list's reducer rebuilds it."""
    return dict(load_graph("checkpointer.demo:ChatState").channels)


@contextmanager
def source_on(path: Path, *, read_only: bool = False) -> Iterator[ReaderSource]:
    """The viewer's source as `checkpointer ui` builds it (reads through the CLI's reader)."""
    with open_source(str(path), specs=demo_specs(), read_only=read_only) as source:
        yield source


def copy_db(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    for suffix in ("-wal", "-shm"):
        if Path(f"{src}{suffix}").exists():
            shutil.copyfile(f"{src}{suffix}", f"{dst}{suffix}")
    return dst


def require_chromium() -> str:
    """The browser binary; skip without it, except under CI=true, where the browser tests
    must run (fail)."""
    problem = None
    if not os.path.exists(CHROMIUM):
        problem = f"{CHROMIUM} is missing (apt-get install chromium)"
    else:
        try:
            import playwright.sync_api  # noqa: F401
        except ImportError:
            problem = "the playwright package is missing (pip install -e '.[test]')"
    if problem is not None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(problem + " (CI=true: the browser tests must run)")
        pytest.skip(problem)
    return CHROMIUM
