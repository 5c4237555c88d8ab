"""The in-memory saver's delta histories answered from a walk just made
(`memory_history.py`) equal those of a saver that walks every time, whatever was written,
re-put or asked in between, and whatever a caller did to an answer it was handed."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from checkpointer.ids import task_id_for
from checkpointer.savers.memory import InMemorySaver
from checkpointer.savers.memory_history import HistoryMemo
from checkpointer.types import empty_checkpoint, make_config
from tests.test_fuzz import example_settings

CHANNELS = ("m", "n")

values = st.one_of(
    st.integers(0, 99),  # shared as it is
    st.builds(lambda n: [n, "x"], st.integers(0, 99)),  # one list copy
    st.builds(lambda n: [{"id": n, "text": "hi"}], st.integers(0, 99)),  # a chat write
    st.builds(lambda n: (n, "t"), st.integers(0, 99)),  # no cheap copy: decoded again
    st.builds(lambda n: {"deep": [n, {"in": n}]}, st.integers(0, 99)),  # too deep to copy
)

steps = st.tuples(
    st.just("step"),
    st.one_of(st.just(10**6), st.integers(0, 50)),  # the parent: mostly the last
    st.dictionaries(
        st.sampled_from(CHANNELS),
        st.tuples(st.booleans(), st.lists(values, max_size=3)),  # stores a value; writes
    ),
)
operations = st.one_of(
    steps,
    steps,
    st.tuples(st.just("late"), st.integers(0, 50), st.sampled_from(CHANNELS), values),
    st.tuples(st.just("snapshot"), st.integers(0, 50), st.sampled_from(CHANNELS)),
    st.tuples(st.just("read"), st.integers(0, 50), st.booleans()),
    st.tuples(st.just("timeline"), st.booleans()),
)


def walker() -> InMemorySaver:
    """A saver that walks the ancestors for every request."""
    saver = InMemorySaver()
    saver._histories = HistoryMemo(0)
    return saver


class Twins:
    """The same calls made on a saver that reuses walks and on one that does not."""

    def __init__(self) -> None:
        self.ours, self.reference = InMemorySaver(), walker()
        self.configs: list[Any] = []
        self.versions: list[dict[str, int]] = []
        self.task = 0

    def both(self, name: str, *args: Any, **kwargs: Any) -> Any:
        got = getattr(self.ours, name)(*args, **kwargs)
        assert getattr(self.reference, name)(*args, **kwargs) == got
        return got

    def step(self, parent: int, plan: dict[str, tuple[bool, list[Any]]]) -> None:
        """A checkpoint after the writes of `plan` on the checkpoint numbered `parent`
        (any number past the last: the last), storing a value where `plan` says so."""
        number = len(self.configs)
        has_parent = bool(self.configs)
        at = min(parent, number - 1)
        config = self.configs[at] if has_parent else make_config("t")
        current = dict(self.versions[at]) if has_parent else {}
        checkpoint = empty_checkpoint()
        new_versions = {}
        for channel in CHANNELS:
            stores, writes = plan.get(channel, (False, []))
            if has_parent and writes:
                self.task += 1
                pairs = [(channel, value) for value in writes]
                self.both("put_writes", config, pairs, task_id_for(self.task, channel))
            if channel in plan or channel not in current:
                current[channel] = number + 1
                new_versions[channel] = number + 1
                if stores:
                    checkpoint["channel_values"][channel] = [channel, number]
        checkpoint["channel_versions"] = dict(current)
        self.configs.append(self.both("put", config, checkpoint, {"step": number}, new_versions))
        self.versions.append(current)

    def late(self, at: int, channel: str, value: Any) -> None:
        """A write added to a checkpoint that may have children already."""
        self.task += 1
        config = self.configs[at % len(self.configs)]
        self.both("put_writes", config, [(channel, value)], task_id_for(self.task, "late"))

    def snapshot(self, at: int, channel: str) -> None:
        """A checkpoint put again with a value stored at its own version of `channel`
        (as retention materializes one): its descendants' histories now start there."""
        index = at % len(self.configs)
        stored = self.ours.get_tuple(self.configs[index])
        assert stored is not None
        checkpoint = dict(stored.checkpoint)
        checkpoint["channel_values"] = {channel: ["snap", index]}
        parent = stored.parent_config or make_config("t")
        version = checkpoint["channel_versions"][channel]
        self.both("put", parent, checkpoint, stored.metadata, {channel: version})

    def read(self, at: int, spoil: bool) -> None:
        config = self.configs[at % len(self.configs)]
        got = self.ours.get_delta_channel_history(config=config, channels=CHANNELS)
        want = self.reference.get_delta_channel_history(config=config, channels=CHANNELS)
        assert got == want
        if spoil:
            spoil_answer(got)

    def timeline(self, spoil: bool) -> None:
        for listed in self.ours.list(make_config("t")):  # newest first
            self.read(self.configs.index(listed.config), spoil)


def spoil_answer(histories: dict[str, Any]) -> None:
    """Change every mutable value a caller was handed, as a careless caller might."""
    for history in histories.values():
        for _, _, value in history["writes"]:
            if isinstance(value, list):
                value.append("spoiled")
                if value and isinstance(value[0], dict):
                    value[0]["text"] = "spoiled"
            elif isinstance(value, dict):
                value["deep"].append("spoiled")
        seed = history.get("seed")
        if isinstance(seed, list):
            seed.append("spoiled")


@example_settings(150)
@given(first=steps, ops=st.lists(operations, max_size=40))
def test_answers_equal_a_walk_at_every_request(first: Any, ops: list[Any]) -> None:
    twins = Twins()
    twins.step(0, first[2])
    for op in ops:
        getattr(twins, op[0])(*op[1:])
    twins.timeline(spoil=False)


def test_a_timeline_walks_once_between_snapshots() -> None:
    """A linear thread read newest first (LangGraph's `get_state_history`): one walk at the
    head and one at each snapshot; every other request is answered from the last walk."""
    twins = Twins()
    for number in range(60):
        twins.step(number, {"m": (number % 20 == 0, [[{"id": number}]])})
    twins.timeline(spoil=True)
    assert twins.ours._histories.hits >= 60 - 4
    assert twins.reference._histories.hits == 0


def test_the_head_read_again_is_answered_from_its_walk() -> None:
    twins = Twins()
    for number in range(10):
        twins.step(number, {"m": (False, [[number]])})
    head = twins.configs[-1]
    first = twins.ours.get_delta_channel_history(config=head, channels=["m"])
    spoil_answer(first)
    again = twins.ours.get_delta_channel_history(config=head, channels=["m"])
    assert twins.ours._histories.hits == 1
    assert again == twins.reference.get_delta_channel_history(config=head, channels=["m"])


def test_a_write_or_delete_forgets_the_walks() -> None:
    twins = Twins()
    for number in range(8):
        twins.step(number, {"m": (False, [number])})
    twins.timeline(spoil=False)
    twins.late(2, "m", 1000)  # pending on an ancestor of every later checkpoint
    twins.timeline(spoil=False)
    assert 1000 in [
        value
        for _, _, value in twins.ours.get_delta_channel_history(
            config=twins.configs[-1], channels=["m"]
        )["m"]["writes"]
    ]
    twins.ours.delete_thread("t")
    assert twins.ours._histories._walks == {}
    assert twins.ours.get_delta_channel_history(config=twins.configs[-1], channels=["m"]) == {
        "m": {"writes": []}
    }


def test_walks_are_bounded_by_the_value_budget() -> None:
    """A walk larger than half the budget is never kept decoded (it is decoded again for
    each answer), and kept walks never add up past the budget."""
    twins = Twins()
    twins.ours._histories = HistoryMemo(max_bytes=600)
    for number in range(30):
        twins.step(number, {"m": (False, [["x" * 20]])})
    twins.timeline(spoil=True)
    memo = twins.ours._histories
    assert memo.hits > 0
    assert all(walk.kept is None for walk in memo._walks.values())
    assert memo._size == 0
