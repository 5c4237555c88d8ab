"""A timeline's delta histories answered from a descendant's (`history_reuse.py`) equal
those of an in-memory saver that walks every one, on trees with forks, snapshots anywhere and
writes added late; and what the saver writes or deletes is never answered from before."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointer.ids import task_id_for
from checkpointer.savers.postgres import PostgresSaver
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.types import empty_checkpoint, make_config
from tests.conftest import PG_URL, drop_schema, require_postgres
from tests.test_memory_history import walker

CHANNELS = ("m", "n")


@st.composite
def trees(draw: Any) -> list[dict[str, Any]]:
    """Steps: the earlier step each continues (mostly the previous one), and per channel
    whether it gets a new version, stores a value, and the writes leading to it."""
    steps = []
    for number in range(draw(st.integers(min_value=2, max_value=16))):
        parent = number - 1
        if number > 1 and draw(st.integers(0, 5)) == 0:
            parent = draw(st.integers(0, number - 1))  # a fork
        steps.append(
            {
                "parent": parent,
                **{
                    ch: (
                        draw(st.booleans()),  # a new version
                        draw(st.integers(0, 3)) == 0,  # stores a value (a snapshot)
                        draw(st.lists(st.integers(0, 99), max_size=3)),
                    )
                    for ch in CHANNELS
                },
            }
        )
    return steps


def _drive(saver: Any, thread_id: str, steps: list[dict[str, Any]]) -> list[Any]:
    configs: list[Any] = []
    versions: list[dict[str, int]] = []
    for number, step in enumerate(steps):
        parent = step["parent"]
        config = configs[parent] if parent >= 0 else make_config(thread_id)
        current = dict(versions[parent]) if parent >= 0 else {}
        if parent >= 0:
            for ch in CHANNELS:
                writes = [(ch, value) for value in step[ch][2]]
                if writes:
                    saver.put_writes(config, writes, task_id_for(number, ch))
        checkpoint = empty_checkpoint()
        new_versions = {}
        for ch in CHANNELS:
            fresh, stores, _ = step[ch]
            if fresh or ch not in current:
                current[ch] = number + 1
                new_versions[ch] = number + 1
                if stores:
                    checkpoint["channel_values"][ch] = [ch, number]
        checkpoint["channel_versions"] = dict(current)
        configs.append(saver.put(config, checkpoint, {"step": number}, new_versions))
        versions.append(current)
    return configs


@pytest.fixture(params=["sqlite", "postgres"])
def sql_saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        saver = SqliteSaver(tmp_path / "reuse.db")
        saver.setup()
        yield saver
        saver.close()
        return
    require_postgres()
    schema = f"cp_test_{uuid.uuid4().hex[:12]}"
    saver = PostgresSaver(PG_URL, schema=schema, min_size=1, max_size=2)
    saver.setup()
    try:
        yield saver
    finally:
        saver.close()
        drop_schema(schema)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=trees())
def test_a_timeline_reads_the_histories_the_memory_saver_walks(
    sql_saver: Any, steps: list[dict[str, Any]]
) -> None:
    thread_id = uuid.uuid4().hex
    memory = walker()
    want_configs = _drive(memory, thread_id, steps)
    got_configs = _drive(sql_saver, thread_id, steps)
    twin = {
        got["configurable"]["checkpoint_id"]: want
        for got, want in zip(got_configs, want_configs, strict=True)
    }
    hits = sql_saver._history_reuse.hits
    for listed in sql_saver.list(make_config(thread_id)):  # newest first, as a timeline
        want = memory.get_delta_channel_history(
            config=twin[listed.config["configurable"]["checkpoint_id"]], channels=CHANNELS
        )
        got = sql_saver.get_delta_channel_history(config=listed.config, channels=CHANNELS)
        assert got == want
    assert sql_saver._history_reuse.hits >= hits  # (counted; the next test asserts use)


@pytest.mark.parametrize("shape", [int, lambda n: (n, "tuple")], ids=["copied", "decoded"])
def test_a_linear_timeline_is_answered_mostly_from_reuse(sql_saver: Any, shape: Any) -> None:
    """Values with a cheap exact copy are copied from the first decode; others (tuples)
    are decoded again from the rows kept, each time."""
    steps = [
        {"parent": n - 1, "m": (True, n % 10 == 0, [shape(n)]), "n": (False, False, [])}
        for n in range(40)
    ]
    memory = walker()
    want = _drive(memory, "t", steps)
    got = _drive(sql_saver, "t", steps)
    before = sql_saver._history_reuse.hits
    listed = list(sql_saver.list(make_config("t")))
    for tup, expected in zip(listed, reversed(want), strict=True):
        assert sql_saver.get_delta_channel_history(
            config=tup.config, channels=["m"]
        ) == memory.get_delta_channel_history(config=expected, channels=["m"])
    # A walk at each snapshot (every 10) and at the head; the others are answered.
    assert sql_saver._history_reuse.hits - before >= 30
    assert len(got) == 40


def test_what_the_saver_writes_is_never_answered_from_before(sql_saver: Any) -> None:
    """Writes added to a checkpoint that has children change its descendants' histories:
    the saver forgets what it read of that thread."""
    steps = [{"parent": n - 1, "m": (True, False, [n]), "n": (True, False, [])} for n in range(6)]
    configs = _drive(sql_saver, "t", steps)
    listed = list(sql_saver.list(make_config("t")))
    head, parent = listed[0].config, listed[1].config
    sql_saver.get_delta_channel_history(config=head, channels=CHANNELS)
    sql_saver.put_writes(configs[2], [("m", 1000)], task_id_for(99, "late"))
    history = sql_saver.get_delta_channel_history(config=parent, channels=CHANNELS)
    assert 1000 in [value for _, _, value in history["m"]["writes"]]


def test_a_request_no_entry_can_answer_leaves_the_entries_unsorted(sql_saver: Any) -> None:
    """Reading the head again (a chat's get_state after get_state) is not an ancestor of
    the head's kept history: it reads from the database, and the kept rows stay as read
    (sorting them costs as much as reading them)."""
    steps = [{"parent": n - 1, "m": (True, False, [n]), "n": (True, False, [])} for n in range(6)]
    _drive(sql_saver, "t", steps)
    listed = list(sql_saver.list(make_config("t")))
    head = listed[0].config
    reuse = sql_saver._history_reuse
    first = sql_saver.get_delta_channel_history(config=head, channels=CHANNELS)
    entries = list(reuse._entries.values())
    hits = reuse.hits
    assert sql_saver.get_delta_channel_history(config=head, channels=CHANNELS) == first
    assert reuse.hits == hits
    assert entries and all(entry.channels is None for entry in entries)
    # An ancestor is still answered from them (and only then are they sorted).
    parent = sql_saver.get_delta_channel_history(config=listed[1].config, channels=CHANNELS)
    assert reuse.hits == hits + 1
    assert parent["m"]["writes"] == first["m"]["writes"][:-1]
