"""The read-only commands (`threads`, `history`, `show`, `diff`, `stats`) on databases made
by our runtime and by LangGraph through the drop-in, on SQLite and PostgreSQL; and the
errors every command reports as one line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from checkpointer.inspect import tool_serializer, with_langgraph_types
from tests.test_cli_support import (
    CHAT,
    TURNS,
    Db,
    assert_one_line_error,
    cfg,
    empty_db,
    lg_chat_graph,
    make_db,
    run,
    run_json,
)

GRAPH = "tests.test_cli_support:CHAT"
LG_SCHEMA = "tests.lg_graphs:ChatFew"
THREADS = ["ask", "chat", "lg-ask", "lg-chat"]


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Db]:
    """One database per backend with all four threads; the tests here only read it."""
    with make_db(request.param, tmp_path_factory.mktemp("cli")) as made:
        yield made


def _history(db: Db, thread_id: str) -> list[Any]:
    with db.saver() as saver:
        saver.serde = with_langgraph_types(tool_serializer())  # type: ignore[assignment]
        return list(saver.list(cfg(thread_id)))


# --------------------------------------------------------------------------- threads
def test_threads_lists_every_thread_with_counts_steps_and_bytes(db: Db) -> None:
    data = run_json("threads", *db.args, "--sort", "id")
    assert data["total"] == 4
    assert [t["thread_id"] for t in data["threads"]] == THREADS
    for row in data["threads"]:
        tuples = _history(db, row["thread_id"])
        head = tuples[0]
        assert row == {
            "thread_id": row["thread_id"],
            "namespaces": [""],
            "checkpoints": len(tuples),
            "last_checkpoint_id": head.config["configurable"]["checkpoint_id"],
            "last_step": head.metadata["step"],
            "last_updated": head.checkpoint["ts"],
            "bytes": row["bytes"],
        }
        assert row["bytes"] > 100

    by_count = run_json("threads", *db.args, "--sort", "count")["threads"]
    counts = [t["checkpoints"] for t in by_count]
    assert counts == sorted(counts, reverse=True)
    by_bytes = run_json("threads", *db.args, "--sort", "bytes", "--limit", "2")
    assert by_bytes["total"] == 4 and len(by_bytes["threads"]) == 2
    assert by_bytes["threads"][0]["bytes"] >= by_bytes["threads"][1]["bytes"]

    human = run("threads", *db.args)
    assert human.exit_code == 0, human.stderr
    for text in ("threads (4 of 4, by updated)", "lg-chat", "chat", "(root)", "checkpoints"):
        assert text in human.stdout


# --------------------------------------------------------------------------- history
def test_history_of_our_thread_matches_the_runtime(db: Db) -> None:
    with db.saver() as saver:
        graph = CHAT.compile(checkpointer=saver)
        snapshots = list(graph.get_state_history(cfg("chat")))
    data = run_json("history", "chat", *db.args)
    entries = data["checkpoints"]
    assert data["head"] == entries[0]["checkpoint_id"]
    assert [e["checkpoint_id"] for e in entries] == [
        s.config["configurable"]["checkpoint_id"] for s in snapshots
    ]
    for entry, snap in zip(entries, snapshots):
        assert entry["step"] == snap.metadata["step"]
        assert entry["source"] == snap.metadata["source"]
        assert entry["nodes"] == snap.metadata["nodes"]
        assert entry["nodes_from"] == "metadata"
        assert entry["run_id"] == snap.metadata["run_id"]
    head = entries[0]
    assert set(head) == {
        "checkpoint_id",
        "parent_checkpoint_id",
        "step",
        "source",
        "created_at",
        "nodes",
        "nodes_from",
        "updated_channels",
        "changed_channels",
        "written_channels",
        "pending_writes",
        "interrupts",
        "children",
        "run_id",
    }
    assert head["nodes"] == ["bot"] and head["children"] == [] and head["interrupts"] == []
    assert {"messages", "turn"} <= set(head["changed_channels"])
    assert {"messages", "turn"} <= set(head["written_channels"])
    assert head["parent_checkpoint_id"] == entries[1]["checkpoint_id"]
    assert entries[1]["source"] == "input" and entries[1]["nodes"] == ["__start__"]
    assert entries[1]["children"] == [head["checkpoint_id"]]

    limited = run_json("history", "chat", *db.args, "--limit", "3")["checkpoints"]
    assert [e["checkpoint_id"] for e in limited] == [e["checkpoint_id"] for e in entries[:3]]

    human = run("history", "chat", *db.args)
    assert human.exit_code == 0, human.stderr
    for text in ("branch to", head["checkpoint_id"], "bot", "__start__", "messages, turn"):
        assert text in human.stdout


def test_history_shows_pending_interrupts(db: Db) -> None:
    ours = run_json("history", "ask", *db.args)["checkpoints"][0]
    assert [i["value"] for i in ours["interrupts"]] == [{"question": "ship it?"}]
    assert ours["pending_writes"] >= 1
    theirs = run_json("history", "lg-ask", *db.args)["checkpoints"][0]
    assert len(theirs["interrupts"]) == 1
    assert theirs["interrupts"][0]["__class__"] == "langgraph.types.Interrupt"
    assert theirs["interrupts"][0]["value"]["question"] == "approve?"
    human = run("history", "lg-ask", *db.args)
    assert "⏸ 1 interrupt" in human.stdout


def test_history_of_a_langgraph_thread_reads_node_names_from_task_paths(db: Db) -> None:
    with db.saver() as saver:
        graph = lg_chat_graph(saver)
        snapshots = list(graph.get_state_history(cfg("lg-chat")))
    entries = run_json("history", "lg-chat", *db.args)["checkpoints"]
    assert [e["checkpoint_id"] for e in entries] == [
        s.config["configurable"]["checkpoint_id"] for s in snapshots
    ]
    by_step = {e["step"]: e for e in entries}
    assert by_step[-1]["source"] == "input" and by_step[-1]["nodes"] == []
    assert by_step[0]["nodes"] == ["__start__"] and by_step[0]["nodes_from"] == "task_paths"
    assert by_step[3]["nodes"] == ["chat"]
    assert "messages" in by_step[3]["changed_channels"]
    assert by_step[3]["updated_channels"] is not None
    human = run("history", "lg-chat", *db.args)
    assert "chat*" in human.stdout and "node names read from task paths" in human.stdout


# --------------------------------------------------------------------------- show
def test_show_rebuilds_delta_channels_with_the_graph(db: Db) -> None:
    with db.saver() as saver:
        graph = CHAT.compile(checkpointer=saver)
        snapshots = list(graph.get_state_history(cfg("chat")))
    kinds = set()
    for snap in snapshots:
        checkpoint_id = snap.config["configurable"]["checkpoint_id"]
        data = run_json("show", "chat", checkpoint_id, *db.args, "--graph", GRAPH)
        assert data["checkpoint_id"] == checkpoint_id
        assert data["values"] == snap.values
        kinds.add(data["channels"]["messages"]["kind"])
    assert kinds == {"snapshot", "rebuilt"}  # both stored snapshots and replayed ones


def test_show_without_a_graph_gives_snapshot_plus_writes_never_a_guess(db: Db) -> None:
    with db.saver() as saver:
        graph = CHAT.compile(checkpointer=saver)
        snapshots = list(graph.get_state_history(cfg("chat")))
    delta_ids = []
    for snap in snapshots:
        checkpoint_id = snap.config["configurable"]["checkpoint_id"]
        data = run_json("show", "chat", checkpoint_id, *db.args)
        messages = data["channels"].get("messages")
        if messages is None:
            continue
        if messages["kind"] == "snapshot":
            assert messages["value"] == snap.values["messages"]
            continue
        assert messages["kind"] == "delta"
        assert "value" not in messages and "messages" not in data["values"]
        assert data["values"]["turn"] == snap.values["turn"]
        seed = messages["seed"]["value"] if messages["seed"] else []
        replayed = seed + [m for w in messages["writes"] for m in w["value"]]
        assert replayed == snap.values["messages"]
        assert all(w["channel"] == "messages" for w in messages["writes"])
        delta_ids.append(checkpoint_id)
    assert delta_ids

    human = run("show", "chat", delta_ids[0], *db.args)
    assert human.exit_code == 0, human.stderr
    for text in ("NOT rebuilt", "snapshot at step", "write(s) since", "--graph", "metadata"):
        assert text in human.stdout


def test_show_exact_structure_with_pending_interrupt(db: Db) -> None:
    data = run_json("show", "ask", *db.args, "--graph", "tests.test_cli_support:Chat")
    assert data["values"] == {"messages": ["deploy?", "reply 1"], "turn": 1}
    assert data["channels"]["turn"] == {
        "version": data["channels"]["turn"]["version"],
        "kind": "value",
        "value": 1,
    }
    interrupt_writes = [w for w in data["pending_writes"] if w["channel"] == "__interrupt__"]
    assert len(interrupt_writes) == 1
    write = interrupt_writes[0]
    assert write["idx"] == -3 and write["task_path"] == "ask"
    assert write["checkpoint_id"] == data["checkpoint_id"]
    assert [i["value"] for i in data["interrupts"]] == [{"question": "ship it?"}]
    assert data["metadata"]["source"] == "loop"
    assert set(data) == {
        "thread_id",
        "checkpoint_ns",
        "checkpoint_id",
        "parent_checkpoint_id",
        "created_at",
        "step",
        "source",
        "values",
        "channels",
        "pending_writes",
        "interrupts",
        "metadata",
    }
    human = run("show", "ask", *db.args, "--channel", "turn")
    assert "interrupts pending" in human.stdout and "pending writes (" in human.stdout


def test_show_a_langgraph_thread(db: Db) -> None:
    with db.saver() as saver:
        graph = lg_chat_graph(saver)
        snapshots = list(graph.get_state_history(cfg("lg-chat")))
    for snap in snapshots[:4]:
        checkpoint_id = snap.config["configurable"]["checkpoint_id"]
        data = run_json("show", "lg-chat", checkpoint_id, *db.args, "--graph", LG_SCHEMA)
        messages = data["values"].get("messages", [])
        assert [m["content"] for m in messages] == [
            m.content for m in snap.values.get("messages", [])
        ]
        assert all(m["__class__"].startswith("langchain_core.messages.") for m in messages)
        assert data["values"].get("turn") == snap.values.get("turn")
    paused = run_json("show", "lg-ask", *db.args)
    assert paused["interrupts"][0]["value"]["question"] == "approve?"
    assert any(w["channel"] == "__interrupt__" and w["idx"] == -3 for w in paused["pending_writes"])


# --------------------------------------------------------------------------- diff
def test_diff_between_an_ancestor_and_the_head(db: Db) -> None:
    entries = run_json("history", "chat", *db.args)["checkpoints"]
    a, b = entries[-2], entries[0]  # the first loop checkpoint, the head
    data = run_json("diff", "chat", a["checkpoint_id"], b["checkpoint_id"], *db.args)
    assert data["relation"] == "ancestor" and data["common_ancestor"] == a["checkpoint_id"]
    assert (data["step_a"], data["step_b"]) == (a["step"], b["step"])
    by_channel = {c["channel"]: c for c in data["channels"]}
    turn = by_channel["turn"]
    assert turn == {
        "channel": "turn",
        "status": "changed",
        "version_a": turn["version_a"],
        "kind_a": "value",
        "a": 1,
        "version_b": turn["version_b"],
        "kind_b": "value",
        "b": TURNS,
        "writes_to_a": [],
        "writes_to_b": [],
    }
    messages = by_channel["messages"]
    written = [m for w in messages["writes_to_b"] for m in w["value"]]
    expected = [m for t in range(1, TURNS) for m in (f"hi {t}", f"reply {t + 1}")]
    assert written == expected
    assert messages["writes_to_a"] == []

    with_graph = run_json(
        "diff", "chat", a["checkpoint_id"], b["checkpoint_id"], *db.args, "--graph", GRAPH
    )
    rebuilt = {c["channel"]: c for c in with_graph["channels"]}["messages"]
    assert rebuilt["a"] == ["hi 0", "reply 1"]
    assert rebuilt["b"] == ["hi 0", "reply 1", *expected]

    backwards = run_json("diff", "chat", b["checkpoint_id"], a["checkpoint_id"], *db.args)
    assert backwards["relation"] == "descendant"
    human = run("diff", "chat", a["checkpoint_id"], b["checkpoint_id"], *db.args, "--graph", GRAPH)
    assert human.exit_code == 0, human.stderr
    for text in ("A is an ancestor of B", "messages", "turn", "write(s) on the way to B"):
        assert text in human.stdout


# --------------------------------------------------------------------------- stats
def test_stats_bytes_per_table_thread_channel_and_delta_share(db: Db) -> None:
    data = run_json("stats", *db.args)
    tables = {t["table"]: t for t in data["tables"]}
    total_checkpoints = sum(len(_history(db, t)) for t in THREADS)
    assert tables["checkpoints"]["rows"] == total_checkpoints
    assert all(t["bytes"] > 0 and t["disk_bytes"] and t["disk_bytes"] > 0 for t in tables.values())
    assert data["total_bytes"] == sum(t["bytes"] for t in data["tables"])
    assert data["threads"]["count"] == 4
    assert sum(t["bytes"] for t in data["threads"]["largest"]) == data["total_bytes"]
    channels = {c["channel"]: c for c in data["channels"]}
    assert channels["messages"]["kind"] == "delta" and channels["messages"]["snapshots"] > 0
    assert channels["turn"]["kind"] == "value" and channels["turn"]["snapshots"] == 0
    assert data["delta"]["channels"] == ["messages"]
    assert 0 < data["delta"]["snapshot_share"] < 1

    one = run_json("stats", "chat", *db.args)
    assert one["thread_id"] == "chat" and one["threads"]["count"] == 1
    assert {t["table"]: t["rows"] for t in one["tables"]}["checkpoints"] == len(
        _history(db, "chat")
    )
    human = run("stats", *db.args)
    for text in ("tables", "largest threads", "channels", "snapshot share"):
        assert text in human.stdout


def test_user_classes_load_only_when_allowed(tmp_path: Path) -> None:
    from tests.test_cli_support import Ticket

    with empty_db("sqlite", tmp_path) as db, db.saver() as saver:
        CHAT.compile(checkpointer=saver).invoke(
            {"messages": [Ticket("disk full", 1)], "turn": 0}, cfg("tickets")
        )
    root = run_json("history", "tickets", *db.args)["checkpoints"][-1]["checkpoint_id"]
    strict = run_json("show", "tickets", root, *db.args)
    assert strict["channels"]["messages"]["kind"] == "snapshot"
    value = strict["values"]["messages"]
    assert "__unloadable__" in value and "Ticket" in value["__unloadable__"]
    assert "unloadable value" in run("show", "tickets", root, *db.args).stdout
    head = run_json("show", "tickets", *db.args)["channels"]["messages"]
    assert head["kind"] == "delta" and "__unloadable__" in head["seed"]["value"]
    allowed = run_json(
        "show", "tickets", root, *db.args, "--allow-module", "tests.test_cli_support"
    )
    assert allowed["values"]["messages"] == [
        {"__class__": "tests.test_cli_support.Ticket", "title": "disk full", "priority": 1}
    ]
    # --graph allows the classes of the graph's module, and rebuilds with its reducers.
    rebuilt = run_json("show", "tickets", *db.args, "--graph", GRAPH)
    assert rebuilt["values"]["messages"][0]["title"] == "disk full"


# --------------------------------------------------------------------------- errors
UNREACHABLE = "postgresql://nope@127.0.0.1:1/x"


@pytest.fixture(scope="module")
def sqlite_db(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Db]:
    with make_db("sqlite", tmp_path_factory.mktemp("cli-errors"), langgraph=False) as made:
        yield made


def test_unknown_thread_and_checkpoint_are_one_line(sqlite_db: Db) -> None:
    for command in (["history", "nope"], ["show", "nope"], ["stats", "nope"], ["delete", "nope"]):
        assert_one_line_error(run(*command, *sqlite_db.args), "unknown thread 'nope'")
    assert_one_line_error(
        run("show", "chat", "0000dead", *sqlite_db.args), "unknown checkpoint '0000dead'"
    )
    assert_one_line_error(run("diff", "chat", "x", "y", *sqlite_db.args), "unknown checkpoint")


def test_bad_urls_and_missing_databases_are_one_line(tmp_path: Path) -> None:
    assert_one_line_error(run("threads", "--url", "mysql://x/y"), "unsupported database URL")
    missing = str(tmp_path / "missing.db")
    assert_one_line_error(run("threads", "--url", missing), "no such SQLite database")
    assert not os.path.exists(missing)  # a typo never leaves an empty database behind
    garbage = tmp_path / "garbage.db"
    garbage.write_text("this is not a database\n" * 100)
    assert_one_line_error(run("history", "t", "--url", str(garbage)), "not a database")
    env = {k: v for k, v in os.environ.items() if k != "CHECKPOINTER_URL"}
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("CHECKPOINTER_URL", raising=False)
        assert_one_line_error(run("threads"), "no database given")
    assert env is not None


def test_unreachable_postgres_is_one_line() -> None:
    for command in (["threads"], ["history", "t"], ["migrate"], ["export", "--all"]):
        assert_one_line_error(
            run(*command, "--url", UNREACHABLE), "cannot connect to PostgreSQL", "127.0.0.1"
        )


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_unmigrated_database_is_one_line(kind: str, tmp_path: Path) -> None:
    with empty_db(kind, tmp_path, migrated=False) as db:
        line = assert_one_line_error(run("threads", *db.args), "has no checkpointer schema")
        assert "checkpointer migrate" in line
        migrated = run("migrate", *db.args)
        assert migrated.exit_code == 0, migrated.stderr
        assert "schema migrated" in migrated.stdout
        assert run_json("threads", *db.args) == {"total": 0, "threads": []}


def test_schema_at_another_revision_is_one_line(tmp_path: Path) -> None:
    import sqlite3

    from checkpointer.savers.sql.migration import render_upgrade_sql, split_statements
    from checkpointer.savers.sql.schema import KNOWN_REVISIONS, SCHEMA_REVISION, VERSION_TABLE

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path)
    for statement in split_statements(render_upgrade_sql("sqlite", None, None, KNOWN_REVISIONS[0])):
        conn.execute(statement)
    conn.commit()
    if KNOWN_REVISIONS[0] != SCHEMA_REVISION:
        assert_one_line_error(run("threads", "--url", str(path)), "older than this code")
    conn.execute(f"UPDATE {VERSION_TABLE} SET version_num = '9999'")
    conn.commit()
    conn.close()
    assert_one_line_error(run("history", "t", "--url", str(path)), "newer than this code")


def test_env_var_supplies_the_url(sqlite_db: Db, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CHECKPOINTER_URL", f"sqlite:///{sqlite_db.url}")
    result = run("threads", "--json")
    assert result.exit_code == 0, result.stderr
    assert [t["thread_id"] for t in json.loads(result.stdout)["threads"]] != []


def test_console_script_in_a_real_process(sqlite_db: Db) -> None:
    script = Path(sys.executable).parent / "checkpointer"
    assert script.exists()
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("CHECKPOINTER_URL", None)
    ok = subprocess.run(
        [str(script), "threads", "--url", sqlite_db.url, "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert ok.returncode == 0, ok.stderr
    assert {t["thread_id"] for t in json.loads(ok.stdout)["threads"]} == {"ask", "chat"}
    bad = subprocess.run(
        [str(script), "migrate", "--url", UNREACHABLE],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert bad.returncode != 0
    assert "Traceback" not in bad.stderr
    assert bad.stderr.strip().count("\n") == 0 and bad.stderr.startswith("error: ")
