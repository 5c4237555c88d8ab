"""SQLite `list` pages number their checkpoints by rowid and put them in page order in
Python (`reads._page_sort`): that order must be SQLite's own ORDER BY checkpoint_id DESC,
thread_id DESC, checkpoint_ns DESC, whatever the keys' characters and whatever order the
rows were written in, and every checkpoint must keep its own pending writes."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointer.savers.sql.reads import _page_sort
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
