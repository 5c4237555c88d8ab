"""The parent rule of `put` (`savers/sql/parents.py`, issue #15): a parent need not be
stored, yet no sequence of puts ever stores a loop of parent pointers, and every walk
over what was stored ends. Checked against a model of the rule with random put sequences
on the in-memory and SQLite savers, and on PostgreSQL with a fixed sequence."""

from __future__ import annotations

import tempfile
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointer.errors import ConfigError, ParentLoopError, ParentMismatchError
from checkpointer.savers.memory import InMemorySaver
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.types import empty_checkpoint, make_config
from tests.conftest import Harness

IDS = ["a", "b", "c", "d", "e"]
Put = tuple[str, str | None]
"""(checkpoint id, parent id or None for a root)."""

puts = st.lists(st.tuples(st.sampled_from(IDS), st.none() | st.sampled_from(IDS)), max_size=14)


def expected(stored: dict[str, str | None], put: Put) -> type[Exception] | None:
    """What the rule makes of `put` given the stored parent pointers (None: written)."""
    checkpoint_id, parent_id = put
    if parent_id == checkpoint_id:
        return ConfigError
    if checkpoint_id in stored:
        return None if stored[checkpoint_id] == parent_id else ParentMismatchError
    if checkpoint_id in stored.values():
        return ParentLoopError
    return None


def ancestors(stored: dict[str, str | None], start: str) -> list[str]:
    """The ids a walk from `start` passes; fails the test on a loop."""
    seen: list[str] = []
    cursor: str | None = start
    while cursor is not None and cursor in stored:
        assert cursor not in seen, f"loop through {cursor}: {stored}"
        seen.append(cursor)
        cursor = stored[cursor]
    return seen


def _checkpoint(checkpoint_id: str, step: int) -> Any:
    cp = empty_checkpoint()
    cp["id"] = checkpoint_id
    cp["channel_versions"] = {"d": f"{step + 1:08d}"}
    return cp


def run_sequence(saver: Any, sequence: list[Put]) -> str:
    """Apply `sequence` to `saver`, each outcome as the model says, then compare what is
    stored and walk every checkpoint's delta history (each a write per checkpoint).
    Returns the thread written."""
    thread = f"t-{uuid.uuid4().hex[:8]}"
    stored: dict[str, str | None] = {}
    for step, (checkpoint_id, parent_id) in enumerate(sequence):
        outcome = expected(stored, (checkpoint_id, parent_id))
        config = make_config(thread, "", parent_id)
        meta: Any = {"step": step, "counters_since_delta_snapshot": {"d": (1, 1)}}
        if outcome is None:
            written = saver.put(config, _checkpoint(checkpoint_id, step), meta, {})
            if checkpoint_id not in stored:
                saver.put_writes(written, [("d", checkpoint_id)], str(uuid.uuid4()))
            stored[checkpoint_id] = parent_id
        else:
            with pytest.raises(outcome) as caught:
                saver.put(config, _checkpoint(checkpoint_id, step), meta, {})
            assert repr(checkpoint_id) in str(caught.value)
    listed = {
        t.config["configurable"]["checkpoint_id"]: (
            t.parent_config["configurable"]["checkpoint_id"] if t.parent_config else None
        )
        for t in saver.list(make_config(thread))
    }
    assert listed == stored
    for checkpoint_id in stored:
        history = saver.get_delta_channel_history(
            config=make_config(thread, "", checkpoint_id), channels=["d"]
        )
        walked = ancestors(stored, checkpoint_id)[1:]
        assert [w[2] for w in history["d"]["writes"]] == walked[::-1]
    return thread


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence=puts)
def test_random_puts_never_store_a_loop_in_memory(sequence: list[Put]) -> None:
    run_sequence(InMemorySaver(), sequence)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(sequence=puts)
def test_random_puts_never_store_a_loop_in_sqlite(sequence: list[Put]) -> None:
    with (
        tempfile.TemporaryDirectory() as tmp,
        SqliteSaver.from_conn_string(Path(tmp) / "rule.db") as saver,
    ):
        run_sequence(saver, sequence)


def test_random_puts_never_store_a_loop_on_postgres(pg_url: str, pg_schema: str) -> None:
    """The Postgres put tests the rule in its one statement (the upsert keeps a re-put's
    parent, `prior` is found under the parent it was stored with): same outcomes as the
    model, and a thread summary equal to one recomputed from the rows, re-puts of roots
    and of children included."""
    from checkpointer.savers.postgres import PostgresSaver

    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as saver:

        @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
        @given(sequence=puts)
        def check(sequence: list[Put]) -> None:
            thread = run_sequence(saver, sequence)
            maintained = saver.list_threads(thread_ids=[thread])
            saver.refresh_thread_summaries([thread])
            assert maintained == saver.list_threads(thread_ids=[thread])

        check()


# The sequences that close a loop in every way the rule must stop, for every saver.
CLOSING = [
    [("a", "b"), ("b", "a")],  # a child stored before its parent, then the parent under it
    [("a", None), ("b", "a"), ("a", "b")],  # a re-put under its own child
    [("a", "c"), ("b", "a"), ("c", "b")],  # a three-step loop, closed by its last put
    [("a", "a")],  # its own parent
    [("c", "x"), ("x", None), ("x", "c")],
]


async def test_no_put_sequence_closes_a_loop_on_any_saver(harness: Harness) -> None:
    for sequence in CLOSING:
        thread = f"t-{uuid.uuid4().hex[:8]}"
        stored: dict[str, str | None] = {}
        for step, (checkpoint_id, parent_id) in enumerate(sequence):
            outcome = expected(stored, (checkpoint_id, parent_id))
            config = make_config(thread, "", parent_id)
            if outcome is None:
                await harness.put(config, _checkpoint(checkpoint_id, step), {}, {})
                stored[checkpoint_id] = parent_id
            else:
                with pytest.raises(outcome):
                    await harness.put(config, _checkpoint(checkpoint_id, step), {}, {})
        assert outcome is not None, f"{sequence}: the put closing the loop was written"
        for checkpoint_id in stored:
            ancestors(stored, checkpoint_id)
            history = await harness.delta(make_config(thread, "", checkpoint_id), ["d"])
            assert history["d"]["writes"] == []
        listed = await harness.list(make_config(thread))
        assert {t.config["configurable"]["checkpoint_id"] for t in listed} == set(stored)


def test_the_put_guard_probes_indexes_never_scans(tmp_path: Path) -> None:
    """The rule costs two index probes per put on SQLite (children by parent: revision
    0007's index; the checkpoint itself: the primary key), whatever the thread's length."""
    import sqlite3

    from checkpointer.savers.sql.parents import new_checkpoint_allowed
    from checkpointer.savers.sql.schema import CHECKPOINTS

    path = tmp_path / "plan.db"
    with SqliteSaver.from_conn_string(path):
        pass
    guard = new_checkpoint_allowed(CHECKPOINTS, "?1", "?2", "?3")
    with sqlite3.connect(path) as conn:
        plan = [
            row[3]
            for row in conn.execute(f"EXPLAIN QUERY PLAN SELECT 1 WHERE {guard}", ("t", "", "x"))
        ]
    searches = [s for s in plan if s.startswith(("SEARCH", "SCAN")) and "CONSTANT ROW" not in s]
    assert len(searches) == 2 and all(step.startswith("SEARCH") for step in searches), plan
    assert any(f"{CHECKPOINTS}_parent_idx" in step for step in searches), plan
