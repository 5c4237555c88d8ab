"""Setting up: `migrate` (create or upgrade the schema) and `demo`."""

from __future__ import annotations

import click

from checkpointer.cli.common import NO_URL, CliError, database_options, open_database


@click.command(short_help="Run the demo chat thread.")
@click.option(
    "--db",
    "db_path",
    default=None,
    help="SQLite file for the demo thread (default: ./checkpointer-demo.db).",
)
@click.option("--url", default=None, help="Run on this database instead (postgresql://...).")
@click.option(
    "--schema",
    default=None,
    envvar="CHECKPOINTER_SCHEMA",
    help="PostgreSQL schema for the demo's tables (default: the URL's search path, else public).",
)
def demo(db_path: str | None, url: str | None, schema: str | None) -> None:
    """Run a chat thread: crash and resume, approval, history, fork, storage figures."""
    from checkpointer.demo import run_demo

    run_demo(db_path=db_path, url=url, schema=schema)


@click.command(short_help="Create or upgrade the database schema.")
@database_options
@click.option("--sql", "print_sql", is_flag=True, help="Print the SQL instead of applying it.")
def migrate(url: str | None, schema: str | None, print_sql: bool) -> None:
    """Create or upgrade the schema of a database to this version."""
    from checkpointer.savers.migrate import migrate as apply_migrations

    if not url:
        raise CliError(NO_URL)
    if print_sql:
        click.echo(apply_migrations(url, sql=True, schema=schema))
        return
    with open_database(url, schema, create=True, check=False) as db:
        before = db.revision()
        if before is None:
            from checkpointer.inspect_langgraph import WRITE_HINT, has_langgraph_tables

            if has_langgraph_tables(db):
                # Our tables do not belong in another saver's database.
                raise CliError(WRITE_HINT)
        db.saver.setup()
        after = db.revision()
    if before == after:
        click.echo(f"schema is up to date (revision {after})")
    else:
        click.echo(f"schema migrated from {before or 'nothing'} to revision {after}")
