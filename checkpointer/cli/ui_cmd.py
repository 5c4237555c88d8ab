"""`checkpointer ui`: serve the web viewer on a local port (needs the `ui` extra)."""

from __future__ import annotations

import os
import webbrowser

import click

from checkpointer.cli.common import CliError, database_options, graph_options, open_with_graph
from checkpointer.savers.sql.migration import parse_url


def _read_only_file(url: str) -> bool:
    """A SQLite file this user cannot write: open it for reading only."""
    try:
        kind, target = parse_url(url)
    except ValueError:
        return False
    if kind != "sqlite" or not os.path.exists(target):
        return False
    folder = os.path.dirname(os.path.abspath(target))
    return not os.access(target, os.W_OK) or not os.access(folder, os.W_OK)


@click.command("ui", short_help="Browse threads, forks and state in a local web page.")
@database_options
@graph_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", type=click.IntRange(0, 65535), default=0, help="Port (default: any free one)."
)
@click.option("--read-only", is_flag=True, help="Disable the actions (fork, copy).")
@click.option("--no-browser", is_flag=True, help="Print the URL only; do not open a browser.")
def ui(
    url: str | None,
    schema: str | None,
    graph_ref: str | None,
    allow_modules: tuple[str, ...],
    host: str,
    port: int,
    read_only: bool,
    no_browser: bool,
) -> None:
    """Serve a web page showing the database's threads: each thread's checkpoints as a tree
    (forks as branches), the full state at any checkpoint (delta channels rebuilt with the
    reducers of --graph), diffs, and fork / copy / export behind a confirmation.

    The page is for you only: it listens on 127.0.0.1 and every request needs the random
    token in the URL printed at start.
    """
    try:
        from checkpointer.ui.data import ReaderSource, writer_for
        from checkpointer.ui.server import bind, serve
    except ImportError as exc:
        raise CliError(
            f"the web viewer needs the ui extra ({exc.name} is missing): "
            'pip install "superstep-checkpointer[ui]"'
        ) from exc
    if not url:
        raise CliError("no database given: pass --url or set CHECKPOINTER_URL")
    read_only = read_only or _read_only_file(url)
    with (
        open_with_graph(url, schema, graph_ref, allow_modules) as (reader, graph),
        writer_for(reader, url, schema=schema, read_only=read_only) as writer,
    ):
        source = ReaderSource(reader, specs=graph.channels if graph else None, writer=writer)
        bound = bind(host, port)
        click.echo(f"checkpointer ui: {reader.where}" + (" (read-only)" if writer is None else ""))
        if host not in ("127.0.0.1", "localhost", "::1"):
            click.echo(f"warning: listening on {host}, not only this machine", err=True)
        click.echo(f"open {bound.url}")
        click.echo("press Ctrl-C to stop")
        if not no_browser:
            webbrowser.open(bound.url)
        serve(source, bound)
