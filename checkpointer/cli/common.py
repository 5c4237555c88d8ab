"""What every subcommand shares: database options, output (rich or JSON), progress, and the
one-line error a user sees instead of a traceback."""

from __future__ import annotations

import importlib
import json
import os
import sqlite3
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from checkpointer.cli.graphs import GraphChannels, load_graph
from checkpointer.errors import CheckpointerError
from checkpointer.inspect import Database, tool_serializer

F = TypeVar("F", bound=Callable[..., Any])

NO_URL = (
    "no database given: pass --url (a SQLite path, sqlite:///path or postgresql://...) "
    "or set CHECKPOINTER_URL"
)
WIDE = 200
"""Console width when output is not a terminal: ids and tables stay on one line in files."""


class CliError(click.ClickException):
    """An error shown as one line, `error: ...`, with exit code 1."""

    exit_code = 1

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.message}", err=True)


def one_line(text: str) -> str:
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


def describe_error(exc: BaseException) -> str:
    """The message for an exception that escaped a command: what went wrong, in one line."""
    if isinstance(exc, CheckpointerError):
        return one_line(str(exc))
    try:
        import psycopg
    except ImportError:  # pragma: no cover - psycopg is a dependency
        psycopg = None  # type: ignore[assignment]
    if psycopg is not None and isinstance(exc, psycopg.Error):
        return f"PostgreSQL: {one_line(str(exc))}"
    if isinstance(exc, sqlite3.Error):
        return f"SQLite: {one_line(str(exc))}"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    if isinstance(exc, ValueError | LookupError):
        return one_line(str(exc))
    return (
        f"unexpected {type(exc).__name__}: {one_line(str(exc))} (run with --traceback to see where)"
    )


# --------------------------------------------------------------------------- output
def stdout_console() -> Console:
    console = Console(highlight=False, soft_wrap=False)
    if not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(highlight=False, width=WIDE)
    return console


def stderr_console() -> Console:
    return Console(stderr=True, highlight=False)


def emit_json(data: Any) -> None:
    """Machine output: indented JSON on stdout, keys in a stable order."""
    click.echo(json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False))


@contextmanager
def progress(
    description: str, total: float | None = None, *, as_bytes: bool = False
) -> Iterator[Callable[[float], None]]:
    """A progress display on stderr (nothing when stderr is not a terminal); yields
    `advance(n)`."""
    console = stderr_console()
    columns: list[Any] = [SpinnerColumn(), TextColumn("{task.description}")]
    if total is not None:
        columns += [BarColumn(), DownloadColumn() if as_bytes else MofNCompleteColumn()]
    columns.append(TimeElapsedColumn())
    with Progress(
        *columns, console=console, transient=True, disable=not console.is_terminal
    ) as bar:
        task = bar.add_task(description, total=total)

        def advance(n: float = 1) -> None:
            bar.update(task, advance=n)

        yield advance


# --------------------------------------------------------------------------- options
def database_options(f: F) -> F:
    """`--url` and `--schema`, from the environment when not given."""
    f = click.option(
        "--schema",
        default=None,
        envvar="CHECKPOINTER_SCHEMA",
        help="PostgreSQL schema holding the tables (default: public).",
    )(f)
    f = click.option(
        "--url",
        default=None,
        envvar="CHECKPOINTER_URL",
        help="Database: a SQLite path or sqlite:///path, or postgresql://... "
        "[env: CHECKPOINTER_URL]",
    )(f)
    return f


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON for scripts.")(f)


def ns_option(f: F) -> F:
    return click.option(
        "--ns", "ns", default="", show_default=False, help="Checkpoint namespace (default: root)."
    )(f)


def graph_options(f: F) -> F:
    f = click.option(
        "--allow-module",
        "allow_modules",
        multiple=True,
        metavar="MODULE",
        help="Import this module and let stored values name its classes (repeatable).",
    )(f)
    f = click.option(
        "--graph",
        "graph_ref",
        default=None,
        metavar="MODULE:ATTR",
        help="A StateGraph, compiled graph (ours or LangGraph's) or state schema whose "
        "reducers rebuild delta channels.",
    )(f)
    return f


@contextmanager
def open_database(
    url: str | None,
    schema: str | None,
    *,
    create: bool = False,
    check: bool = True,
    modules: Sequence[str] = (),
) -> Iterator[Database]:
    """The database a command works on, schema checked (or created, with `create`)."""
    if not url:
        raise CliError(NO_URL)
    with Database.open(url, schema=schema, create=create, serde=tool_serializer(modules)) as db:
        if check:
            if create:
                db.ensure_schema()
            else:
                db.check_schema()
        yield db


def import_allowed_module(name: str) -> None:
    """Import an `--allow-module` module (from the working directory too), so that its
    classes exist to be matched: stored values never cause an import themselves."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(name)
    except Exception as exc:
        raise CliError(f"--allow-module {name!r}: cannot import it: {exc}") from exc


@contextmanager
def open_with_graph(
    url: str | None, schema: str | None, graph_ref: str | None, allow_modules: Sequence[str]
) -> Iterator[tuple[Database, GraphChannels | None]]:
    """The database plus the channels of `--graph` (whose module's classes may load)."""
    graph = load_graph(graph_ref) if graph_ref else None
    for name in allow_modules:  # the serializer never imports: the command line does
        import_allowed_module(name)
    modules = [*allow_modules, *(graph.modules if graph else ())]
    with open_database(url, schema, modules=modules) as db:
        yield db, graph
