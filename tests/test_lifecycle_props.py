"""Property: whatever runs, forks, interrupts, pins and retention operations a thread goes
through, every checkpoint that is kept reads back exactly as it was written (values and
pending writes), on the in-memory, SQLite and PostgreSQL savers.

Threads come from `ChainDriver` (the replay engine driving a saver like a runtime does),
with two delta channels that snapshot at different frequencies, an `Overwrite` now and
then, a reducer channel and a plain one.
"""

from __future__ import annotations

import operator
import os
import uuid
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointer.channels import BinaryOperatorAggregate, DeltaChannel, LastValue, Overwrite
from checkpointer.lifecycle import KeepLast, MaxAge, RetentionPolicy
from checkpointer.savers.base import BaseCheckpointSaver
from checkpointer.savers.retention import parse_ts
from checkpointer.types import INTERRUPT, RunnableConfig, make_config
from tests.chain import ChainDriver, values_at
from tests.conftest import PG_URL, drop_schema, require_postgres


def extend(state: list[Any], batches: Sequence[list[Any]]) -> list[Any]:
    return [*state, *(item for batch in batches for item in batch)]


SPECS = {
    "msgs": DeltaChannel(extend, snapshot_frequency=3),
    "log": DeltaChannel(extend, snapshot_frequency=5),
    "total": BinaryOperatorAggregate(int, operator.add),
    "topic": LastValue(str),
}


def cid(config: RunnableConfig) -> str:
    return str(config["configurable"]["checkpoint_id"])


# One step: up to two tasks, each writing some channels. Small integers keep shrinking fast.
task = st.lists(
    st.sampled_from(["msgs", "log", "total", "topic", "overwrite"]), min_size=0, max_size=3
)
step = st.lists(task, min_size=1, max_size=2)
fraction = st.floats(min_value=0, max_value=1)
operation = st.one_of(
    st.tuples(st.just("run"), st.lists(step, min_size=1, max_size=6)),
    st.tuples(st.just("fork"), fraction),
    st.tuples(st.just("interrupt"), st.just(0.0)),
    st.tuples(st.just("pin"), fraction),
    st.tuples(st.just("keep_last"), st.integers(min_value=1, max_value=4), st.booleans()),
    st.tuples(st.just("max_age"), fraction, st.booleans()),
)


class Scenario:
    """Drives one thread and remembers what every checkpoint looked like when written."""

    def __init__(self, saver: BaseCheckpointSaver) -> None:
        self.saver = saver
        self.thread_id = f"prop-{uuid.uuid4().hex[:10]}"
        self.driver = ChainDriver(saver, SPECS, thread_id=self.thread_id)
        self.counter = 0
        self.pinned: set[str] = set()

    def existing(self) -> list[str]:
        """Checkpoint ids of the thread, oldest first."""
        return sorted(cid(t.config) for t in self.saver.list(make_config(self.thread_id)))

    def pick(self, fraction: float) -> str:
        ids = self.existing()
        return ids[min(int(fraction * len(ids)), len(ids) - 1)]

    def run(self, steps: list[list[list[str]]]) -> None:
        for tasks in steps:
            writes: list[list[tuple[str, Any]]] = []
            once: set[str] = set()  # a LastValue and an Overwrite take one write per step
            for names in tasks:
                batch: list[tuple[str, Any]] = []
                for name in names:
                    self.counter += 1
                    if name in ("overwrite", "topic") and name in once:
                        continue
                    once.add(name)
                    if name == "overwrite":
                        batch.append(("msgs", Overwrite([f"o{self.counter}"])))
                    elif name == "topic":
                        batch.append(("topic", f"t{self.counter}"))
                    elif name == "total":
                        batch.append(("total", self.counter))
                    else:
                        batch.append((name, [f"{name}{self.counter}"]))
                writes.append(batch)
            self.driver.run_step(writes)

    def apply(self, op: tuple[Any, ...]) -> None:
        kind = op[0]
        if kind == "run":
            self.run(op[1])
        elif kind == "fork":
            self.driver.fork_from(make_config(self.thread_id, "", self.pick(op[1])))
        elif kind == "interrupt":
            self.saver.put_writes(
                self.driver.config,
                [(INTERRUPT, {"ask": f"approve {self.counter}?"})],
                str(uuid.uuid4()),
            )
        elif kind == "pin":
            target = self.pick(op[1])
            self.saver.pin(make_config(self.thread_id, "", target))
            self.pinned.add(target)
        elif kind == "keep_last":
            self.retain(KeepLast(op[1]), op[2])
        else:
            ids = self.existing()
            pivot = self.saver.get_tuple(make_config(self.thread_id, "", self.pick(op[1])))
            assert pivot is not None and ids
            ts = parse_ts(pivot.checkpoint["ts"])
            assert ts is not None
            self.retain(MaxAge(timedelta(hours=1)), op[2], now=ts + timedelta(hours=1))

    def retain(self, policy: RetentionPolicy, materialize: bool, **kwargs: Any) -> None:
        before = {
            cid(t.config): t
            for t in self.saver.list(make_config(self.thread_id))
            if t.config["configurable"]["checkpoint_ns"] == ""
        }
        awaiting = {
            c
            for c, t in before.items()
            if any(w[1] == INTERRUPT for w in t.pending_writes or [])
            and not any(
                o.parent_config is not None and cid(o.parent_config) == c for o in before.values()
            )
        }
        head = max(before)
        report = self.saver.apply_retention(
            policy,
            thread_ids=[self.thread_id],
            channels=SPECS if materialize else None,
            **kwargs,
        )
        after = set(self.existing())
        assert after <= set(before)
        assert {head} | self.pinned | awaiting <= after
        assert report.checkpoints_deleted == len(before) - len(after)
        if materialize and isinstance(policy, KeepLast):
            # With the channel specs nothing is kept for history: exactly what was asked.
            assert after == set(sorted(before)[-policy.n :]) | {head} | self.pinned | awaiting
        self.check_kept(before)

    def check_kept(self, before: dict[str, Any]) -> None:
        expected = {cid(config): values for config, values in self.driver.saved}
        for checkpoint_id in self.existing():
            config = make_config(self.thread_id, "", checkpoint_id)
            assert values_at(self.saver, SPECS, config) == expected[checkpoint_id]
            tup = self.saver.get_tuple(config)
            assert tup is not None
            assert tup.pending_writes == before[checkpoint_id].pending_writes


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def sync_saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[BaseCheckpointSaver]:
    kind = request.param
    if kind == "memory":
        from checkpointer.savers.memory import InMemorySaver

        yield InMemorySaver()
    elif kind == "sqlite":
        from checkpointer.savers.sqlite import SqliteSaver

        with SqliteSaver.from_conn_string(tmp_path / "props.db", setup=True) as saver:
            yield saver
    else:
        require_postgres()
        from checkpointer.savers.postgres import PostgresSaver

        schema = f"cp_test_{uuid.uuid4().hex[:12]}"
        try:
            with PostgresSaver.from_conn_string(PG_URL, schema=schema, setup=True) as saver:
                yield saver
        finally:
            drop_schema(schema)


@settings(
    max_examples=int(os.environ.get("LIFECYCLE_PROP_EXAMPLES", "15")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(first=st.lists(step, min_size=3, max_size=10), ops=st.lists(operation, max_size=12))
def test_retention_never_changes_a_kept_checkpoint(
    sync_saver: BaseCheckpointSaver,
    first: list[list[list[str]]],
    ops: list[tuple[Any, ...]],
) -> None:
    scenario = Scenario(sync_saver)
    scenario.run(first)
    for op in [*ops, ("keep_last", 1, True)]:
        scenario.apply(op)
    # What remains after the last, most aggressive trim still reads back in full.
    expected = dict((cid(c), v) for c, v in scenario.driver.saved)
    for checkpoint_id in scenario.existing():
        config = make_config(scenario.thread_id, "", checkpoint_id)
        assert values_at(sync_saver, SPECS, config) == expected[checkpoint_id]
