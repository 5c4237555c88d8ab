"""Channel kinds against their documented semantics (LangGraph 1.2 channels, DESIGN 3.2/3.3)."""

from __future__ import annotations

import contextlib
import copy
import functools
import operator
from collections.abc import Callable, Mapping, MutableSet, Sequence
from typing import Annotated, Any, NotRequired

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checkpointer.channels import (
    MISSING,
    AnyValue,
    BaseChannel,
    BinaryOperatorAggregate,
    DeltaChannel,
    DeltaSnapshot,
    EmptyChannelError,
    EphemeralValue,
    InvalidUpdateError,
    LastValue,
    LastValueAfterFinish,
    NamedBarrierValue,
    NamedBarrierValueAfterFinish,
    Overwrite,
    Topic,
    UntrackedValue,
)
from checkpointer.ids import task_id_for

AnyChannel = BaseChannel[Any, Any, Any]


def extend(state: list[int], writes: Sequence[list[int]]) -> list[int]:
    """Batched list-extend reducer: batching invariant by construction."""
    return state + [x for w in writes for x in w]


def extend_in_place(state: list[int], writes: Sequence[list[int]]) -> list[int]:
    """Same fold, but mutating its state: the kind of reducer that exposes aliasing bugs."""
    for w in writes:
        state.extend(w)
    return state


# Every kind, with a sequence of steps that leaves it holding something.
KINDS: dict[str, tuple[Callable[[], AnyChannel], list[list[Any]]]] = {
    "last_value": (lambda: LastValue(int, "k"), [[1], [2]]),
    "last_value_after_finish": (lambda: LastValueAfterFinish(int, "k"), [[1]]),
    "any_value": (lambda: AnyValue(int, "k"), [[1, 1]]),
    "ephemeral": (lambda: EphemeralValue(int, key="k"), [[3]]),
    "untracked": (lambda: UntrackedValue(int, key="k"), [[3]]),
    "topic": (lambda: Topic(int, key="k"), [[1, [2, 3]]]),
    "topic_accumulate": (lambda: Topic(int, accumulate=True, key="k"), [[1], [2, 3]]),
    "binop": (lambda: BinaryOperatorAggregate(int, operator.add, key="k"), [[1, 2], [3]]),
    "barrier": (lambda: NamedBarrierValue(str, {"a", "b"}, key="k"), [["a"]]),
    "barrier_after_finish": (
        lambda: NamedBarrierValueAfterFinish(str, {"a", "b"}, key="k"),
        [["a", "b"]],
    ),
    "delta": (lambda: DeltaChannel(extend, list, key="k").from_checkpoint(MISSING), [[[1], [2]]]),
}


def _filled(kind: str) -> AnyChannel:
    factory, steps = KINDS[kind]
    channel = factory()
    for step in steps:
        channel.update(step)
    return channel


def _state(channel: AnyChannel) -> Any:
    """Everything observable about a channel (for comparing two of them)."""
    value = channel.get() if channel.is_available() else MISSING
    return (type(channel), channel.key, channel.is_available(), value, channel.checkpoint())


# --- the base contract, for every kind ---------------------------------------------------


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_update_with_no_values_is_accepted(kind: str) -> None:
    factory, _ = KINDS[kind]
    assert factory().update([]) in (True, False)
    assert _filled(kind).update([]) in (True, False)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_checkpoint_round_trip(kind: str) -> None:
    channel = _filled(kind)
    restored = KINDS[kind][0]().from_checkpoint(channel.checkpoint())
    if kind in ("untracked", "delta"):
        # Neither stores its value in the checkpoint: untracked never, delta only via replay.
        assert channel.checkpoint() is MISSING
    else:
        assert channel.checkpoint() is not MISSING
        assert _state(restored) == _state(channel)
    assert restored.key == "k"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_empty_channel_round_trips_as_missing(kind: str) -> None:
    factory, _ = KINDS[kind]
    channel = factory()
    if kind == "delta":
        # Hydrated delta channels start from an empty value, not from nothing.
        assert channel.get() == []
        return
    if kind == "binop":
        # Reducer channels start from typ() when it can be built.
        assert channel.checkpoint() == 0
        return
    assert channel.checkpoint() is MISSING
    assert not channel.from_checkpoint(MISSING).is_available()


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_copy_is_independent(kind: str) -> None:
    channel = _filled(kind)
    before = copy.deepcopy(_state(channel))
    clone = channel.copy()
    assert _state(clone) == before
    # Drive the clone through another step, a consume and a finish; the original must not move.
    _, steps = KINDS[kind]
    with contextlib.suppress(InvalidUpdateError):
        clone.update(steps[-1])
    clone.finish()
    clone.consume()
    clone.update([])
    assert _state(channel) == before


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_empty_error_and_repr_name_the_key(kind: str) -> None:
    factory, _ = KINDS[kind]
    channel = factory()
    channel.key = "my_key"
    # Reducer channels start from an empty value; use ones that have none.
    if isinstance(channel, DeltaChannel):
        channel = DeltaChannel(extend, key="my_key")
    elif isinstance(channel, BinaryOperatorAggregate):
        channel = BinaryOperatorAggregate(int | str, operator.add, key="my_key")
    with pytest.raises(EmptyChannelError, match="my_key"):
        channel.get()
    assert "my_key" in repr(channel)
    assert type(channel).__name__ in repr(channel)


# --- LastValue ----------------------------------------------------------------------------


def test_last_value_rejects_two_writes_in_one_step_naming_the_key() -> None:
    channel = LastValue(int, "user_request")
    with pytest.raises(InvalidUpdateError) as info:
        channel.update([1, 2, 3])
    message = str(info.value)
    assert "user_request" in message
    assert "3 values" in message
    assert "Annotated" in message
    assert not channel.is_available()  # the failed step left nothing behind


def test_last_value_keeps_value_across_steps_without_writes() -> None:
    channel = LastValue(str, "k")
    assert channel.update(["a"]) is True
    assert channel.update([]) is False
    assert channel.get() == "a"
    assert channel.update(["b"]) is True
    assert channel.get() == "b"


def test_none_is_a_value_not_emptiness() -> None:
    channel = LastValue(Any, "k").from_checkpoint(None)
    assert channel.is_available()
    assert channel.get() is None
    assert channel.checkpoint() is None


# --- LastValueAfterFinish -----------------------------------------------------------------


def test_last_value_after_finish_lifecycle() -> None:
    channel = LastValueAfterFinish(int, "deferred")
    assert channel.finish() is False  # nothing to release
    channel.update([1, 2])
    assert not channel.is_available()
    assert channel.consume() is False  # not released yet: a subscriber did not see it
    assert channel.finish() is True
    assert channel.get() == 2
    assert channel.finish() is False
    restored = channel.from_checkpoint(channel.checkpoint())
    assert restored.is_available() and restored.get() == 2
    assert channel.consume() is True
    assert not channel.is_available()
    assert channel.checkpoint() is MISSING


def test_last_value_after_finish_new_write_hides_until_next_finish() -> None:
    channel = LastValueAfterFinish(int, "k")
    channel.update([1])
    channel.finish()
    channel.update([5])
    assert not channel.is_available()
    assert channel.checkpoint() == (5, False)


# --- AnyValue -----------------------------------------------------------------------------


def test_any_value_keeps_last_and_clears_on_empty_step() -> None:
    channel = AnyValue(int, "k")
    assert channel.update([]) is False
    assert channel.update([1, 2, 3]) is True
    assert channel.get() == 3
    assert channel.update([]) is True
    assert not channel.is_available()
    assert channel.update([]) is False


# --- EphemeralValue / UntrackedValue ------------------------------------------------------


def test_ephemeral_value_lives_one_step() -> None:
    channel = EphemeralValue(int, key="branch:a")
    assert channel.update([7]) is True
    assert channel.get() == 7
    assert channel.checkpoint() == 7  # persisted, so a resumed run still sees the trigger
    assert channel.update([]) is True
    assert not channel.is_available()
    assert channel.update([]) is False


def test_ephemeral_guard() -> None:
    with pytest.raises(InvalidUpdateError, match="branch:a"):
        EphemeralValue(int, key="branch:a").update([1, 2])
    unguarded = EphemeralValue(int, guard=False, key="k")
    unguarded.update([1, 2])
    assert unguarded.get() == 2
    assert EphemeralValue(int) != EphemeralValue(int, guard=False)
    assert EphemeralValue(int) == EphemeralValue(str)


def test_untracked_value_is_never_persisted() -> None:
    channel = UntrackedValue(object, key="client")
    client = object()
    channel.update([client])
    assert channel.get() is client
    assert channel.checkpoint() is MISSING
    assert channel.copy().get() is client  # survives within a run
    assert not channel.from_checkpoint(client).is_available()  # never from storage
    assert channel.update([]) is False and channel.get() is client
    with pytest.raises(InvalidUpdateError, match="client"):
        channel.update([1, 2])


# --- Topic --------------------------------------------------------------------------------

writes_strategy = st.lists(st.one_of(st.integers(), st.lists(st.integers(), max_size=3)))


def _flat(batch: list[Any]) -> list[int]:
    return [x for w in batch for x in (w if isinstance(w, list) else [w])]


@given(st.lists(writes_strategy, max_size=6))
def test_topic_shows_one_step_unless_accumulating(batches: list[list[Any]]) -> None:
    step_topic = Topic(int, key="k")
    acc_topic = Topic(int, accumulate=True, key="k")
    everything: list[int] = []
    for batch in batches:
        had = step_topic.is_available()
        changed = step_topic.update(batch)
        assert changed == (had or bool(_flat(batch)))
        assert (step_topic.get() if step_topic.is_available() else []) == _flat(batch)
        acc_changed = acc_topic.update(batch)
        assert acc_changed == bool(_flat(batch))
        everything += _flat(batch)
        assert (acc_topic.get() if acc_topic.is_available() else []) == everything


def test_topic_flattens_one_level_only() -> None:
    channel = Topic(list, key="k")
    channel.update([[1, [2, 3]], 4])
    assert channel.get() == [1, [2, 3], 4]


def test_topic_checkpoint_is_not_aliased() -> None:
    channel = Topic(int, accumulate=True, key="k")
    channel.update([1])
    saved = channel.checkpoint()
    channel.update([2])
    assert saved == [1]
    stored = [1, 2]
    restored = channel.from_checkpoint(stored)
    restored.update([3])
    assert stored == [1, 2]


def test_topic_reads_the_old_tuple_layout() -> None:
    assert Topic(int).from_checkpoint((set(), [1, 2])).get() == [1, 2]


# --- BinaryOperatorAggregate --------------------------------------------------------------


@given(st.lists(st.lists(st.integers(), max_size=4), max_size=6))
def test_binop_folds_every_write_in_order(batches: list[list[int]]) -> None:
    channel = BinaryOperatorAggregate(list, operator.add, key="k")
    for batch in batches:
        assert channel.update([[x] for x in batch]) == bool(batch)
    assert channel.get() == [x for batch in batches for x in batch]


def test_binop_starts_from_empty_type_or_first_write() -> None:
    assert BinaryOperatorAggregate(int, operator.add).get() == 0
    assert BinaryOperatorAggregate(Sequence[int], operator.add).get() == []
    assert BinaryOperatorAggregate(Mapping[str, int], operator.or_).get() == {}
    assert BinaryOperatorAggregate(MutableSet[int], operator.or_).get() == set()
    assert BinaryOperatorAggregate(Annotated[list[int], "doc"], operator.add).get() == []
    assert BinaryOperatorAggregate(NotRequired[dict[str, int]], operator.or_).get() == {}
    unbuildable = BinaryOperatorAggregate(int | str, operator.add, key="k")
    assert not unbuildable.is_available()
    unbuildable.update([1, 2])
    assert unbuildable.get() == 3


def test_binop_overwrite_replaces_and_wins_its_step() -> None:
    channel = BinaryOperatorAggregate(int, operator.add, key="total")
    channel.update([5])
    assert channel.update([1, Overwrite(100), 7]) is True
    assert channel.get() == 100  # the write before is replaced, the one after dropped
    channel.update([1])
    assert channel.get() == 101
    channel.update([{"__overwrite__": 3}])
    assert channel.get() == 3


def test_binop_overwrite_as_first_write_of_an_unbuildable_type() -> None:
    channel = BinaryOperatorAggregate(int | str, operator.add, key="k")
    channel.update([Overwrite(4), 1])
    assert channel.get() == 4


def test_binop_rejects_two_overwrites_in_one_step() -> None:
    channel = BinaryOperatorAggregate(int, operator.add, key="total")
    with pytest.raises(InvalidUpdateError, match="total"):
        channel.update([Overwrite(1), 2, {"__overwrite__": 3}])
    channel2 = BinaryOperatorAggregate(int, operator.add, key="total")
    channel2.update([Overwrite(1)])
    channel2.update([Overwrite(2)])  # one per step is fine
    assert channel2.get() == 2


def test_binop_reads_a_delta_snapshot() -> None:
    channel = BinaryOperatorAggregate(list, operator.add, key="k")
    assert channel.from_checkpoint(DeltaSnapshot([1, 2])).get() == [1, 2]


def test_binop_equality_compares_operator() -> None:
    def my_add(a: int, b: int) -> int:
        return a + b

    assert BinaryOperatorAggregate(int, operator.add) == BinaryOperatorAggregate(list, operator.add)
    assert BinaryOperatorAggregate(int, operator.add) != BinaryOperatorAggregate(int, my_add)
    assert BinaryOperatorAggregate(int, operator.add) != LastValue(int)
    # The same lambda written in two schemas is two objects; it must not count as a conflict.
    assert BinaryOperatorAggregate(int, lambda a, b: a + b) == BinaryOperatorAggregate(
        int, lambda a, b: a + b
    )


# --- NamedBarrierValue --------------------------------------------------------------------


def test_named_barrier_waits_for_every_name() -> None:
    channel = NamedBarrierValue(str, {"a", "b"}, key="join:c")
    assert channel.update(["a"]) is True
    assert channel.update(["a"]) is False  # already seen
    assert not channel.is_available()
    assert channel.consume() is False
    restored = channel.from_checkpoint(channel.checkpoint())
    assert restored.update(["b"]) is True
    assert restored.is_available() and restored.get() is None
    assert not channel.is_available()  # restoring did not alias the seen set
    assert restored.consume() is True
    assert not restored.is_available()
    with pytest.raises(InvalidUpdateError, match="join:c"):
        restored.update(["z"])


def test_named_barrier_after_finish_opens_only_at_finish() -> None:
    channel = NamedBarrierValueAfterFinish(str, {"a", "b"}, key="k")
    channel.update(["a"])
    assert channel.finish() is False  # incomplete barrier cannot finish
    channel.update(["b"])
    assert not channel.is_available()
    assert channel.consume() is False
    assert channel.finish() is True
    assert channel.is_available()
    assert channel.from_checkpoint(channel.checkpoint()).is_available()
    assert channel.consume() is True
    assert not channel.is_available() and channel.checkpoint() is MISSING
    assert NamedBarrierValueAfterFinish(str, {"a"}) != NamedBarrierValue(str, {"a"})
    assert NamedBarrierValue(str, {"a"}) != NamedBarrierValue(str, {"b"})


# --- DeltaChannel -------------------------------------------------------------------------

ints = st.lists(st.integers(-50, 50), max_size=3)


@st.composite
def steps_with_overwrites(draw: st.DrawFn) -> list[list[Any]]:
    """Batches of list writes; each batch holds at most one Overwrite, at any position."""
    batches = draw(st.lists(st.lists(ints, max_size=4), max_size=8))
    result: list[list[Any]] = []
    for batch in batches:
        writes: list[Any] = list(batch)
        if draw(st.booleans()):
            position = draw(st.integers(0, len(writes)))
            writes.insert(position, Overwrite(draw(ints)))
        result.append(writes)
    return result


def _stored(batches: list[list[Any]], first_step: int = 0) -> list[tuple[str, str, Any]]:
    return [
        (task_id_for(first_step + step, f"task{i}"), "messages", value)
        for step, batch in enumerate(batches)
        for i, value in enumerate(batch)
    ]


@settings(max_examples=300)
@given(steps_with_overwrites(), st.data())
def test_delta_live_equals_replay_equals_binop(
    batches: list[list[Any]], data: st.DataObject
) -> None:
    live = DeltaChannel(extend, list, key="messages").from_checkpoint(MISSING)
    binop = BinaryOperatorAggregate(list, operator.add, key="messages")
    values_after: list[list[int]] = []
    for batch in batches:
        live.update(batch)
        binop.update(batch)
        values_after.append(live.get())
    final = live.get()
    assert binop.get() == final

    replayed = DeltaChannel(extend, list, key="messages").from_checkpoint(MISSING)
    replayed.replay_writes(_stored(batches))
    assert replayed.get() == final

    # Resuming from a snapshot taken after any step and replaying the rest gives the same.
    if batches:
        cut = data.draw(st.integers(0, len(batches) - 1))
        seed = DeltaSnapshot(values_after[cut])
        resumed = DeltaChannel(extend, list, key="messages").from_checkpoint(seed)
        resumed.replay_writes(_stored(batches[cut + 1 :], first_step=cut + 1))
        assert resumed.get() == final


@given(st.lists(st.one_of(ints, ints.map(Overwrite)), max_size=10))
def test_delta_replay_matches_binop_one_write_per_step(writes: list[Any]) -> None:
    binop = BinaryOperatorAggregate(list, operator.add, key="k")
    for write in writes:
        binop.update([write])
    replayed = DeltaChannel(extend, list, key="k").from_checkpoint(MISSING)
    replayed.replay_writes([(f"t{i}", "k", w) for i, w in enumerate(writes)])
    assert replayed.get() == binop.get()


def test_delta_replay_is_one_reducer_call() -> None:
    calls: list[int] = []

    def counting(state: list[int], writes: Sequence[list[int]]) -> list[int]:
        calls.append(len(writes))
        return extend(state, writes)

    channel = DeltaChannel(counting, key="k").from_checkpoint(DeltaSnapshot([0]))
    channel.replay_writes(_stored([[[1], [2]], [[3]], [[4], [5]]]))
    assert calls == [5]
    assert channel.get() == [0, 1, 2, 3, 4, 5]
    channel.replay_writes([])
    assert calls == [5]


def test_delta_replay_overwrite_rules() -> None:
    # Ids that do not encode a step: the last Overwrite is the base, later writes fold.
    channel = DeltaChannel(extend, key="k").from_checkpoint(DeltaSnapshot([0]))
    channel.replay_writes(
        [("a", "k", [1]), ("b", "k", Overwrite([9])), ("c", "k", [2]), ("d", "k", [3])]
    )
    assert channel.get() == [9, 2, 3]
    # Step-encoding ids: writes in the Overwrite's own step are dropped, as live update did.
    channel = DeltaChannel(extend, key="k").from_checkpoint(DeltaSnapshot([0]))
    channel.replay_writes(
        [
            (task_id_for(3, "a"), "k", Overwrite([9])),
            (task_id_for(3, "b"), "k", [1]),
            (task_id_for(4, "a"), "k", [2]),
        ]
    )
    assert channel.get() == [9, 2]
    # Overwrite(None) resets to an empty value.
    channel.replay_writes([("x", "k", {"__overwrite__": None}), ("y", "k", [5])])
    assert channel.get() == [5]


def test_delta_update_overwrite() -> None:
    channel = DeltaChannel(extend, key="history").from_checkpoint(DeltaSnapshot([1]))
    assert channel.update([[2], Overwrite([7]), [8]]) is True
    assert channel.get() == [7]
    assert channel.update([Overwrite(None)]) is True
    assert channel.get() == []
    with pytest.raises(InvalidUpdateError, match="history"):
        channel.update([Overwrite([1]), {"__overwrite__": [2]}])
    assert channel.update([]) is False
    assert channel.get() == []


def test_delta_never_checkpoints_itself() -> None:
    channel = DeltaChannel(extend, key="k").from_checkpoint(MISSING)
    channel.update([[1]])
    assert channel.checkpoint() is MISSING
    assert channel.copy().get() == [1]


def test_delta_from_checkpoint_forms() -> None:
    spec = DeltaChannel(extend, key="k")
    assert not spec.is_available()  # a spec is not hydrated yet
    assert spec.from_checkpoint(MISSING).get() == []
    assert spec.from_checkpoint(None).get() == []
    assert spec.from_checkpoint(DeltaSnapshot([1, 2])).get() == [1, 2]
    assert spec.from_checkpoint([3]).get() == [3]  # migrated BinaryOperatorAggregate blob
    assert DeltaChannel(extend, dict).from_checkpoint(MISSING).get() == {}


def test_delta_does_not_mutate_stored_values_with_an_in_place_reducer() -> None:
    snapshot = DeltaSnapshot([1])
    overwrite = Overwrite([5])
    channel = DeltaChannel(extend_in_place, key="k").from_checkpoint(snapshot)
    channel.replay_writes([("a", "k", [2])])
    assert channel.get() == [1, 2] and snapshot.value == [1]
    clone = channel.copy()
    clone.update([[3]])
    assert channel.get() == [1, 2]
    channel.update([overwrite])
    channel.update([[6]])
    assert overwrite.value == [5]
    channel.replay_writes([("b", "k", overwrite), ("c", "k", [7])])
    assert overwrite.value == [5]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "10", None])
def test_delta_snapshot_frequency_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises(ValueError, match="snapshot_frequency"):
        DeltaChannel(extend, snapshot_frequency=bad)


def test_delta_type_normalisation_and_equality() -> None:
    assert DeltaChannel(extend).typ is list
    assert DeltaChannel(extend, Sequence[int]).typ is list
    assert DeltaChannel(extend, Mapping[str, int]).typ is dict
    assert DeltaChannel(extend, MutableSet[int]).typ is set
    assert DeltaChannel(extend, NotRequired[Annotated[list[int], "x"]]).typ is list
    assert DeltaChannel(extend, snapshot_frequency=1).snapshot_frequency == 1
    assert DeltaChannel(extend) == DeltaChannel(extend, dict)
    assert DeltaChannel(extend) != DeltaChannel(extend, snapshot_frequency=5)
    assert DeltaChannel(extend) != DeltaChannel(extend_in_place)
    assert DeltaChannel(extend) != BinaryOperatorAggregate(list, operator.add)


def test_delta_unbuildable_type_reports_the_key() -> None:
    channel = DeltaChannel(extend, int | str, key="weird")
    hydrated = channel.from_checkpoint(MISSING)
    assert not hydrated.is_available()
    with pytest.raises(InvalidUpdateError, match="weird"):
        hydrated.update([[1]])


def test_binary_reducer_equivalence_helper() -> None:
    # Guards the property tests above: `extend` really is `operator.add` folded over batches.
    state, batches = [0], [[1, 2], [3]]
    assert extend(state, batches) == functools.reduce(operator.add, batches, state)
