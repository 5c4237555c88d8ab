"""Our savers against LangGraph's own InMemorySaver, call for call.

Hypothesis writes random programs of saver calls, the way LangGraph's runtime makes them
(puts that carry only the channels whose version moved, forks from any earlier checkpoint,
subgraph namespaces, pending writes with special channels, threads deleted), and runs
each program on LangGraph's reference saver and on ours behind the
drop-in adapter. Every read (`get_tuple` of the head or of an id, `list` with filters,
`before` and `limit`) must give the same answer on both. The scenario tests of
`test_langgraph_dropin.py` compare whole graphs; this compares the storage contract where no
graph would wander: forks of forks, writes arriving after a fork, deletes between reads.

Where LangGraph's savers disagree with each other, the program avoids the question rather
than pick a side: a batch of writes mixing special and regular channels (the in-memory
saver replaces the special ones, the SQL savers none), and the order of a `list` that spans
namespaces (the in-memory saver groups by namespace, the SQL savers sort by id). The same
programs also run against LangGraph's SQLite saver, where that order is compared, and
where a dict or list in a metadata filter is left out (it compares JSON texts).
"""

from __future__ import annotations

import asyncio
import sqlite3
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("langgraph.checkpoint.memory")

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.memory import InMemorySaver as ReferenceSaver
from langgraph.checkpoint.serde.types import _DeltaSnapshot
from langgraph.checkpoint.sqlite import SqliteSaver as ReferenceSqliteSaver

from checkpointer.langgraph import LangGraphSaver
from checkpointer.types import make_config
from tests.conftest import (
    ASYNC_KINDS,
    PG_KINDS,
    close_saver,
    drop_schema,
    open_saver,
    require_postgres,
)
from tests.test_fuzz import example_settings

KINDS = ("memory", "sqlite", "async_sqlite", "postgres", "async_postgres")
CHANNELS = ("messages", "count", "note", "items")
GROWING = "log"
NAMESPACES = ("", "inner:6f1c3d2e-0000-4000-8000-000000000001")
SPECIAL = ("__error__", "__interrupt__", "__resume__", "__scheduled__")
THREADS = 3

PROGRAMS = settings(
    example_settings(60),
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
        HealthCheck.function_scoped_fixture,
    ],
)

# Values a state may hold: what LangGraph's serializer keeps exactly (type included).
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.binary(max_size=8),
    st.uuids(),
    st.datetimes(timezones=st.just(UTC)),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=6), inner, max_size=4),
    ),
    max_leaves=10,
)
# Metadata is JSON on every saver: plain JSON values.
json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(2**53), max_value=2**53),
        st.text(max_size=8),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)

# A delta channel's snapshot, as LangGraph's DeltaChannel puts it among the values.
snapshots = st.builds(_DeltaSnapshot, st.lists(scalars, max_size=3))
# A delta channel's snapshot, as LangGraph's DeltaChannel puts it among the values.
snapshots = st.builds(_DeltaSnapshot, st.lists(scalars, max_size=3))
put_op = st.tuples(
    st.just("put"),
    st.integers(0, THREADS - 1),  # thread
    st.sampled_from(NAMESPACES),
    st.integers(0, 10**6),  # which parent: 0 the head, else any earlier checkpoint
    st.dictionaries(
        st.sampled_from(CHANNELS),
        st.one_of(values, snapshots, st.just(None).map(lambda _: EMPTY)),
    ),
    st.dictionaries(st.sampled_from(("user", "tag", "step")), json_values, max_size=2),
    st.sampled_from((None, "run-a", "run-b")),
    st.integers(0, 3),  # items appended to the growing list channel (0: not updated)
)
writes_op = st.tuples(
    st.just("put_writes"),
    st.integers(0, 10**6),  # which stored checkpoint
    st.integers(0, 3),  # which task
    st.one_of(
        st.lists(st.tuples(st.sampled_from(CHANNELS), values), min_size=1, max_size=3),
        st.lists(st.tuples(st.sampled_from(SPECIAL), values), min_size=1, max_size=2),
    ),
)
tuple_op = st.tuples(st.just("get_tuple"), st.integers(0, THREADS - 1), st.integers(-1, 10**6))
list_op = st.tuples(
    st.just("list"),
    st.sampled_from(("thread", "namespace", "all")),
    st.integers(0, THREADS - 1),
    st.sampled_from(NAMESPACES),
    # No None: the reference in-memory saver matches a missing key with it, its SQL savers
    # (and ours) do not.
    st.dictionaries(
        st.sampled_from(("user", "tag", "source", "run_id")),
        json_values.filter(lambda v: v is not None),
        max_size=1,
    ),
    st.one_of(st.none(), st.integers(0, 10**6)),  # before which checkpoint
    st.one_of(st.none(), st.integers(1, 4)),  # limit
)
delete_op = st.tuples(st.just("delete_thread"), st.integers(0, THREADS - 1))
early_op = st.tuples(
    st.just("early_writes"),
    st.integers(0, THREADS - 1),
    st.sampled_from(NAMESPACES),
    st.integers(0, 3),  # which task
    st.lists(st.tuples(st.sampled_from(CHANNELS), values), min_size=1, max_size=2),
)
reput_op = st.tuples(
    st.just("reput"),
    st.integers(0, 10**6),  # which stored checkpoint
    st.dictionaries(st.sampled_from(("user", "tag")), json_values, max_size=1),
)
delta_op = st.tuples(
    st.just("delta"),
    st.integers(-1, 10**6),  # which stored checkpoint; -1: the head of a thread
    st.integers(0, THREADS - 1),
    st.lists(st.sampled_from(CHANNELS), min_size=1, max_size=3, unique=True),
)
programs = st.lists(
    st.one_of(
        put_op, put_op, put_op, writes_op, writes_op, tuple_op, list_op, list_op,
        delete_op, reput_op, delta_op, delta_op, early_op,
    ),
    min_size=1,
    max_size=40,
)  # fmt: skip


class _Empty:
    """A channel with a version and no value (an emptied Topic, a consumed trigger)."""

    def __repr__(self) -> str:
        return "EMPTY"


EMPTY = _Empty()


@dataclass
class Program:
    """One program's run: the reference and ours, and what the program knows (the
    checkpoints it stored, in order, with the state each carries)."""

    ours: Any
    ref: Any
    prefix: str
    sorted_across_namespaces: bool = False
    """The reference orders a `list` spanning namespaces by checkpoint id, as LangGraph's
    SQL savers (and ours) do; its in-memory saver groups by namespace."""
    nested_filters: bool = True
    """The reference matches a dict or list in a metadata filter by value, as its in-memory
    saver (and ours) do; its SQLite saver compares JSON texts, `json.dumps` escaping what
    SQLite's `json_extract` returns raw (a DEL, any non-ASCII character)."""
    states: dict[tuple[str, str, str], tuple[dict[str, Any], dict[str, str]]] = field(
        default_factory=dict
    )
    stored: list[tuple[str, str, str]] = field(default_factory=list)
    # The id the next put of a (thread, namespace) takes: writes were put to it first.
    reserved: dict[tuple[str, str], str] = field(default_factory=dict)

    def thread(self, i: int) -> str:
        return f"{self.prefix}-{i}"


def _lists(value: Any) -> Any:
    """`value` with its tuples as lists: LangGraph's serializer reads a tuple back as a
    list, ours as the tuple it was (README, "Serializer"); nothing else may differ."""
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # a named tuple keeps its type
        return (type(value).__name__, [_lists(v) for v in value])
    if isinstance(value, tuple | list):
        return [_lists(v) for v in value]
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    return value


def _comparable(tup: Any) -> Any:
    """A tuple as plain data; pending writes grouped by task in their stored order (savers
    differ in the order of tasks, never within one)."""
    if tup is None:
        return None
    writes = sorted(tup.pending_writes or [], key=lambda w: w[0])
    return (
        tup.config,
        _lists(tup.checkpoint),
        tup.metadata,
        tup.parent_config,
        [(task, channel, _lists(value)) for task, channel, value in writes],
    )


def _both(program: Program, call: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
    """Call `call` on both sides; an error must be the same on both (by being an error)."""
    answers = []
    for saver in (program.ref, program.ours):
        try:
            answers.append(("ok", getattr(saver, call)(*args, **kwargs)))
        except Exception as exc:  # compared, not swallowed
            answers.append(("error", exc))
    (ref_kind, ref), (our_kind, ours) = answers
    assert ref_kind == our_kind, f"{call}{args}: reference {ref!r}, ours {ours!r}"
    return ref, ours


def _pick(items: list[Any], i: int) -> Any:
    return items[i % len(items)] if items else None


def _put(program: Program, op: tuple[Any, ...]) -> None:
    _, t, ns, which, updates, user_meta, run_id, grown = op
    thread = program.thread(t)
    here = [k for k in program.stored if k[0] == thread and k[1] == ns]
    parent = None
    if here:
        parent = here[-1] if which == 0 else _pick(here, which)
    values, versions = ({}, {}) if parent is None else program.states[parent]
    values, versions = dict(values), dict(versions)
    new_versions: dict[str, str] = {}
    if grown:  # a list that grows by appends, kilobytes a step: stored as tails, compressed
        log = values.get(GROWING, [])
        added = grown if log else 8 * grown  # large enough a base for the next to be a tail
        log = [*log, *(f"{len(program.stored)}/{len(log) + i} " * 40 for i in range(added))]
        updates = {**updates, GROWING: log}
    for channel, value in updates.items():
        version = program.ref.get_next_version(versions.get(channel), None)
        versions[channel] = new_versions[channel] = version
        if value is EMPTY:
            values.pop(channel, None)
        else:
            values[channel] = value
    checkpoint = empty_checkpoint()
    checkpoint_id = program.reserved.pop((thread, ns), None) or str(
        uuid6(clock_seq=len(program.stored))
    )
    checkpoint.update(
        id=checkpoint_id,
        ts=datetime.now(UTC).isoformat(),
        channel_values=dict(values),
        channel_versions=dict(versions),
        versions_seen={"node": {c: v for c, v in versions.items() if c != "items"}},
        updated_channels=sorted(new_versions),
    )
    metadata: dict[str, Any] = {
        "source": "loop",
        "step": len(here),
        "parents": {},
        "prefix": program.prefix,
        **user_meta,
    }
    if run_id is not None:
        metadata["run_id"] = run_id
    config = make_config(thread, ns, parent[2] if parent else None)
    ref, ours = _both(program, "put", config, checkpoint, metadata, new_versions)
    assert ref == ours
    key = (thread, ns, checkpoint_id)
    program.states[key] = (values, versions)
    program.stored.append(key)


def _put_writes(program: Program, op: tuple[Any, ...]) -> None:
    _, which, task, writes = op
    target = _pick(program.stored, which)
    if target is None:
        return
    task_id = str(uuid.UUID(int=task + 1, version=4))
    _both(program, "put_writes", make_config(*target), writes, task_id, f"~path{task}")


def _early_writes(program: Program, op: tuple[Any, ...]) -> None:
    """Writes to the checkpoint the next put will store (LangGraph's background puts can
    land after the step's writes): they must be its pending writes once it is put."""
    _, t, ns, task, writes = op
    thread = program.thread(t)
    checkpoint_id = program.reserved.setdefault(
        (thread, ns), str(uuid6(clock_seq=len(program.stored)))
    )
    task_id = str(uuid.UUID(int=task + 1, version=4))
    config = make_config(thread, ns, checkpoint_id)
    _both(program, "put_writes", config, writes, task_id, f"~path{task}")


def _read_tuple(program: Program, op: tuple[Any, ...]) -> None:
    _, t, which = op
    thread = program.thread(t)
    for ns in NAMESPACES:
        mine = [k for k in program.stored if k[0] == thread and k[1] == ns]
        checkpoint_id = None if which < 0 or not mine else _pick(mine, which)[2]
        ref, ours = _both(program, "get_tuple", make_config(thread, ns, checkpoint_id))
        assert _comparable(ours) == _comparable(ref)


def _list(program: Program, op: tuple[Any, ...]) -> None:
    _, scope, t, ns, filter_, before_at, limit = op
    thread = program.thread(t)
    if scope == "all":
        config = None
        filter_ = {**filter_, "prefix": program.prefix}
    elif scope == "thread":
        config = {"configurable": {"thread_id": thread}}
    else:
        config = make_config(thread, ns)
    if not program.nested_filters:
        filter_ = {k: v for k, v in filter_.items() if not isinstance(v, dict | list)}
    before = None
    if before_at is not None and program.stored:
        before = make_config(*_pick(program.stored, before_at))
    in_order = scope == "namespace" or program.sorted_across_namespaces
    if not in_order:
        limit = None  # across namespaces the reference savers order differently
    kwargs = {"filter": filter_ or None, "before": before, "limit": limit}
    ref, ours = _both(program, "list", config, **kwargs)
    ref_rows = [_comparable(x) for x in ref]
    our_rows = [_comparable(x) for x in ours]
    if not in_order:
        ref_rows.sort(key=repr)
        our_rows.sort(key=repr)
    assert our_rows == ref_rows


def _delete_thread(program: Program, op: tuple[Any, ...]) -> None:
    thread = program.thread(op[1])
    _both(program, "delete_thread", thread)
    # Runs do not fork from deleted checkpoints: a value a put carries without a new
    # version is kept by ours (`sql/unstored.py`) where the reference drops it.
    program.stored = [k for k in program.stored if k[0] != thread]


def _reput(program: Program, op: tuple[Any, ...]) -> None:
    """The same checkpoint put again under the same parent (LangGraph re-puts a checkpoint
    it resumes from), with other metadata: it keeps its values and its writes."""
    _, which, user_meta = op
    key = _pick(program.stored, which)
    if key is None:
        return
    found = program.ref.get_tuple(make_config(*key))
    if found is None:
        return
    parent = found.parent_config
    config = parent if parent is not None else make_config(key[0], key[1])
    metadata = {**found.metadata, **user_meta}
    checkpoint = dict(found.checkpoint)
    ref, ours = _both(program, "put", config, checkpoint, metadata, {})
    assert ref == ours


def _delta(program: Program, op: tuple[Any, ...]) -> None:
    _, which, t, channels = op
    if which < 0:
        config = make_config(program.thread(t), "")
    else:
        key = _pick(program.stored, which)
        if key is None:
            return
        config = make_config(*key)
    ref, ours = _both(program, "get_delta_channel_history", config=config, channels=channels)
    assert set(ours) == set(ref)
    for channel in ref:
        # A stored None: the in-memory reference seeds with it, LangGraph's SQL savers (and
        # the adapter, `test_a_stored_none_gives_no_seed_through_the_adapter`) give none.
        if not ("seed" in ref[channel] and ref[channel]["seed"] is None):
            assert ("seed" in ours[channel]) == ("seed" in ref[channel]), channel
        assert _lists(ours[channel].get("seed")) == _lists(ref[channel].get("seed")), channel
        assert [(t, c, _lists(v)) for t, c, v in ours[channel]["writes"]] == [
            (t, c, _lists(v)) for t, c, v in ref[channel]["writes"]
        ], channel


RUNNERS = {
    "put": _put,
    "put_writes": _put_writes,
    "get_tuple": _read_tuple,
    "list": _list,
    "delete_thread": _delete_thread,
    "early_writes": _early_writes,
    "reput": _reput,
    "delta": _delta,
}


class AsyncSide:
    """An async saver behind the adapter, called through its async API (`aput`, `alist`,
    ...) on the loop it was opened on, under the sync names the programs use."""

    def __init__(self, adapter: LangGraphSaver, loop: asyncio.AbstractEventLoop) -> None:
        self._adapter = adapter
        self._loop = loop

    @property
    def adapter(self) -> LangGraphSaver:
        return self._adapter

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop

    def _run(self, awaitable: Any) -> Any:
        return self._loop.run_until_complete(awaitable)

    def put(self, *args: Any) -> Any:
        return self._run(self._adapter.aput(*args))

    def put_writes(self, *args: Any) -> Any:
        return self._run(self._adapter.aput_writes(*args))

    def get_tuple(self, config: Any) -> Any:
        return self._run(self._adapter.aget_tuple(config))

    def list(self, config: Any, **kwargs: Any) -> list[Any]:
        async def collect() -> list[Any]:
            return [t async for t in self._adapter.alist(config, **kwargs)]

        return self._run(collect())  # type: ignore[no-any-return]

    def delete_thread(self, thread_id: str) -> None:
        self._run(self._adapter.adelete_thread(thread_id))

    def get_delta_channel_history(self, **kwargs: Any) -> Any:
        return self._run(self._adapter.aget_delta_channel_history(**kwargs))


@contextmanager
def opened_adapter(kind: str, tmp_path: Path) -> Iterator[Any]:
    """One of our savers of `kind` (opened as every contract test opens it) behind the
    adapter; an async one as an `AsyncSide` on a loop of its own. Closed (its PostgreSQL
    schema dropped) on exit."""
    schema = None
    if kind in PG_KINDS:
        require_postgres()
        schema = f"cp_test_{uuid.uuid4().hex[:12]}"
    loop = asyncio.new_event_loop()
    try:
        saver = loop.run_until_complete(open_saver(kind, tmp_path, schema))
        try:
            adapter = LangGraphSaver(saver)
            yield AsyncSide(adapter, loop) if kind in ASYNC_KINDS else adapter
        finally:
            loop.run_until_complete(close_saver(kind, saver))
    finally:
        loop.close()
        if schema is not None:
            drop_schema(schema)


def _run(run: Program, program: list[tuple[Any, ...]]) -> None:
    for op in program:
        RUNNERS[op[0]](run, op)
    # Whatever the program did last, every thread reads back the same at the end.
    for t in range(THREADS):
        _read_tuple(run, ("get_tuple", t, -1))
        _list(run, ("list", "thread", t, "", {}, None, None))


@pytest.fixture(params=KINDS)
def our_saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Each of our savers, shared by the test's examples (each writes threads of its own)."""
    with opened_adapter(request.param, tmp_path) as saver:
        yield saver


@PROGRAMS
@given(program=programs)
def test_programs_read_back_as_on_langgraph_in_memory_saver(
    our_saver: Any, program: list[tuple[Any, ...]]
) -> None:
    _run(Program(our_saver, ReferenceSaver(), uuid.uuid4().hex[:10]), program)


@PROGRAMS
@given(program=programs)
def test_programs_read_back_as_on_langgraph_sqlite_saver(
    our_saver: Any, program: list[tuple[Any, ...]]
) -> None:
    """The same programs against LangGraph's SQLite saver: the order (and `limit`) of a
    listing that spans namespaces is compared too, filters by nested values are not."""
    conn = sqlite3.connect(":memory:", check_same_thread=False)
    try:
        reference = ReferenceSqliteSaver(conn)
        reference.setup()
        run = Program(
            our_saver,
            reference,
            uuid.uuid4().hex[:10],
            sorted_across_namespaces=True,
            nested_filters=False,
        )
        _run(run, program)
    finally:
        conn.close()
