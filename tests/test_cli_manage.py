"""The commands that change threads: `fork`, `copy`, `delete`, `delete-runs`, `prune`, each
checked against what the runtimes then read (our graph, LangGraph through the drop-in)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_cli_support import (
    CHAT,
    TURNS,
    Db,
    assert_one_line_error,
    cfg,
    make_db,
    run,
    run_json,
)


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    with make_db(request.param, tmp_path, langgraph=False) as made:
        yield made


@pytest.fixture
def lg_db(tmp_path: Path) -> Iterator[Db]:
    with make_db("sqlite", tmp_path, ours=False) as made:
        yield made


def _ids(db: Db, thread_id: str) -> list[str]:
    with db.saver() as saver:
        return [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg(thread_id))]


def _state(db: Db, thread_id: str, checkpoint_id: str | None = None) -> Any:
    with db.saver() as saver:
        return CHAT.compile(checkpointer=saver).get_state(cfg(thread_id, checkpoint_id))


# --------------------------------------------------------------------------- fork
def test_fork_in_place_makes_a_new_head_the_next_run_continues_from(db: Db) -> None:
    history = run_json("history", "chat", *db.args)["checkpoints"]
    old_head = history[0]["checkpoint_id"]
    # A checkpoint whose message list is NOT stored: it must stay readable in the fork.
    target = next(
        e
        for e in history[2:]
        if run_json("show", "chat", e["checkpoint_id"], *db.args)["channels"]["messages"]["kind"]
        == "delta"
    )
    before = _state(db, "chat", target["checkpoint_id"])
    old_head_state = _state(db, "chat", old_head)

    result = run_json("fork", "chat", target["checkpoint_id"], *db.args)
    assert result == {
        "mode": "in_place",
        "thread_id": "chat",
        "checkpoint_ns": "",
        "checkpoint_id": result["checkpoint_id"],
        "source_thread_id": "chat",
        "source_checkpoint_id": target["checkpoint_id"],
        "checkpoints": 1,
        "pending_writes_copied": False,
    }
    head = _state(db, "chat")
    assert head.config["configurable"]["checkpoint_id"] == result["checkpoint_id"]
    assert head.values == before.values
    assert head.metadata["source"] == "fork"
    assert head.metadata["forked_from"] == target["checkpoint_id"]
    assert head.metadata["step"] == target["step"]
    shown = run_json("show", "chat", *db.args)
    assert shown["channels"]["messages"]["kind"] == "delta"  # readable without a reducer

    with db.saver() as saver:
        out = CHAT.compile(checkpointer=saver).invoke({"messages": ["again"]}, cfg("chat"))
    turn = before.values["turn"] + 1
    assert out["messages"] == [*before.values["messages"], "again", f"reply {turn}"]
    assert _state(db, "chat", old_head).values == old_head_state.values  # old branch intact

    tree = run_json("history", "chat", *db.args, "--all")
    assert len(tree["heads"]) == 2 and old_head in tree["heads"]
    human = run("history", "chat", *db.args, "--all")
    assert "branch from step" in human.stdout and "latest head" in human.stdout


def test_fork_to_a_new_thread_copies_the_branch(db: Db) -> None:
    history = run_json("history", "chat", *db.args)["checkpoints"]
    target = history[3]
    source_state = _state(db, "chat", target["checkpoint_id"])
    result = run_json("fork", "chat", target["checkpoint_id"], "--to", "branch", *db.args)
    assert result["mode"] == "new_thread" and result["thread_id"] == "branch"
    assert result["checkpoint_id"] == target["checkpoint_id"]
    assert result["checkpoints"] == len(history) - 3
    assert result["pending_writes_copied"] is False  # it had a child: its writes stay behind

    copied = _state(db, "branch")
    assert copied.config["configurable"]["checkpoint_id"] == target["checkpoint_id"]
    assert copied.values == source_state.values
    assert _ids(db, "branch") == [e["checkpoint_id"] for e in history[3:]]
    with db.saver() as saver:
        out = CHAT.compile(checkpointer=saver).invoke({"messages": ["more"]}, cfg("branch"))
    assert out["messages"][-2:] == ["more", f"reply {source_state.values['turn'] + 1}"]

    again = run("fork", "chat", target["checkpoint_id"], "--to", "branch", *db.args)
    assert_one_line_error(again, "thread 'branch' already exists")


def test_forks_of_langgraph_threads(lg_db: Db) -> None:
    from langgraph.types import Command

    from checkpointer.langgraph import LangGraphSaver
    from tests.lg_graphs import approval_graph
    from tests.test_cli_support import lg_chat_graph

    head = run_json("history", "lg-ask", *lg_db.args)["head"]
    result = run_json("fork", "lg-ask", head, "--to", "lg-ask-2", *lg_db.args)
    assert result["pending_writes_copied"] is True  # the head: its interrupt comes along
    with lg_db.saver() as saver:
        graph = approval_graph().compile(checkpointer=LangGraphSaver(saver))
        assert graph.get_state(cfg("lg-ask-2")).interrupts
        done = graph.invoke(Command(resume="yes"), cfg("lg-ask-2"))
        assert done["decision"] == "yes"
        assert graph.get_state(cfg("lg-ask")).next == ("ask",)  # the original still waits

    history = run_json("history", "lg-chat", *lg_db.args)["checkpoints"]
    target = next(e for e in history if e["step"] == 2)
    with lg_db.saver() as saver:
        final = lg_chat_graph(saver).get_state(cfg("lg-chat")).values
    forked = run_json("fork", "lg-chat", target["checkpoint_id"], *lg_db.args)
    assert forked["mode"] == "in_place"
    with lg_db.saver() as saver:
        graph = lg_chat_graph(saver)
        state = graph.get_state(cfg("lg-chat"))
        assert state.config["configurable"]["checkpoint_id"] == forked["checkpoint_id"]
        assert state.next == ("chat",)
        assert graph.invoke(None, cfg("lg-chat")) == final  # re-runs the rest identically


# --------------------------------------------------------------------------- copy / delete
def test_copy_then_delete(db: Db) -> None:
    copied = run_json("copy", "chat", "chat-2", *db.args)
    assert copied["checkpoints"] == len(_ids(db, "chat")) and copied["bytes"] > 0
    assert _state(db, "chat-2").values == _state(db, "chat").values
    assert_one_line_error(run("copy", "chat", "ask", *db.args), "already exists")
    assert_one_line_error(run("copy", "nope", "x", *db.args), "unknown thread 'nope'")

    dry = run_json("delete", "chat-2", *db.args, "--dry-run")
    assert dry["dry_run"] is True
    assert dry["threads"][0]["checkpoints_removed"] == copied["checkpoints"]
    assert dry["threads"][0]["checkpoints_kept"] == 0
    assert dry["bytes_reclaimed"] == copied["bytes"]
    assert len(_ids(db, "chat-2")) == copied["checkpoints"]  # nothing deleted

    done = run_json("delete", "chat-2", *db.args)
    assert done["dry_run"] is False and done["bytes_reclaimed"] == copied["bytes"]
    assert _ids(db, "chat-2") == []
    assert [t["thread_id"] for t in run_json("threads", *db.args)["threads"]] == ["ask", "chat"]
    human = run("delete", "ask", *db.args)
    assert "removed" in human.stdout and "reclaimed" in human.stdout


def test_delete_runs(db: Db) -> None:
    history = run_json("history", "chat", *db.args)["checkpoints"]
    last_run = history[0]["run_id"]
    run_checkpoints = {e["checkpoint_id"] for e in history if e["run_id"] == last_run}
    assert run_checkpoints

    dry = run_json("delete-runs", last_run, *db.args, "--dry-run")
    assert dry["run_ids"] == [last_run]
    assert {r["checkpoint_id"] for r in dry["threads"][0]["removed"]} == run_checkpoints
    assert len(_ids(db, "chat")) == len(history)

    done = run_json("delete-runs", last_run, *db.args)
    assert {r["checkpoint_id"] for r in done["threads"][0]["removed"]} == run_checkpoints
    remaining = [e for e in history if e["run_id"] != last_run]
    assert _ids(db, "chat") == [e["checkpoint_id"] for e in remaining]
    assert _state(db, "chat").values["turn"] == TURNS - 1
    assert_one_line_error(run("delete-runs", "no-such-run", *db.args), "no-such-run")


# --------------------------------------------------------------------------- prune
def test_prune_dry_run_shows_exactly_what_prune_removes(db: Db) -> None:
    head = _state(db, "chat")
    before_ids = _ids(db, "chat")
    dry = run_json("prune", "chat", *db.args, "--dry-run")
    assert dry["dry_run"] is True and dry["strategy"] == "keep_latest"
    assert _ids(db, "chat") == before_ids  # nothing changed
    thread = dry["threads"][0]
    assert thread["checkpoints_before"] == len(before_ids)
    assert 0 < thread["checkpoints_removed"] < len(before_ids)
    assert dry["bytes_reclaimed"] > 0

    human = run("prune", "chat", *db.args, "--dry-run")
    assert "dry run, nothing changed" in human.stdout and "would reclaim" in human.stdout

    done = run_json("prune", "chat", *db.args)
    assert done["threads"][0]["removed"] == thread["removed"]
    assert done["bytes_reclaimed"] == dry["bytes_reclaimed"]
    assert len(_ids(db, "chat")) == thread["checkpoints_kept"]
    after = _state(db, "chat")
    assert after.values == head.values  # the head still rebuilds its delta channels
    shown = run_json("show", "chat", *db.args, "--graph", "tests.test_cli_support:CHAT")
    assert shown["values"] == head.values

    gone = run_json("prune", "ask", *db.args, "--strategy", "delete")
    assert gone["threads"][0]["checkpoints_kept"] == 0
    assert_one_line_error(run("prune", "nope", *db.args), "unknown thread 'nope'")
