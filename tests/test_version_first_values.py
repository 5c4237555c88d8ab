"""SQLite value rows keyed version first, and the table of channels with value rows beside
them (schema revision 0012): a database written at 0011 upgrades and reads as before, and
the channel table follows the value rows through every write, copy and delete."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from checkpointer.langgraph import LangGraphSaver
from checkpointer.savers.sql.schema import SCHEMA_REVISION, VERSION_TABLE
from checkpointer.savers.sqlite import SqliteSaver
from tests.lg_graphs import ChatFew, chat_graph, observe, run_chat_few, scenario_subgraph
from tests.old_schema import back_to_0011

TURNS = 12
"""ChatFew snapshots every 3 steps: value rows of the message channel at 4 versions."""


def _run(saver: Any, thread_id: str, turns: int = TURNS, start: int = 0) -> dict[str, Any]:
    return run_chat_few(saver, thread_id, HumanMessage(content="hi", id="h"), turns, start)


def _query(path: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(sql).fetchall()


def _value_key(path: Path) -> list[str]:
    """The columns of the value rows' primary key, in order."""
    [(index,)] = _query(
        path,
        "SELECT name FROM pragma_index_list('checkpointer_blobs') WHERE origin = 'pk'",
    )
    return [row[0] for row in _query(path, f"SELECT name FROM pragma_index_info('{index}')")]


def _listed(path: Path) -> set[tuple[str, str, str]]:
    return set(_query(path, "SELECT * FROM checkpointer_stored_channels"))


def _with_values(path: Path) -> set[tuple[str, str, str]]:
    return set(_query(path, "SELECT thread_id, checkpoint_ns, channel FROM checkpointer_blobs"))


def _summaries(path: Path) -> list[tuple[Any, ...]]:
    return _query(
        path,
        "SELECT thread_id, checkpoint_count, bytes FROM checkpointer_threads ORDER BY thread_id",
    )


def test_upgrade_from_0011_rekeys_values_and_reads_as_before(tmp_path: Path) -> None:
    want_before = _run(InMemorySaver(), "chat")
    reference = InMemorySaver()
    _run(reference, "chat")
    want_after = _run(reference, "chat", turns=TURNS + 9, start=TURNS)
    want_subgraph = scenario_subgraph(InMemorySaver())

    path = tmp_path / "old.db"
    with SqliteSaver.from_conn_string(path) as saver:
        assert _run(LangGraphSaver(saver), "chat") == want_before
        assert scenario_subgraph(LangGraphSaver(saver)) == want_subgraph
    rows_before = sorted(_query(path, "SELECT * FROM checkpointer_blobs"))
    summaries_before = _summaries(path)

    def execute(sql: str) -> Any:
        with sqlite3.connect(path) as conn:
            return conn.execute(sql).fetchall()

    back_to_0011(execute)
    assert _query(path, f"SELECT version_num FROM {VERSION_TABLE}") == [("0011",)]
    assert _value_key(path) == ["thread_id", "checkpoint_ns", "channel", "version"]
    assert not _query(path, "SELECT 1 FROM sqlite_master WHERE name LIKE '%stored_channels%'")
    assert sorted(_query(path, "SELECT * FROM checkpointer_blobs")) == rows_before

    with SqliteSaver.from_conn_string(path) as saver:  # sets up: the upgrade
        assert _query(path, f"SELECT version_num FROM {VERSION_TABLE}") == [(SCHEMA_REVISION,)]
        assert _value_key(path) == ["thread_id", "checkpoint_ns", "version", "channel"]
        assert sorted(_query(path, "SELECT * FROM checkpointer_blobs")) == rows_before
        assert _summaries(path) == summaries_before  # the copy was not counted again
        listed = _listed(path)
        assert listed == _with_values(path)
        assert {("chat", "", "messages")} <= listed and any(ns for _, ns, _ in listed)
        graph = chat_graph(ChatFew, TURNS).compile(checkpointer=LangGraphSaver(saver))
        assert observe(graph, {"configurable": {"thread_id": "chat"}}) == want_before
        got = _run(LangGraphSaver(saver), "chat", turns=TURNS + 9, start=TURNS)
        assert got == want_after
        # Rows written after the upgrade count once, by the triggers made after the copy.
        counted = _summaries(path)
        saver.refresh_thread_summaries()
        assert _summaries(path) == counted
    assert _listed(path) == _with_values(path)


def test_channel_table_follows_values_through_copies_and_deletes(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    want = _run(InMemorySaver(), "a")
    with SqliteSaver.from_conn_string(path) as saver:
        lg = LangGraphSaver(saver)
        assert _run(lg, "a") == want
        saver.copy_thread("a", "b")
        listed = _listed(path)
        assert listed == _with_values(path)
        assert {("a", "", "messages"), ("b", "", "messages")} <= listed
        graph = chat_graph(ChatFew, TURNS).compile(checkpointer=lg)
        assert observe(graph, {"configurable": {"thread_id": "b"}}) == want

        saver.delete_thread("a")
        assert _listed(path) == {key for key in listed if key[0] == "b"}
        assert observe(graph, {"configurable": {"thread_id": "b"}}) == want

        # Pruned to its head, b may keep fewer value rows; whatever it keeps is listed,
        # and its head still reads the same.
        saver.prune(["b"])
        assert _with_values(path) <= _listed(path)
        head = observe(graph, {"configurable": {"thread_id": "b"}})
        assert head["values"] == want["values"]

        # Its run deleted, whatever value rows b keeps are listed.
        run_ids = {
            t.metadata.get("run_id") for t in saver.list({"configurable": {"thread_id": "b"}})
        }
        saver.delete_for_runs([r for r in run_ids if r])
        assert _with_values(path) <= _listed(path)

        # Value rows removed around the saver, then the summaries refreshed (as the docs
        # ask of such code): a thread left without value rows lists no channel.
        with sqlite3.connect(path) as conn:
            conn.execute("DELETE FROM checkpointer_blobs WHERE thread_id = 'b'")
        saver.refresh_thread_summaries(["b"])
        assert _listed(path) == set()

        # A thread written again under the same id finds its seeds again.
        assert _run(lg, "a") == want
        assert _listed(path) == _with_values(path)
        assert ("a", "", "messages") in _listed(path)


def test_sqlite_reads_find_value_rows_by_their_whole_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every read statement reaches a value row by its whole primary key, never by a
    range of the namespace's rows (a whole-thread `list` once weighed the head's values
    through such a scan, twice per call)."""
    statements: list[str] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    path = tmp_path / "plans.db"
    with SqliteSaver.from_conn_string(path) as saver:
        lg = LangGraphSaver(saver)
        _run(lg, "t")
        monkeypatch.setattr(sqlite3, "connect", traced)
        saver.close()
    with SqliteSaver.from_conn_string(path) as saver:
        config: Any = {"configurable": {"thread_id": "t"}}
        head = saver.get_tuple(config)
        assert head is not None
        list(saver.list(config))
        list(saver.list(config, limit=3))
        saver.get_delta_channel_history(config=head.config, channels=["messages"])
        graph = chat_graph(ChatFew, TURNS).compile(checkpointer=LangGraphSaver(saver))
        observe(graph, config)
    monkeypatch.undo()
    reads = [s for s in statements if s.lstrip().upper().startswith(("SELECT", "WITH"))]
    assert any("checkpointer_blobs" in s for s in reads)
    value_key = "(thread_id=? AND checkpoint_ns=? AND version=? AND channel=?)"
    with sqlite3.connect(path) as conn:
        for sql in reads:
            for row in conn.execute(f"EXPLAIN QUERY PLAN {sql}"):
                step = row[3]
                if "sqlite_autoindex_checkpointer_blobs" in step or " checkpointer_blobs" in step:
                    assert value_key in step, (step, sql)
