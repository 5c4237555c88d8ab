"""Moving threads: `export`, `import` (portable JSONL) and `import-langgraph`."""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, TextIO

import click
from rich.markup import escape

from checkpointer.cli.common import (
    NO_URL,
    CliError,
    database_options,
    emit_json,
    json_option,
    open_database,
    open_read,
    progress,
    stderr_console,
    stdout_console,
)
from checkpointer.export import TransferCounts, export_threads, import_threads
from checkpointer.inspect import Database
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
    with open_read(url, schema) as reader:
        threads = reader.all_thread_ids() if all_threads else list(thread_ids)
        if not all_threads:
            reader.require_threads(threads)
        with (
            progress("exporting", total=len(threads)) as advance,
            exportable(reader, threads) as db,
        ):

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


@contextlib.contextmanager
def exportable(reader: Any, thread_ids: list[str]) -> Iterator[Database]:
    """A database of our schema holding the reader's threads: the reader itself, or for
    a LangGraph database, an in-memory copy made by the one import path (so the file is
    what `checkpointer import` reads, values in our serializer's form)."""
    if isinstance(reader, Database):
        yield reader
        return
    from checkpointer.importer import import_threads
    from checkpointer.serde.compression import database_default_serializer

    with Database.open(":memory:", create=True) as memory:
        memory.ensure_schema()
        memory.saver.serde = database_default_serializer()
        import_threads(reader, memory.saver, thread_ids=thread_ids)
        yield memory


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
    with removed_if_new_on_failure(url), open_database(url, schema, create=True) as db:
        stream = sys.stdin if file == "-" else open(file, encoding="ascii", errors="replace")  # noqa: SIM115
        try:
            with progress("importing", total=total, as_bytes=True) as advance:
                counts = import_threads(db, stream, replace=replace, on_line=advance)
        finally:
            if stream is not sys.stdin:
                stream.close()
        where = db.where
    _report_import(counts.as_dict(), where, as_json)


@contextlib.contextmanager
def removed_if_new_on_failure(url: str | None) -> Iterator[None]:
    """A SQLite target that did not exist before is removed again when the command fails:
    a failed import leaves no empty database behind."""
    files = _sqlite_files(url)
    created = bool(files) and not os.path.exists(files[0])
    try:
        yield
    except BaseException:
        if created:
            for name in files:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(name)
        raise


def _report_import(counts: dict[str, int], where: str, as_json: bool) -> None:
    if as_json:
        emit_json(counts)
        return
    stdout_console().print(
        f"imported {counts['threads']} thread(s): {counts['checkpoints']} checkpoints, "
        f"{counts.get('blobs', 0)} values, {counts['writes']} writes into {escape(where)}"
    )


@click.command("import-langgraph", short_help="Import threads from LangGraph's own savers.")
@click.argument("source")
@click.option("--thread", "thread_ids", multiple=True, metavar="THREAD", help="Only these threads.")
@click.option(
    "--source-schema", default=None, help="PostgreSQL schema of the source (default: its own)."
)
@database_options
@json_option
def import_langgraph(
    source: str,
    thread_ids: tuple[str, ...],
    source_schema: str | None,
    url: str | None,
    schema: str | None,
    as_json: bool,
) -> None:
    """Move threads from LangGraph's own savers (SOURCE: their SQLite file or PostgreSQL
    URL, read only) into this database, with history, pending writes and interrupts.

    Threads already imported are reported as such and left alone; a thread id the target
    holds with other checkpoints is skipped, never merged. A SQLite target that did not
    exist is removed again when the import fails.
    """
    from checkpointer.importer import import_threads, open_source

    if not url:
        raise CliError(NO_URL)
    with open_source(source, schema=source_schema) as reader:
        if thread_ids:
            reader.require_threads(list(thread_ids))
        if not reader.all_thread_ids():
            raise CliError(f"the import source {reader.where} holds no threads")
        with (
            removed_if_new_on_failure(url),
            open_database(url, schema, create=True) as db,
            target_saver(url, db) as saver,
        ):
            with progress("importing threads") as advance:
                report = import_threads(
                    reader,
                    saver,
                    thread_ids=list(thread_ids) or None,
                    on_thread=lambda *_: advance(1),
                )
            where = db.where
    if as_json:
        emit_json(report.as_dict())
        return
    console = stdout_console()
    console.print(
        f"imported {len(report.threads)} thread(s): {report.checkpoints} checkpoints, "
        f"{report.blobs} values, {report.writes} writes into {escape(where)}"
    )
    if report.present:
        console.print(f"already present, nothing to do: {escape(', '.join(report.present))}")
    for thread_id in report.skipped:
        console.print(
            f"[yellow]skipped {escape(thread_id)}:[/] {escape(report.reasons[thread_id])}"
        )


@contextlib.contextmanager
def target_saver(url: str, db: Any) -> Iterator[Any]:
    """The saver an import writes through: the database's own, with the serializer a saver
    of that URL uses by default (values compressed as an application's saver would)."""
    from checkpointer.serde.compression import database_default_serializer

    saver = db.saver
    saved = saver.serde
    saver.serde = database_default_serializer()
    try:
        yield saver
    finally:
        saver.serde = saved
