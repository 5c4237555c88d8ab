"""In-memory saver specifics: isolation from callers, and lifecycle operations that keep
delta channels rebuildable."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from checkpointer.channels import DeltaChannel, LastValue
from checkpointer.errors import CheckpointerError
from checkpointer.savers.base import dumps_json
from checkpointer.savers.memory import InMemorySaver
from checkpointer.types import empty_checkpoint, make_config
from tests.chain import ChainDriver, values_at


def extend(state: list[Any], batch: Sequence[list[Any]]) -> list[Any]:
    return [*state, *(item for items in batch for item in items)]


SPECS = {"msgs": DeltaChannel(extend, snapshot_frequency=4), "name": LastValue(str)}


def run_chain(saver: InMemorySaver, thread_id: str, steps: int, run_id: str = "r1") -> ChainDriver:
    driver = ChainDriver(saver, SPECS, thread_id=thread_id)
    for i in range(steps):
        driver.run_step([[("msgs", [i]), ("name", f"{run_id}-{i}")]])
    return driver


def test_saved_values_do_not_follow_later_mutation() -> None:
    saver = InMemorySaver()
    checkpoint = empty_checkpoint()
    value = {"items": [1]}
    checkpoint["channel_values"]["data"] = value
    checkpoint["channel_versions"]["data"] = "1"
    config = saver.put(make_config("t"), checkpoint, {"step": 0}, {"data": "1"})
    value["items"].append(2)
    tup = saver.get_tuple(config)
    assert tup is not None
    assert tup.checkpoint["channel_values"]["data"] == {"items": [1]}


def test_prune_keep_latest_keeps_what_the_head_needs() -> None:
    saver = InMemorySaver()
    driver = run_chain(saver, "t", 10)
    other = run_chain(saver, "other", 3)
    head_before = values_at(saver, SPECS, driver.config)
    saver.prune(["t"], strategy="keep_latest")
    kept = list(saver.list(make_config("t")))
    # Snapshots at steps 0 (root), 4 and 8: the head (step 9) needs only step 8.
    assert [t.metadata["step"] for t in kept] == [9, 8]
    assert values_at(saver, SPECS, driver.config) == head_before
    assert len(list(saver.list(make_config("other")))) == 3
    assert values_at(saver, SPECS, other.config) == other.saved[-1][1]


def test_prune_keeps_pending_writes_of_the_head() -> None:
    saver = InMemorySaver()
    driver = run_chain(saver, "t", 3)
    saver.put_writes(driver.config, [("__interrupt__", "approve?")], "task-1")
    saver.prune(["t"])
    tup = saver.get_tuple(make_config("t"))
    assert tup is not None and tup.pending_writes == [("task-1", "__interrupt__", "approve?")]


def test_prune_rejects_unknown_strategy() -> None:
    with pytest.raises(ValueError, match="unknown prune strategy 'newest'"):
        InMemorySaver().prune(["t"], strategy="newest")


def test_delete_for_runs_refuses_to_orphan_another_runs_history() -> None:
    saver = InMemorySaver()
    checkpoint_ids = []
    driver = ChainDriver(saver, SPECS, thread_id="t")
    for run, count in (("r1", 2), ("r2", 2)):
        for i in range(count):
            driver.run_step([[("msgs", [f"{run}-{i}"])]])
            tup = saver.get_tuple(driver.config)
            assert tup is not None
            # Tag the checkpoint with its run as a runtime would.
            stored = saver._threads["t"][""][tup.checkpoint["id"]]
            stored.metadata = dumps_json({**tup.metadata, "run_id": run})
            stored.run_id = run
            checkpoint_ids.append(tup.checkpoint["id"])
    with pytest.raises(CheckpointerError, match="cannot delete these runs"):
        saver.delete_for_runs(["r1"])
    assert len(list(saver.list(make_config("t")))) == 4  # nothing was lost
    saver.delete_for_runs(["r2"])
    assert [t.checkpoint["id"] for t in saver.list(make_config("t"))] == checkpoint_ids[:2][::-1]
    assert values_at(saver, SPECS, make_config("t")) == {"msgs": ["r1-0", "r1-1"]}


def test_copy_thread_copies_delta_history() -> None:
    saver = InMemorySaver()
    driver = run_chain(saver, "src", 6)
    saver.copy_thread("src", "dst")
    assert values_at(saver, SPECS, make_config("dst")) == values_at(saver, SPECS, driver.config)
    saver.delete_thread("src")
    assert saver.get_tuple(make_config("src")) is None
    assert values_at(saver, SPECS, make_config("dst"))["msgs"] == list(range(6))


def test_list_does_not_hold_the_lock_while_the_caller_iterates() -> None:
    saver = InMemorySaver()
    run_chain(saver, "t", 3)
    for tup in saver.list(make_config("t")):
        # A nested call from inside the iteration must not deadlock.
        assert saver.get_tuple(tup.config) is not None
        saver.put_writes(tup.config, [("x", 1)], "nested")
