"""The viewer's tree: linear runs and branches drawn from parent pointers."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from checkpointer.ui.tree import (
    COLLAPSE_OVER,
    HEAD_KEEP,
    TAIL_KEEP,
    Run,
    build_runs,
    count_runs,
    find_run,
    layout,
    run_containing,
)


def _ids(n: int) -> list[str]:
    return [f"c{i:06d}" for i in range(n)]


@st.composite
def forests(draw: st.DrawFn) -> dict[str, str | None]:
    """Parent maps where every parent is older (a smaller id), as checkpoints are."""
    n = draw(st.integers(1, 60))
    ids = _ids(n)
    parents: dict[str, str | None] = {ids[0]: None}
    for i in range(1, n):
        choice = draw(st.integers(-1, i - 1))
        parents[ids[i]] = None if choice < 0 or draw(st.integers(0, 9)) == 0 else ids[choice]
    return parents


def _all_runs(forest: list[Run]) -> list[Run]:
    out, stack = [], list(forest)
    while stack:
        run = stack.pop()
        out.append(run)
        stack.extend(run.children)
    return out


@settings(max_examples=200, deadline=None)
@given(forests())
def test_runs_cover_every_checkpoint_once_and_are_linear(parents: dict[str, str | None]) -> None:
    forest = build_runs(parents)
    runs = _all_runs(forest)
    seen = [cid for run in runs for cid in run.ids]
    assert sorted(seen) == sorted(parents)
    kids: dict[str, list[str]] = {c: [] for c in parents}
    for c, p in parents.items():
        if p is not None:
            kids[p].append(c)
    for run in runs:
        for older, newer in zip(run.ids, run.ids[1:]):
            assert parents[newer] == older and kids[older] == [newer]
        # A run ends where the line splits or stops; its children start at its last's kids.
        assert sorted(child.first for child in run.children) == sorted(kids[run.last])
        assert [c.first for c in run.children] == sorted(c.first for c in run.children)
        if parents[run.first] is not None:
            assert len(kids[parents[run.first]]) != 1
    assert count_runs(forest) == len(runs)
    for run in runs:
        assert find_run(forest, run.first) is run
        assert run_containing(forest, run.last) is run


@settings(max_examples=200, deadline=None)
@given(forests())
def test_layout_draws_each_run_once_with_branches_one_level_deeper(
    parents: dict[str, str | None],
) -> None:
    forest = build_runs(parents)
    rows = layout(forest)
    drawn = [r.run for r in rows if r.kind == "run"]
    assert len(drawn) == count_runs(forest)
    assert len({id(r) for r in drawn}) == len(drawn)
    depth = {id(r.run): r.depth for r in rows if r.run is not None}
    for run in _all_runs(forest):
        if run.children:
            assert depth[id(run.children[0])] == depth[id(run)]
        for branch in run.children[1:]:
            assert depth[id(branch)] == depth[id(run)] + 1
    labels = [r for r in rows if r.kind == "branch"]
    assert len(labels) == sum(max(0, len(r.children) - 1) for r in _all_runs(forest))


def test_a_long_line_collapses_and_does_not_recurse() -> None:
    ids = _ids(10_000)
    parents: dict[str, str | None] = {ids[0]: None}
    parents.update({ids[i]: ids[i - 1] for i in range(1, len(ids))})
    # A fork near the end, and one off the middle.
    parents["z-fork-a"] = ids[9_000]
    parents["z-fork-b"] = ids[5_000]
    forest = build_runs(parents)
    assert len(forest) == 1
    rows = layout(forest)
    assert sum(1 for r in rows if r.kind == "branch") == 2
    main = forest[0]
    first, hidden, last = main.visible()
    assert len(main.ids) > COLLAPSE_OVER
    assert (len(first), len(last)) == (HEAD_KEEP, TAIL_KEEP)
    assert hidden == len(main.ids) - HEAD_KEEP - TAIL_KEEP


def test_short_runs_show_whole() -> None:
    run = Run(_ids(COLLAPSE_OVER))
    assert run.visible() == (run.ids, 0, [])


def test_a_parent_loop_or_missing_parent_still_draws() -> None:
    parents: dict[str, str | None] = {"a": "b", "b": "a", "c": "gone", "d": "c"}
    forest = build_runs(parents)
    seen = sorted(cid for run in _all_runs(forest) for cid in run.ids)
    assert seen == ["a", "b", "c", "d"]


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 400), st.data())
def test_segments_tile_the_run_and_show_the_focus(n: int, data: st.DataObject) -> None:
    run = Run(_ids(n))
    focus = data.draw(st.none() | st.sampled_from(run.ids))
    segments = run.segments(focus)
    assert segments[0].start == 0 and segments[-1].stop == n
    for a, b in pairwise(segments):
        assert a.stop == b.start and a.kind != b.kind
    shown = {c for s in segments if s.kind == "rows" for c in run.ids[s.start : s.stop]}
    assert run.ids[0] in shown and run.ids[-1] in shown
    if focus is not None:
        assert focus in shown
    if n <= COLLAPSE_OVER:
        assert [s.kind for s in segments] == ["rows"]
    elif focus is None:
        assert [s.size for s in segments] == [HEAD_KEEP, n - HEAD_KEEP - TAIL_KEEP, TAIL_KEEP]
