"""The read path's shortcuts against what they stand for.

SQLite `list` pages number their checkpoints by rowid and put them in page order in
Python (`reads._page_sort`): that order must be SQLite's own ORDER BY checkpoint_id DESC,
thread_id DESC, checkpoint_ns DESC, whatever the keys' characters and whatever order the
rows were written in, and every checkpoint must keep its own pending writes."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointer.savers.base import dumps_json, loads_json
from checkpointer.savers.metadata import escape_json_text
from checkpointer.savers.sql.postgres_dialect import PostgresDialect
from checkpointer.savers.sql.reads import _page_sort
from checkpointer.savers.sql.records import decode_metadata, metadata_escaped
from checkpointer.savers.sql.sqlite_dialect import SqliteDialect
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.types import empty_checkpoint, make_config

# Characters whose UTF-8 bytes and code points order alike or not at all alike would show:
# ASCII, Latin-1, BMP above the surrogates, supplementary planes; NUL is refused in keys.
_KEY_TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from("aAz0-_~ ÿé€\ufffd\U0001d11e\U0010ffff"),
        st.characters(min_codepoint=1, exclude_categories=("Cs",)),
    ),
    min_size=0,
    max_size=4,
)
_KEYS = st.lists(
    st.tuples(_KEY_TEXT.filter(bool), _KEY_TEXT, _KEY_TEXT.filter(bool)),
    min_size=1,
    max_size=12,
    unique=True,
)


def _sql_order(path: Path) -> list[tuple[str, str, str]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT thread_id, checkpoint_ns, checkpoint_id FROM checkpointer_checkpoints "
            "ORDER BY checkpoint_id DESC, thread_id DESC, checkpoint_ns DESC"
        ).fetchall()


def _key(tup: Any) -> tuple[str, str, str]:
    c = tup.config["configurable"]
    return (c["thread_id"], c["checkpoint_ns"], c["checkpoint_id"])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(keys=_KEYS, page_size=st.integers(1, 5))
def test_sqlite_list_order_is_sqlites(tmp_path_factory: Any, keys: Any, page_size: int) -> None:
    path = tmp_path_factory.mktemp("order") / "order.db"
    saver = SqliteSaver(path, page_size=page_size)
    saver.setup()
    try:
        # Written in the drawn order: rowids follow it, not the page order.
        for i, (thread_id, ns, checkpoint_id) in enumerate(keys):
            checkpoint = empty_checkpoint()
            checkpoint["id"] = checkpoint_id
            config = saver.put(make_config(thread_id, ns), checkpoint, {"step": i}, {})
            saver.put_writes(config, [("c", i), ("d", -i)], f"task{i}")
        expected = _sql_order(path)
        listed = list(saver.list(None))
        assert [_key(t) for t in listed] == expected
        for tup in listed:
            i = tup.metadata["step"]
            assert keys[i] == _key(tup)
            assert tup.pending_writes == [(f"task{i}", "c", i), (f"task{i}", "d", -i)]
        for thread_id in {k[0] for k in keys}:
            in_thread = [k for k in expected if k[0] == thread_id]
            whole = {"configurable": {"thread_id": thread_id}}  # every namespace
            assert [_key(t) for t in saver.list(whole)] == in_thread
            assert [_key(t) for t in saver.list(whole, limit=2)] == in_thread[:2]
    finally:
        saver.close()


@given(
    st.lists(
        st.tuples(
            st.one_of(_KEY_TEXT, st.binary(max_size=3)),
            st.one_of(_KEY_TEXT, st.binary(max_size=3)),
            st.one_of(_KEY_TEXT, st.binary(max_size=3)),
        ),
        unique=True,
        max_size=10,
    )
)
def test_page_sort_matches_sqlite_with_blob_keys(keys: list[tuple[Any, Any, Any]]) -> None:
    """A key column holding a BLOB (written around the saver) sorts after every text, as
    SQLite sorts it, instead of failing the page."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE c (t TEXT, n TEXT, i TEXT)")
    conn.executemany("INSERT INTO c VALUES (?, ?, ?)", keys)
    rows = conn.execute("SELECT rowid, 0, t, n, i FROM c").fetchall()
    expected = conn.execute("SELECT t, n, i FROM c ORDER BY i DESC, t DESC, n DESC").fetchall()
    conn.close()
    _page_sort(rows, SqliteDialect())
    assert [(r[2], r[3], r[4]) for r in rows] == expected


_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=8,
)


@given(
    st.one_of(
        _JSONISH.map(lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))),
        st.tuples(_JSONISH, st.sampled_from(["", " ", "\n", "x", "}", ",1"])).map(
            lambda p: json.dumps(p[0]) + p[1]
        ),
        st.tuples(st.sampled_from(["", " ", "\ufeff", "\t"]), _JSONISH).map(
            lambda p: p[0] + json.dumps(p[1])
        ),
        st.text(max_size=12),
        st.binary(max_size=12),
    )
)
def test_loads_json_is_json_loads(text: str | bytes) -> None:
    """The records' parser takes the C scanner straight: the same value as json.loads, or
    the same error."""
    try:
        expected: Any = json.loads(text)
    except Exception as exc:  # the error's type and message, which CorruptValueError quotes
        expected = (type(exc), str(exc))
        with pytest.raises(type(exc)) as raised:
            loads_json(text)
        assert str(raised.value) == expected[1]
        return
    assert loads_json(text) == expected


# Values of every shape a batch meets: plain msgpack (the batch), extensions (tuples, big
# ints: the batch refuses the chunk), None and bytes (other tags).
_WRITE_VALUE = st.one_of(
    _JSONISH,
    st.tuples(st.integers(), st.text(max_size=3)),
    st.integers(min_value=2**64, max_value=2**70),
    st.binary(max_size=4),
    st.lists(st.dictionaries(st.text(max_size=3), st.integers(), max_size=2), max_size=2),
)


_PLAIN_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=4),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=40, deadline=None)
@given(
    st.one_of(
        # Plain values only (every chunk read in one call), or with the odd other one.
        st.lists(st.lists(_PLAIN_VALUE, max_size=3), min_size=1, max_size=140),
        st.lists(st.lists(_WRITE_VALUE, max_size=3), min_size=1, max_size=80),
    )
)
def test_list_write_values_are_get_tuples(writes: list[list[Any]]) -> None:
    """A page's write values, decoded by chunks in one call where they can be
    (`reads._batch_writes`), are what each checkpoint's own `get_tuple` reads, in order."""
    saver = SqliteSaver(":memory:")
    saver.setup()
    try:
        config = make_config("w")
        for i, values in enumerate(writes):
            checkpoint = empty_checkpoint()
            checkpoint["id"] = f"{i:04d}"
            config = saver.put(config, checkpoint, {"step": i}, {})
            saver.put_writes(config, [(f"c{j}", v) for j, v in enumerate(values)], f"t{i}")
        listed = list(saver.list(make_config("w")))
        assert len(listed) == len(writes)
        for tup in listed:
            alone = saver.get_tuple(tup.config)
            assert alone is not None
            assert tup.pending_writes == alone.pending_writes
            i = tup.metadata["step"]
            assert [w[2] for w in tup.pending_writes or []] == writes[i]
    finally:
        saver.close()


_META_TEXT = st.text(alphabet=st.sampled_from('a\x00\uffff0\\"é'), max_size=6)


@given(
    st.dictionaries(
        _META_TEXT,
        st.recursive(
            st.none() | st.integers() | _META_TEXT,
            lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_META_TEXT, inner),
            max_leaves=6,
        ),
        max_size=4,
    )
)
def test_escaped_metadata_text_reads_as_parsed_jsonb(metadata: dict[str, Any]) -> None:
    """PostgreSQL metadata comes as jsonb's text: unescaped only when the text holds the
    escape character, it reads as the parsed jsonb did (unescaped always)."""
    text = escape_json_text(dumps_json(metadata))
    assert decode_metadata(text, escaped=True) == decode_metadata(json.loads(text))
    assert decode_metadata(text, escaped=True) == metadata
    assert metadata_escaped(PostgresDialect("public"))
    assert not metadata_escaped(SqliteDialect())
