"""Read-only commands: `threads`, `history`, `show`, `diff`, `stats`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import click
from rich.console import Console, Group, RenderableType
from rich.markup import escape
from rich.measure import Measurement
from rich.padding import Padding
from rich.panel import Panel
from rich.pretty import Pretty
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from checkpointer.cli.common import (
    CliError,
    database_options,
    emit_json,
    graph_options,
    json_option,
    ns_option,
    open_read,
    open_with_graph,
    output_options,
    paged_console,
    progress,
)
from checkpointer.cli.render import (
    diff_json,
    history_json,
    human_bytes,
    jsonable,
    names,
    short_ts,
    state_json,
    step_label,
)
from checkpointer.inspect import (
    ChannelView,
    DiffView,
    HistoryEntry,
    StateView,
    WriteView,
    diff_view,
    is_internal_channel,
    state_view,
)
from checkpointer.inspect import history as history_view
from checkpointer.savers.sql.inspect import THREAD_SORTS

DELTA_HINT = (
    "delta channels are shown as their nearest stored snapshot plus the writes since; "
    "pass --graph module:attr to rebuild their values"
)


# --------------------------------------------------------------------------- threads
@click.command(short_help="List threads: checkpoints, last step and update, bytes.")
@database_options
@click.option(
    "--sort",
    type=click.Choice(THREAD_SORTS),
    default="updated",
    show_default=True,
    help="updated: newest first; count/bytes: largest first; id: by thread id.",
)
@click.option(
    "--limit", type=click.IntRange(min=0), default=50, show_default=True, help="0: no limit."
)
@click.option(
    "--offset", type=click.IntRange(min=0), default=0, help="Skip this many threads first."
)
@output_options
@json_option
def threads(
    url: str | None, schema: str | None, sort: str, limit: int, offset: int, as_json: bool
) -> None:
    """List threads: namespaces, checkpoints, last step and update, bytes stored."""
    with open_read(url, schema) as db:
        total, rows = db.thread_summaries(sort, limit or None, offset)
    if as_json:
        emit_json(
            {
                "total": total,
                "threads": [
                    {
                        "thread_id": r.thread_id,
                        "namespaces": r.namespaces,
                        "checkpoints": r.checkpoints,
                        "last_checkpoint_id": r.last_checkpoint_id,
                        "last_step": r.last_step,
                        "last_updated": r.last_updated,
                        "bytes": r.bytes,
                    }
                    for r in rows
                ],
            }
        )
        return
    with paged_console() as console:
        if not rows:
            console.print(f"no threads in {escape(db.where)}")
            return
        nested = any(r.namespaces != [""] for r in rows)
        wide = console.width >= 100
        columns = [
            Col("thread", lambda r: escape(r.thread_id), 0, overflow="fold", min_width=8),
            Col("checkpoints", lambda r: str(r.checkpoints), 1, justify="right"),
            Col("last step", lambda r: step_label(r.last_step), 2, justify="right"),
            Col("bytes", lambda r: human_bytes(r.bytes), 3, justify="right", min_width=8),
            Col("last update", lambda r: short_ts(r.last_updated), 4, no_wrap=True),
        ]
        if wide or nested:
            columns.insert(
                1,
                Col(
                    "namespaces" if wide else "ns",
                    lambda r: (
                        escape(", ".join(ns or "(root)" for ns in r.namespaces))
                        if wide
                        else str(len(r.namespaces))
                    ),
                    5 if not nested else 2,
                    overflow="fold",
                ),
            )
        title = f"threads ({len(rows)} of {total}, by {sort})"
        print_fitted(console, title, columns, rows)


@dataclass
class Col:
    """A table column: header, how a row fills it, and its priority (0: always shown;
    higher numbers are dropped first when the terminal is too narrow for all)."""

    header: str
    cell: Callable[[Any], Any]
    priority: int = 0
    options: dict[str, Any] = field(default_factory=dict)

    def __init__(
        self, header: str, cell: Callable[[Any], Any], priority: int = 0, **options: Any
    ) -> None:
        self.header, self.cell, self.priority, self.options = header, cell, priority, options

    @property
    def min_width(self) -> int:
        return max(int(self.options.get("min_width", 0)), len(self.header))


def print_fitted(console: Console, title: str, columns: list[Col], rows: Sequence[Any]) -> None:
    """Print a table of the columns that fit the console's width (each at least as wide as
    its header, so no header is cut), dropping the least important first, and say which
    were left out."""
    kept = list(columns)
    while True:
        table = Table(title=title)
        for c in kept:
            col(table, c.header, **c.options)
        for row in rows:
            table.add_row(*(c.cell(row) for c in kept))
        needed = Measurement.get(console, console.options.update_width(10_000), table).minimum
        droppable = [c for c in kept if c.priority > 0]
        if needed <= console.width or not droppable:
            break
        kept.remove(max(droppable, key=lambda c: c.priority))
    console.print(table)
    hidden = [c.header for c in columns if c not in kept]
    if hidden:
        console.print(
            f"[dim]narrow terminal: {', '.join(hidden)} not shown (--width or --json show "
            "everything)[/]"
        )


def col(table: Table, header: str, **options: Any) -> None:
    """A column whose header is never cut: at least as wide as its name."""
    options.setdefault("min_width", len(header))
    options["min_width"] = max(options["min_width"], len(header))
    table.add_column(header, **options)


SHORT_ID = 12
"""Characters of a checkpoint id shown in narrow tables: its random tail, unique in a
thread, and accepted wherever a CHECKPOINT argument is."""


# --------------------------------------------------------------------------- history
def _pending_label(entry: HistoryEntry) -> str:
    label = str(entry.pending_writes) if entry.pending_writes else "-"
    if entry.interrupts:
        label += f" (⏸ {len(entry.interrupts)} interrupt{'s' if len(entry.interrupts) > 1 else ''})"
    return label


def _nodes_label(entry: HistoryEntry) -> str:
    if not entry.nodes:
        return "-"
    return ", ".join(entry.nodes) + ("*" if entry.nodes_from == "task_paths" else "")


def _history_columns(internal: bool, width: int) -> list[Col]:
    """Full ids and times from 132 columns; below that the ids' unique tails and the
    month-day time; under 90 no time (`show` has it); narrower still, columns are dropped
    by `print_fitted`, least useful first."""
    wide = width >= 132
    columns = [
        Col("step", lambda e: step_label(e.step), 0, justify="right", no_wrap=True),
        Col(
            "checkpoint",
            lambda e: e.checkpoint_id if wide else e.checkpoint_id[-SHORT_ID:],
            0,
            no_wrap=True,
            min_width=36 if wide else SHORT_ID,
        ),
        Col("source", lambda e: e.source or "-", 3, no_wrap=True, min_width=6),
        Col("nodes", lambda e: escape(_nodes_label(e)), 2, overflow="fold"),
        Col(
            "changed",
            lambda e: escape(
                names(e.changed_channels, internal=internal, hide=is_internal_channel)
            ),
            1,
            overflow="fold",
        ),
        Col("pending", _pending_label, 4, overflow="fold"),
    ]
    if width >= 90:
        columns.append(
            Col(
                "created",
                lambda e: short_ts(e.ts) if wide else short_ts(e.ts)[5:],
                5,
                no_wrap=True,
                min_width=19 if wide else 14,
            )
        )
    return columns


def _tree_label(e: HistoryEntry, internal: bool, latest: str) -> Text:
    text = Text()
    text.append(f"step {step_label(e.step)} ", style="bold")
    text.append(e.checkpoint_id, style="cyan")
    text.append(f"  {e.source or '-'}")
    if e.nodes:
        text.append(f"  {_nodes_label(e)}", style="green")
    changed = names(e.changed_channels, internal=internal, hide=is_internal_channel)
    text.append(f"  changed: {changed}", style="dim")
    if e.interrupts:
        text.append(f"  ⏸ {len(e.interrupts)} interrupt(s)", style="yellow")
    if not e.children:
        text.append("  ◀ latest head" if e.checkpoint_id == latest else "  ◀ head", style="magenta")
    return text


def _history_tree(entries: dict[str, HistoryEntry], title: str, internal: bool) -> Tree:
    """Every branch: a line of checkpoints stays at one level; a checkpoint with several
    children opens one sub-branch per extra child (oldest child continues the line)."""
    tree = Tree(title)
    latest = max(entries) if entries else ""
    roots = [cid for cid, e in sorted(entries.items()) if e.parent_id not in entries]
    for root in roots:
        stack: list[tuple[Tree, str]] = [(tree, root)]
        while stack:
            level, cursor = stack.pop()
            while True:
                entry = entries[cursor]
                level.add(_tree_label(entry, internal, latest))
                kids = entry.children
                if not kids:
                    break
                for kid in reversed(kids[1:]):
                    sub = level.add(
                        Text(f"⑂ branch from step {step_label(entry.step)}", style="yellow")
                    )
                    stack.append((sub, kid))
                cursor = kids[0]
    return tree


@click.command(short_help="A thread's checkpoints: steps, nodes, changes, interrupts.")
@click.argument("thread_id")
@database_options
@ns_option
@click.option("--all", "all_branches", is_flag=True, help="Every branch, as a tree.")
@click.option("--at", "at", default=None, metavar="CHECKPOINT", help="Branch ending here.")
@click.option("--limit", type=click.IntRange(min=0), default=0, help="Newest N only (0: all).")
@click.option("--internal", is_flag=True, help="Also list scheduling channels (branch:, __*).")
@output_options
@json_option
def history(
    thread_id: str,
    url: str | None,
    schema: str | None,
    ns: str,
    all_branches: bool,
    at: str | None,
    limit: int,
    internal: bool,
    as_json: bool,
) -> None:
    """Checkpoints of a thread: step, source, nodes, changed channels, pending interrupts.

    Shows the branch that ends at the thread's head (or at --at), newest first; with
    --all, every branch as a tree, oldest first. Nodes marked * are read from task paths
    (LangGraph threads do not store node names).
    """
    with open_read(url, schema) as db:
        head, nodes, entries = history_view(
            db, thread_id, ns, at=at, all_branches=all_branches, limit=limit
        )
    if as_json:
        payload: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
        if all_branches:
            heads = sorted(e.checkpoint_id for e in entries if not e.children)
            payload.update(heads=heads, latest=max(nodes) if nodes else None)
        else:
            payload["head"] = head
        payload["checkpoints"] = [history_json(e) for e in entries]
        emit_json(payload)
        return
    with paged_console() as console:
        where = f"thread {thread_id}" + (f" namespace {ns}" if ns else "")
        if all_branches:
            by_id = {e.checkpoint_id: e for e in entries}
            head_count = sum(1 for e in entries if not e.children)
            title = f"{where}: {len(entries)} checkpoints, {head_count} branch head(s)"
            console.print(_history_tree(by_id, escape(title), internal))
        else:
            title = f"{where}: branch to {head} ({len(entries)} checkpoints, newest first)"
            print_fitted(console, escape(title), _history_columns(internal, console.width), entries)
            if console.width < 132:
                console.print(
                    f"[dim]checkpoint: the last {SHORT_ID} characters of each id (they work "
                    "as CHECKPOINT arguments; --width 132 shows whole ids)[/]"
                )
        if any(e.nodes_from == "task_paths" for e in entries):
            console.print("[dim]* node names read from task paths[/]")


# --------------------------------------------------------------------------- show
def _write_lines(writes: list[WriteView], limit: int = 0) -> list[RenderableType]:
    shown = writes if not limit else writes[-limit:]
    out: list[RenderableType] = []
    if limit and len(writes) > limit:
        out.append(Text(f"… {len(writes) - limit} earlier writes", style="dim"))
    for w in shown:
        label = Text(f"step {step_label(None if w.step is None else w.step + 1)} ", style="dim")
        label.append(f"[{w.task_path or w.task_id[:8]}] ", style="green")
        out.append(Group(label, Pretty(w.value, indent_guides=False)))
    return out


def _channel_cell(view: ChannelView) -> RenderableType:
    if view.kind in ("value", "rebuilt", "snapshot"):
        return Pretty(view.value, indent_guides=False)
    if view.kind == "empty":
        return Text("(empty: no value stored at this version)", style="dim")
    parts: list[RenderableType] = [
        Text("delta channel, NOT rebuilt (no reducer given)", style="yellow")
    ]
    if view.note:
        parts.append(Text(view.note, style="red"))
    if view.seed is not None:
        parts.append(
            Text(
                f"snapshot at step {step_label(view.seed.step)} ({view.seed.checkpoint_id}):",
                style="bold",
            )
        )
        parts.append(Pretty(view.seed.value, indent_guides=False))
    else:
        parts.append(Text("no snapshot before: replay starts empty", style="bold"))
    parts.append(Text(f"+ {len(view.writes)} write(s) since:", style="bold"))
    parts.extend(_write_lines(view.writes))
    return Group(*parts)


KIND_LABEL = {
    "value": "value",
    "snapshot": "value (snapshot)",
    "rebuilt": "rebuilt delta",
    "delta": "delta",
    "empty": "empty",
}


def _render_state(console: Console, view: StateView, internal: bool) -> None:
    meta = view.metadata
    nodes = meta.get("nodes")
    lines = [
        f"thread [bold]{escape(view.thread_id)}[/]"
        + (f" · namespace {escape(view.checkpoint_ns)}" if view.checkpoint_ns else ""),
        f"checkpoint [cyan]{view.checkpoint_id}[/] · step {step_label(view.step)} · "
        f"source {view.source or '-'} · created {short_ts(view.ts)}",
        f"parent {view.parent_id or '(none: first checkpoint)'}",
    ]
    if isinstance(nodes, list):
        lines.append(f"nodes {escape(', '.join(map(str, nodes)) or '-')}")
    console.print(Panel("\n".join(lines), title="checkpoint", expand=False))

    table = Table(title="state", show_lines=True)
    col(table, "channel", overflow="fold")
    col(table, "kind", no_wrap=True)
    col(table, "value", overflow="fold")
    hidden = 0
    for name, ch in view.channels.items():
        if not internal and is_internal_channel(name):
            hidden += 1
            continue
        table.add_row(escape(name), KIND_LABEL[ch.kind], _channel_cell(ch))
    console.print(table)
    if hidden:
        console.print(f"[dim]{hidden} scheduling channel(s) hidden (--internal shows them)[/]")
    if any(c.kind == "delta" for c in view.channels.values()):
        console.print(f"[yellow]{DELTA_HINT}[/]")

    if view.pending_writes and console.width >= 120:
        pending = Table(title=f"pending writes ({len(view.pending_writes)})")
        col(pending, "task", no_wrap=True)
        col(pending, "path", overflow="fold")
        col(pending, "idx", justify="right")
        col(pending, "channel", overflow="fold")
        col(pending, "value", overflow="fold")
        for w in view.pending_writes:
            pending.add_row(
                w.task_id, escape(w.task_path), str(w.idx), escape(w.channel), Pretty(w.value)
            )
        console.print(pending)
    elif view.pending_writes:
        # Narrow: one block per write, the value on its own lines at full width.
        console.print(Text(f"pending writes ({len(view.pending_writes)})", style="bold"))
        for w in view.pending_writes:
            label = Text("• ", style="dim")
            label.append(w.channel, style="bold")
            label.append(f"  idx {w.idx}  task {w.task_id[:8]}…", style="dim")
            if w.task_path:
                label.append(f"  path {w.task_path}", style="green")
            console.print(label)
            console.print(Padding(Pretty(w.value, indent_guides=False), (0, 0, 0, 4)))
    else:
        console.print("[dim]no pending writes[/]")
    if view.interrupts:
        console.print(Panel(Pretty(view.interrupts), title="⏸ interrupts pending", expand=False))
    console.print(Panel(Pretty(meta), title="metadata", expand=False))


@click.command(short_help="Full state at a checkpoint, pending writes, metadata.")
@click.argument("thread_id")
@click.argument("checkpoint", required=False)
@database_options
@ns_option
@graph_options
@click.option("--channel", "channels", multiple=True, metavar="NAME", help="Only these channels.")
@click.option("--internal", is_flag=True, help="Also show scheduling channels (branch:, __*).")
@output_options
@json_option
def show(
    thread_id: str,
    checkpoint: str | None,
    url: str | None,
    schema: str | None,
    ns: str,
    graph_ref: str | None,
    allow_modules: tuple[str, ...],
    channels: tuple[str, ...],
    internal: bool,
    as_json: bool,
) -> None:
    """Full state at a checkpoint (the head by default), pending writes, metadata.

    CHECKPOINT is an id, or a unique prefix or suffix of one. Delta channels are rebuilt
    with the reducers of --graph; without it they show as their nearest snapshot plus the
    writes since.
    """
    with open_with_graph(url, schema, graph_ref, allow_modules) as (db, graph):
        checkpoint_id = db.resolve(thread_id, ns, checkpoint)
        view = state_view(db, thread_id, ns, checkpoint_id, graph.channels if graph else None)
    if channels:
        unknown = sorted(set(channels) - set(view.channels))
        if unknown:
            raise CliError(f"no channel {', '.join(unknown)} at checkpoint {checkpoint_id}")
        view.channels = {k: v for k, v in view.channels.items() if k in channels}
        internal = True
    if as_json:
        emit_json(state_json(view))
        return
    with paged_console() as console:
        _render_state(console, view, internal)


# --------------------------------------------------------------------------- diff
RELATION_TEXT = {
    "same": "A and B are the same checkpoint",
    "ancestor": "A is an ancestor of B",
    "descendant": "B is an ancestor of A",
    "diverged": "A and B are on different branches",
    "unrelated": "A and B share no ancestor",
}


def _list_change(a: Any, b: Any) -> tuple[RenderableType, RenderableType] | None:
    """For two lists, what a person wants to see: the items after the shared prefix."""
    if not isinstance(a, list | tuple) or not isinstance(b, list | tuple):
        return None
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    if prefix == 0:
        return None
    head = f"{prefix} item(s) in common"
    left: list[RenderableType] = [Text(f"{len(a)} items ({head})", style="dim")]
    right: list[RenderableType] = [Text(f"{len(b)} items ({head})", style="dim")]
    if len(a) > prefix:
        left += [Text(f"then {len(a) - prefix} more:", style="bold"), Pretty(list(a[prefix:]))]
    if len(b) > prefix:
        right += [Text(f"then {len(b) - prefix} more:", style="bold"), Pretty(list(b[prefix:]))]
    return Group(*left), Group(*right)


def _side(
    view: ChannelView | None,
    writes: list[WriteView],
    label: str,
    shown: RenderableType | None = None,
) -> RenderableType:
    if view is None:
        return Text("(absent)", style="dim")
    parts: list[RenderableType] = []
    if view.kind == "delta":
        parts.append(Text("delta, not rebuilt", style="yellow"))
    elif view.kind == "empty":
        parts.append(Text("(empty)", style="dim"))
    else:
        parts.append(shown if shown is not None else Pretty(view.value, indent_guides=False))
    if writes:
        parts.append(Text(f"{len(writes)} write(s) on the way to {label}:", style="bold"))
        parts.extend(_write_lines(writes, limit=20))
    return Group(*parts)


def _render_diff(console: Console, view: DiffView, internal: bool) -> None:
    console.print(
        f"A [cyan]{view.a}[/] (step {step_label(view.step_a)}) → "
        f"B [cyan]{view.b}[/] (step {step_label(view.step_b)}): {RELATION_TEXT[view.relation]}"
        + (
            f", common ancestor {view.common_ancestor}"
            if view.relation == "diverged" and view.common_ancestor
            else ""
        )
    )
    shown = [c for c in view.channels if internal or not is_internal_channel(c.channel)]
    if not shown:
        console.print("no channel changed")
    else:
        table = Table(show_lines=True)
        col(table, "channel", overflow="fold")
        col(table, "change", no_wrap=True)
        col(table, "A", overflow="fold")
        col(table, "B", overflow="fold")
        for c in shown:
            pair = None
            if c.a is not None and c.b is not None and c.a.has_value and c.b.has_value:
                pair = _list_change(c.a.value, c.b.value)
            table.add_row(
                escape(c.channel),
                c.status,
                _side(c.a, c.writes_to_a, "A", pair[0] if pair else None),
                _side(c.b, c.writes_to_b, "B", pair[1] if pair else None),
            )
        console.print(table)
    hidden = len(view.channels) - len(shown)
    note = f"{len(view.unchanged)} channel(s) unchanged"
    if hidden:
        note += f", {hidden} changed scheduling channel(s) hidden (--internal shows them)"
    console.print(f"[dim]{note}[/]")
    if any(v is not None and v.kind == "delta" for c in shown for v in (c.a, c.b)):
        console.print(f"[yellow]{DELTA_HINT}[/]")


@click.command(short_help="What changed between two checkpoints, per channel.")
@click.argument("thread_id")
@click.argument("a")
@click.argument("b")
@database_options
@ns_option
@graph_options
@click.option("--internal", is_flag=True, help="Also show scheduling channels (branch:, __*).")
@output_options
@json_option
def diff(
    thread_id: str,
    a: str,
    b: str,
    url: str | None,
    schema: str | None,
    ns: str,
    graph_ref: str | None,
    allow_modules: tuple[str, ...],
    internal: bool,
    as_json: bool,
) -> None:
    """What changed from checkpoint A to checkpoint B, per channel.

    For delta channels, the writes between them: when A is an ancestor of B, the pending
    writes of the checkpoints from A to B's parent (on different branches, the writes on
    each side since the common ancestor).
    """
    with open_with_graph(url, schema, graph_ref, allow_modules) as (db, graph):
        a_id = db.resolve(thread_id, ns, a)
        b_id = db.resolve(thread_id, ns, b)
        view = diff_view(db, thread_id, ns, a_id, b_id, graph.channels if graph else None)
    if as_json:
        emit_json(diff_json(view))
        return
    with paged_console() as console:
        _render_diff(console, view, internal)


# --------------------------------------------------------------------------- stats
@click.command(short_help="Bytes per table, thread and channel; delta vs snapshot share.")
@click.argument("thread_id", required=False)
@database_options
@click.option(
    "--top",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="Largest threads listed.",
)
@output_options
@json_option
def stats(
    url: str | None, schema: str | None, thread_id: str | None, top: int, as_json: bool
) -> None:
    """Bytes per table, per thread, per channel, and the delta vs snapshot share.

    Bytes are stored payload (records, values, writes), not page or index overhead; the
    database size on disk is shown too when the whole database is measured.
    """
    with open_read(url, schema) as db:
        if thread_id is not None:
            db.require_threads([thread_id])
        with progress("measuring"):
            result = db.stats(thread_id, top)
    delta = [c for c in result.channels if c.is_delta]
    snapshot_bytes = sum(c.snapshot_bytes for c in delta)
    delta_write_bytes = sum(c.write_bytes for c in delta)
    delta_total = snapshot_bytes + delta_write_bytes
    payload: dict[str, Any] = {
        "thread_id": thread_id,
        "tables": [
            {"table": t.table, "rows": t.rows, "bytes": t.bytes, "disk_bytes": t.disk_bytes}
            for t in result.tables
        ],
        "total_bytes": sum(t.bytes for t in result.tables),
        "database_bytes": result.database_bytes,
        "free_bytes": result.free_bytes,
        "threads": {
            "count": result.thread_count,
            "largest": [
                {
                    "thread_id": t.thread_id,
                    "checkpoints": t.checkpoints,
                    "checkpoint_bytes": t.checkpoint_bytes,
                    "blob_bytes": t.blob_bytes,
                    "write_bytes": t.write_bytes,
                    "bytes": t.total,
                }
                for t in result.threads
            ],
        },
        "channels": [
            {
                "channel": c.channel,
                "kind": "delta" if c.is_delta else "value",
                "blobs": c.blobs,
                "blob_bytes": c.blob_bytes,
                "snapshots": c.snapshots,
                "snapshot_bytes": c.snapshot_bytes,
                "writes": c.writes,
                "write_bytes": c.write_bytes,
                "bytes": c.total,
            }
            for c in result.channels
        ],
        "delta": {
            "channels": [c.channel for c in delta],
            "snapshot_bytes": snapshot_bytes,
            "write_bytes": delta_write_bytes,
            "snapshot_share": round(snapshot_bytes / delta_total, 4) if delta_total else None,
        },
    }
    if as_json:
        emit_json(jsonable(payload))
        return
    with paged_console() as console:
        _render_stats(console, result, thread_id, delta, snapshot_bytes, delta_write_bytes)


def _render_stats(
    console: Console,
    result: Any,
    thread_id: str | None,
    delta: list[Any],
    snapshot_bytes: int,
    delta_write_bytes: int,
) -> None:
    delta_total = snapshot_bytes + delta_write_bytes
    tables = Table(title="tables" + (f" (thread {escape(thread_id)})" if thread_id else ""))
    for column in ("table", "rows", "bytes", "on disk"):
        col(tables, column, justify="left" if column == "table" else "right")
    for t in result.tables:
        tables.add_row(t.table, str(t.rows), human_bytes(t.bytes), human_bytes(t.disk_bytes))
    console.print(tables)
    if result.database_bytes is not None:
        line = f"database on disk: {human_bytes(result.database_bytes)}"
        if result.free_bytes:
            line += f" ({human_bytes(result.free_bytes)} free pages; VACUUM returns them)"
        console.print(line)
    if thread_id is None:
        threads_table = Table(
            title=f"largest threads ({len(result.threads)} of {result.thread_count})"
        )
        for column in ("thread", "checkpoints", "records", "values", "writes", "total"):
            col(
                threads_table,
                column,
                justify="left" if column == "thread" else "right",
                overflow="fold",
            )
        for big in result.threads:
            threads_table.add_row(
                escape(big.thread_id),
                str(big.checkpoints),
                human_bytes(big.checkpoint_bytes),
                human_bytes(big.blob_bytes),
                human_bytes(big.write_bytes),
                human_bytes(big.total),
            )
        console.print(threads_table)
    channels_table = Table(title="channels")
    for column in ("channel", "kind", "values", "of which snapshots", "writes", "total"):
        col(
            channels_table,
            "snapshots" if column == "of which snapshots" and console.width < 100 else column,
            justify="left" if column in ("channel", "kind") else "right",
            overflow="fold",
        )
    for c in result.channels:
        channels_table.add_row(
            escape(c.channel),
            "delta" if c.is_delta else "value",
            f"{c.blobs} · {human_bytes(c.blob_bytes)}",
            f"{c.snapshots} · {human_bytes(c.snapshot_bytes)}" if c.is_delta else "-",
            f"{c.writes} · {human_bytes(c.write_bytes)}",
            human_bytes(c.total),
        )
    console.print(channels_table)
    if delta_total:
        share = snapshot_bytes / delta_total
        console.print(
            f"delta channels ({escape(', '.join(c.channel for c in delta))}): "
            f"{human_bytes(delta_write_bytes)} as writes, {human_bytes(snapshot_bytes)} as "
            f"snapshots ({share:.0%} snapshot share)"
        )
    else:
        console.print("[dim]no delta channel snapshots stored[/]")
