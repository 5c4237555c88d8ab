"""Commands that change threads: `fork`, `copy`, `delete`, `delete-runs`, `prune`.

Destructive commands take `--dry-run`, which runs the very same operation inside a
transaction that is rolled back and reports what it removed: what you see is exactly what
the real run does.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from checkpointer.cli.common import (
    CliError,
    database_options,
    emit_json,
    json_option,
    ns_option,
    open_database,
    progress,
    stdout_console,
)
from checkpointer.cli.render import human_bytes
from checkpointer.inspect import Database, ThreadEffect, measure, simulate
from checkpointer.savers.base import PRUNE_STRATEGIES
from checkpointer.savers.sql.deletion import delete_for_runs_plan
from checkpointer.savers.sql.inspect import (
    existing_threads_plan,
    footprint_plan,
    threads_of_runs_plan,
)
from checkpointer.savers.sql.lifecycle import prune_keep_latest_plan
from checkpointer.savers.sql.plan import Plan
from checkpointer.savers.sql.transfer import (
    ForkResult,
    fork_in_place_plan,
    fork_to_thread_plan,
    refuse_bound_values_plan,
)


def _now() -> datetime:
    return datetime.now(UTC)


def _effects_json(effects: list[ThreadEffect], dry_run: bool, **extra: Any) -> dict[str, Any]:
    return {
        "dry_run": dry_run,
        **extra,
        "threads": [
            {
                "thread_id": e.thread_id,
                "checkpoints_before": e.checkpoints_before,
                "checkpoints_removed": len(e.removed),
                "checkpoints_kept": e.checkpoints_kept,
                "removed": [
                    {"checkpoint_ns": ns, "checkpoint_id": cid, "step": step}
                    for ns, cid, step in e.removed
                ],
                "writes_removed": e.writes_removed,
                "blobs_removed": e.blobs_removed,
                "bytes_reclaimed": e.bytes_reclaimed,
            }
            for e in effects
        ],
        "bytes_reclaimed": sum(e.bytes_reclaimed for e in effects),
    }


def _print_effects(effects: list[ThreadEffect], dry_run: bool, what: str) -> None:
    console = stdout_console()
    verb = "would remove" if dry_run else "removed"
    table = Table(title=f"{what}: dry run, nothing changed" if dry_run else what)
    for column in ("thread", "checkpoints", verb, "kept", "steps " + verb, "writes", "bytes"):
        table.add_column(column, justify="left" if column in ("thread",) else "right")
    for e in effects:
        steps = sorted({s for _, _, s in e.removed if s is not None})
        table.add_row(
            escape(e.thread_id),
            str(e.checkpoints_before),
            str(len(e.removed)),
            str(e.checkpoints_kept),
            _ranges(steps),
            str(e.writes_removed),
            human_bytes(e.bytes_reclaimed),
        )
    console.print(table)
    total = sum(e.bytes_reclaimed for e in effects)
    console.print(
        f"{'would reclaim' if dry_run else 'reclaimed'} {human_bytes(total)} "
        f"({sum(len(e.removed) for e in effects)} checkpoints)"
    )


def _ranges(steps: Sequence[int]) -> str:
    """[-1, 0, 1, 7] -> "-1..1, 7"."""
    if not steps:
        return "-"
    parts: list[str] = []
    start = prev = steps[0]
    for s in [*steps[1:], None]:
        if s is not None and s == prev + 1:
            prev = s
            continue
        parts.append(str(start) if start == prev else f"{start}..{prev}")
        if s is not None:
            start = prev = s
    return ", ".join(parts)


def _dialect_thread_delete(db: Database, thread_id: str) -> Plan[None]:
    delete_thread_plan = getattr(db.dialect, "delete_thread_plan")  # noqa: B009 - both dialects
    plan: Plan[None] = delete_thread_plan(thread_id).plan
    return plan


def _chain(*plans: Plan[None]) -> Plan[None]:
    for plan in plans:
        yield from plan


def fresh_run_ids_plan(db: Database, thread_id: str) -> Plan[dict[str, str]]:
    """Give every run of a copied thread a new id (column and metadata), so deleting a
    run of the source (`delete-runs RUN`) leaves the copy alone. Returns old -> new."""
    import uuid

    from checkpointer.savers.sql.plan import Stmt

    d = db.dialect
    rows = yield Stmt(
        f"SELECT DISTINCT run_id FROM {d.checkpoints} WHERE thread_id = {d.p('t')} "
        "AND run_id IS NOT NULL",
        {"t": thread_id},
        fetch=True,
    )
    mapping = {str(r[0]): str(uuid.uuid4()) for r in rows}
    meta = (
        f"jsonb_set(metadata, '{{run_id}}', to_jsonb(CAST({d.p('new')} AS text)))"
        if d.name == "postgresql"
        else f"json_set(metadata, '$.run_id', {d.p('new')})"
    )
    for old, new in mapping.items():
        yield Stmt(
            f"UPDATE {d.checkpoints} SET run_id = {d.p('new')}, metadata = {meta} "
            f"WHERE thread_id = {d.p('t')} AND run_id = {d.p('old')}",
            {"t": thread_id, "old": old, "new": new},
        )
    return mapping


# --------------------------------------------------------------------------- fork / copy
@click.command(short_help="Branch from a checkpoint, in place or into a new thread.")
@click.argument("thread_id")
@click.argument("checkpoint")
@click.option(
    "--to", "target", default=None, metavar="NEW_THREAD", help="Copy the branch to a new thread."
)
@database_options
@ns_option
@json_option
def fork(
    thread_id: str,
    checkpoint: str,
    target: str | None,
    url: str | None,
    schema: str | None,
    ns: str,
    as_json: bool,
) -> None:
    """Branch from CHECKPOINT: the next run continues from there.

    Without --to: adds to THREAD a copy of CHECKPOINT (same state and parent,
    source "fork", metadata forked_from) as its new head; the next invoke on THREAD runs
    the step after CHECKPOINT again, and the old branch stays intact.

    With --to NEW_THREAD: copies CHECKPOINT and all its ancestors (values and pending
    writes, so delta channels rebuild) into NEW_THREAD, whose head it becomes. CHECKPOINT's
    own pending writes come along only if it had no child (the new thread then resumes
    exactly where the old one stood, interrupts included).
    """
    with open_database(url, schema) as db:
        checkpoint_id = db.resolve(thread_id, ns, checkpoint)
        with progress("forking"):
            plan = (
                fork_to_thread_plan(db.dialect, thread_id, target, ns, checkpoint_id)
                if target is not None
                else fork_in_place_plan(db.dialect, thread_id, ns, checkpoint_id)
            )
            result: ForkResult = db.run(plan, txn=True)
            if target is not None:
                db.run(fresh_run_ids_plan(db, target), txn=True)
    if as_json:
        emit_json(
            {
                "mode": "new_thread" if target is not None else "in_place",
                "thread_id": result.thread_id,
                "checkpoint_ns": result.checkpoint_ns,
                "checkpoint_id": result.checkpoint_id,
                "source_thread_id": thread_id,
                "source_checkpoint_id": result.source_checkpoint_id,
                "checkpoints": result.checkpoints,
                "pending_writes_copied": result.pending_writes_copied,
            }
        )
        return
    console = stdout_console()
    if target is None:
        console.print(
            f"forked thread [bold]{escape(thread_id)}[/] at {checkpoint_id}: new head "
            f"[cyan]{result.checkpoint_id}[/] (source fork); the next run of the thread "
            "continues from it"
        )
    else:
        pending = (
            "with its pending writes"
            if result.pending_writes_copied
            else "without its pending writes (they made its child in the source)"
        )
        console.print(
            f"copied the branch ending at {checkpoint_id} ({result.checkpoints} checkpoints) "
            f"into thread [bold]{escape(target)}[/], head {pending}"
        )


@click.command(short_help="Copy a thread to a new thread.")
@click.argument("source")
@click.argument("target")
@database_options
@json_option
def copy(source: str, target: str, url: str | None, schema: str | None, as_json: bool) -> None:
    """Copy thread SOURCE, every branch and namespace, to the new thread TARGET."""
    if source == target:
        raise CliError("source and target are the same thread")
    with open_database(url, schema) as db:
        db.require_threads([source])
        if db.run(existing_threads_plan(db.dialect, [target])):
            raise CliError(f"thread {target!r} already exists; delete it first or pick another")
        # The tools hold no keys: values bound to their thread cannot be re-sealed here.
        db.run(refuse_bound_values_plan(db.dialect, source, f"copy thread {source!r}"))
        with progress("copying"):
            db.saver.copy_thread(source, target)
            db.run(fresh_run_ids_plan(db, target), txn=True)
        copied = db.run(footprint_plan(db.dialect, [target]))
    counts = {
        "checkpoints": len(copied.checkpoints),
        "blobs": copied.blobs.get(target, 0),
        "writes": copied.writes.get(target, 0),
        "bytes": copied.total_bytes(),
    }
    if as_json:
        emit_json({"source": source, "target": target, **counts})
        return
    stdout_console().print(
        f"copied thread [bold]{escape(source)}[/] to [bold]{escape(target)}[/]: "
        f"{counts['checkpoints']} checkpoints, {counts['writes']} writes, "
        f"{counts['blobs']} values ({human_bytes(counts['bytes'])})"
    )


# --------------------------------------------------------------------------- removal
@click.command(short_help="Delete threads.")
@click.argument("thread_ids", nargs=-1, required=True, metavar="THREAD...")
@database_options
@click.option("--dry-run", is_flag=True, help="Show what would be deleted; change nothing.")
@json_option
def delete(
    thread_ids: tuple[str, ...], url: str | None, schema: str | None, dry_run: bool, as_json: bool
) -> None:
    """Delete threads: every checkpoint, value and pending write."""
    threads = list(dict.fromkeys(thread_ids))
    with open_database(url, schema) as db:
        db.require_threads(threads)
        with progress("deleting"):
            if dry_run:
                result = simulate(
                    db, threads, _chain(*(_dialect_thread_delete(db, t) for t in threads))
                )
            else:

                def delete_all() -> None:
                    for thread_id in threads:
                        db.saver.delete_thread(thread_id)

                result = measure(db, threads, delete_all)
    if as_json:
        emit_json(_effects_json(result, dry_run))
        return
    _print_effects(result, dry_run, "delete")


@click.command("delete-runs", short_help="Delete the checkpoints some runs created.")
@click.argument("run_ids", nargs=-1, required=True, metavar="RUN_ID...")
@database_options
@click.option(
    "--thread",
    "only_threads",
    multiple=True,
    metavar="THREAD",
    help="Only in these threads (repeatable); other threads keep the runs' checkpoints.",
)
@click.option("--dry-run", is_flag=True, help="Show what would be deleted; change nothing.")
@json_option
def delete_runs(
    run_ids: tuple[str, ...],
    url: str | None,
    schema: str | None,
    only_threads: tuple[str, ...],
    dry_run: bool,
    as_json: bool,
) -> None:
    """Delete the checkpoints some runs created (their writes and unused values too).

    Refuses when another run's checkpoints rebuild their delta channels from them.
    """
    runs = list(dict.fromkeys(run_ids))
    with open_database(url, schema) as db:
        found = db.run(threads_of_runs_plan(db.dialect, runs))
        if only_threads:
            db.require_threads(list(only_threads))
            found = {r: [t for t in ts if t in only_threads] for r, ts in found.items()}
            found = {r: ts for r, ts in found.items() if ts}
        unknown = [r for r in runs if r not in found]
        if unknown:
            where = f" in thread(s) {', '.join(map(repr, only_threads))}" if only_threads else ""
            raise CliError(
                f"no checkpoint was created by run {', '.join(map(repr, unknown))}{where}"
            )
        threads = sorted({t for ts in found.values() for t in ts})
        plan = delete_for_runs_plan(db.dialect, runs, threads if only_threads else None)
        with progress("deleting runs"):
            if dry_run:
                result = simulate(db, threads, plan)
            elif only_threads:
                result = measure(db, threads, lambda: db.run(plan, txn=True))
            else:
                result = measure(db, threads, lambda: db.saver.delete_for_runs(runs))
    if as_json:
        emit_json(_effects_json(result, dry_run, run_ids=runs))
        return
    _print_effects(result, dry_run, f"delete runs {', '.join(runs)}")


@click.command(short_help="Remove old checkpoints; heads stay readable.")
@click.argument("thread_ids", nargs=-1, required=True, metavar="THREAD...")
@database_options
@click.option(
    "--strategy",
    type=click.Choice(PRUNE_STRATEGIES),
    default="keep_latest",
    show_default=True,
    help="keep_latest: keep each namespace's head and what its delta channels replay from; "
    "delete: remove the threads.",
)
@click.option("--dry-run", is_flag=True, help="Show what would go and the bytes reclaimed.")
@json_option
def prune(
    thread_ids: tuple[str, ...],
    url: str | None,
    schema: str | None,
    strategy: str,
    dry_run: bool,
    as_json: bool,
) -> None:
    """Prune old checkpoints of threads, keeping every head readable."""
    threads = list(dict.fromkeys(thread_ids))
    with open_database(url, schema) as db:
        db.require_threads(threads)
        with progress(f"pruning {len(threads)} thread(s)"):
            if dry_run:
                action = (
                    prune_keep_latest_plan(db.dialect, db.saver.serde, threads, _now())
                    if strategy == "keep_latest"
                    else _chain(*(_dialect_thread_delete(db, t) for t in threads))
                )
                result = simulate(db, threads, action)
            else:
                result = measure(db, threads, lambda: db.saver.prune(threads, strategy=strategy))
    if as_json:
        emit_json(_effects_json(result, dry_run, strategy=strategy))
        return
    _print_effects(result, dry_run, f"prune ({strategy})")
