"""A thread's checkpoints as a tree of linear runs, so 10,000 checkpoints draw as a handful
of rows.

A *run* is a maximal chain of checkpoints where each one (but the last) has exactly one
child, and each one (but the first) is that single child of the previous. A checkpoint with
several children ends its run; each child starts a run of its own: the oldest child continues
the line, the others are branches (forks). The page draws the first and last few checkpoints
of a long run and loads the middle on demand.

Pure functions over a parent map: no database, no values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

HEAD_KEEP = 3
"""Checkpoints shown at the start of a collapsed run."""
TAIL_KEEP = 6
"""Checkpoints shown at the end of a collapsed run (the newest, where people look first)."""
COLLAPSE_OVER = 16
"""Runs longer than this are collapsed."""
FOCUS_KEEP = 3
"""Checkpoints shown on each side of a selected one inside a collapsed run."""


@dataclass(slots=True)
class Run:
    """A linear run of checkpoints, oldest first, and the runs that start below its last one
    (`children[0]` continues the line; the rest branch off)."""

    ids: list[str]
    children: list[Run] = field(default_factory=list)

    @property
    def first(self) -> str:
        return self.ids[0]

    @property
    def last(self) -> str:
        return self.ids[-1]

    def visible(self) -> tuple[list[str], int, list[str]]:
        """(ids shown first, how many are hidden in between, ids shown last)."""
        if len(self.ids) <= COLLAPSE_OVER:
            return self.ids, 0, []
        hidden = len(self.ids) - HEAD_KEEP - TAIL_KEEP
        return self.ids[:HEAD_KEEP], hidden, self.ids[-TAIL_KEEP:]

    def segments(self, focus: str | None = None) -> list[Segment]:
        """The run as drawn: shown stretches and hidden gaps, in order. A collapsed run
        shows its start, its end and, when `focus` (a selected checkpoint) is in the middle,
        a few checkpoints around it."""
        n = len(self.ids)
        if n <= COLLAPSE_OVER:
            return [Segment("rows", 0, n)]
        shown = [(0, HEAD_KEEP), (n - TAIL_KEEP, n)]
        if focus is not None and focus in self.ids:
            i = self.ids.index(focus)
            shown.append((max(0, i - FOCUS_KEEP), min(n, i + FOCUS_KEEP + 1)))
        merged: list[tuple[int, int]] = []
        for start, stop in sorted(shown):
            if merged and start <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
            else:
                merged.append((start, stop))
        out: list[Segment] = []
        cursor = 0
        for start, stop in merged:
            if start > cursor:
                out.append(Segment("gap", cursor, start))
            out.append(Segment("rows", start, stop))
            cursor = stop
        return out


@dataclass(frozen=True, slots=True)
class Segment:
    """Checkpoints `ids[start:stop]` of a run, shown (`rows`) or left to load (`gap`)."""

    kind: str
    start: int
    stop: int

    @property
    def size(self) -> int:
        return self.stop - self.start


def children_map(parents: Mapping[str, str | None]) -> dict[str, list[str]]:
    """Children per checkpoint, oldest (smallest id) first."""
    kids: dict[str, list[str]] = {cid: [] for cid in parents}
    for cid in sorted(parents):
        parent = parents[cid]
        if parent is not None and parent in kids and parent != cid:
            kids[parent].append(cid)
    return kids


def build_runs(parents: Mapping[str, str | None]) -> list[Run]:
    """The forest of runs: one root run per checkpoint whose parent is not in the map
    (normally one), oldest root first. Iterative, so a 10,000-long chain is no recursion."""
    kids = children_map(parents)
    roots = [cid for cid in sorted(parents) if parents[cid] not in parents or parents[cid] == cid]
    forest: list[Run] = []
    seen: set[str] = set()
    # Roots first; then whatever a parent loop (corrupt data) kept unreachable.
    for start in [*roots, *sorted(parents)]:
        if start in seen:
            continue
        stack: list[tuple[str, Run | None]] = [(start, None)]
        while stack:
            first, owner = stack.pop()
            if first in seen:
                continue
            run = Run([])
            cursor: str | None = first
            while cursor is not None and cursor not in seen:
                seen.add(cursor)
                run.ids.append(cursor)
                below = kids[cursor]
                if len(below) == 1 and below[0] not in seen:
                    cursor = below[0]
                    continue
                cursor = None
                for child in reversed(below):
                    if child not in seen:
                        stack.append((child, run))
            (forest if owner is None else owner.children).append(run)
    # Children were pushed newest first and popped oldest first: already in id order.
    return forest


def find_run(forest: list[Run], first_id: str) -> Run | None:
    """The run that starts at `first_id`."""
    stack = list(forest)
    while stack:
        run = stack.pop()
        if run.first == first_id:
            return run
        stack.extend(run.children)
    return None


def run_containing(forest: list[Run], checkpoint_id: str) -> Run | None:
    stack = list(forest)
    while stack:
        run = stack.pop()
        if checkpoint_id in run.ids:
            return run
        stack.extend(run.children)
    return None


def count_runs(forest: list[Run]) -> int:
    total, stack = 0, list(forest)
    while stack:
        run = stack.pop()
        total += 1
        stack.extend(run.children)
    return total


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the drawn tree: a run at an indent, or the label of a branch that starts
    below checkpoint `fork_point`."""

    kind: str  # "run" | "branch"
    depth: int
    run: Run | None = None
    fork_point: str | None = None


def layout(forest: list[Run]) -> list[Row]:
    """Rows in drawing order: a run, then the branches that start below its last checkpoint
    (each one level deeper, under a label), then the run that continues the line at the same
    level. Iterative: a line with thousands of forks does not recurse."""
    rows: list[Row] = []
    stack: list[Row] = [Row("run", 0, run) for run in reversed(forest)]
    while stack:
        row = stack.pop()
        rows.append(row)
        if row.kind != "run" or row.run is None:
            continue
        run = row.run
        if run.children:
            stack.append(Row("run", row.depth, run.children[0]))
        for branch in reversed(run.children[1:]):
            stack.append(Row("run", row.depth + 1, branch))
            stack.append(Row("branch", row.depth + 1, fork_point=run.last))
    return rows
