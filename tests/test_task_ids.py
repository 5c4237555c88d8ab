"""Task ids as runtimes produce them, stored losslessly and in order on every saver.

LangGraph's exit-durability writes carry synthetic ids that put the superstep in the first
group in decimal; for step -1 that is "-0000001-...", not a valid UUID. Postgres stores task
ids in a uuid column, so it must encode that one, and read back the exact string.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpointer.ids import task_id_for
from checkpointer.savers.sql.postgres_dialect import (
    PostgresDialect,
    decode_write_key,
    encode_write_key,
    task_name,
)
from checkpointer.types import empty_checkpoint, make_config
from tests.conftest import Harness

NULL_TAIL = "0000-0000-0000-000000000000"
# In the order LangGraph applies them: step -1's Command update, then step 0 and 1 writes.
EXIT_IDS = [
    f"-0000001-{NULL_TAIL}",
    "00000000-0000-0000-0000-000000000001",
    f"00000001-{NULL_TAIL}",
]


async def _anchor(harness: Harness, thread: str) -> dict:
    checkpoint = empty_checkpoint()
    return await harness.put(make_config(thread), checkpoint, {"step": -2}, {})


async def test_langgraph_exit_ids_round_trip_in_order(harness: Harness) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    config = await _anchor(harness, thread)
    for position, task_id in reversed(list(enumerate(EXIT_IDS))):
        await harness.put_writes(config, [("messages", f"m{position}"), ("x", position)], task_id)
    await harness.put_writes(config, [("__interrupt__", "stop")], EXIT_IDS[0])
    tup = await harness.get_tuple(config)
    assert tup is not None
    assert [(w[0], w[1]) for w in tup.pending_writes or []] == [
        (EXIT_IDS[0], "__interrupt__"),
        (EXIT_IDS[0], "messages"),
        (EXIT_IDS[0], "x"),
        (EXIT_IDS[1], "messages"),
        (EXIT_IDS[1], "x"),
        (EXIT_IDS[2], "messages"),
        (EXIT_IDS[2], "x"),
    ]
    child = empty_checkpoint()
    child_config = await harness.put(config, child, {"step": 0}, {})
    history = await harness.delta(child_config, ["messages"])
    assert [w[0] for w in history["messages"]["writes"]] == EXIT_IDS
    assert [w[2] for w in history["messages"]["writes"]] == ["m0", "m1", "m2"]


async def test_our_task_ids_sort_by_step_in_storage(harness: Harness) -> None:
    thread = f"t-{uuid.uuid4().hex[:8]}"
    config = await _anchor(harness, thread)
    ids = [task_id_for(step, "node") for step in (-2, -1, 0, 7, 10**6)]
    for task_id in reversed(ids):
        await harness.put_writes(config, [("c", task_id)], task_id)
    tup = await harness.get_tuple(config)
    assert tup is not None
    assert [w[0] for w in tup.pending_writes or []] == ids


@pytest.mark.parametrize(
    ("task_id", "idx"),
    [(f"-0000001-{NULL_TAIL}", 0), (f"-0000002-{NULL_TAIL}", 5), (f"-0000001-{NULL_TAIL}", -3)],
)
def test_postgres_write_key_encoding_is_exact(task_id: str, idx: int) -> None:
    stored_id, stored_idx = encode_write_key(task_id, idx)
    uuid.UUID(stored_id)  # a valid uuid for the column
    assert decode_write_key(stored_id, stored_idx) == (task_id, idx)
    # Sorts before any real write of the same id tail.
    assert (stored_id, stored_idx) < ("00000000-" + task_id[9:], -4)


@pytest.mark.parametrize("task_id", ["task-1", "A" * 200, "ünïcode task", "", "{x}"])
def test_postgres_stores_other_ids_under_a_derived_uuid_and_their_name(task_id: str) -> None:
    stored_id, stored_idx = encode_write_key(task_id, 3)
    uuid.UUID(stored_id)
    assert encode_write_key(task_id, 3) == (stored_id, 3)  # the same key on a re-send
    assert task_name(task_id) == task_id
    # Readers select the name in place of the uuid (`task_id_text`).
    assert decode_write_key(task_id, stored_idx) == (task_id, 3)


@given(
    keys=st.lists(
        st.tuples(
            st.sampled_from([*EXIT_IDS, "task-1", "ünï", str(uuid.UUID(int=7))]),
            st.integers(-3, 40),
        ),
        max_size=12,
    )
)
def test_postgres_reads_a_batch_of_write_keys_as_each_alone(keys: list[tuple[str, int]]) -> None:
    """A batch of stored keys (a delta history's writes) decodes as each key alone, with
    or without a step-keyed id among them."""
    stored = [encode_write_key(task_id, idx) for task_id, idx in keys]
    # Readers select a named task's name in place of its uuid (`task_id_text`).
    selected = [
        (task_id if task_name(task_id) is not None else stored_id, stored_idx)
        for (task_id, _), (stored_id, stored_idx) in zip(keys, stored, strict=True)
    ]
    ids, idxs = [key[0] for key in selected], [key[1] for key in selected]
    assert PostgresDialect().decode_write_keys(ids, idxs) == keys


def test_postgres_refuses_task_ids_its_text_cannot_hold() -> None:
    for bad in ("a\x00b", "lone \ud800"):
        with pytest.raises(ValueError, match="task id"):
            task_name(bad)
    assert task_name(str(uuid.uuid4())) is None
    assert task_name(f"-0000001-{NULL_TAIL}") is None


# Ids as LangGraph's checkpoint tests and other runtimes write them, mixed with UUIDs.
MIXED_IDS = ["task-1", "task-2", "Task-10", str(uuid.uuid4()), "z" * 80, "ünï", "a b"]


async def test_any_task_id_round_trips_in_text_order(harness: Harness) -> None:
    """Every saver takes any task id string and gives it back exactly, its writes in
    (task_path, task_id, idx) order with ids compared as text, as LangGraph's savers do."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    config = await _anchor(harness, thread)
    for task_id in reversed(MIXED_IDS):
        await harness.put_writes(config, [("messages", task_id), ("x", 1)], task_id)
        await harness.put_writes(config, [("messages", task_id), ("x", 1)], task_id)  # resent
    await harness.put_writes(config, [("__error__", "boom")], "task-1")
    await harness.put_writes(config, [("__error__", "again")], "task-1")  # replaces
    tup = await harness.get_tuple(config)
    assert tup is not None
    expected = [(i, "messages", i) for i in sorted(MIXED_IDS)]
    writes = [w for w in tup.pending_writes or [] if w[1] == "messages"]
    assert writes == expected
    assert [w for w in tup.pending_writes or [] if w[1] == "__error__"] == [
        ("task-1", "__error__", "again")
    ]
    child = await harness.put(config, empty_checkpoint(), {"step": 0}, {})
    history = await harness.delta(child, ["messages"])
    assert [w[0] for w in history["messages"]["writes"]] == sorted(MIXED_IDS)
    # Copies keep the names.
    await harness.copy_thread(thread, thread + "-copy")
    copied = await harness.get_tuple(
        make_config(thread + "-copy", "", config["configurable"]["checkpoint_id"])
    )
    assert copied is not None
    assert sorted(copied.pending_writes or []) == sorted(tup.pending_writes or [])


async def test_a_task_id_no_backend_can_hold_is_a_config_error(harness: Harness) -> None:
    """One id rule on every saver (`types.check_id`): a NUL or a lone surrogate is refused
    before anything is stored, and the writes already there stay."""
    from checkpointer.errors import ConfigError

    thread = f"t-{uuid.uuid4().hex[:8]}"
    config = await _anchor(harness, thread)
    await harness.put_writes(config, [("x", 1)], "task-1")
    with pytest.raises(ConfigError, match="NUL"):
        await harness.put_writes(config, [("x", 2)], "task\x00two")
    with pytest.raises(ConfigError, match="surrogate"):
        await harness.put_writes(config, [("x", 3)], "task\ud800")
    tup = await harness.get_tuple(config)
    assert tup is not None and ("task-1", "x", 1) in (tup.pending_writes or [])
    assert [w for w in tup.pending_writes or [] if w[1] == "x"] == [("task-1", "x", 1)]
