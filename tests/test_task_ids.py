"""Task ids as runtimes produce them, stored losslessly and in order on every saver.

LangGraph's exit-durability writes carry synthetic ids that put the superstep in the first
group in decimal; for step -1 that is "-0000001-...", not a valid UUID. Postgres stores task
ids in a uuid column, so it must encode that one, and read back the exact string.
"""

from __future__ import annotations

import uuid

import pytest

from checkpointer.ids import task_id_for
from checkpointer.savers.sql.postgres_dialect import decode_write_key, encode_write_key
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


def test_postgres_refuses_other_non_uuid_ids() -> None:
    with pytest.raises(ValueError, match="not a canonical UUID"):
        encode_write_key("task-1", 0)
