"""Identifiers: ordering and validity are what savers and SQL ORDER BY rely on."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpointer.ids import (
    MAX_STEP,
    MIN_STEP,
    channel_version_counter,
    new_checkpoint_id,
    next_channel_version,
    superstep_of,
    task_id_for,
)

steps = st.integers(min_value=MIN_STEP, max_value=MAX_STEP)


def test_checkpoint_ids_increase_in_creation_order() -> None:
    ids = [new_checkpoint_id() for _ in range(5000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    for value in ids[:10]:
        assert uuid.UUID(value).version == 7


@given(steps, st.text(max_size=20), st.text(max_size=20))
def test_task_id_is_rfc_uuid_and_encodes_its_step(step: int, node: str, path: str) -> None:
    task_id = task_id_for(step, node, path)
    parsed = uuid.UUID(task_id)
    assert str(parsed) == task_id
    assert parsed.variant == uuid.RFC_4122
    assert parsed.version == 8
    assert superstep_of(task_id) == step


@given(st.lists(st.tuples(steps, st.text(max_size=8)), min_size=2, max_size=30))
def test_task_ids_sort_by_step_as_strings_and_as_uuids(items: list[tuple[int, str]]) -> None:
    ids = [(step, task_id_for(step, name)) for step, name in items]
    by_string = [step for step, _ in sorted(ids, key=lambda x: x[1])]
    by_uuid = [step for step, _ in sorted(ids, key=lambda x: uuid.UUID(x[1]).bytes)]
    assert by_string == sorted(by_string)
    assert by_uuid == sorted(by_uuid)


def test_task_id_covers_negative_and_huge_steps() -> None:
    edge = [-2, -1, 0, 1, 9, 10, 10**9, MAX_STEP]
    ids = [task_id_for(step, "node") for step in edge]
    assert ids == sorted(ids)
    assert [superstep_of(t) for t in ids] == edge
    assert not ids[1].startswith("-")


def test_task_id_is_deterministic_and_distinguishes_tasks() -> None:
    assert task_id_for(3, "ns", "a") == task_id_for(3, "ns", "a")
    assert task_id_for(3, "ns", "a") != task_id_for(3, "ns", "b")
    assert task_id_for(3, "ns", "a") != task_id_for(4, "ns", "a")


@pytest.mark.parametrize("step", [MIN_STEP - 1, MAX_STEP + 1])
def test_task_id_refuses_steps_it_cannot_encode(step: int) -> None:
    with pytest.raises(ValueError, match="outside the encodable range"):
        task_id_for(step, "n")


def test_superstep_of_rejects_foreign_ids() -> None:
    with pytest.raises(ValueError, match="not version 8"):
        superstep_of(str(uuid.uuid4()))
    with pytest.raises(ValueError, match="not a task id"):
        superstep_of("-0000001-aaaa")


def test_channel_versions_increase_and_stay_unique_across_forks() -> None:
    v1 = next_channel_version(None)
    v2 = next_channel_version(v1)
    fork = next_channel_version(v1)
    assert v1 < v2 and v1 < fork
    assert v2 != fork
    assert channel_version_counter(v2) == channel_version_counter(fork) == 2
    assert channel_version_counter(7) == 7
    assert next_channel_version(7) > next_channel_version(6)


@given(st.integers(0, 10**12 - 2), st.integers(1, 10**6))
def test_versions_order_across_paddings(counter: int, gap: int) -> None:
    """A thread written with 32-digit versions (older checkpoints, LangGraph's savers) goes
    on with 12-digit ones: every later version must still compare greater as a string."""
    later = min(counter + gap, 10**12 - 1)
    old_style = f"{counter:032d}.{'f' * 16}"
    following = next_channel_version(old_style)
    assert following > old_style
    assert channel_version_counter(following) == counter + 1
    if later > counter + 1:
        assert next_channel_version(later - 1) > next_channel_version(counter)
    assert len(next_channel_version(counter)) == 12 + 1 + 16
