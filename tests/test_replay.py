"""The replay engine: merging a step's writes, snapshot planning, and rebuilding from history."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpointer.channels import (
    BinaryOperatorAggregate,
    DeltaChannel,
    DeltaSnapshot,
    EphemeralValue,
    InvalidUpdateError,
    LastValue,
    LastValueAfterFinish,
    Overwrite,
    Topic,
)
from checkpointer.errors import HistoryUnavailableError
from checkpointer.ids import next_channel_version
from checkpointer.replay import (
    TaskWrites,
    apply_writes,
    channels_from_checkpoint,
    create_checkpoint,
    delta_channels_to_snapshot,
    plan_delta_snapshots,
    read_channel_values,
)
from checkpointer.savers.memory import InMemorySaver
from checkpointer.types import empty_checkpoint
from tests.chain import ChainDriver, values_at


def extend(state: list[Any], batch: Sequence[list[Any]]) -> list[Any]:
    """Batched list reducer: each write is a list of items to append."""
    out = list(state)
    for items in batch:
        out.extend(items)
    return out


def version(current: Any) -> str:
    return next_channel_version(current)


def fresh(**specs: Any) -> dict[str, Any]:
    channels = {}
    for key, spec in specs.items():
        spec.key = key
        channels[key] = spec.from_checkpoint(None) if isinstance(spec, DeltaChannel) else spec
    return channels


# ------------------------------------------------------------------ apply_writes
def test_parallel_writes_fold_in_task_path_order() -> None:
    channels = fresh(notes=BinaryOperatorAggregate(list, operator.add))
    checkpoint = empty_checkpoint()
    tasks = [
        TaskWrites("b", [("notes", ["second"])], ("go",), path="0002"),
        TaskWrites("a", [("notes", ["first"])], ("go",), path="0001"),
    ]
    updated = apply_writes(checkpoint, channels, tasks, version)
    assert updated == {"notes"}
    assert channels["notes"].get() == ["first", "second"]
    assert "notes" in checkpoint["channel_versions"]


def test_one_version_per_step_for_every_changed_channel() -> None:
    channels = fresh(a=LastValue(int), b=LastValue(int))
    checkpoint = empty_checkpoint()
    apply_writes(checkpoint, channels, [TaskWrites("n", [("a", 1), ("b", 2)], ("x",))], version)
    versions = checkpoint["channel_versions"]
    assert versions["a"] == versions["b"]
    first = versions["a"]
    apply_writes(checkpoint, channels, [TaskWrites("n", [("b", 3)], ("x",))], version)
    assert versions["a"] == first and versions["b"] > first


def test_lastvalue_conflict_names_the_channel() -> None:
    channels = fresh(answer=LastValue(str))
    tasks = [
        TaskWrites("a", [("answer", "x")], ("go",), path="1"),
        TaskWrites("b", [("answer", "y")], ("go",), path="2"),
    ]
    with pytest.raises(InvalidUpdateError, match="answer"):
        apply_writes(empty_checkpoint(), channels, tasks, version)


def test_topic_accumulates_or_clears_between_steps() -> None:
    channels = fresh(kept=Topic(str, accumulate=True), inbox=Topic(str))
    checkpoint = empty_checkpoint()
    apply_writes(
        checkpoint, channels, [TaskWrites("n", [("kept", "a"), ("inbox", "a")], ("t",))], version
    )
    apply_writes(checkpoint, channels, [TaskWrites("n", [("kept", "b")], ("t",))], version)
    assert list(channels["kept"].get()) == ["a", "b"]
    assert not channels["inbox"].is_available()


def test_ephemeral_value_lives_one_step() -> None:
    channels = fresh(signal=EphemeralValue(str), other=LastValue(int))
    checkpoint = empty_checkpoint()
    apply_writes(checkpoint, channels, [TaskWrites("n", [("signal", "go")], ("t",))], version)
    assert channels["signal"].get() == "go"
    apply_writes(checkpoint, channels, [TaskWrites("n", [("other", 1)], ("t",))], version)
    assert not channels["signal"].is_available()


def test_writes_without_triggers_do_not_advance_a_step() -> None:
    channels = fresh(signal=EphemeralValue(str), other=LastValue(int))
    checkpoint = empty_checkpoint()
    apply_writes(checkpoint, channels, [TaskWrites("n", [("signal", "go")], ("t",))], version)
    # An update_state-like write (no triggers) must not clear the ephemeral value.
    apply_writes(checkpoint, channels, [TaskWrites("input", [("other", 1)])], version)
    assert channels["signal"].get() == "go"


def test_finish_runs_when_nothing_can_trigger_a_node() -> None:
    channels = fresh(result=LastValueAfterFinish(str), edge=LastValue(str))
    checkpoint = empty_checkpoint()
    # `edge` triggers a node: not the last step, so `result` stays hidden.
    apply_writes(
        checkpoint,
        channels,
        [TaskWrites("n", [("result", "done"), ("edge", "x")], ("t",))],
        version,
        trigger_to_nodes={"edge": ["next"]},
    )
    assert not channels["result"].is_available()
    apply_writes(
        checkpoint, channels, [TaskWrites("m", [], ("edge",))], version, {"edge": ["next"]}
    )
    assert channels["result"].get() == "done"


def test_versions_seen_records_what_each_task_read() -> None:
    channels = fresh(a=LastValue(int))
    checkpoint = empty_checkpoint()
    apply_writes(checkpoint, channels, [TaskWrites("n", [("a", 1)], ("x",))], version)
    seen_version = checkpoint["channel_versions"]["a"]
    apply_writes(checkpoint, channels, [TaskWrites("reader", [], ("a",))], version)
    assert checkpoint["versions_seen"]["reader"] == {"a": seen_version}


# ------------------------------------------------------------ snapshot planning
def test_snapshot_predicate_at_both_thresholds() -> None:
    channels = fresh(msgs=DeltaChannel(extend, snapshot_frequency=3))
    channels["msgs"].update([[1]])
    versions = {"msgs": "v"}
    assert delta_channels_to_snapshot(channels, {"msgs": (2, 2)}, versions) == set()
    assert delta_channels_to_snapshot(channels, {"msgs": (3, 3)}, versions) == {"msgs"}
    assert (
        delta_channels_to_snapshot(channels, {"msgs": (0, 9)}, versions, max_supersteps=10) == set()
    )
    assert delta_channels_to_snapshot(channels, {"msgs": (0, 10)}, versions, max_supersteps=10) == {
        "msgs"
    }
    # No version: never written on this branch, nothing to snapshot.
    assert delta_channels_to_snapshot(channels, {"msgs": (5, 5)}, {}) == set()


def test_max_supersteps_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    import checkpointer.replay as replay

    monkeypatch.setenv("CHECKPOINTER_DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT", "7")
    try:
        assert importlib.reload(replay).DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT == 7
        monkeypatch.setenv("CHECKPOINTER_DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT", "zero")
        with pytest.raises(ValueError, match="positive integer"):
            importlib.reload(replay)
    finally:
        monkeypatch.delenv("CHECKPOINTER_DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT")
        importlib.reload(replay)


def test_counters_advance_reset_and_keep_only_nonzero() -> None:
    channels = fresh(a=DeltaChannel(extend, snapshot_frequency=2), b=DeltaChannel(extend))
    channels["a"].update([[1]])
    channels["b"].update([[1]])
    versions = {"a": "1", "b": "1"}
    plan = plan_delta_snapshots(channels, {}, {"a"}, versions)
    assert plan.to_snapshot == set()
    assert plan.counters == {"a": (1, 1), "b": (0, 1)}
    plan = plan_delta_snapshots(
        channels, {"counters_since_delta_snapshot": plan.counters}, {"a"}, versions
    )
    assert plan.to_snapshot == {"a"}
    assert plan.counters == {"b": (0, 2)}
    forced = plan_delta_snapshots(channels, {}, (), versions, forced={"b"})
    assert forced.to_snapshot == {"b"} and "b" not in forced.counters


def test_create_checkpoint_stores_snapshots_and_bumps_unchanged_versions() -> None:
    channels = fresh(msgs=DeltaChannel(extend), name=LastValue(str))
    checkpoint = empty_checkpoint()
    apply_writes(
        checkpoint, channels, [TaskWrites("n", [("msgs", [1]), ("name", "x")], ("t",))], version
    )
    checkpoint["versions_seen"]["reader"] = {"msgs": checkpoint["channel_versions"]["msgs"]}
    plain = create_checkpoint(checkpoint, channels, 0)
    assert "msgs" not in plain["channel_values"]
    assert plain["channel_values"]["name"] == "x"
    stored = dict(checkpoint["channel_versions"])
    snap = create_checkpoint(
        checkpoint,
        channels,
        1,
        get_next_version=version,
        channels_to_snapshot={"msgs"},
        stored_versions=stored,
    )
    assert snap["channel_values"]["msgs"] == DeltaSnapshot([1])
    assert snap["channel_versions"]["msgs"] > stored["msgs"]
    assert snap["versions_seen"]["reader"]["msgs"] == snap["channel_versions"]["msgs"]
    assert snap["channel_versions"]["name"] == stored["name"]


# ---------------------------------------------------------------- hydration
def test_hydration_without_a_saver_is_a_clear_error() -> None:
    specs = fresh(msgs=DeltaChannel(extend))
    checkpoint = empty_checkpoint()
    checkpoint["channel_versions"]["msgs"] = "1"
    with pytest.raises(HistoryUnavailableError, match="msgs"):
        channels_from_checkpoint(specs, checkpoint)


class CountingSaver(InMemorySaver):
    def __init__(self) -> None:
        super().__init__()
        self.history_calls = 0

    def get_delta_channel_history(self, *, config: Any, channels: Sequence[str]) -> Any:
        self.history_calls += 1
        return super().get_delta_channel_history(config=config, channels=channels)


def test_all_delta_channels_rebuild_from_one_history_call() -> None:
    saver = CountingSaver()
    specs = {
        "a": DeltaChannel(extend, snapshot_frequency=1000),
        "b": DeltaChannel(extend, snapshot_frequency=1000),
        "name": LastValue(str),
    }
    driver = ChainDriver(saver, specs)
    for i in range(10):
        driver.run_step([[("a", [i]), ("b", [-i])], [("name", f"n{i}")]])
    saver.history_calls = 0
    values = values_at(saver, specs, driver.config)
    assert saver.history_calls == 1
    assert values == {"a": list(range(10)), "b": [-i for i in range(10)], "name": "n9"}


def test_thousand_checkpoint_chain_matches_a_plain_reducer_at_every_checkpoint() -> None:
    saver = InMemorySaver()
    delta_specs = {"msgs": DeltaChannel(extend, snapshot_frequency=50)}
    plain_specs = {"msgs": BinaryOperatorAggregate(list, operator.add)}
    delta = ChainDriver(saver, delta_specs, thread_id="delta")
    plain = ChainDriver(saver, plain_specs, thread_id="plain")
    for i in range(1000):
        writes: list[list[tuple[str, Any]]] = [[("msgs", [i])]]
        if i % 7 == 0:
            writes.append([("msgs", [f"side-{i}"])])
        if i == 500:
            writes = [[("msgs", Overwrite([f"reset-{i}"]))]]
        delta.run_step(writes)
        plain.run_step(writes)
    snapshots = 0
    for (delta_config, live), (plain_config, _) in zip(delta.saved, plain.saved, strict=True):
        stored = values_at(saver, delta_specs, delta_config)
        assert stored == live == values_at(saver, plain_specs, plain_config)
        tup = saver.get_tuple(delta_config)
        assert tup is not None
        snapshots += "msgs" in tup.checkpoint["channel_values"]
    assert 19 <= snapshots <= 22  # every 50 updates, plus the forced one after Overwrite


write_item = st.one_of(
    st.lists(st.integers(-5, 5), max_size=3),
    st.lists(st.integers(-5, 5), max_size=3).map(Overwrite),
)


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(st.lists(write_item, min_size=0, max_size=3), min_size=1, max_size=30),
    frequency=st.integers(1, 6),
    fork_at=st.integers(0, 29),
    fork_steps=st.lists(st.lists(write_item, max_size=2), min_size=1, max_size=8),
)
def test_forks_rebuild_their_own_branch_only(
    steps: list[list[Any]], frequency: int, fork_at: int, fork_steps: list[list[Any]]
) -> None:
    saver = InMemorySaver()
    specs = {"msgs": DeltaChannel(extend, snapshot_frequency=frequency)}
    driver = ChainDriver(saver, specs)
    for step in steps:
        overwrites = [w for w in step if isinstance(w, Overwrite)][:1]
        plain = [w for w in step if not isinstance(w, Overwrite)]
        tasks = [[("msgs", w)] for w in plain + overwrites]
        driver.run_step(tasks or [[]])
    original = list(driver.saved)
    fork_config, _ = original[min(fork_at, len(original) - 1)]
    driver.fork_from(fork_config)
    for step in fork_steps:
        plain = [w for w in step if not isinstance(w, Overwrite)]
        driver.run_step([[("msgs", w)] for w in plain] or [[]])
    for config, live in driver.saved:
        assert values_at(saver, specs, config) == live
    # The original branch reads as it did before the fork.
    for config, live in original:
        assert values_at(saver, specs, config) == live


def test_read_channel_values_skips_empty_channels() -> None:
    channels = fresh(a=LastValue(int), b=LastValue(int))
    channels["a"].update([1])
    assert read_channel_values(channels) == {"a": 1}
