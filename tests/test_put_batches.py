"""Large puts and write batches: a batch longer than one multi-row INSERT (SQLite sends
at most `MULTI_ROW_CHUNK` rows per statement, each chunk binding the shared key once)
stores every row with its own values, in every saver, whether its checkpoint is stored
before or after the writes."""

from __future__ import annotations

from typing import Any

import pytest

from checkpointer.ids import new_checkpoint_id
from checkpointer.savers.sql.sqlite_dialect import MULTI_ROW_CHUNK
from checkpointer.types import ERROR, empty_checkpoint, make_config
from tests.conftest import Harness

pytestmark = pytest.mark.asyncio

ROWS = 2 * MULTI_ROW_CHUNK + 37
"""Three chunks, the last one partial."""


def _value(i: int) -> Any:
    """Values of every stored shape: inline scalars, bytes, lists, None, long text."""
    return [i, f"v{i}" * (i % 5), None, b"\x00" * (i % 3), {"i": i}][i % 5]


@pytest.mark.parametrize("checkpoint_first", [True, False])
async def test_a_batch_over_several_chunks_reads_back_whole(
    harness: Harness, checkpoint_first: bool
) -> None:
    thread = f"big-{checkpoint_first}"
    cp = empty_checkpoint()
    cp["id"] = new_checkpoint_id()
    channels = [f"ch{i}" for i in range(ROWS)]
    cp["channel_versions"] = dict.fromkeys(channels, "1")
    cp["channel_values"] = {ch: _value(i) for i, ch in enumerate(channels)}
    config = make_config(thread, "", cp["id"])
    # Channels repeat within the batch: each position is a slot of its own, all kept.
    writes = [(channels[i % 50], _value(i)) for i in range(ROWS)]
    if checkpoint_first:
        await harness.put(make_config(thread, ""), cp, {"step": 0}, dict(cp["channel_versions"]))
    await harness.put_writes(config, writes, "task-a", "path")
    await harness.put_writes(config, [(ERROR, "boom")], "task-b")
    if not checkpoint_first:
        await harness.put(make_config(thread, ""), cp, {"step": 0}, dict(cp["channel_versions"]))
    tup = await harness.get_tuple(config)
    assert tup is not None
    assert tup.checkpoint["channel_values"] == cp["channel_values"]
    got = [(w[0], w[1], w[2]) for w in tup.pending_writes or []]
    expected = [("task-a", ch, v) for ch, v in writes] + [("task-b", ERROR, "boom")]
    assert sorted(got, key=repr) == sorted(expected, key=repr)
    # Written again (a retried task): nothing is doubled, nothing changes.
    await harness.put_writes(config, writes, "task-a", "path")
    again = await harness.get_tuple(config)
    assert again is not None and len(again.pending_writes or []) == ROWS + 1
