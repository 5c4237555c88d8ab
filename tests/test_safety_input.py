"""Hostile and odd input at the saver API (issue 16 items 10-13): ids, metadata filters,
typed errors, and reads that must not need SQLite's write lock."""

from __future__ import annotations

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
