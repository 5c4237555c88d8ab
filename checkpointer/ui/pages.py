"""Views shaped for the templates: what each part of the page shows, computed from the
source's data. No HTML here except values (`values.value_html`, escaped)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from checkpointer.channels import MISSING
from checkpointer.inspect import ChannelDiff, DiffView, HistoryEntry, StateView, is_internal_channel
from checkpointer.ui.data import Source, ThreadTree
from checkpointer.ui.tree import Row, layout
from checkpointer.ui.values import items_html, list_change, value_html

RELATION_TEXT = {
    "same": "the same checkpoint",
    "ancestor": "A is an ancestor of B",
    "descendant": "B is an ancestor of A",
    "diverged": "A and B are on different branches",
    "unrelated": "A and B share no ancestor",
}
KIND_LABEL = {
    "value": "value",
    "snapshot": "snapshot",
    "rebuilt": "rebuilt delta",
    "delta": "delta (not rebuilt)",
    "empty": "empty",
}


def short_id(checkpoint_id: str) -> str:
    """The part of an id a person can tell apart: ids of one thread share their time
    prefix, so the tail."""
    return checkpoint_id[-8:]


def step_label(step: int | None) -> str:
    return "?" if step is None else str(step)


@dataclass(slots=True)
class NodeRow:
    entry: HistoryEntry
    is_head: bool
    is_latest: bool

    @property
    def id(self) -> str:
        return self.entry.checkpoint_id


@dataclass(slots=True)
class DrawnPart:
    """A stretch of a run: rows shown, or a gap of `count` checkpoints from `start` that
    loads on click (`steps`: the first and last step hidden)."""

    kind: str
    rows: list[NodeRow]
    start: int
    count: int
    steps: tuple[str, str] | None = None


@dataclass(slots=True)
class DrawnRun:
    """One run of the tree as drawn."""

    depth: int
    first: str
    parts: list[DrawnPart]


@dataclass(slots=True)
class DrawnBranch:
    depth: int
    fork_point: str
    step: str


@dataclass(slots=True)
class TreeView:
    tree: ThreadTree
    items: list[DrawnRun | DrawnBranch]
    heads: list[str]
    checkpoints: int


def node_rows(source: Source, tree: ThreadTree, ids: list[str]) -> list[NodeRow]:
    heads = set(tree.heads)
    return [
        NodeRow(e, e.checkpoint_id in heads, e.checkpoint_id == tree.latest)
        for e in source.entries(tree, ids)
    ]


def tree_view(source: Source, tree: ThreadTree, focus: str | None = None) -> TreeView:
    """The drawn tree: every run's shown checkpoints with their entries (only those are
    read in full), gaps for the collapsed middles, a label where each branch starts.
    `focus` (the selected checkpoint) is shown even inside a collapsed run."""
    rows: list[Row] = layout(tree.forest)
    plans = {id(r.run): r.run.segments(focus) for r in rows if r.run is not None}
    wanted: list[str] = []
    for row in rows:
        if row.run is not None:
            for seg in plans[id(row.run)]:
                if seg.kind == "rows":
                    wanted += row.run.ids[seg.start : seg.stop]
    by_id = {r.id: r for r in node_rows(source, tree, wanted)}
    items: list[DrawnRun | DrawnBranch] = []
    for row in rows:
        if row.kind == "branch" and row.fork_point is not None:
            node = tree.nodes.get(row.fork_point)
            step = node.metadata.get("step") if node else None
            items.append(DrawnBranch(row.depth, row.fork_point, step_label(step)))
            continue
        assert row.run is not None
        run = row.run
        parts: list[DrawnPart] = []
        for seg in plans[id(run)]:
            ids = run.ids[seg.start : seg.stop]
            if seg.kind == "rows":
                parts.append(DrawnPart("rows", [by_id[c] for c in ids], seg.start, seg.size))
            else:
                steps = (
                    step_label(tree.nodes[ids[0]].metadata.get("step")),
                    step_label(tree.nodes[ids[-1]].metadata.get("step")),
                )
                parts.append(DrawnPart("gap", [], seg.start, seg.size, steps))
        items.append(DrawnRun(row.depth, run.first, parts))
    return TreeView(tree, items, tree.heads, len(tree.nodes))


# --------------------------------------------------------------------------- state
@dataclass(slots=True)
class ChannelRow:
    name: str
    kind: str
    internal: bool
    html: Markup
    note: str | None = None


def channel_rows(view: StateView) -> list[ChannelRow]:
    out: list[ChannelRow] = []
    for name, ch in view.channels.items():
        if ch.kind in ("value", "rebuilt", "snapshot"):
            html = value_html(ch.value)
        elif ch.kind == "empty":
            html = Markup('<span class="v-none">(empty: no value at this version)</span>')
        else:
            parts = [
                Markup(
                    '<div class="note">no reducer given (start with --graph): the '
                    "nearest snapshot and the writes since</div>"
                )
            ]
            if ch.seed is not None:
                parts.append(
                    Markup("<div>snapshot at step {}:</div>{}").format(
                        step_label(ch.seed.step), value_html(ch.seed.value)
                    )
                )
            parts.append(Markup("<div>+ {} write(s):</div>").format(len(ch.writes)))
            parts += [value_html(w.value) for w in ch.writes]
            html = Markup("").join(parts)
        out.append(ChannelRow(name, KIND_LABEL[ch.kind], is_internal_channel(name), html, ch.note))
    return out


# --------------------------------------------------------------------------- diff
@dataclass(slots=True)
class ChannelChange:
    name: str
    status: str
    internal: bool
    summary: str
    parts: list[tuple[str, Markup]] = field(default_factory=list)


def _value(view: Any) -> Any:
    return view.value if view is not None and view.has_value else MISSING


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # a value whose __eq__ fails is not equal to anything
        return False


def channel_change(d: ChannelDiff) -> ChannelChange:
    """What a person wants to see of one changed channel: for lists the appended (or
    replaced) items, else the two values; for delta channels not rebuilt, the writes."""
    a, b = _value(d.a), _value(d.b)
    change = ChannelChange(d.channel, d.status, is_internal_channel(d.channel), "")
    lists = list_change(a, b) if b is not MISSING else None
    if lists is not None:
        kept, only_a, only_b = lists
        if not only_a:
            change.summary = f"+{len(only_b)} appended ({kept} in common)"
            change.parts.append(("appended", items_html(only_b, start=kept)))
        else:
            change.summary = f"{kept} in common, then A has {len(only_a)}, B has {len(only_b)}"
            change.parts.append(("only in A", items_html(only_a, start=kept)))
            change.parts.append(("only in B", items_html(only_b, start=kept)))
        return change
    if a is not MISSING or b is not MISSING:
        same = a is not MISSING and b is not MISSING and _equal(a, b)
        change.summary = "written again, same value" if same else d.status
        change.parts.append(("A", value_html(a)))
        change.parts.append(("B", value_html(b)))
        return change
    change.summary = f"{len(d.writes_to_b)} write(s) from A to B (values not rebuilt)"
    for w in d.writes_to_b:
        change.parts.append(
            (f"step {step_label(None if w.step is None else w.step + 1)}", value_html(w.value))
        )
    return change


@dataclass(slots=True)
class DiffPage:
    view: DiffView
    relation: str
    changes: list[ChannelChange]


def diff_page(view: DiffView) -> DiffPage:
    return DiffPage(view, RELATION_TEXT[view.relation], [channel_change(d) for d in view.channels])
