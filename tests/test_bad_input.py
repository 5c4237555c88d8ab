"""Hostile and malformed input: every saver either does the right thing or raises a typed
error (a `CheckpointerError`), and the database stays usable afterwards.

Covered: missing or mistyped config keys, unknown and malformed checkpoint ids, metadata
filter keys and values that try SQL injection, NUL and lone surrogates in ids, values and
metadata, non-finite floats, huge values (with `SizeGuard`), and rows corrupted with SQL
in the database itself: values, and checkpoint records whose JSON is malformed or of the
wrong shape (a `CorruptValueError` naming the checkpoint, wherever it is read).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from checkpointer.errors import (
    CheckpointerError,
    CheckpointNotFoundError,
    ConfigError,
    CorruptValueError,
    DeserializationError,
    IdTooLongError,
    ValueTooLarge,
)
from checkpointer.ids import next_channel_version, task_id_for
from checkpointer.serde import MsgpackSerializer
from checkpointer.serde.guard import SizeGuard
from checkpointer.serde.located import ValueLocation
from checkpointer.types import Checkpoint, empty_checkpoint, make_config
from tests import crash_worker as cw
from tests.conftest import PG_URL, close_saver, drop_schema, open_saver, require_postgres

KINDS = ("memory", "sqlite", "postgres")


class DB:
    """A set-up sync saver plus raw SQL access to its tables (to corrupt them)."""

    def __init__(self, kind: str, saver: Any, schema: str | None) -> None:
        self.kind = kind
        self.saver = saver
        self.schema = schema

    def table(self, name: str) -> str:
        return f'"{self.schema}".checkpointer_{name}' if self.schema else f"checkpointer_{name}"

    def sql(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        if self.kind == "sqlite":
            conn = sqlite3.connect(self.saver._executor.path, isolation_level=None)
            try:
                return conn.execute(statement.replace("%s", "?"), params).fetchall()
            finally:
                conn.close()

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            cur = conn.execute(statement, params)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []

    def counts(self) -> tuple[int, ...]:
        if self.kind == "memory":
            return (len(list(self.saver.list(None))),)
        return tuple(
            self.sql(f"SELECT count(*) FROM {self.table(t)}")[0][0]
            for t in ("checkpoints", "blobs", "writes")
        )


def open_db(kind: str, tmp_path: Path, **kwargs: Any) -> DB:
    schema = None
    if kind == "postgres":
        require_postgres()
        schema = f"cp_bad_{uuid.uuid4().hex[:10]}"
    if kwargs:
        saver: Any
        if kind == "memory":
            from checkpointer.savers.memory import InMemorySaver

            saver = InMemorySaver(**kwargs)
        elif kind == "sqlite":
            from checkpointer.savers.sqlite import SqliteSaver

            saver = SqliteSaver(tmp_path / f"{uuid.uuid4().hex}.db", **kwargs)
            saver.setup()
        else:
            from checkpointer.savers.postgres import PostgresSaver

            saver = PostgresSaver(PG_URL, schema=schema, max_size=2, **kwargs)
            saver.setup()
    else:
        saver = asyncio.run(open_saver(kind, tmp_path, schema))
    return DB(kind, saver, schema)


def close_db(db: DB) -> None:
    asyncio.run(close_saver(db.kind, db.saver))
    if db.schema:
        drop_schema(db.schema)


@pytest.fixture(params=KINDS)
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[DB]:
    opened = open_db(request.param, tmp_path)
    try:
        yield opened
    finally:
        close_db(opened)


def checkpoint(value: Any = 1) -> tuple[Checkpoint, dict[str, str]]:
    version = next_channel_version(None)
    cp = empty_checkpoint()
    cp["channel_values"] = {"x": value}
    cp["channel_versions"] = {"x": version}
    return cp, {"x": version}


# ------------------------------------------------------------------- config keys
BAD_CONFIGS: list[Any] = [
    None,
    "thread-1",
    {},
    {"configurable": None},
    {"configurable": "thread-1"},
    {"configurable": {}},
    {"configurable": {"thread_id": None}},
    {"configurable": {"thread_id": ["a"]}},
    {"configurable": {"thread_id": True}},
    {"configurable": {"thread_id": {"id": 1}}},
    {"configurable": {"thread_id": "t", "checkpoint_id": 5}},
    {"configurable": {"thread_id": "t", "checkpoint_ns": 7}},
]


@pytest.mark.parametrize("config", BAD_CONFIGS, ids=repr)
def test_bad_configs_raise_config_error_everywhere(db: DB, config: Any) -> None:
    saver = db.saver
    cp, versions = checkpoint()
    calls: list[Callable[[], Any]] = [
        lambda: saver.get_tuple(config),
        lambda: saver.put(config, cp, {}, versions),
        lambda: saver.put_writes(config, [("x", 1)], task_id_for(0, "t")),
        lambda: saver.get_delta_channel_history(config=config, channels=["x"]),
    ]
    if config is not None and config != {}:  # list({}): test_list_of_a_config_without_keys
        calls.append(lambda: list(saver.list(config)))
    graph = cw.build_graph(cw.Hooks(None), saver)
    calls += [
        lambda: graph.invoke({"messages": ["x"], "n": 0}, config),
        lambda: graph.get_state(config),
        lambda: list(graph.get_state_history(config)),
        lambda: graph.update_state(config, {"n": 1}, as_node="join"),
    ]
    for call in calls:
        with pytest.raises(ConfigError):
            call()
    assert db.counts()[0] == 0


@pytest.mark.parametrize(
    "kind",
    [k for k in KINDS],
)
def test_list_of_a_config_without_keys(kind: str, tmp_path: Path) -> None:
    db = open_db(kind, tmp_path)
    try:
        with pytest.raises(ConfigError):
            list(db.saver.list({}))
    finally:
        close_db(db)


def test_put_writes_needs_a_checkpoint_id(db: DB) -> None:
    with pytest.raises(CheckpointerError, match="checkpoint_id"):
        db.saver.put_writes(make_config("t"), [("x", 1)], task_id_for(0, "t"))


# --------------------------------------------------------------- checkpoint ids
ODD_IDS = [
    "no-such-checkpoint",
    "'; DROP TABLE checkpointer_checkpoints; --",
    '" OR 1=1 --',
    "%(thread_id)s",
    "?",
    "0" * 768,  # the longest id there is (MAX_ID_BYTES); longer ones are refused:
    str(uuid.uuid4()),
]


def test_unknown_and_malformed_checkpoint_ids(db: DB) -> None:
    graph = cw.build_graph(cw.Hooks(None), db.saver)
    cw.run_phases(graph, "t")
    before = db.counts()
    for odd in ODD_IDS:
        config = make_config("t", checkpoint_id=odd)
        assert db.saver.get_tuple(config) is None
        assert list(db.saver.list(config)) == []
        history = db.saver.get_delta_channel_history(config=config, channels=["messages"])
        assert history == {"messages": {"writes": []}}
        assert graph.get_state(config).values == {}
        with pytest.raises(CheckpointNotFoundError):
            graph.invoke(None, config)
        with pytest.raises(CheckpointNotFoundError):
            graph.update_state(config, {"n": 9}, as_node="join")
        assert list(db.saver.list(make_config("t"), before=config)) is not None
    with pytest.raises(IdTooLongError, match="checkpoint_id"):
        db.saver.get_tuple(make_config("t", checkpoint_id="0" * 10_000))
    assert db.counts() == before
    assert graph.get_state(cw.thread_config("t")).values["n"] == 4


# ------------------------------------------------------------ metadata filters
INJECTION_KEYS: list[Any] = [
    "a'; DROP TABLE checkpointer_checkpoints; --",
    "source') OR ('1'='1",
    'a"b',
    "a..b",  # dotted keys name nested values ("user.level"), with no empty names
    ".a",
    "a.",
    "$.source",
    "a b",
    "",
    "x" * 300,
    "a\x00b",
    "\ud800",
    None,
    3,
    ("source",),
]


def test_filter_keys_that_try_sql_injection_are_refused(db: DB) -> None:
    graph = cw.build_graph(cw.Hooks(None), db.saver)
    cw.run_phases(graph, "t")
    before = db.counts()
    for key in INJECTION_KEYS:
        with pytest.raises(ConfigError, match="filter"):
            list(db.saver.list(None, filter={key: "input"}))
    assert db.counts() == before
    assert len(list(db.saver.list(None, filter={"source": "input"}))) == 2


INJECTION_VALUES: list[Any] = [
    "input' OR '1'='1",
    "'; DROP TABLE checkpointer_checkpoints; --",
    '"input"',
    {"$ne": None},
    ["input"],
    "input\\",
    "%s",
    "?",
]


def test_filter_values_are_bound_as_data(db: DB) -> None:
    graph = cw.build_graph(cw.Hooks(None), db.saver)
    cw.run_phases(graph, "t")
    before = db.counts()
    for value in INJECTION_VALUES:
        assert list(db.saver.list(None, filter={"source": value})) == []
    assert db.counts() == before
    assert len(list(db.saver.list(None, filter={"source": "loop", "step": 0}))) == 1


# ------------------------------------------------------ NUL and lone surrogates
def _round_trip_or_typed(action: Callable[[], Any], check: Callable[[Any], None]) -> None:
    try:
        result = action()
    except CheckpointerError:
        return  # refused clearly: acceptable
    check(result)


def _still_usable(db: DB) -> None:
    cp, versions = checkpoint("after")
    config = db.saver.put(make_config("usable"), cp, {"source": "ok"}, versions)
    assert db.saver.get_tuple(config) is not None
    assert len(list(db.saver.list(None, filter={"source": "ok"}))) == 1


ODD_VALUES: list[Any] = [
    "a\x00b",
    "\ud800",
    "\udfff\ud800",
    {"k\x00": "v\udc80"},
    ["\x00" * 10, b"\x00\xff"],
    ("\ud83d", "😀"),
]


@pytest.mark.parametrize("value", ODD_VALUES, ids=repr)
def test_nul_and_surrogates_in_values_round_trip(db: DB, value: Any) -> None:
    cp, versions = checkpoint(value)
    config = db.saver.put(make_config("v"), cp, {}, versions)
    db.saver.put_writes(config, [("w", value)], task_id_for(0, "t"))
    tup = db.saver.get_tuple(config)
    assert tup is not None
    assert tup.checkpoint["channel_values"]["x"] == value
    assert tup.pending_writes is not None and tup.pending_writes[0][2] == value


@pytest.mark.parametrize(
    "kind",
    [k for k in KINDS],
)
def test_nul_in_thread_id(kind: str, tmp_path: Path) -> None:
    db = open_db(kind, tmp_path)
    try:
        cp, versions = checkpoint()
        _round_trip_or_typed(
            lambda: db.saver.put(make_config("a\x00b"), cp, {}, versions),
            lambda config: (
                db.saver.get_tuple(make_config("a\x00b")) is not None
                and db.saver.get_tuple(make_config("a")) is None
            ),
        )
        _still_usable(db)
    finally:
        close_db(db)


@pytest.mark.parametrize(
    "kind",
    [k for k in KINDS],
)
def test_lone_surrogate_in_thread_and_checkpoint_ids(kind: str, tmp_path: Path) -> None:
    db = open_db(kind, tmp_path)
    try:
        cp, versions = checkpoint()
        thread = "t\ud800"
        _round_trip_or_typed(
            lambda: db.saver.put(make_config(thread), cp, {}, versions),
            lambda config: None,
        )
        try:
            found = db.saver.get_tuple(make_config("t", checkpoint_id="\udfff"))
        except CheckpointerError:
            found = None
        assert found is None
        _still_usable(db)
    finally:
        close_db(db)


@pytest.mark.parametrize(
    "kind",
    [k for k in KINDS],
)
def test_lone_surrogate_in_metadata(kind: str, tmp_path: Path) -> None:
    db = open_db(kind, tmp_path)
    try:
        cp, versions = checkpoint()
        meta = {"note": "bad \ud800 half"}
        _round_trip_or_typed(
            lambda: db.saver.put(make_config("m"), cp, meta, versions),
            lambda config: db.saver.get_tuple(config).metadata["note"] == meta["note"],
        )
        for value in ("\ud800", "a\x00b"):
            with contextlib.suppress(CheckpointerError):
                list(db.saver.list(None, filter={"note": value}))
        _still_usable(db)
    finally:
        close_db(db)


def test_nul_in_metadata_is_refused_clearly_or_kept(db: DB) -> None:
    cp, versions = checkpoint()
    meta = {"note": "a\x00b"}
    _round_trip_or_typed(
        lambda: db.saver.put(make_config("m"), cp, meta, versions),
        lambda config: db.saver.get_tuple(config).metadata == meta,
    )
    _still_usable(db)


# ------------------------------------------------------------ non-finite floats
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, [1.0, math.nan]], ids=repr)
def test_non_finite_floats_in_values_round_trip(db: DB, value: Any) -> None:
    cp, versions = checkpoint(value)
    config = db.saver.put(make_config("f"), cp, {}, versions)
    got = db.saver.get_tuple(config).checkpoint["channel_values"]["x"]
    assert repr(got) == repr(value)


@pytest.mark.parametrize(
    "kind",
    [k for k in KINDS],
)
def test_non_finite_floats_in_metadata(kind: str, tmp_path: Path) -> None:
    db = open_db(kind, tmp_path)
    try:
        cp, versions = checkpoint()
        _round_trip_or_typed(
            lambda: db.saver.put(make_config("m"), cp, {"score": math.nan}, versions),
            lambda config: math.isnan(db.saver.get_tuple(config).metadata["score"]),
        )
        with contextlib.suppress(CheckpointerError):
            list(db.saver.list(None, filter={"score": math.inf}))
        _still_usable(db)  # a filtered list() over the whole database still works
    finally:
        close_db(db)


# ------------------------------------------------------------------ huge values
def test_size_guard_refuses_a_huge_value_before_writing(tmp_path: Path) -> None:
    for kind in KINDS:
        if kind == "postgres":
            try:
                require_postgres()
            except pytest.skip.Exception:
                continue
        db = open_db(kind, tmp_path, serde=SizeGuard(MsgpackSerializer(), 64 * 1024))
        try:
            before = db.counts()
            cp, versions = checkpoint("x" * 100_000)
            cp["channel_values"]["small"] = 1
            versions["small"] = next_channel_version(None)
            cp["channel_versions"]["small"] = versions["small"]
            with pytest.raises(ValueTooLarge) as info:
                db.saver.put(make_config("big"), cp, {}, versions)
            assert info.value.limit == 64 * 1024 and info.value.size > 100_000
            assert "65536" in str(info.value) and str(info.value.size) in str(info.value)
            assert db.counts() == before  # not even the small channel's blob
            small, small_versions = checkpoint("ok")
            config = db.saver.put(make_config("big"), small, {}, small_versions)
            with pytest.raises(ValueTooLarge):
                db.saver.put_writes(
                    config, [("a", 1), ("b", b"\x00" * 70_000)], task_id_for(0, "t")
                )
            tup = db.saver.get_tuple(config)
            assert tup is not None and tup.pending_writes == []
        finally:
            close_db(db)


def test_size_guard_in_a_graph_run_fails_the_task_and_keeps_the_thread(tmp_path: Path) -> None:
    from checkpointer.savers.sqlite import SqliteSaver

    class Blowup(cw.Hooks):
        def node_ran(self, key: str) -> None:
            pass

    with SqliteSaver.from_conn_string(
        tmp_path / "g.db", serde=SizeGuard(MsgpackSerializer(), 10_000)
    ) as saver:
        graph = cw.build_graph(Blowup(None), saver)
        config = cw.thread_config("g")
        graph.invoke({"messages": ["hello"], "n": 0}, config)
        before = graph.get_state(config).values
        with pytest.raises(ValueTooLarge, match="10000 bytes"):
            graph.invoke({"messages": ["y" * 20_000]}, config)
        assert graph.get_state(config).values == before
        graph.invoke({"messages": ["fine"]}, config)
        messages = graph.get_state(config).values["messages"]
        assert "fine" in messages and messages[-1] == "join:3"
        assert not any(len(m) > 100 for m in messages)


def test_size_guard_names_the_location_and_limits_reads() -> None:
    guard = SizeGuard(MsgpackSerializer(), 100, max_load_bytes=50)
    where = ValueLocation.write("thread-9", "", "cp-1", "task-1", 0, "messages")
    with pytest.raises(ValueTooLarge, match=r"thread-9.*messages"):
        guard.dumps_typed_at("x" * 200, where)
    assert guard.loads_typed(guard.dumps_typed("ok")) == "ok"
    with pytest.raises(DeserializationError, match="read limit"):
        guard.loads_typed(("msgpack", b"\xa1" + b"x" * 60))
    with pytest.raises(ValueError):
        SizeGuard(MsgpackSerializer(), 0)


def test_large_values_round_trip_without_a_guard(db: DB) -> None:
    big = {"blob": b"\x00\xff" * 2_000_000, "text": "é" * 500_000}
    cp, versions = checkpoint(big)
    config = db.saver.put(make_config("large"), cp, {}, versions)
    assert db.saver.get_tuple(config).checkpoint["channel_values"]["x"] == big


# ---------------------------------------------------------------- corrupt rows
def _thread_with_history(db: DB) -> tuple[Any, list[Any]]:
    graph = cw.build_graph(cw.Hooks(None), db.saver)
    cw.run_phases(graph, "t")
    tuples = list(db.saver.list(cw.thread_config("t")))
    return graph, tuples


def _corrupt_write(db: DB, checkpoint_id: str, channel: str, *, tag: str | None = None) -> str:
    """Truncate (or retag) one pending write of a checkpoint; returns its task id."""
    if db.kind == "memory":
        stored = db.saver._threads["t"][""][checkpoint_id]
        write = next(w for w in stored.writes.values() if w.channel == channel)
        write.value = (tag, write.value[1]) if tag else (write.value[0], write.value[1][:2])
        return str(write.task_id)
    table = db.table("writes")
    task = db.sql(
        f"SELECT task_id FROM {table} WHERE checkpoint_id = %s AND channel = %s",
        (checkpoint_id, channel),
    )[0][0]
    if tag:
        db.sql(
            f"UPDATE {table} SET type = %s WHERE checkpoint_id = %s AND channel = %s",
            (tag, checkpoint_id, channel),
        )
    else:
        cut = "substr(blob, 1, 2)" if db.kind == "sqlite" else "substring(blob from 1 for 2)"
        db.sql(
            f"UPDATE {table} SET blob = {cut} WHERE checkpoint_id = %s AND channel = %s",
            (checkpoint_id, channel),
        )
    return str(task)


@pytest.mark.parametrize("tag", [None, "pickle"], ids=["truncated", "unknown-tag"])
def test_corrupt_write_is_a_typed_error_and_the_rest_stays_readable(
    db: DB, tag: str | None
) -> None:
    graph, tuples = _thread_with_history(db)
    target = tuples[4]  # a loop checkpoint in the middle, with a pending write on messages
    cid = target.config["configurable"]["checkpoint_id"]
    _corrupt_write(db, cid, "messages", tag=tag)
    with pytest.raises(DeserializationError):
        db.saver.get_tuple(target.config)
    readable = 0
    for tup in tuples:
        if tup.config == target.config:
            continue
        try:
            state = graph.get_state(tup.config)
        except DeserializationError:
            continue  # replays the corrupt write: must fail typed, not silently
        readable += 1
        assert state.values["messages"] is not None
    assert readable >= len(tuples) - 4
    older = list(db.saver.list(cw.thread_config("t"), before=target.config))
    assert len(older) == len(tuples) - 5


def test_corrupt_write_error_names_its_location(db: DB) -> None:
    _, tuples = _thread_with_history(db)
    target = tuples[4]
    cid = target.config["configurable"]["checkpoint_id"]
    task = _corrupt_write(db, cid, "messages")
    try:
        db.saver.get_tuple(target.config)
    except DeserializationError as exc:
        error: DeserializationError = exc
    assert isinstance(error, CorruptValueError), repr(error)
    assert (error.thread_id, error.checkpoint_id, error.channel) == ("t", cid, "messages")
    assert error.task_id == task
    assert "t" in str(error) and cid in str(error) and "messages" in str(error)


def test_list_yields_the_checkpoints_before_a_corrupt_one(db: DB) -> None:
    _, tuples = _thread_with_history(db)
    cid = tuples[4].config["configurable"]["checkpoint_id"]
    _corrupt_write(db, cid, "messages")
    seen = []
    with pytest.raises(CorruptValueError) as caught:
        for tup in db.saver.list(cw.thread_config("t")):
            seen.append(tup.config)
    assert seen == [t.config for t in tuples[:4]]
    assert caught.value.checkpoint_id == cid


@pytest.mark.parametrize("kind", ["async_sqlite", "async_postgres"])
def test_async_list_yields_the_checkpoints_before_a_corrupt_one(kind: str, tmp_path: Path) -> None:
    """`alist`, and the sync `list` bridge of the async savers (from another thread), stop
    at the same place as the sync savers' `list`."""
    schema = None
    if kind == "async_postgres":
        require_postgres()
        schema = f"cp_bad_{uuid.uuid4().hex[:10]}"

    async def scenario() -> None:
        saver = await open_saver(kind, tmp_path, schema)
        try:
            db = DB(kind.removeprefix("async_"), saver, schema)
            graph = cw.build_graph(cw.Hooks(None), saver)
            for phase in cw.PHASES:
                await graph.ainvoke(phase, cw.thread_config("t"))
            tuples = [t async for t in saver.alist(cw.thread_config("t"))]
            cid = tuples[4].config["configurable"]["checkpoint_id"]
            await asyncio.to_thread(_corrupt_write, db, cid, "messages")
            seen = []
            with pytest.raises(CorruptValueError):
                async for tup in saver.alist(cw.thread_config("t")):
                    seen.append(tup.config)
            assert seen == [t.config for t in tuples[:4]]

            def bridged() -> list[Any]:
                got = []
                with pytest.raises(CorruptValueError):
                    for tup in saver.list(cw.thread_config("t")):
                        got.append(tup.config)
                return got

            assert await asyncio.to_thread(bridged) == seen

            # A damaged record fails the statement itself: the retry reads around it.
            damaged = tuples[2].config["configurable"]["checkpoint_id"]
            text = "{bad" if db.kind == "sqlite" else '{"channel_versions": [1]}'
            await asyncio.to_thread(_set_record, db, "checkpoint", text, damaged)
            with pytest.raises(CorruptValueError) as caught:
                await saver.aget_tuple(tuples[2].config)
            assert caught.value.checkpoint_id == damaged
            seen.clear()
            with pytest.raises(CorruptValueError):
                async for tup in saver.alist(cw.thread_config("t")):
                    seen.append(tup.config)
            assert seen == [t.config for t in tuples[:2]]
        finally:
            await close_saver(kind, saver)
            if schema:
                drop_schema(schema)

    asyncio.run(scenario())


def test_corrupt_blob_is_a_typed_error(db: DB) -> None:
    graph, tuples = _thread_with_history(db)
    head = tuples[0]
    version = str(head.checkpoint["channel_versions"]["n"])
    if db.kind == "memory":
        db.saver._blobs[("t", "", "n", version)] = ("msgpack", b"\xc1")
    else:
        # The SQL savers keep a small int in the checkpoint record (see sql/inline.py).
        assert not db.sql(
            f"SELECT 1 FROM {db.table('blobs')} WHERE channel = 'n' AND version = %s",
            (version,),
        )
        setter = (
            "json_set(checkpoint, '$.channel_values.n', json('[1]'))"
            if db.kind == "sqlite"
            else "jsonb_set(checkpoint, '{channel_values,n}', '[1]')"
        )
        db.sql(
            f"UPDATE {db.table('checkpoints')} SET checkpoint = {setter} WHERE checkpoint_id = %s",
            (head.config["configurable"]["checkpoint_id"],),
        )
    with pytest.raises(DeserializationError):
        graph.get_state(head.config)


def _set_record(db: DB, column: str, value: str, checkpoint_id: str) -> None:
    cast = "::jsonb" if db.kind == "postgres" else ""
    db.sql(
        f"UPDATE {db.table('checkpoints')} SET {column} = %s{cast} WHERE checkpoint_id = %s",
        (value, checkpoint_id),
    )


CORRUPT_RECORDS: list[tuple[str, str, set[str]]] = [
    # (column, stored text, the databases that can hold it: jsonb refuses malformed text)
    ("metadata", "[1]", {"sqlite", "postgres"}),
    ("metadata", '{"counters_since_delta_snapshot": "x"}', {"sqlite", "postgres"}),
    ("metadata", "{bad", {"sqlite"}),
    ("checkpoint", "{bad", {"sqlite"}),
    ("checkpoint", '"text"', {"sqlite", "postgres"}),
    ("checkpoint", '{"v": 4, "channel_versions": [1, 2]}', {"sqlite", "postgres"}),
    (
        "checkpoint",
        '{"v": 4, "channel_versions": {}, "versions_seen": {"a": 1}}',
        {"sqlite", "postgres"},
    ),
]


def _record_cases(columns: set[str]) -> list[Any]:
    return [
        pytest.param(kind, column, text, id=f"{kind}-{column}-{text[:20]}")
        for column, text, kinds in CORRUPT_RECORDS
        if column in columns
        for kind in sorted(kinds)
    ]


@pytest.mark.parametrize(("kind", "column", "text"), _record_cases({"metadata", "checkpoint"}))
def test_corrupt_checkpoint_record_is_a_typed_error(
    kind: str, column: str, text: str, tmp_path: Path
) -> None:
    """A checkpoint row whose JSON is malformed or of the wrong shape raises
    CorruptValueError naming it, wherever it is read; the rest of the thread stays
    readable, and nothing else is lost."""
    db = open_db(kind, tmp_path)
    try:
        graph, tuples = _thread_with_history(db)
        target = tuples[4]
        cid = target.config["configurable"]["checkpoint_id"]
        before = db.counts()
        _set_record(db, column, text, cid)

        def names_target(exc: CorruptValueError) -> bool:
            return (exc.thread_id, exc.checkpoint_id) == ("t", cid) and cid in str(exc)

        with pytest.raises(CorruptValueError) as caught:
            db.saver.get_tuple(target.config)
        assert names_target(caught.value) and column in str(caught.value)
        seen = []
        with pytest.raises(CorruptValueError) as caught:
            for tup in db.saver.list(cw.thread_config("t")):
                seen.append(tup.config)
        assert seen == [t.config for t in tuples[:4]] and names_target(caught.value)
        older = list(db.saver.list(cw.thread_config("t"), before=target.config))
        assert [t.config for t in older] == [t.config for t in tuples[5:]]
        # A metadata filter meets a row it cannot read too, and says so instead of skipping it
        # (Metadata that is JSON but not the target's any more simply does not match.)
        thread, wanted = cw.thread_config("t"), {"source": target.metadata["source"]}
        if column == "metadata" and text != "{bad":
            found = db.saver.list(thread, filter=wanted)
            assert cid not in {t.config["configurable"]["checkpoint_id"] for t in found}
        else:
            with pytest.raises(CorruptValueError):
                list(db.saver.list(thread, filter=wanted))
        for tup in tuples[:4]:
            try:
                graph.get_state(tup.config)  # may replay delta channels through the target
            except CorruptValueError as exc:
                assert column == "checkpoint" and names_target(exc)
        assert db.saver.get_tuple(tuples[0].config) is not None
        assert db.counts() == before
    finally:
        close_db(db)


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_corrupt_record_on_a_delta_history_path_is_a_typed_error(
    damage: str, tmp_path: Path
) -> None:
    """A later checkpoint whose delta channel replays through an ancestor whose record is
    not JSON raises CorruptValueError naming that ancestor (SQLite; jsonb cannot hold such
    text). Reading on past it could silently start the channel from an older value."""
    db = open_db("sqlite", tmp_path)
    try:
        graph, tuples = _thread_with_history(db)
        # A child and its parent that both rebuild "messages" from further back.
        child, parent = next(
            (c, p)
            for c, p in itertools.pairwise(tuples)
            if "messages" not in c.checkpoint["channel_values"]
            and "messages" not in p.checkpoint["channel_values"]
            and c.parent_config == p.config
        )
        expected = graph.get_state(child.config).values
        pid = parent.config["configurable"]["checkpoint_id"]
        table = db.table("checkpoints")
        original = db.sql(f"SELECT checkpoint FROM {table} WHERE checkpoint_id = %s", (pid,))
        text = original[0][0]
        _set_record(db, "checkpoint", "{bad" if damage == "garbage" else text[:40], pid)
        with pytest.raises(CorruptValueError) as caught:
            db.saver.get_delta_channel_history(config=child.config, channels=["messages"])
        assert (caught.value.thread_id, caught.value.checkpoint_id) == ("t", pid)
        with pytest.raises(CorruptValueError):
            graph.get_state(child.config)
        assert db.saver.get_tuple(child.config) is not None  # its own row is fine
        assert graph.get_state(tuples[0].config).values["messages"]
        _set_record(db, "checkpoint", text, pid)  # repaired: nothing else was lost
        assert graph.get_state(child.config).values == expected
    finally:
        close_db(db)


def test_lifecycle_operations_over_a_damaged_record_are_typed_and_change_nothing(
    tmp_path: Path,
) -> None:
    """Operations that read records wholesale (retention, compaction, pins) over a record
    that is not JSON raise CorruptValueError, roll back, and leave every row in place."""
    from checkpointer.lifecycle import KeepLast

    db = open_db("sqlite", tmp_path)
    try:
        _, tuples = _thread_with_history(db)
        damaged = tuples[len(tuples) // 2].config["configurable"]["checkpoint_id"]
        _set_record(db, "checkpoint", "{bad", damaged)
        before = db.counts()
        with pytest.raises(CorruptValueError):
            db.saver.apply_retention(KeepLast(2), thread_ids=["t"])
        with pytest.raises(CorruptValueError):
            db.saver.prune(["t"])
        assert db.counts() == before
        assert db.saver.get_tuple(tuples[0].config) is not None  # the head still reads
    finally:
        close_db(db)
