"""The reader API the CLI and a web viewer share (`checkpointer.inspect.open_reader`), as
the README shows it, on our database and on LangGraph's, read-only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from checkpointer.inspect import diff_view, history, open_reader, state_view
from checkpointer.reader import Reader, ReadOnlyError
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.types import empty_checkpoint
from tests.test_cli_support import CHAT, cfg

try:
    from tests.test_cli_langgraph_db import lg as lg  # the LangGraph databases fixture
except pytest.skip.Exception:  # LangGraph's savers not installed
    lg = None


def test_readme_example_on_our_database(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    with SqliteSaver.from_conn_string(path) as saver:
        graph = CHAT.compile(checkpointer=saver)
        for turn in range(3):
            graph.invoke({"messages": [f"hi {turn}"]}, cfg("thread-1"))
        expected = graph.get_state(cfg("thread-1"))
    before = path.read_bytes()
    with open_reader(str(path)) as reader:
        assert reader.kind == "checkpointer"
        total, threads = reader.thread_summaries(sort="updated", limit=20, offset=0)
        assert total == 1 and threads[0].thread_id == "thread-1"
        head, _nodes, entries = history(reader, "thread-1")
        assert head == expected.config["configurable"]["checkpoint_id"]
        state = state_view(reader, "thread-1", "", head)
        assert state.channels["turn"].value == expected.values["turn"]
        change = diff_view(reader, "thread-1", "", entries[1].checkpoint_id, head)
        assert change.relation == "ancestor"
        with pytest.raises(ReadOnlyError):
            reader.saver  # type: ignore[attr-defined]  # noqa: B018
    assert path.read_bytes() == before


def test_readme_example_on_a_langgraph_database(tmp_path: Path) -> None:
    pytest.importorskip("langgraph.checkpoint.sqlite")
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.sqlite import SqliteSaver as ReferenceSqliteSaver

    from tests.lg_graphs import ChatFew, chat_graph

    path = tmp_path / "lg.db"
    with ReferenceSqliteSaver.from_conn_string(str(path)) as saver:
        graph = chat_graph(ChatFew, 4).compile(checkpointer=saver)
        graph.invoke({"messages": [HumanMessage(content="hi", id="h")], "turn": 0}, cfg("t"))
        expected = graph.get_state(cfg("t"))
    before = path.read_bytes()
    with open_reader(str(path)) as reader:
        assert reader.kind == "langgraph"
        head, _nodes, entries = history(reader, "t")
        assert head == expected.config["configurable"]["checkpoint_id"]
        assert [e.step for e in entries] == sorted((e.step for e in entries), reverse=True)
        assert state_view(reader, "t", "", head).channels["turn"].value == expected.values["turn"]
    assert path.read_bytes() == before


def _check_listing_reads(reader: Reader, threads: dict[str, dict[str, list[str]]]) -> None:
    """namespaces, namespace_head and thread_summaries(thread_ids=...) agree with the
    checkpoints each namespace holds (`threads`: thread -> namespace -> checkpoint ids)."""
    assert reader.all_thread_ids() == sorted(threads)
    for thread_id, namespaces in threads.items():
        assert reader.namespaces(thread_id) == sorted(namespaces)
        for ns, ids in namespaces.items():
            assert reader.namespace_head(thread_id, ns) == (max(ids), len(ids))
            assert sorted(reader.skeleton(thread_id, ns)) == sorted(ids)
    assert reader.namespaces("nope") == []
    assert reader.namespace_head("nope", "") == (None, 0)
    some = sorted(threads)[:2]
    total, page = reader.thread_summaries("id", None, 0, thread_ids=[*some, "nope"])
    assert total == len(some) and [t.thread_id for t in page] == some
    assert page[0].checkpoints == sum(len(ids) for ids in threads[some[0]].values())
    assert reader.thread_summaries("id", 1, 1, thread_ids=some)[1][0].thread_id == some[1]
    assert reader.thread_summaries("updated", thread_ids=[]) == (0, [])
    everything, _ = reader.thread_summaries("count")
    assert everything == len(threads)


def test_listing_reads_on_our_database(tmp_path: Path) -> None:
    path = tmp_path / "ns.db"
    with SqliteSaver.from_conn_string(path) as saver:
        graph = CHAT.compile(checkpointer=saver)
        for thread in ("a", "b", "c"):
            graph.invoke({"messages": [f"hi {thread}"]}, cfg(thread))
        checkpoint = empty_checkpoint()
        saver.put(
            {"configurable": {"thread_id": "b", "checkpoint_ns": "inner:1"}},
            checkpoint,
            {"source": "loop", "step": 0, "parents": {}},
            {},
        )
        expected: dict[str, dict[str, list[str]]] = {}
        for thread in ("a", "b", "c"):
            for ns in ("", "inner:1"):
                ids = [
                    t.config["configurable"]["checkpoint_id"]
                    for t in saver.list(
                        {"configurable": {"thread_id": thread, "checkpoint_ns": ns}}
                    )
                ]
                if ids:
                    expected.setdefault(thread, {})[ns] = ids
    assert list(expected["b"]) == ["", "inner:1"]
    with open_reader(str(path)) as reader:
        _check_listing_reads(reader, expected)


def test_listing_reads_on_langgraph_databases(lg: Any) -> None:
    from langgraph.checkpoint.base import BaseCheckpointSaver

    from tests.test_ui_langgraph import url_and_schema

    url, schema = url_and_schema(lg)
    expected: dict[str, dict[str, list[str]]] = {}
    saver: BaseCheckpointSaver[Any] = lg.graphs["fork"].checkpointer
    for t in saver.list(None):
        c = t.config["configurable"]
        expected.setdefault(c["thread_id"], {}).setdefault(c["checkpoint_ns"], []).append(
            c["checkpoint_id"]
        )
    assert any(len(namespaces) > 1 for namespaces in expected.values())  # the subgraph
    before = lg.fingerprint()
    with open_reader(url, schema=schema) as reader:
        assert reader.kind == "langgraph"
        _check_listing_reads(reader, expected)
    assert lg.fingerprint() == before
