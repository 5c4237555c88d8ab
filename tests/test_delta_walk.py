"""The SQLite delta-history walk reads each ancestor's version of a channel out of its JSON
record, and skips that parse for a channel with no stored value (`delta_sql.stored_at`).
Neither may change the answer: whatever text the versions are (quotes and backslashes that
JSON escapes, non-ASCII, digits that look like numbers, one version text shared by several
channels), the history equals the in-memory saver's, which walks without any shortcut.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointer.ids import task_id_for
from checkpointer.savers.memory import InMemorySaver
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.types import empty_checkpoint, make_config

CHANNELS = ("m", "n")

# Versions: arbitrary text (never NUL or lone surrogates, which no id may hold), with the
# characters that JSON escapes and digits that look like numbers over-represented.
version_text = st.one_of(
    st.text(
        alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
        min_size=1,
        max_size=6,
    ),
    st.text(alphabet='0123456789.:+-"\\/é\n', min_size=1, max_size=6),
)


@st.composite
def chains(draw: Any) -> list[dict[str, Any]]:
    """Steps of one linear thread: per channel, a new version (or the old one), whether the
    step stores a value for it, and the writes its tasks made from the previous step."""
    length = draw(st.integers(min_value=1, max_value=12))
    pool = draw(st.lists(version_text, min_size=length, max_size=length, unique=True))
    # A channel never reuses a version text, but the two channels share the same texts in
    # different orders, so one channel's stored version appears in the other's records.
    unused = {"m": iter(pool), "n": iter(draw(st.permutations(pool)))}
    current: dict[str, str] = {}
    steps = []
    for _ in range(length):
        step: dict[str, Any] = {}
        for channel in CHANNELS:
            if channel not in current or draw(st.booleans()):
                current[channel] = next(unused[channel])
            step[channel] = (
                current[channel],
                draw(st.booleans()),  # stores a value, if its version is new
                draw(st.lists(st.integers(0, 99), max_size=2)),  # writes leading here
            )
        steps.append(step)
    return steps


def _drive(saver: Any, steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Put the chain; return the config of every checkpoint, oldest first."""
    configs: list[dict[str, Any]] = []
    config = make_config("t")
    versions: dict[str, str] = {}
    for number, step in enumerate(steps):
        if configs:
            for channel in CHANNELS:
                writes = [(channel, value) for value in step[channel][2]]
                if writes:
                    saver.put_writes(config, writes, task_id_for(number, channel))
        checkpoint = empty_checkpoint()
        new_versions = {}
        for channel in CHANNELS:
            version, stores, _ = step[channel]
            if versions.get(channel) != version:
                new_versions[channel] = version
            versions[channel] = version
            if stores:
                checkpoint["channel_values"][channel] = [channel, number]
        checkpoint["channel_versions"] = dict(versions)
        config = saver.put(config, checkpoint, {"step": number}, new_versions)
        configs.append(config)
    return configs


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=chains())
def test_sqlite_delta_walk_equals_the_memory_walk(tmp_path: Path, steps: list[Any]) -> None:
    memory = InMemorySaver()
    path = tmp_path / f"walk-{next(_counter)}.db"
    sqlite = SqliteSaver(str(path))
    try:
        sqlite.setup()
        expected_configs = _drive(memory, steps)
        got_configs = _drive(sqlite, steps)
        for expected_config, got_config in zip(expected_configs, got_configs, strict=True):
            want = memory.get_delta_channel_history(config=expected_config, channels=CHANNELS)
            got = sqlite.get_delta_channel_history(config=got_config, channels=CHANNELS)
            # Checkpoint ids differ between the two stores; the histories must not.
            assert got == want
    finally:
        sqlite.close()


_counter = itertools.count()
