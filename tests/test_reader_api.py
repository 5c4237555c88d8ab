"""The reader API the CLI and a web viewer share (`checkpointer.inspect.open_reader`), as
the README shows it, on our database and on LangGraph's, read-only."""

from __future__ import annotations

from pathlib import Path

import pytest

from checkpointer.inspect import diff_view, history, open_reader, state_view
from checkpointer.reader import ReadOnlyError
from checkpointer.savers.sqlite import SqliteSaver
from tests.test_cli_support import CHAT, cfg


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
