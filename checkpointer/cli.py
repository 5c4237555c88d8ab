"""The `checkpointer` command: the demo, migrations, and (later) thread tools."""

from __future__ import annotations

import sys

import click

from checkpointer.errors import CheckpointerError


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="checkpointer")
def main() -> None:
    """Checkpoint persistence for superstep graph runtimes."""


@main.command()
@click.option(
    "--db",
    "db_path",
    default=None,
    help="SQLite file for the demo thread (default: ./checkpointer-demo.db).",
)
@click.option("--url", default=None, help="Run on this database instead (postgresql://...).")
def demo(db_path: str | None, url: str | None) -> None:
    """Run a chat thread: crash and resume, approval, history, fork, storage figures."""
    from checkpointer.demo import run_demo

    _run(lambda: run_demo(db_path=db_path, url=url))


@main.command()
@click.option("--url", required=True, envvar="CHECKPOINTER_URL", help="Database URL or path.")
@click.option("--sql", "print_sql", is_flag=True, help="Print the SQL instead of applying it.")
def migrate(url: str, print_sql: bool) -> None:
    """Create or upgrade the schema of a database to this version."""
    from checkpointer.savers.sql import migrate as apply_migrations

    def go() -> None:
        result = apply_migrations(url, sql=print_sql)
        if print_sql and result:
            click.echo(result)
        elif not print_sql:
            click.echo("schema is up to date")

    _run(go)


def _run(action: object) -> None:
    """Turn library errors into one clear line and a non-zero exit, never a traceback."""
    try:
        action()  # type: ignore[operator]
    except CheckpointerError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
