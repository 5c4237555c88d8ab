"""`diff_view` finds the common ancestor with walks that stop near it (a diff against a
parent costs the distance, not the thread's length), and finds the same one, with the
same paths, as walking both whole ancestries would."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from checkpointer import inspect
from checkpointer.inspect import MAX_WALK, _path_from, _walks_to_common
from checkpointer.savers.sql.inspect import Ancestor


class ParentsOnly:
    """A reader that only walks ancestors, over a parent map; it counts rows returned."""

    def __init__(self, parents: dict[str, str | None]) -> None:
        self.parents = parents
        self.rows = 0

    def ancestors(self, thread_id: str, ns: str, checkpoint_id: str, max_depth: int) -> Any:
        out: list[Ancestor] = []
        cursor: str | None = checkpoint_id
        while cursor is not None and cursor in self.parents and len(out) <= max_depth:
            parent = self.parents[cursor]
            out.append(Ancestor(len(out), cursor, parent, len(out)))
            cursor = parent
        self.rows += len(out)
        return out


@st.composite
def forests(draw: Any) -> dict[str, str | None]:
    """Checkpoints c0000.. each with a random earlier parent (or none: another root)."""
    n = draw(st.integers(1, 120))
    parents: dict[str, str | None] = {}
    for i in range(n):
        if i == 0 or draw(st.integers(0, 19)) == 0:
            parents[f"c{i:04d}"] = None
        else:
            low = draw(st.sampled_from([0, max(0, i - 3)]))
            parents[f"c{i:04d}"] = f"c{draw(st.integers(low, i - 1)):04d}"
    return parents


@settings(max_examples=300, deadline=None)
@given(forests(), st.data())
def test_the_bounded_walk_finds_what_whole_walks_find(
    parents: dict[str, str | None], data: st.DataObject
) -> None:
    ids = sorted(parents)
    a = data.draw(st.sampled_from(ids))
    b = data.draw(st.sampled_from(ids))
    reader = ParentsOnly(parents)
    full_a = reader.ancestors("t", "", a, MAX_WALK)
    full_b = reader.ancestors("t", "", b, MAX_WALK)
    on_b = {x.checkpoint_id for x in full_b}
    expected = next((x.checkpoint_id for x in full_a if x.checkpoint_id in on_b), None)
    walk_a, walk_b, common = _walks_to_common(reader, "t", "", a, b)  # type: ignore[arg-type]
    assert common == expected
    assert _path_from(walk_a, common) == _path_from(full_a, common)
    assert _path_from(walk_b, common) == _path_from(full_b, common)


def test_a_parent_diff_reads_a_few_ancestors_of_a_long_thread() -> None:
    n = 10_000
    parents = {f"c{i:05d}": (f"c{i - 1:05d}" if i else None) for i in range(n)}
    reader = ParentsOnly(parents)
    head, parent = f"c{n - 1:05d}", f"c{n - 2:05d}"
    _, _, common = _walks_to_common(reader, "t", "", parent, head)  # type: ignore[arg-type]
    assert common == parent
    assert reader.rows <= 4 * inspect.FIRST_WALK
