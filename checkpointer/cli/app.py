"""The `checkpointer` command group: registers every subcommand and turns any error that
escapes one into a single `error: ...` line on stderr with a non-zero exit code."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import click

from checkpointer.cli.common import CliError, describe_error, one_line, wants_json
from checkpointer.cli.manage_cmds import copy, delete, delete_runs, fork, prune
from checkpointer.cli.read_cmds import diff, history, show, stats, threads
from checkpointer.cli.setup_cmds import demo, migrate
from checkpointer.cli.transfer_cmds import export_cmd, import_cmd, import_langgraph
from checkpointer.cli.ui_cmd import ui

TRACEBACK_ENV = "CHECKPOINTER_TRACEBACK"
DISTRIBUTION = "superstep-checkpointer"
"""The name on PyPI (`checkpointer` there is an unrelated caching library); the import
package and the command are `checkpointer`."""


def _version() -> str:
    """This distribution's version (a checkout installed under the old name still works)."""
    from importlib.metadata import PackageNotFoundError, version

    for name in (DISTRIBUTION, "checkpointer"):
        try:
            return version(name)
        except PackageNotFoundError:
            continue
    return "unknown"


class CheckpointerGroup(click.Group):
    """A click group whose commands never end in a traceback (unless asked for), listed in
    the order a user meets them rather than alphabetically."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(self.commands)

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        # Noted before any parsing, so that a usage error in the subcommand's arguments
        # (before --json is reached, or in --json's own command) still answers in JSON.
        head = args[: args.index("--")] if "--" in args else args
        if "--json" in head:
            ctx.meta["checkpointer.json_asked"] = True
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            # click prints the usage and `Error: ...` on stderr, exit code 2; a script that
            # asked for JSON also gets the error shape every other failure prints.
            if ctx.meta.get("checkpointer.json_asked") or wants_json():
                message = one_line(exc.format_message())
                click.echo(json.dumps({"error": {"message": message}}, ensure_ascii=False))
            raise
        except (click.exceptions.Exit, click.Abort, click.ClickException):
            raise
        except KeyboardInterrupt as exc:
            raise click.Abort() from exc
        except BrokenPipeError:
            # The reader went away (`... | head`): stop quietly, like other Unix tools.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            raise click.exceptions.Exit(1) from None
        except Exception as exc:
            if (ctx.obj or {}).get("traceback") or os.environ.get(TRACEBACK_ENV):
                raise
            raise CliError(describe_error(exc), as_json=wants_json()) from exc


@click.group(cls=CheckpointerGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=_version(), prog_name="checkpointer")
@click.option(
    "--traceback",
    is_flag=True,
    help=f"Show the full traceback of an unexpected error (or set {TRACEBACK_ENV}=1).",
)
@click.pass_context
def main(ctx: click.Context, traceback: bool) -> None:
    """Checkpoint persistence for superstep graph runtimes: see, compare, fork and manage
    threads.

    Every command takes --url (a SQLite path or sqlite:///path, or postgresql://...; or
    set CHECKPOINTER_URL), --schema for PostgreSQL, and --json for scripts where it prints
    data.
    """
    ctx.obj = {"traceback": traceback}


for command in (
    threads,
    history,
    show,
    diff,
    stats,
    fork,
    copy,
    delete,
    delete_runs,
    prune,
    export_cmd,
    import_cmd,
    import_langgraph,
    migrate,
    demo,
    ui,
):
    main.add_command(command)
