"""Moving threads: `export`, `import` (portable JSONL) and `import-langgraph`."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable
from typing import TextIO

import click
from rich.markup import escape

from checkpointer.cli.common import (
    CliError,
    database_options,
    emit_json,
    json_option,
    open_database,
    progress,
    stderr_console,
    stdout_console,
)
from checkpointer.export import TransferCounts, export_threads, import_threads
from checkpointer.savers.sql.inspect import all_thread_ids_plan
from checkpointer.savers.sql.migration import parse_url


@click.command("export", short_help="Write threads to a portable JSONL file.")
@click.argument("thread_ids", nargs=-1, metavar="[THREAD]...")
@click.option("--all", "all_threads", is_flag=True, help="Export every thread.")
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write here (atomically) instead of standard output; never over the database, "
    "and over an existing file only with --force.",
)
@click.option("--force", is_flag=True, help="Replace an existing output file.")
@database_options
def export_cmd(
    thread_ids: tuple[str, ...],
    all_threads: bool,
    output: str | None,
    force: bool,
    url: str | None,
    schema: str | None,
) -> None:
    """Write threads to a portable JSONL file (every checkpoint, value and write).

    Values keep their exact stored bytes (base64), so `checkpointer import` reproduces the
    threads on any backend: SQLite to PostgreSQL and back.
    """
    if bool(thread_ids) == all_threads:
        raise CliError("name the threads to export, or pass --all (not both)")
    if output is not None:
        check_output_path(output, url, force=force)
    with open_database(url, schema) as db:
        threads = db.run(all_thread_ids_plan(db.dialect)) if all_threads else list(thread_ids)
        if not all_threads:
            db.require_threads(threads)
        with progress("exporting", total=len(threads)) as advance:

            def write(out: TextIO) -> TransferCounts:
                return export_threads(db, threads, out, on_thread=lambda *_: advance(1))

            if output is None:
                counts = write(sys.stdout)
                sys.stdout.flush()
            else:
                counts = write_atomically(output, write, force=force)
    stderr_console().print(
        f"exported {counts.threads} thread(s): {counts.checkpoints} checkpoints, "
        f"{counts.blobs} values, {counts.writes} writes"
        + (f" to {escape(output)}" if output else "")
    )


def _sqlite_files(url: str | None) -> list[str]:
    """The files a SQLite database URL stands for (main file, journal, WAL, shared memory);
    nothing for PostgreSQL or an in-memory database."""
    if not url:
        return []
    try:
        kind, target = parse_url(url)
    except ValueError:
        return []
    if kind != "sqlite" or target in ("", ":memory:") or target.startswith("file:"):
        return []
    return [target, *(f"{target}{suffix}" for suffix in ("-journal", "-wal", "-shm"))]


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)


def check_output_path(output: str, url: str | None, *, force: bool) -> None:
    """Refuse an output path that is the source database (or one of its side files, found
    by inode so another name for the same file is caught too), a directory, or an existing
    file unless `force`."""
    for db_file in _sqlite_files(url):
        if _same_file(output, db_file):
            raise CliError(f"refusing to write the export over the database it reads ({db_file})")
    if os.path.isdir(output):
        raise CliError(f"{output!r} is a directory")
    if os.path.lexists(output) and not force:
        raise CliError(f"{output!r} already exists; pass --force to replace it")
    parent = os.path.dirname(os.path.abspath(output))
    if not os.path.isdir(parent):
        raise CliError(f"no such directory: {parent!r}")


def write_atomically(
    output: str, write: Callable[[TextIO], TransferCounts], *, force: bool
) -> TransferCounts:
    """`write` into a fresh temporary file beside `output`, then move it into place: a
    failed export leaves no half file, and no other file (an `output.partial` of the
    user's, say) is touched. Without `force` the move refuses to replace a file that
    appeared meanwhile."""
    fd, tmp = tempfile.mkstemp(
        prefix=f".{os.path.basename(output)}.",
        suffix=".partial",
        dir=os.path.dirname(os.path.abspath(output)),
    )
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # what a plain open() would have given
        with os.fdopen(fd, "w", encoding="ascii", newline="\n") as out:
            counts = write(out)
        if force:
            os.replace(tmp, output)
        else:
            try:
                os.link(tmp, output)  # fails if output exists: no silent overwrite
            except FileExistsError as exc:
                raise CliError(f"{output!r} already exists; pass --force to replace it") from exc
            except OSError:
                if os.path.lexists(output):
                    raise CliError(
                        f"{output!r} already exists; pass --force to replace it"
                    ) from None
                os.replace(tmp, output)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    return counts


@click.command("import", short_help="Import a JSONL file written by export.")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--replace", is_flag=True, help="Overwrite threads that already exist.")
@database_options
@json_option
def import_cmd(
    file: str, replace: bool, url: str | None, schema: str | None, as_json: bool
) -> None:
    """Import a file written by `checkpointer export` (all or nothing: one transaction).

    Creates the schema in an empty database. Threads that already exist are refused
    unless --replace.
    """
    if file != "-" and not os.path.isfile(file):
        raise CliError(f"no such file: {file!r}")
    total = os.path.getsize(file) if file != "-" else None
    with open_database(url, schema, create=True) as db:
        stream = sys.stdin if file == "-" else open(file, encoding="ascii", errors="replace")  # noqa: SIM115
        try:
            with progress("importing", total=total, as_bytes=True) as advance:
                counts = import_threads(db, stream, replace=replace, on_line=advance)
        finally:
            if stream is not sys.stdin:
                stream.close()
        where = db.where
    _report_import(counts.as_dict(), where, as_json)


def _report_import(counts: dict[str, int], where: str, as_json: bool) -> None:
    if as_json:
        emit_json(counts)
        return
    stdout_console().print(
        f"imported {counts['threads']} thread(s): {counts['checkpoints']} checkpoints, "
        f"{counts.get('blobs', 0)} values, {counts['writes']} writes into {escape(where)}"
    )


@click.command("import-langgraph", short_help="Import threads from LangGraph's reference savers.")
@click.argument("source")
@click.option("--thread", "thread_ids", multiple=True, metavar="THREAD", help="Only these threads.")
@database_options
@json_option
def import_langgraph(
    source: str,
    thread_ids: tuple[str, ...],
    url: str | None,
    schema: str | None,
    as_json: bool,
) -> None:
    """Move threads from LangGraph's reference savers (SOURCE: their SQLite file or
    PostgreSQL URL) into this database, with history, pending writes and interrupts."""
    from checkpointer.importer import import_from_url

    try:
        kind, target = parse_url(source)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    if kind == "sqlite" and not os.path.isfile(target):
        raise CliError(f"no such SQLite database: {target!r}")
    with open_database(url, schema, create=True) as db:
        with progress("importing threads") as advance:
            report = import_from_url(
                source,
                db.saver,
                thread_ids=list(thread_ids) or None,
                on_thread=lambda *_: advance(1),
            )
        where = db.where
    counts = {
        "threads": len(report.threads),
        "checkpoints": report.checkpoints,
        "blobs": report.blobs,
        "writes": report.writes,
    }
    if as_json:
        emit_json({**counts, "thread_ids": report.threads})
        return
    _report_import(counts, where, as_json=False)
