"""Values a put stores although `new_versions` leaves them out (`sql/unstored.py`, issue
#15): a channel's value resolves from its version whichever checkpoint brought it, on
every saver: a root put with values and `new_versions={}`, a re-put bringing a delta
channel's snapshot at a version nothing stored a value for, a child of an unsaved parent.
A value already stored at a version is never replaced by one carried at the same version."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpointer.channels.markers import DeltaSnapshot
from checkpointer.savers.memory import InMemorySaver
from checkpointer.types import Checkpoint, empty_checkpoint, make_config
from tests.conftest import Harness


def _checkpoint(
    checkpoint_id: str, values: dict[str, Any], versions: dict[str, str] | None = None
) -> Checkpoint:
    cp = empty_checkpoint()
    cp["id"] = checkpoint_id
    cp["channel_values"] = dict(values)
    cp["channel_versions"] = dict(versions if versions is not None else {})
    return cp


SEEDS = ["seed", {"large": list(range(40))}, None]


@pytest.mark.parametrize("seed", SEEDS, ids=["scalar", "blob", "none"])
async def test_a_root_put_with_values_and_no_new_versions_keeps_them(
    harness: Harness, seed: Any
) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    root_cp = _checkpoint("a-root", {"ch": seed, "other": 1}, {"ch": "5", "other": "2"})
    root = await harness.put(make_config(thread), root_cp, {}, {})
    await harness.put_writes(root, [("ch", "write-root")], str(uuid.UUID(int=7)))
    child = await harness.put(root, _checkpoint("b-child", {}, {"ch": "6", "other": "2"}), {}, {})
    tup = await harness.get_tuple(root)
    assert tup is not None and tup.checkpoint["channel_values"] == {"ch": seed, "other": 1}
    history = (await harness.delta(child, ["ch"]))["ch"]
    assert history["seed"] == seed
    assert [w[2] for w in history["writes"]] == ["write-root"]
    # The child at the root's version of `other` reads the root's value.
    tup = await harness.get_tuple(child)
    assert tup is not None and tup.checkpoint["channel_values"] == {"other": 1}


async def test_a_re_put_brings_a_snapshot_at_a_version_with_no_value(harness: Harness) -> None:
    """LangGraph's delta channels store no value at their versions; a re-put of an
    ancestor with a snapshot there seeds later walks (its test_seed_present...)."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    config = make_config(thread)
    configs = []
    for step in range(4):
        versions = {"items": f"{step + 1:03d}"}
        cp = _checkpoint(f"cp-{step}", {}, versions)
        meta: Any = {"step": step, "counters_since_delta_snapshot": {"items": (1, 1)}}
        config = await harness.put(config, cp, meta, dict(versions))
        await harness.put_writes(config, [("items", [f"v{step}"])], str(uuid.UUID(int=step)))
        configs.append((config, cp, meta))
    assert "seed" not in (await harness.delta(configs[-1][0], ["items"]))["items"]
    # Re-put the second checkpoint under its own parent with a snapshot, no new version.
    target_config, cp, meta = configs[1]
    tup = await harness.get_tuple(target_config)
    assert tup is not None and tup.parent_config is not None
    cp["channel_values"] = {"items": DeltaSnapshot(["seeded"])}
    await harness.put(tup.parent_config, cp, meta, {})
    history = (await harness.delta(configs[-1][0], ["items"]))["items"]
    assert history["seed"] == DeltaSnapshot(["seeded"])
    assert [w[2] for w in history["writes"]] == [["v1"], ["v2"]]
    # A value stored at a version stays the one read there: a later carry cannot replace it.
    cp["channel_values"] = {"items": DeltaSnapshot(["other"])}
    await harness.put(tup.parent_config, cp, meta, {})
    history = (await harness.delta(configs[-1][0], ["items"]))["items"]
    assert history["seed"] == DeltaSnapshot(["seeded"])


async def test_an_orphan_keeps_its_values(harness: Harness) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    cp = _checkpoint("orphan", {"big": {"k": [1, 2, 3]}, "n": 3}, {"big": "9", "n": "9"})
    config = await harness.put(make_config(thread, "", "never-saved"), cp, {}, {})
    tup = await harness.get_tuple(config)
    assert tup is not None and tup.checkpoint["channel_values"] == {"big": {"k": [1, 2, 3]}, "n": 3}


async def test_a_value_with_no_version_is_kept_where_the_record_can_hold_it(
    harness: Harness,
) -> None:
    """LangGraph's SQLite saver keeps a whole checkpoint, so its tests seed delta walks with
    values that have no version. The SQL savers keep small scalars of those in the record
    (as LangGraph's PostgreSQL saver keeps primitives); larger ones have no key to be
    stored under and are dropped, as LangGraph's in-memory and PostgreSQL savers drop
    them. The in-memory saver drops them all, as LangGraph's does."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    root = await harness.put(
        make_config(thread), _checkpoint("a", {"ch": "seed", "big": {"x": [1]}}), {}, {}
    )
    await harness.put_writes(root, [("ch", "w")], str(uuid.UUID(int=1)))
    child = await harness.put(root, _checkpoint("b", {}), {}, {})
    tup = await harness.get_tuple(root)
    history = await harness.delta(child, ["ch", "big"])
    assert history["big"] == {"writes": []}
    assert [w[2] for w in history["ch"]["writes"]] == ["w"]
    if harness.kind == "memory":
        assert tup is not None and tup.checkpoint["channel_values"] == {}
        assert "seed" not in history["ch"]
    else:
        assert tup is not None and tup.checkpoint["channel_values"] == {"ch": "seed"}
        assert history["ch"]["seed"] == "seed"
        # Not carried: a child without the value has none.
        tup = await harness.get_tuple(child)
        assert tup is not None and tup.checkpoint["channel_values"] == {}


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(
        st.tuples(
            st.dictionaries(st.sampled_from("abc"), st.integers(0, 3), max_size=3),
            st.sets(st.sampled_from("abc")),
        ),
        min_size=1,
        max_size=6,
    )
)
def test_every_value_put_reads_back_from_its_version(
    steps: list[tuple[dict[str, int], set[str]]],
) -> None:
    """Random puts on the in-memory saver: each channel's version is a function of its
    value, some values put with their version in `new_versions` and some not; every
    checkpoint then reads the value of each of its channels that any put brought."""
    saver = InMemorySaver()
    config = make_config("t")
    brought: dict[tuple[str, str], int] = {}
    puts = []
    for i, (values, announced) in enumerate(steps):
        versions = {ch: f"{v:03d}" for ch, v in values.items()}
        for ch, v in values.items():
            brought.setdefault((ch, versions[ch]), v)
        new = {ch: versions[ch] for ch in announced if ch in versions}
        config = saver.put(config, _checkpoint(f"cp-{i}", values, versions), {}, new)
        puts.append((config, versions))
    for config, versions in puts:
        tup = saver.get_tuple(config)
        assert tup is not None
        assert tup.checkpoint["channel_values"] == {
            ch: brought[(ch, v)] for ch, v in versions.items()
        }
