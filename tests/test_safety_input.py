"""Hostile and odd input at the saver API (issue 16 items 10-13): ids, metadata filters,
typed errors, and reads that must not need SQLite's write lock."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointer.ids import next_channel_version
from checkpointer.savers.sqlite import AsyncSqliteSaver, SqliteSaver
from checkpointer.types import empty_checkpoint, make_config


def _put_one(saver: SqliteSaver, thread_id: str) -> dict[str, Any]:
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"x": 1}
    version = next_channel_version(None)
    checkpoint["channel_versions"] = {"x": version}
    return saver.put(make_config(thread_id), checkpoint, {"step": 0}, {"x": version})


# ------------------------------------------------------------ item 13: reads and the lock
@pytest.fixture
def locked_db(tmp_path: Path) -> Any:
    """A set-up database with one thread, and a second connection holding the write lock
    (BEGIN IMMEDIATE with a row written but not committed) while the test reads."""
    path = tmp_path / "locked.db"
    with SqliteSaver(path) as saver:
        saver.setup()
        _put_one(saver, "old")
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute(
        "INSERT INTO checkpointer_threads (thread_id, created_at, updated_at) "
        "VALUES ('other', '2020-01-01 00:00:00.000', '2020-01-01 00:00:00.000')"
    )
    try:
        yield path
    finally:
        writer.execute("ROLLBACK")
        writer.close()


def test_setup_makes_the_file_settings(tmp_path: Path) -> None:
    """WAL and incremental auto-vacuum are set once, by setup, and persist in the file."""
    path = tmp_path / "fresh.db"
    with SqliteSaver(path) as saver:
        saver.setup()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA auto_vacuum").fetchone()[0] == 2  # INCREMENTAL
    finally:
        conn.close()


def test_a_fresh_saver_reads_while_another_connection_writes(locked_db: Path) -> None:
    with SqliteSaver(locked_db, busy_timeout=0.2) as saver:
        assert saver.get_tuple(make_config("old")) is not None
        assert saver.get_tuple(make_config("never-seen")) is None
        assert len(list(saver.list(make_config("old")))) == 1
        assert [s.thread_id for s in saver.list_threads()] == ["old"]


async def test_a_fresh_async_saver_reads_while_another_connection_writes(
    locked_db: Path,
) -> None:
    saver = AsyncSqliteSaver(locked_db, busy_timeout=0.2)
    try:
        assert await saver.aget_tuple(make_config("old")) is not None
        assert await saver.aget_tuple(make_config("never-seen")) is None
        assert len([t async for t in saver.alist(make_config("old"))]) == 1
    finally:
        await saver.aclose()


# ------------------------------------------------- item 11: one metadata filter rule
SCALARS: list[Any] = [
    0,
    1,
    -1,
    2,
    1.0,
    0.0,
    -0.0,
    1.5,
    -2.25,
    True,
    False,
    None,
    "",
    "1",
    "true",
    "null",
    "a\x00b",
    "\x00",
    "\uffff",
    "\uffff0",
    "\uffff\uffff",
    "a\\u0000",
    "é",
    2**53,
    2**63 - 1,
]
CONTAINERS: list[Any] = [
    [],
    [1],
    [1.0],
    [True],
    [None],
    [1, 2],
    [2, 1],
    {},
    {"a": 1},
    {"a": 1.0},
    {"a": True},
    {"a": None},
    {"b": 1},
    {"a": 1, "b": 2},
    [{"a": [1]}],
    [{"a": [1.0]}],
    {"a": {"b": "x\x00"}},
    {"a": {"b": "x"}},
    {"a\x00": 1},
    {"a\x00b": 1},
    ["\x00"],
    [""],
    [[]],
    [{}],
]
POOL = SCALARS + CONTAINERS


def _corpus() -> list[dict[str, Any]]:
    """One metadata document per pool value, under a top-level and a nested key (plus one
    document without the key), so every filter has something to match and to miss."""
    docs: list[dict[str, Any]] = [
        {"i": i, "x": v, "user": {"x": v, "access-level": i}} for i, v in enumerate(POOL)
    ]
    docs.append({"i": len(POOL), "user": 5})
    return docs


def _reference(docs: list[dict[str, Any]], filter: dict[str, Any]) -> set[int]:
    from checkpointer.savers.metadata import metadata_matches

    return {d["i"] for d in docs if metadata_matches(d, filter)}


class FiveSavers:
    """Every saver kind with the same corpus stored, driven from sync code."""

    def __init__(self, tmp_path: Path) -> None:
        import asyncio
        import uuid

        from tests.conftest import PG_KINDS, SAVER_KINDS, open_saver, require_postgres

        require_postgres()
        self.loop = asyncio.new_event_loop()
        self.schemas: dict[str, str] = {}
        self.savers: dict[str, Any] = {}
        self.docs = _corpus()
        for kind in SAVER_KINDS:
            schema = f"cp_test_{uuid.uuid4().hex[:12]}" if kind in PG_KINDS else None
            if schema:
                self.schemas[kind] = schema
            self.savers[kind] = self.loop.run_until_complete(open_saver(kind, tmp_path, schema))
        for kind in SAVER_KINDS:
            config = make_config("filters")
            for doc in self.docs:
                checkpoint = empty_checkpoint()
                config = self.call(kind, "put", config, checkpoint, doc, {})

    def call(self, kind: str, name: str, *args: Any, **kwargs: Any) -> Any:
        saver = self.savers[kind]
        if kind.startswith("async"):
            method = getattr(saver, "a" + name)
            if name == "list":

                async def collect() -> list[Any]:
                    return [t async for t in method(*args, **kwargs)]

                return self.loop.run_until_complete(collect())
            return self.loop.run_until_complete(method(*args, **kwargs))
        result = getattr(saver, name)(*args, **kwargs)
        return list(result) if name == "list" else result

    def matched(self, kind: str, filter: dict[str, Any]) -> set[int]:
        found = self.call(kind, "list", make_config("filters"), filter=filter)
        return {t.metadata["i"] for t in found}

    def close(self) -> None:
        from tests.conftest import close_saver, drop_schema

        for kind, saver in self.savers.items():
            self.loop.run_until_complete(close_saver(kind, saver))
        for schema in self.schemas.values():
            drop_schema(schema)
        self.loop.close()


@pytest.fixture
def five(tmp_path: Path) -> Any:
    savers = FiveSavers(tmp_path)
    try:
        yield savers
    finally:
        savers.close()


def test_every_saver_matches_the_reference_on_the_probe_table(five: FiveSavers) -> None:
    """Each pool value as a filter, top-level and dotted: the five savers and the
    reference rule select the same documents."""
    disagreements = []
    for value in POOL:
        for key in ("x", "user.x"):
            want = _reference(five.docs, {key: value})
            assert want, (key, value)  # the document holding it matches at least
            for kind in five.savers:
                got = five.matched(kind, {key: value})
                if got != want:
                    disagreements.append((kind, key, value, sorted(got ^ want)))
    assert disagreements == [], "\n".join(map(repr, disagreements))


def test_the_rule_on_the_cases_the_issue_names() -> None:
    from checkpointer.savers.metadata import json_equal

    assert json_equal(1, 1.0) and json_equal(0, -0.0) and json_equal([1], [1.0])
    assert not json_equal(1, True) and not json_equal(0, False) and not json_equal(None, 0)
    assert not json_equal("1", 1) and not json_equal([1, 2], [2, 1])
    assert json_equal({"a": 1, "b": [2.0]}, {"b": [2], "a": 1.0})
    assert not json_equal({"a": 1}, {"a": 1, "b": 2})  # equality, not containment


def test_dotted_keys_look_into_nested_objects(five: FiveSavers) -> None:
    """LangGraph's SqliteSaver reading of a dotted key, on every saver; names may start
    with a digit or hold '-'."""
    for kind in five.savers:
        assert five.matched(kind, {"user.access-level": 3}) == {3}, kind
        assert five.matched(kind, {"user.access-level": 3, "i": 3}) == {3}, kind
        assert five.matched(kind, {"user.nothing": 3}) == set(), kind
        assert five.matched(kind, {"i.x": 3}) == set(), kind  # not an object: no match
        assert five.matched(kind, {"123abc": 1}) == set(), kind


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False, min_value=-(2.0**53), max_value=2.0**53)
    | st.sampled_from(SCALARS)
    | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["a", "b", "a\x00"]), inner, max_size=3)
    ),
    max_leaves=6,
)


@settings(
    max_examples=60,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(value=st.one_of(st.sampled_from(POOL), json_values), key=st.sampled_from(["x", "user.x"]))
def test_five_savers_agree_with_the_reference_model(five: FiveSavers, value: Any, key: str) -> None:
    """Random filter values (from the pool and arbitrary JSON) against the stored corpus:
    every saver selects exactly what `metadata_matches` selects."""
    want = _reference(five.docs, {key: value})
    for kind in five.savers:
        assert five.matched(kind, {key: value}) == want, kind


ODD_METADATA: dict[str, Any] = {
    "nul": "a\x00b",
    "escape": "\uffff0\uffff\uffff",
    "text": "a\\u0000",
    "nested": {"k\x00": ["\x00", "\uffff"]},
}


async def test_nul_and_the_escape_character_in_metadata_round_trip(harness: Any) -> None:
    """jsonb cannot hold NUL: PostgreSQL stores it escaped, reversibly; every saver gives
    back exactly what was put, finds it by filter, and keeps it through copy_thread."""
    config = await harness.put(make_config("odd"), empty_checkpoint(), dict(ODD_METADATA), {})
    tup = await harness.get_tuple(config)
    assert tup is not None
    assert {k: tup.metadata[k] for k in ODD_METADATA} == ODD_METADATA
    for key, value in [
        ("nul", "a\x00b"),
        ("escape", ODD_METADATA["escape"]),
        ("nested", ODD_METADATA["nested"]),
        ("text", "a\\u0000"),
    ]:
        assert len(await harness.list(make_config("odd"), filter={key: value})) == 1, key
    assert await harness.list(make_config("odd"), filter={"nul": "a"}) == []
    assert await harness.list(make_config("odd"), filter={"escape": "\uffff0"}) == []
    await harness.copy_thread("odd", "odd-copy")
    copied = await harness.list(make_config("odd-copy"))
    assert {k: copied[0].metadata[k] for k in ODD_METADATA} == ODD_METADATA


# ------------------------------------------------------------ item 12: typed errors
def _deep(depth: int) -> dict[str, Any]:
    root: dict[str, Any] = {}
    cursor = root
    for _ in range(depth):
        cursor["a"] = {}
        cursor = cursor["a"]
    return root


async def test_deep_metadata_and_filters_are_typed_errors(harness: Any) -> None:
    from checkpointer.errors import ConfigError, SerializationError
    from checkpointer.savers.metadata import MAX_METADATA_DEPTH

    config = make_config("deep")
    with pytest.raises(SerializationError, match="levels deep"):
        await harness.put(config, empty_checkpoint(), {"d": _deep(100_000)}, {})
    with pytest.raises(SerializationError, match="levels deep"):
        await harness.put(config, empty_checkpoint(), {"d": [_deep(MAX_METADATA_DEPTH)]}, {})
    with pytest.raises(ConfigError, match="levels deep"):
        await harness.list(None, filter={"d": _deep(100_000)})
    assert await harness.list(config) == []  # nothing was stored
    ok = {"d": _deep(MAX_METADATA_DEPTH - 2)}  # exactly the bound: accepted
    stored = await harness.put(config, empty_checkpoint(), ok, {})
    tup = await harness.get_tuple(stored)
    assert tup is not None and tup.metadata["d"] == ok["d"]
    assert len(await harness.list(config, filter={"d": ok["d"]})) == 1


@pytest.mark.parametrize("limit", ["5", -1, 1.5, True, [1]])
async def test_bad_list_limits_are_config_errors(harness: Any, limit: Any) -> None:
    from checkpointer.errors import ConfigError

    await harness.put(make_config("lim"), empty_checkpoint(), {}, {})
    with pytest.raises(ConfigError, match="limit"):
        await harness.list(None, limit=limit)
    assert len(await harness.list(None, limit=0)) == 0
    assert len(await harness.list(None, limit=1)) == 1


async def test_unknown_prune_strategy_is_a_config_error(harness: Any) -> None:
    from checkpointer.errors import ConfigError

    await harness.put(make_config("p"), empty_checkpoint(), {}, {})
    for strategy in ("bogus", None, 3):
        with pytest.raises(ConfigError, match="prune strategy"):
            await harness.prune(["p"], strategy=strategy)
    assert len(await harness.list(make_config("p"))) == 1


def _fill(saver: Any, thread_id: str) -> int:
    """Puts ~64 KiB checkpoints until the database is full; how many were acknowledged."""
    from checkpointer.errors import StorageFullError

    config = make_config(thread_id)
    for n in range(10_000):
        checkpoint = empty_checkpoint()
        version = next_channel_version(None if n == 0 else f"{n:032d}.0")
        checkpoint["channel_values"] = {"x": bytes(range(256)) * 256 + n.to_bytes(4, "big")}
        checkpoint["channel_versions"] = {"x": version}
        try:
            config = saver.put(config, checkpoint, {"step": n}, {"x": version})
        except StorageFullError as exc:
            assert "nothing of this call was written" in str(exc)
            return n
    raise AssertionError("the database never filled up")


def test_a_full_sqlite_database_is_a_typed_error_and_loses_nothing(tmp_path: Path) -> None:
    """`max_page_count` makes SQLite report "database or disk is full", as a full disk
    does: StorageFullError, every acknowledged checkpoint still reads back, and the saver
    works again once there is room."""
    from checkpointer.serde import MsgpackSerializer

    path = tmp_path / "full.db"
    with SqliteSaver(path) as saver:
        saver.setup()
    conn = sqlite3.connect(path, check_same_thread=False)
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    conn.execute(f"PRAGMA max_page_count = {pages + 200}")
    # no compression: the values must really take the room
    with SqliteSaver(conn, serde=MsgpackSerializer()) as saver:
        acked = _fill(saver, "full")
        assert acked > 0
        listed = list(saver.list(make_config("full")))
        assert len(listed) == acked
        assert all(saver.get_tuple(t.config) is not None for t in listed)
        conn.execute("PRAGMA max_page_count = 1000000")
        _put_one(saver, "after")  # room again: the saver goes on
        assert saver.get_tuple(make_config("after")) is not None
    conn.close()


# ------------------------------------------------------- item 10: one id validation
BAD_IDS: list[Any] = [None, 5, 1.5, ["a", "b"], b"a", "a\x00b", "\ud800", "x" * 769, "é" * 385]


async def _call(harness: Any, name: str, *args: Any, **kwargs: Any) -> Any:
    saver = harness.saver
    if harness.is_async:
        result = getattr(saver, "a" + name)(*args, **kwargs)
        return await result
    return getattr(saver, name)(*args, **kwargs)


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
async def test_bad_ids_are_config_errors_at_every_entry_point(harness: Any, bad: Any) -> None:
    """Every id argument, on every saver: a ConfigError naming the argument, and nothing
    stored or changed."""
    from datetime import timedelta

    from checkpointer.errors import ConfigError
    from checkpointer.lifecycle import KeepLast

    config = await harness.put(make_config("keep"), empty_checkpoint(), {}, {})
    calls: list[tuple[str, tuple[Any, ...], dict[str, Any], str]] = [
        ("delete_thread", (bad,), {}, "thread_id"),
        ("copy_thread", ("keep", bad), {}, "target_thread_id"),
        ("copy_thread", (bad, "keep-2"), {}, "source_thread_id"),
        ("set_thread_ttl", (bad, timedelta(days=1)), {}, "thread_id"),
        ("list_pinned", (bad,), {}, "thread_id"),
        ("prune", ([bad],), {"strategy": "delete"}, "thread_ids"),
        ("delete_for_runs", ([bad],), {}, "run_ids"),
        ("apply_retention", (KeepLast(1),), {"thread_ids": [bad]}, "thread_ids"),
        ("list_threads", (), {"thread_ids": [bad]}, "thread_ids"),
        ("put_writes", (config, [("x", 1)], bad), {}, "task_id"),
        ("put", (make_config(bad), empty_checkpoint(), {}, {}), {}, "thread_id"),
        ("put", (make_config("keep", bad), empty_checkpoint(), {}, {}), {}, "checkpoint_ns"),
        ("get_tuple", (make_config("keep", "", bad),), {}, "checkpoint_id"),
    ]
    if bad is not None:  # a None checkpoint id or run id means "none"
        bad_cp = {**empty_checkpoint(), "id": bad}
        calls.append(("put", (make_config("keep"), bad_cp, {}, {}), {}, "checkpoint['id']"))
        calls.append(
            ("put", (make_config("keep"), empty_checkpoint(), {"run_id": bad}, {}), {}, "run_id")
        )
    for name, args, kwargs, what in calls:
        if what == "run_id" and not isinstance(bad, str):
            continue  # non-string run ids are stored as text, like LangGraph's
        if name == "get_tuple" and bad in (None, 5, 1.5):
            continue  # config values of other types are covered by test_bad_input
        if what in ("thread_id", "checkpoint_ns") and name == "put" and bad == 5:
            continue  # an int thread id in a config is LangGraph's str(5)
        if what == "checkpoint_ns" and bad is None:
            continue  # a None namespace is the root namespace
        with pytest.raises(ConfigError, match=re.escape(what)):
            await _call(harness, name, *args, **kwargs)
    threads = await _call(harness, "list_threads")
    assert [t.thread_id for t in threads] == ["keep"]
    assert len(await harness.list(None)) == 1


@pytest.mark.parametrize("name", ["prune", "delete_for_runs", "list_threads"])
async def test_a_string_is_not_a_list_of_ids(harness: Any, name: str) -> None:
    from checkpointer.errors import ConfigError

    for t in ("a", "b", "abc"):
        await harness.put(make_config(t), empty_checkpoint(), {"run_id": t}, {})
    kwargs = {"thread_ids": "abc"} if name == "list_threads" else {}
    args = () if name == "list_threads" else ("abc",)
    with pytest.raises(ConfigError, match="list of ids"):
        await _call(harness, name, *args, **kwargs)
    assert len(await harness.list(None)) == 3


async def test_the_longest_ids_are_stored_and_found(harness: Any) -> None:
    """Thread id, namespace, checkpoint id and task path at the limit, together, in
    random (incompressible) text: every backend indexes them."""
    import random

    from checkpointer.types import MAX_ID_BYTES

    rnd = random.Random(7)
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

    def long_id() -> str:
        return "".join(rnd.choice(alphabet) for _ in range(MAX_ID_BYTES))

    thread_id, ns = long_id(), long_id()
    checkpoint = empty_checkpoint()
    checkpoint["id"] = "1" + long_id()[1:]
    checkpoint["channel_values"] = {"c" * 100: 1}
    version = next_channel_version(None)
    checkpoint["channel_versions"] = {"c" * 100: version}
    config = await harness.put(
        make_config(thread_id, ns), checkpoint, {"run_id": long_id()}, {"c" * 100: version}
    )
    task_id = "00000000-0000-4000-8000-000000000001"
    await harness.put_writes(config, [("c" * 100, 2)], task_id, long_id())
    tup = await harness.get_tuple(config)
    assert tup is not None and tup.checkpoint["channel_values"] == {"c" * 100: 1}
    assert tup.pending_writes == [(task_id, "c" * 100, 2)]
    multibyte = "é" * (MAX_ID_BYTES // 2)
    await harness.put(make_config(multibyte), empty_checkpoint(), {}, {})
    await harness.copy_thread(multibyte, multibyte[:-1] + "e")
    assert len(await harness.list(make_config(multibyte[:-1] + "e"))) == 1


def test_import_refuses_bad_ids(tmp_path: Path) -> None:
    """An export file whose ids break the rule is refused before anything is written."""
    import io
    import json

    from checkpointer.export import ExportFormatError, export_threads, import_threads
    from checkpointer.inspect import Database

    source = tmp_path / "src.db"
    with SqliteSaver(source) as saver:
        saver.setup()
        _put_one(saver, "t")
    out = io.StringIO()
    with Database.open(str(source)) as db:
        export_threads(db, ["t"], out)
    lines = out.getvalue().splitlines()
    for field, bad in [("thread_id", "t\x00"), ("checkpoint_id", "x" * 800)]:
        edited = [lines[0]]
        for line in lines[1:]:
            record = json.loads(line)
            if record.get("kind") == "checkpoint":
                record[field] = bad
            edited.append(json.dumps(record))
        target = tmp_path / f"dst-{field}.db"
        with SqliteSaver(target) as saver:
            saver.setup()
        with Database.open(str(target)) as db, pytest.raises(ExportFormatError, match=field):
            import_threads(db, [line + "\n" for line in edited])
        with SqliteSaver(target) as saver:
            assert list(saver.list(None)) == []


async def test_a_full_sqlite_database_is_a_typed_error_async(tmp_path: Path) -> None:
    import aiosqlite

    from checkpointer.errors import StorageFullError
    from checkpointer.serde import MsgpackSerializer

    path = tmp_path / "full-async.db"
    with SqliteSaver(path) as saver:
        saver.setup()
    conn = await aiosqlite.connect(path, isolation_level=None)
    pages = (await (await conn.execute("PRAGMA page_count")).fetchone())[0]  # type: ignore[index]
    await (await conn.execute(f"PRAGMA max_page_count = {pages + 100}")).fetchall()
    saver = AsyncSqliteSaver(conn, serde=MsgpackSerializer())
    config = make_config("full")
    acked = 0
    try:
        for n in range(10_000):
            checkpoint = empty_checkpoint()
            version = next_channel_version(None if n == 0 else f"{n:032d}.0")
            checkpoint["channel_values"] = {"x": bytes(range(256)) * 256 + n.to_bytes(4, "big")}
            checkpoint["channel_versions"] = {"x": version}
            try:
                config = await saver.aput(config, checkpoint, {"step": n}, {"x": version})
            except StorageFullError as exc:
                assert "nothing of this call was written" in str(exc)
                break
            acked += 1
        assert acked > 0
        assert len([t async for t in saver.alist(make_config("full"))]) == acked
    finally:
        await saver.aclose()
        await conn.close()
