"""Tail rows (`savers/sql/tails.py`): a list written as what it gained since a whole
base row reads back exactly as put, whatever the history of puts (growth, edits, cuts,
forks), and a tail is written only where its base is really stored."""

from __future__ import annotations

import copy
import hashlib
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointer.channels.markers import DeltaSnapshot, Overwrite
from checkpointer.errors import CorruptValueError, DeserializationError
from checkpointer.ids import next_channel_version
from checkpointer.savers.postgres import PostgresSaver
from checkpointer.savers.sql import programs as saver_module
from checkpointer.savers.sql.plan import Stmt
from checkpointer.savers.sql.tails import (
    MIN_BASE_BYTES,
    TAIL_PREFIX,
    TAILS_KEY,
    ListTails,
    join_whole,
    list_codec,
)
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.serde import MsgpackSerializer
from checkpointer.serde.compression import CompressingSerializer, database_default_serializer
from checkpointer.serde.fast_path import list_inside, list_of
from checkpointer.types import empty_checkpoint, make_config
from tests.conftest import (
    PG_URL,
    StatementCounter,
    drop_schema,
    opened_saver,
    require_postgres,
)

SYNC_KINDS = ("sqlite", "postgres")


def _item(n: int, size: int = 300) -> dict[str, Any]:
    """A message of about `size` characters that compresses about as prose does."""
    words = "".join(hashlib.sha256(f"{n}.{i}".encode()).hexdigest() for i in range(size // 64 + 1))
    return {"role": "user" if n % 2 else "assistant", "content": words[:size]}


def _plain(value: list[Any]) -> Any:
    return value


def _nested(value: list[Any]) -> Any:
    return Overwrite(DeltaSnapshot(value))


WRAPS = {"plain": _plain, "snapshot": DeltaSnapshot, "overwrite": Overwrite, "nested": _nested}
"""How a list channel's value is stored: as it is, or inside payload markers (a delta
channel's snapshot, an overwrite, both)."""


class _Thread:
    """Puts a list channel the way a runtime does, remembering what each checkpoint held.
    `wrap` makes the stored value of each list (a `DeltaSnapshot` of it...)."""

    def __init__(
        self, saver: Any, thread_id: str | None = None, wrap: Callable[[list[Any]], Any] = _plain
    ) -> None:
        self.saver = saver
        self.wrap = wrap
        self.thread_id = thread_id or uuid.uuid4().hex
        self.head = make_config(self.thread_id)
        self.version: str | None = None
        self.value: list[Any] = []
        self.expected: dict[str, list[Any]] = {}
        self.heads: list[tuple[Any, str | None, list[Any]]] = []
        self.counter = 0

    def put(self, value: list[Any]) -> None:
        self.version = next_channel_version(self.version)
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"messages": self.wrap(value)}
        checkpoint["channel_versions"] = {"messages": self.version}
        self.head = self.saver.put(
            self.head, checkpoint, {"step": len(self.expected)}, {"messages": self.version}
        )
        self.value = value
        self.expected[checkpoint["id"]] = self.wrap(copy.deepcopy(value))
        self.heads.append((self.head, self.version, value))

    def grow(self, count: int, size: int = 300) -> None:
        new = [_item(self.counter + i, size) for i in range(count)]
        self.counter += count
        self.put(self.value + new)

    def fork(self, back: int) -> None:
        """Go on from an earlier checkpoint (its value; versions keep increasing)."""
        head, _version, value = self.heads[max(0, len(self.heads) - 1 - back)]
        self.head, self.value = head, value

    def check(self) -> None:
        for checkpoint_id, value in self.expected.items():
            config = make_config(self.thread_id, checkpoint_id=checkpoint_id)
            got = self.saver.get_tuple(config)
            assert got is not None
            assert got.checkpoint["channel_values"]["messages"] == value, checkpoint_id
            assert TAILS_KEY not in got.checkpoint  # the record's hint stays inside
        listed = {
            t.config["configurable"]["checkpoint_id"]: t.checkpoint["channel_values"]["messages"]
            for t in self.saver.list(make_config(self.thread_id))
        }
        assert listed == self.expected


def _tail_count(saver: Any, thread_id: str) -> int:
    rows = saver.run_sql(
        "SELECT count(*) FROM {blobs} WHERE thread_id = ? AND base_version IS NOT NULL",
        thread_id,
    )
    return int(rows[0][0])


@pytest.fixture(params=SYNC_KINDS)
def sync_saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        with SqliteSaver.from_conn_string(tmp_path / "tails.db") as saver:
            yield _Raw(saver, lambda: sqlite3.connect(tmp_path / "tails.db"), "?", None)
        return
    require_postgres()
    schema = f"cp_test_{uuid.uuid4().hex[:12]}"
    try:
        with PostgresSaver.from_conn_string(PG_URL, schema=schema, pool=False) as saver:
            yield _Raw(saver, lambda: psycopg.connect(PG_URL, autocommit=True), "%s", schema)
    finally:
        drop_schema(schema)


class _Raw:
    """A saver, plus SQL on its tables behind its back (another process, damage)."""

    def __init__(self, saver: Any, connect: Any, placeholder: str, schema: str | None) -> None:
        self.saver, self._connect, self._p, self._schema = saver, connect, placeholder, schema

    def __getattr__(self, name: str) -> Any:
        return getattr(self.saver, name)

    def run_sql(self, sql: str, *params: Any) -> list[Any]:
        prefix = f'"{self._schema}".' if self._schema else ""
        sql = sql.replace("{blobs}", f"{prefix}checkpointer_blobs").replace("?", self._p)
        sql = sql.replace("{checkpoints}", f"{prefix}checkpointer_checkpoints")
        conn = self._connect()
        try:
            rows = conn.execute(sql, params).fetchall() if "SELECT" in sql else []
            if "SELECT" not in sql:
                conn.execute(sql, params)
            conn.commit()
            return list(rows)
        finally:
            conn.close()


# A history: how many items each step adds, or an edit / a cut / a fork.
_STEP = st.one_of(
    st.tuples(st.just("grow"), st.integers(1, 6)),
    st.tuples(st.just("edit"), st.integers(0, 40)),
    st.tuples(st.just("cut"), st.integers(1, 5)),
    st.tuples(st.just("fork"), st.integers(1, 6)),
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=st.lists(_STEP, min_size=1, max_size=30), wrap=st.sampled_from(sorted(WRAPS)))
def test_every_checkpoint_reads_back_as_put(sync_saver: Any, steps: list[Any], wrap: str) -> None:
    thread = _Thread(sync_saver, wrap=WRAPS[wrap])
    thread.grow(20)  # past MIN_BASE_BYTES: later versions can be tails
    for op, n in steps:
        if op == "grow":
            thread.grow(n)
        elif op == "edit" and thread.value:
            value = list(thread.value)
            value[n % len(value)] = {"role": "system", "content": f"edited {n}"}
            thread.put(value)
        elif op == "cut":
            thread.put(thread.value[: max(1, len(thread.value) - n)])
        elif op == "fork" and thread.heads:
            thread.fork(n)
            thread.grow(1)
    thread.check()


@pytest.mark.parametrize("wrap", ["plain", "snapshot"])
def test_a_growing_list_is_stored_as_tails(sync_saver: Any, wrap: str) -> None:
    """A list grown step by step, or a delta channel's snapshots of one (revision 0011)."""
    thread = _Thread(sync_saver, wrap=WRAPS[wrap])
    for _ in range(40):
        thread.grow(2)
    thread.check()
    tails = _tail_count(sync_saver, thread.thread_id)
    # A base, then tails until they would hold 1/TAIL_SHARE of its bytes: half the
    # versions at this early stage (20 to 100 items), most of them later.
    assert tails >= 15
    # And they cost a fraction of whole rows: bytes stored per version of the list.
    rows = sync_saver.run_sql(
        "SELECT sum(length(blob)) FROM {blobs} WHERE thread_id = ?", thread.thread_id
    )
    whole = sum(
        len(database_default_serializer().dumps_typed(v)[1]) for v in thread.expected.values()
    )
    assert int(rows[0][0]) < whole / 2


def test_a_tail_continues_only_a_base_with_the_same_markers(sync_saver: Any) -> None:
    """A plain list after a snapshot of its prefix (or the other way round) is written
    whole: a tail appends to the list inside its base's markers, whatever they are."""
    thread = _Thread(sync_saver, wrap=DeltaSnapshot)
    thread.grow(20)
    thread.wrap = _plain
    thread.grow(1)
    thread.wrap = DeltaSnapshot
    thread.grow(1)
    thread.wrap = Overwrite
    thread.grow(1)
    assert _tail_count(sync_saver, thread.thread_id) == 0
    thread.grow(1)  # the same markers as the base just written whole
    assert _tail_count(sync_saver, thread.thread_id) == 1
    sync_saver.value_cache.clear()
    thread.check()


@pytest.mark.parametrize("walk", [False, True])
def test_a_delta_snapshot_stored_as_a_tail_seeds_the_history(
    sync_saver: Any, walk: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The seed of a delta channel's history read from a snapshot tail is the whole
    snapshot (its base's list with the tail's items), its base brought by the history's
    one statement (by runs, or by the pointer walk)."""
    thread = _Thread(sync_saver, wrap=DeltaSnapshot)
    thread.grow(20)
    thread.grow(1)
    thread.grow(1)
    assert _tail_count(sync_saver, thread.thread_id) == 2
    sync_saver.value_cache.clear()
    if walk:
        monkeypatch.setattr(
            saver_module, "delta_runs_stmt", lambda d, **_: Stmt("SELECT -2", fetch=True)
        )
    counter = StatementCounter(sync_saver.saver)
    history = sync_saver.get_delta_channel_history(config=thread.head, channels=["messages"])
    assert counter.count == (2 if walk else 1)  # the walk: after the runs' refusal
    seed = thread.heads[-2][2]
    assert len(seed) == 21 and history["messages"]["seed"] == DeltaSnapshot(seed)
    listed = list(sync_saver.list(make_config(thread.thread_id), limit=1))
    assert listed[0].checkpoint["channel_values"]["messages"] == DeltaSnapshot(thread.value)


def test_a_tail_of_a_base_gone_is_written_whole(sync_saver: Any) -> None:
    """The saver remembers a base another process has since deleted: the put refuses the
    tail and writes the value whole, in the same put."""
    thread = _Thread(sync_saver)
    thread.grow(20)
    thread.grow(1)
    assert _tail_count(sync_saver, thread.thread_id) == 1
    base_version = thread.heads[0][1]
    sync_saver.run_sql(  # behind the saver's back: the base row goes
        "DELETE FROM {blobs} WHERE thread_id = ? AND version = ?", thread.thread_id, base_version
    )
    del thread.expected[next(iter(thread.expected))]  # that checkpoint lost its value
    thread.grow(1)
    rows = sync_saver.run_sql(
        "SELECT base_version FROM {blobs} WHERE thread_id = ? AND version = ?",
        thread.thread_id,
        thread.version,
    )
    assert rows == [(None,)]  # whole: its remembered base was gone
    thread.grow(1)  # and it is the next base
    assert _tail_count(sync_saver, thread.thread_id) == 2
    del thread.expected[next(iter(thread.expected))]  # the tail of the deleted base
    for checkpoint_id, value in thread.expected.items():
        got = sync_saver.get_tuple(make_config(thread.thread_id, checkpoint_id=checkpoint_id))
        assert got.checkpoint["channel_values"]["messages"] == value


def test_tails_without_hints_read_their_bases_in_a_second_statement(sync_saver: Any) -> None:
    """A record that does not name the bases of its tails (hints are only a shortcut)."""
    thread = _Thread(sync_saver)
    thread.grow(20)
    for _ in range(5):
        thread.grow(1)
    if sync_saver._schema:
        sync_saver.run_sql("UPDATE {checkpoints} SET checkpoint = checkpoint - '__tails__'")
    else:
        sync_saver.run_sql(
            "UPDATE {checkpoints} SET checkpoint = json_remove(checkpoint, '$.__tails__')"
        )
    text = "checkpoint::text" if sync_saver._schema else "checkpoint"
    hinted = f"SELECT count(*) FROM {{checkpoints}} WHERE strpos({text}, ?) > 0"
    if not sync_saver._schema:
        hinted = hinted.replace("strpos", "instr")
    assert sync_saver.run_sql(hinted, TAILS_KEY) == [(0,)]
    sync_saver.value_cache.clear()
    thread.check()


def test_a_tail_whose_base_is_missing_names_the_value(sync_saver: Any) -> None:
    thread = _Thread(sync_saver)
    thread.grow(20)
    thread.grow(1)
    sync_saver.run_sql(
        "DELETE FROM {blobs} WHERE thread_id = ? AND base_version IS NULL", thread.thread_id
    )
    with pytest.raises(CorruptValueError) as caught:
        sync_saver.get_tuple(make_config(thread.thread_id))
    assert caught.value.channel == "messages" and caught.value.version == thread.version
    assert "continues a list" in str(caught.value)


def test_a_delta_seed_stored_as_a_tail_reads_whole(sync_saver: Any) -> None:
    """A channel stored as a list (maybe as tails) before it became a delta channel seeds
    its history with the whole list."""
    thread = _Thread(sync_saver)
    thread.grow(20)
    thread.grow(1)
    thread.grow(1)
    assert _tail_count(sync_saver, thread.thread_id) == 2
    # The history up to the head starts from its parent's value: a tail of 21 items.
    history = sync_saver.get_delta_channel_history(config=thread.head, channels=["messages"])
    assert history["messages"]["seed"] == thread.heads[-2][2]
    assert len(history["messages"]["seed"]) == 21
    assert history["messages"]["writes"] == []


async def test_async_savers_read_tails(tmp_path: Path) -> None:
    for kind in ("async_sqlite", "async_postgres"):
        async with opened_saver(kind, tmp_path) as saver:
            head = make_config("t")
            version: str | None = None
            value: list[Any] = []
            for step in range(12):
                value = value + [_item(step * 3 + i) for i in range(3 if step else 20)]
                version = next_channel_version(version)
                checkpoint = empty_checkpoint()
                checkpoint["channel_values"] = {"messages": value}
                checkpoint["channel_versions"] = {"messages": version}
                head = await saver.aput(head, checkpoint, {}, {"messages": version})
            got = await saver.aget_tuple(make_config("t"))
            assert got.checkpoint["channel_values"]["messages"] == value
            listed = [t async for t in saver.alist(make_config("t"))]
            assert [len(t.checkpoint["channel_values"]["messages"]) for t in listed] == [
                20 + 3 * i for i in range(11, -1, -1)
            ]
            assert len(saver._list_tails) == 1, kind


@settings(max_examples=100, deadline=None)
@given(
    base=st.lists(st.dictionaries(st.text(max_size=4), st.text(max_size=60)), max_size=40),
    more=st.lists(
        st.dictionaries(st.text(max_size=4), st.integers() | st.tuples(st.text(max_size=3))),
        max_size=8,
    ),
    compressed=st.booleans(),
    wrap=st.sampled_from(sorted(WRAPS)),
)
def test_a_tail_decodes_to_the_items_added(
    base: list[Any], more: list[Any], compressed: bool, wrap: str
) -> None:
    """Encoding level: the tail's bytes decode to exactly the items past the base's, and
    joined to the base's bytes they are the new value's, markers included."""
    mark = WRAPS[wrap]
    serde: Any = MsgpackSerializer()
    if compressed:
        serde = CompressingSerializer(serde, threshold=64)
    codec = list_codec(serde)
    assert codec is not None
    tails = ListTails()
    filler = [{"pad": "p" * (MIN_BASE_BYTES * 16)}]  # the items added stay under 1/8
    first = tails.encode(codec, "t", "", "c", "1", mark(filler + base))
    assert isinstance(first, tuple)  # the first is whole
    assert serde.loads_typed(first) == mark(filler + base)
    out = tails.encode(codec, "t", "", "c", "2", mark(filler + base + more))
    if not more:
        assert isinstance(out, tuple)  # not longer: whole
        return
    assert not isinstance(out, tuple) and out.type.startswith(TAIL_PREFIX)
    assert out.base_version == "1" and out.base_size == len(first[1])
    assert serde.loads_typed((out.type[len(TAIL_PREFIX) :], out.blob)) == more
    assert serde.loads_typed(out.whole()) == mark(filler + base + more)
    assert serde.loads_typed(join_whole(first, (out.type, out.blob), {})) == mark(
        filler + base + more
    )
    # An unknown reader fails loudly rather than returning only the tail.
    with pytest.raises(DeserializationError):
        serde.loads_typed((out.type, out.blob))


def test_only_plain_msgpack_serializers_write_tails() -> None:
    from checkpointer.serde.encryption import EncryptedSerializer

    assert list_codec(MsgpackSerializer()) is not None
    assert list_codec(database_default_serializer()) is not None
    assert list_codec(EncryptedSerializer(keys={"k": b"k" * 32}, active_key_id="k")) is None


_SCALAR = st.none() | st.booleans() | st.integers() | st.text(max_size=5)
_ONE_LEVEL = st.one_of(
    st.lists(_SCALAR, max_size=3),
    st.tuples(_SCALAR, _SCALAR),
    st.dictionaries(st.text(max_size=3), _SCALAR, max_size=3),
)
_PLAIN = st.one_of(
    _SCALAR,
    _ONE_LEVEL,
    st.lists(_ONE_LEVEL, max_size=3),
    st.tuples(_ONE_LEVEL, _SCALAR),
    st.frozensets(_SCALAR, max_size=3),
)


@settings(max_examples=300, deadline=None)
@given(
    value=_PLAIN,
    marks=st.lists(st.sampled_from([DeltaSnapshot, Overwrite]), max_size=3),
)
def test_list_inside_finds_exactly_the_lists_a_value_is_or_holds(
    value: Any, marks: list[Any]
) -> None:
    """The byte-level view of what a tail may continue agrees with the value: a list
    inside any markers, never a tuple or set (whose encoding is an array too)."""
    for mark in marks:
        value = mark(value)
    raw = MsgpackSerializer().dumps_typed(value)[1]
    found = list_inside(raw)
    inner = list_of(value)
    if inner is None:
        assert found is None
        return
    assert found is not None
    marked, count, head = found
    assert marked == 4 * len(marks) and count == len(inner) and head >= 1
    rest = MsgpackSerializer().loads_typed(("msgpack", raw[marked:]))
    assert rest == inner
