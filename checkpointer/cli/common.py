"""What every subcommand shares: database options, output (rich or JSON), progress, and the
one-line error a user sees instead of a traceback."""

from __future__ import annotations

import importlib
import io
import json
import os
import sqlite3
import subprocess
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
from checkpointer.inspect import Database, open_reader, tool_serializer
from checkpointer.reader import Reader

F = TypeVar("F", bound=Callable[..., Any])

NO_URL = (
    "no database given: pass --url (a SQLite path, sqlite:///path or postgresql://...) "
    "or set CHECKPOINTER_URL"
)
WIDE = 200
"""Console width when output is not a terminal: ids and tables stay on one line in files."""


class CliError(click.ClickException):
    """An error shown as one line, `error: ...`, with exit code 1; with `--json`, also as
    `{"error": {"message": ...}}` on stdout so a script reading JSON gets JSON."""

    exit_code = 1

    def __init__(self, message: str, *, as_json: bool | None = None) -> None:
        super().__init__(message)
        self.as_json = as_json

    def show(self, file: Any = None) -> None:
        if self.as_json if self.as_json is not None else wants_json():
            click.echo(json.dumps({"error": {"message": self.message}}, ensure_ascii=False))
        click.echo(f"error: {self.message}", err=True)


def wants_json() -> bool:
    """Whether the running command was given --json."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.find_root().meta.get("checkpointer.json"))


def _note_json(ctx: click.Context, _param: Any, value: bool) -> bool:
    if value:
        ctx.find_root().meta["checkpointer.json"] = True
    return value


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
def _meta(key: str) -> Any:
    ctx = click.get_current_context(silent=True)
    return None if ctx is None else ctx.find_root().meta.get(key)


def stdout_console() -> Console:
    width = _meta("checkpointer.width")
    console = Console(highlight=False, soft_wrap=False, width=width)
    if width is None and not console.is_terminal and not os.environ.get("COLUMNS"):
        console = Console(highlight=False, width=WIDE)
    return console


DEFAULT_PAGER = "less -FRX"
"""As git does: -F quits when the text fits one screen, -R keeps colours, -X leaves the
text on the screen."""


@contextmanager
def paged_console() -> Iterator[Console]:
    """A console whose output goes through a pager (`$PAGER`, else `less -FRX`) when stdout
    is a terminal and the output is longer than it, as `git log` does; `--no-pager` or
    `PAGER=cat` turn it off. Off a terminal, output is written as it is."""
    direct = stdout_console()
    if not direct.is_terminal or _meta("checkpointer.no_pager"):
        yield direct
        return
    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=direct.width,
        highlight=False,
        soft_wrap=False,
        force_terminal=True,
        color_system=direct.color_system,  # type: ignore[arg-type]
    )
    yield console
    text = buffer.getvalue()
    pager = os.environ.get("PAGER", DEFAULT_PAGER).strip()
    if text.count("\n") < direct.height or pager in ("", "cat"):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    try:
        env = {**os.environ, "LESS": os.environ.get("LESS", "FRX")}
        subprocess.run(pager, shell=True, input=text.encode(), env=env, check=False)
    except OSError:
        sys.stdout.write(text)


def _note(key: str) -> Callable[[click.Context, Any, Any], Any]:
    def callback(ctx: click.Context, _param: Any, value: Any) -> Any:
        if value:
            ctx.find_root().meta[key] = value
        return value

    return callback


def output_options(f: F) -> F:
    """`--width`, `--no-pager` and `--key-file`, for commands that print tables."""
    f = click.option(
        "--key-file",
        type=click.Path(dir_okay=False),
        expose_value=False,
        callback=_note("checkpointer.key_file"),
        help="Keys to read encrypted values: one key_id:base64 per line "
        "(or $CHECKPOINTER_KEY_FILE, or $CHECKPOINTER_KEYS=id:base64,...).",
    )(f)
    f = click.option(
        "--no-pager",
        is_flag=True,
        expose_value=False,
        callback=_note("checkpointer.no_pager"),
        help="Never page long output (also: PAGER=cat).",
    )(f)
    f = click.option(
        "--width",
        type=click.IntRange(min=40),
        expose_value=False,
        callback=_note("checkpointer.width"),
        help="Lay tables out for this many columns (default: the terminal's).",
    )(f)
    return f


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
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        callback=_note_json,
        help='Print JSON for scripts (errors too: {"error": {"message": ...}}).',
    )(f)


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
    """The database a command changes, schema checked (or created, with `create`). A
    database of LangGraph's own saver is refused with a pointer to `import-langgraph`."""
    if not url:
        raise CliError(NO_URL)
    with Database.open(url, schema=schema, create=create, serde=tool_serializer(modules)) as db:
        if check and db.revision() is None:
            from checkpointer.inspect_langgraph import WRITE_HINT, has_langgraph_tables

            if has_langgraph_tables(db):
                raise CliError(WRITE_HINT)
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
def open_read(
    url: str | None, schema: str | None, *, modules: Sequence[str] = ()
) -> Iterator[Reader]:
    """A database only read, opened so it cannot change: our schema or LangGraph's."""
    if not url:
        raise CliError(NO_URL)
    with open_reader(url, schema=schema, serde=tool_serializer(modules)) as reader:
        apply_keys(reader)
        yield reader


@contextmanager
def open_with_graph(
    url: str | None, schema: str | None, graph_ref: str | None, allow_modules: Sequence[str]
) -> Iterator[tuple[Reader, GraphChannels | None]]:
    """The database (read-only) plus the channels of `--graph` (whose module's classes may
    load)."""
    graph = load_graph(graph_ref) if graph_ref else None
    for name in allow_modules:  # the serializer never imports: the command line does
        import_allowed_module(name)
    modules = [*allow_modules, *(graph.modules if graph else ())]
    with open_read(url, schema, modules=modules) as reader:
        yield reader, graph


def apply_keys(reader: Reader) -> None:
    """Give the reader the operator's keys ($CHECKPOINTER_KEYS or the file named by
    $CHECKPOINTER_KEY_FILE) so encrypted values can be shown."""
    from checkpointer.cli.keys import keys_serializer

    serde = keys_serializer(getattr(reader, "serde", None), _meta("checkpointer.key_file"))
    if serde is not None and isinstance(reader, Database):
        reader.value_serde = serde
