"""Every read command on databases written by LangGraph's own savers (SQLite and
PostgreSQL), checked against `graph.get_state_history` on the same thread, and the
database unchanged afterwards (file bytes and mtime; Postgres tables and row counts).
Write commands refuse such a database and point at `import-langgraph`."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite")

from langchain_core.messages import HumanMessage

from checkpointer.cli.render import jsonable
from tests.conftest import PG_URL, require_postgres
from tests.lg_graphs import Approval, ChatFew, Inner, approval_graph, chat_graph, subgraph_graph
from tests.test_cli_support import assert_one_line_error, run, run_json

SCHEMAS = {
    "fork": "tests.lg_graphs:ChatFew",
    "approval": "tests.lg_graphs:Approval",
    "sub": "tests.lg_graphs:Inner",
}
assert ChatFew and Approval and Inner  # the --graph targets above


@dataclass
class LgDb:
    kind: str
    args: list[str]
    graphs: dict[str, Any]
    fingerprint: Any


def _write(saver: Any) -> dict[str, Any]:
    """A chat with a DeltaChannel, an update and a fork; a paused approval; a subgraph."""
    chat = chat_graph(ChatFew, 6).compile(checkpointer=saver)
    config = {"configurable": {"thread_id": "fork"}}
    chat.invoke({"messages": [HumanMessage(content="hi", id="h")], "turn": 0}, config)
    chat.update_state(config, {"messages": [HumanMessage(content="edit", id="e")]})
    history = list(chat.get_state_history(config))
    forked = chat.update_state(history[4].config, {"mood": "forked"})
    chat.invoke(None, forked)
    approval = approval_graph().compile(checkpointer=saver)
    approval.invoke(
        {"messages": [HumanMessage(content="write", id="w")]},
        {"configurable": {"thread_id": "approval"}},
    )
    sub = subgraph_graph().compile(checkpointer=saver)
    sub.invoke({"messages": ["start"]}, {"configurable": {"thread_id": "sub"}})
    return {"fork": chat, "approval": approval, "sub": sub}


def _file_fingerprint(path: str) -> Any:
    return {
        name: (hashlib.sha256(Path(name).read_bytes()).hexdigest(), os.stat(name).st_mtime_ns)
        for name in (path, f"{path}-wal")
        if os.path.exists(name)
    }


def _pg_fingerprint(schema: str) -> Any:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                "ORDER BY table_name",
                (schema,),
            )
        ]
        return {
            t: conn.execute(
                f"SELECT COUNT(*), md5(string_agg(x::text, '' ORDER BY x::text)) "
                f'FROM "{schema}"."{t}" x'
            ).fetchone()
            for t in tables
        }


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def lg(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LgDb]:
    if request.param == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        path = str(tmp_path_factory.mktemp("lgdb") / "langgraph.db")
        with SqliteSaver.from_conn_string(path) as saver:
            graphs = _write(saver)
            yield LgDb("sqlite", ["--url", path], graphs, lambda: _file_fingerprint(path))
        return
    import psycopg
    from langgraph.checkpoint.postgres import PostgresSaver

    require_postgres()
    schema = f"cp_lgdb_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    url = f"{PG_URL}?options=-csearch_path%3D{schema}"
    try:
        with PostgresSaver.from_conn_string(url) as saver:
            saver.setup()
            graphs = _write(saver)
            yield LgDb(
                "postgres",
                ["--url", PG_URL, "--schema", schema],
                graphs,
                lambda: _pg_fingerprint(schema),
            )
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')


def _cfg(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def test_every_read_command_matches_get_state_history(lg: LgDb, tmp_path: Path) -> None:
    before = lg.fingerprint()
    listed = run_json("threads", *lg.args, "--sort", "id")
    assert [t["thread_id"] for t in listed["threads"]] == ["approval", "fork", "sub"]
    for thread_id, graph in lg.graphs.items():
        snapshots = list(graph.get_state_history(_cfg(thread_id)))
        row = next(t for t in listed["threads"] if t["thread_id"] == thread_id)
        assert row["last_checkpoint_id"] == snapshots[0].config["configurable"]["checkpoint_id"]
        assert row["last_step"] == snapshots[0].metadata["step"]
        data = run_json("history", thread_id, *lg.args, "--all")
        by_id = {e["checkpoint_id"]: e for e in data["checkpoints"]}
        assert sorted(by_id) == sorted(s.config["configurable"]["checkpoint_id"] for s in snapshots)
        for snap in snapshots:
            entry = by_id[snap.config["configurable"]["checkpoint_id"]]
            assert entry["step"] == snap.metadata["step"]
            assert entry["source"] == snap.metadata["source"]
            parent = (
                snap.parent_config["configurable"]["checkpoint_id"] if snap.parent_config else None
            )
            assert entry["parent_checkpoint_id"] == parent
            shown = run_json(
                "show", thread_id, entry["checkpoint_id"], *lg.args, "--graph", SCHEMAS[thread_id]
            )
            expected = jsonable(dict(snap.values))
            assert shown["values"] == expected, (thread_id, snap.metadata)
            assert len(shown["interrupts"]) == len(snap.interrupts)
        head, parent = snapshots[0], snapshots[1]
        diff = run_json(
            "diff",
            thread_id,
            parent.config["configurable"]["checkpoint_id"],
            head.config["configurable"]["checkpoint_id"],
            *lg.args,
            "--graph",
            SCHEMAS[thread_id],
        )
        for channel in diff["channels"]:
            if "a" in channel and "b" in channel:
                assert channel["a"] != channel["b"], channel  # equal values are not changes
    paused = run_json("show", "approval", *lg.args)
    assert paused["interrupts"] and paused["interrupts"][0]["value"]["question"] == "approve?"
    stats = run_json("stats", *lg.args)
    assert stats["threads"]["count"] == 3 and stats["total_bytes"] > 0
    out = tmp_path / f"{lg.kind}.jsonl"
    result = run("export", "--all", *lg.args, "-o", str(out))
    assert result.exit_code == 0, result.stderr
    target = tmp_path / f"ours-{lg.kind}.db"
    imported = run_json("import", str(out), "--url", str(target))
    assert imported["threads"] == 3
    assert (
        run_json("history", "fork", "--url", str(target), "--all")["checkpoints"]
        == run_json("history", "fork", *lg.args, "--all")["checkpoints"]
    )
    assert lg.fingerprint() == before


def test_write_commands_refuse_a_langgraph_database(lg: LgDb) -> None:
    before = lg.fingerprint()
    for args in (
        ["delete", "fork"],
        ["copy", "fork", "fork2"],
        ["prune", "fork"],
        ["delete-runs", "r1"],
        ["fork", "fork", "xyz"],
        ["migrate"],
    ):
        assert_one_line_error(run(*args, *lg.args), "import-langgraph")
    assert lg.fingerprint() == before


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_older_schema_levels_read_too(kind: str, tmp_path: Path) -> None:
    """Databases from before LangGraph's savers stored `task_path` (older SQLite files,
    Postgres below migration 9): the reads still work, node names just cannot be told."""
    if kind == "sqlite":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver

        path = str(tmp_path / "old.db")
        with SqliteSaver.from_conn_string(path) as saver:
            graph = chat_graph(ChatFew, 4).compile(checkpointer=saver)
            graph.invoke({"messages": [HumanMessage(content="hi", id="h")], "turn": 0}, _cfg("t"))
            snapshots = list(graph.get_state_history(_cfg("t")))
        with sqlite3.connect(path) as conn:
            conn.execute("ALTER TABLE writes DROP COLUMN task_path")
        args = ["--url", path]
        fingerprint: Any = lambda: _file_fingerprint(path)  # noqa: E731
        cleanup: Any = None
    else:
        import psycopg
        from langgraph.checkpoint.postgres import PostgresSaver

        require_postgres()
        schema = f"cp_lgold_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{schema}"')
        url = f"{PG_URL}?options=-csearch_path%3D{schema}"
        with PostgresSaver.from_conn_string(url) as saver:
            saver.setup()
            graph = chat_graph(ChatFew, 4).compile(checkpointer=saver)
            graph.invoke({"messages": [HumanMessage(content="hi", id="h")], "turn": 0}, _cfg("t"))
            snapshots = list(graph.get_state_history(_cfg("t")))
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'ALTER TABLE "{schema}".checkpoint_writes DROP COLUMN task_path')
            conn.execute(f'DELETE FROM "{schema}".checkpoint_migrations WHERE v >= 9')
        args = ["--url", PG_URL, "--schema", schema]
        fingerprint = lambda: _pg_fingerprint(schema)  # noqa: E731

        def cleanup() -> None:
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')

    try:
        before = fingerprint()
        entries = run_json("history", "t", *args)["checkpoints"]
        assert [e["checkpoint_id"] for e in entries] == [
            s.config["configurable"]["checkpoint_id"] for s in snapshots
        ]
        for snap in snapshots:
            cid = snap.config["configurable"]["checkpoint_id"]
            shown = run_json("show", "t", cid, *args, "--graph", SCHEMAS["fork"])
            assert shown["values"] == jsonable(dict(snap.values))
        assert run_json("stats", *args)["threads"]["count"] == 1
        assert fingerprint() == before
    finally:
        if cleanup is not None:
            cleanup()
