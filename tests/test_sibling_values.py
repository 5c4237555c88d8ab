"""A channel's value resolves from its version, whichever checkpoint stored it (issue 15,
item 1): siblings written with the same versions and no new ones (LangGraph's `__copy__`
fork), re-puts of an existing checkpoint, and a copy of a root checkpoint read back the
values their versions name, on every saver."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointer.ids import new_checkpoint_id
from checkpointer.savers.memory import InMemorySaver
from checkpointer.types import Checkpoint, empty_checkpoint, make_config
from tests.conftest import Harness

pytestmark = pytest.mark.asyncio

BIG = "x" * 500  # a value row on every SQL saver, beside small scalars kept in records


def _checkpoint(versions: dict[str, str], values: dict[str, Any]) -> Checkpoint:
    cp = empty_checkpoint()
    cp["id"] = new_checkpoint_id()
    cp["channel_versions"] = dict(versions)
    cp["channel_values"] = dict(values)
    return cp


def _thread() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


VALUES: dict[str, Any] = {"x": 1, "y": "two", "z": None, "flag": True, "big": BIG}
VERSIONS = {ch: f"{i + 1:032}.0" for i, ch in enumerate(VALUES)}


async def _values(h: Harness, config: Any) -> dict[str, Any]:
    tup = await h.get_tuple(config)
    assert tup is not None
    return dict(tup.checkpoint["channel_values"])


async def test_a_sibling_with_no_new_versions_reads_its_versions_values(h: Harness) -> None:
    thread_id = _thread()
    root = await h.put(make_config(thread_id), _checkpoint({}, {}), {"step": -1}, {})
    first = await h.put(root, _checkpoint(VERSIONS, VALUES), {"step": 0}, dict(VERSIONS))
    # What `update_state(config, None, as_node="__copy__")` writes: the copied checkpoint's
    # versions under ITS parent, nothing new.
    copy = await h.put(root, _checkpoint(VERSIONS, VALUES), {"step": 1, "source": "fork"}, {})
    assert await _values(h, first) == VALUES
    assert await _values(h, copy) == VALUES
    # ...and a child of the copy that changes one channel keeps the others.
    child_versions = {**VERSIONS, "x": f"{99:032}.0"}
    child = await h.put(
        copy,
        _checkpoint(child_versions, {**VALUES, "x": 2}),
        {"step": 2},
        {"x": child_versions["x"]},
    )
    assert await _values(h, child) == {**VALUES, "x": 2}


async def test_a_copy_of_a_root_checkpoint_keeps_its_values(h: Harness) -> None:
    thread_id = _thread()
    first = await h.put(
        make_config(thread_id), _checkpoint(VERSIONS, VALUES), {"step": -1}, dict(VERSIONS)
    )
    # The copy of a checkpoint without a parent goes under no parent.
    copy = await h.put(make_config(thread_id), _checkpoint(VERSIONS, VALUES), {"step": 0}, {})
    assert await _values(h, first) == VALUES
    assert await _values(h, copy) == VALUES


async def test_re_putting_a_checkpoint_without_new_versions_keeps_its_values(h: Harness) -> None:
    thread_id = _thread()
    root = await h.put(make_config(thread_id), _checkpoint({}, {}), {"step": -1}, {})
    cp = _checkpoint(VERSIONS, VALUES)
    first = await h.put(root, cp, {"step": 0}, dict(VERSIONS))
    again = await h.put(root, cp, {"step": 0}, {})
    assert again == first
    assert await _values(h, first) == VALUES


async def test_values_resolve_when_the_channel_moved_on_in_the_parent(h: Harness) -> None:
    """A put whose unchanged channel is at an OLDER version than its parent's (a fork that
    goes back) reads the value of that older version."""
    thread_id = _thread()
    v1 = {"x": f"{1:032}.0"}
    v2 = {"x": f"{2:032}.0"}
    a = await h.put(make_config(thread_id), _checkpoint(v1, {"x": 1}), {"step": 0}, dict(v1))
    b = await h.put(a, _checkpoint(v2, {"x": 2}), {"step": 1}, dict(v2))
    back = await h.put(b, _checkpoint(v1, {"x": 1}), {"step": 2}, {})
    assert await _values(h, back) == {"x": 1}
    assert await _values(h, b) == {"x": 2}


@pytest.fixture
def h(harness: Harness) -> Harness:
    return harness


# One op: ("step", parent pick, {channel: value}) stores new versions on a child of a
# checkpoint; ("copy", source pick, parent pick) puts a checkpoint's versions (no new
# ones) under any checkpoint or none, as `__copy__` forks and replays do; ("reput", pick)
# puts an existing checkpoint again with no new versions.
_value = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=3), st.just(BIG))
_op = st.one_of(
    st.tuples(
        st.just("step"),
        st.integers(0, 50),
        st.dictionaries(st.sampled_from("abc"), _value, min_size=1, max_size=3),
    ),
    st.tuples(st.just("copy"), st.integers(0, 50), st.one_of(st.none(), st.integers(0, 50))),
    st.tuples(st.just("reput"), st.integers(0, 50)),
)


@settings(
    max_examples=15,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=st.lists(_op, min_size=1, max_size=12))
async def test_every_checkpoint_reads_the_values_of_its_versions(
    h: Harness, ops: list[tuple[Any, ...]]
) -> None:
    """Whatever the puts, each checkpoint reads back what the in-memory saver (values
    keyed by version only) gives for it."""
    thread_id = _thread()
    oracle = Harness(InMemorySaver(), "memory")
    saved: list[tuple[Any, Checkpoint]] = []  # (parent config, checkpoint) as put
    counter = 0
    for op in ops:
        if op[0] == "step" or not saved:
            values = op[2] if op[0] == "step" else {"a": 0}
            parent = saved[op[1] % len(saved)] if saved else None
            versions = dict(parent[1]["channel_versions"]) if parent else {}
            new = {}
            for channel in values:
                counter += 1
                new[channel] = f"{counter:032}.0"
            versions.update(new)
            cp = _checkpoint(versions, values)
            parent_config = (
                make_config(thread_id, "", parent[1]["id"]) if parent else make_config(thread_id)
            )
            puts = [(parent_config, cp, new)]
        elif op[0] == "copy":
            source = saved[op[1] % len(saved)][1]
            parent_config = (
                make_config(thread_id)
                if op[2] is None
                else make_config(thread_id, "", saved[op[2] % len(saved)][1]["id"])
            )
            puts = [(parent_config, _checkpoint(source["channel_versions"], {}), {})]
        else:
            parent_config, cp = saved[op[1] % len(saved)]
            puts = [(parent_config, cp, {})]
        for parent_config, cp, new in puts:
            for saver in (h, oracle):
                await saver.put(parent_config, cp, {"step": len(saved)}, new)
            saved.append((parent_config, cp))
    for _, cp in saved:
        config = make_config(thread_id, "", cp["id"])
        assert await _values(h, config) == await _values(oracle, config)
