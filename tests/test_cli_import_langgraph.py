"""`import-langgraph` and `import_from_url` are one path (issue 18.2, 18.3): bad sources
are refused naming the source, the target is not created when the import fails, a re-run
reports the threads as already present, and both store values alike."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite")

from langchain_core.messages import HumanMessage
from langgraph.checkpoint.sqlite import SqliteSaver as ReferenceSqliteSaver

from checkpointer.importer import import_from_url
from checkpointer.savers.sqlite import SqliteSaver
from tests.conftest import PG_URL, require_postgres
from tests.lg_graphs import ChatFew, chat_graph
from tests.test_cli_support import assert_one_line_error, run, run_json


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("ref") / "reference.db")
    with ReferenceSqliteSaver.from_conn_string(path) as saver:
        graph = chat_graph(ChatFew, 4).compile(checkpointer=saver)
        for thread in ("a", "b"):
            graph.invoke(
                {"messages": [HumanMessage(content="long " * 400, id="h")], "turn": 0},
                {"configurable": {"thread_id": thread}},
            )
    return path


def _types(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute("SELECT type FROM checkpointer_blobs")}


def test_bad_sources_are_refused_and_leave_no_target(reference: str, tmp_path: Path) -> None:
    target = tmp_path / "target.db"
    plain = tmp_path / "plain.db"
    with sqlite3.connect(plain) as conn:
        conn.execute("CREATE TABLE t (x)")
    text = tmp_path / "notes.txt"
    text.write_text("not a database\n" * 100)
    for source, needle in (
        (str(plain), "no LangGraph checkpoint tables"),
        (str(text), "notes.txt"),
        (str(tmp_path / "missing.db"), "no such"),
    ):
        line = assert_one_line_error(run("import-langgraph", source, "--url", str(target)), needle)
        assert "target.db" not in line
        assert not target.exists()
    assert_one_line_error(
        run("import-langgraph", reference, "--thread", "nosuch", "--url", str(target)),
        "unknown thread 'nosuch'",
    )
    assert not target.exists()


def test_a_rerun_reports_threads_already_present(reference: str, tmp_path: Path) -> None:
    target = tmp_path / "ours.db"
    first = run_json("import-langgraph", reference, "--url", str(target))
    assert first["thread_ids"] == ["a", "b"] and first["checkpoints"] > 0
    again = run_json("import-langgraph", reference, "--url", str(target))
    assert again["threads"] == 0 and again["checkpoints"] == 0
    assert again["already_present"] == ["a", "b"] and again["skipped"] == []
    text = run("import-langgraph", reference, "--url", str(target))
    assert "already present" in text.stdout
    run_json("delete", "b", "--url", str(target))
    run_json(
        "fork", "a", run_json("history", "a", "--url", str(target))["head"], "--url", str(target)
    )
    third = run_json("import-langgraph", reference, "--url", str(target))
    assert third["thread_ids"] == ["b"]
    assert [s["thread_id"] for s in third["skipped"]] == ["a"]


def test_cli_and_api_store_values_alike(reference: str, tmp_path: Path) -> None:
    by_cli = tmp_path / "cli.db"
    run_json("import-langgraph", reference, "--url", str(by_cli))
    by_api = tmp_path / "api.db"
    with SqliteSaver.from_conn_string(by_api) as saver:
        import_from_url(reference, saver)
    assert _types(by_cli) == _types(by_api)
    assert "msgpack+zstd" in _types(by_cli)
    assert run_json("history", "a", "--url", str(by_cli), "--all") == run_json(
        "history", "a", "--url", str(by_api), "--all"
    )


def test_a_postgres_source_without_tables_is_one_clear_error(tmp_path: Path) -> None:
    import uuid

    import psycopg

    require_postgres()
    schema = f"cp_empty_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    try:
        target = tmp_path / "t.db"
        source: Any = f"{PG_URL}?options=-csearch_path%3D{schema}"
        assert_one_line_error(
            run("import-langgraph", source, "--url", str(target)), "no LangGraph checkpoint tables"
        )
        assert not target.exists()
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
