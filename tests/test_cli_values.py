"""What `show`, `diff` and `stats` read: compressed delta snapshots (issue 18.1), equal
values in a diff (18.5), and encrypted databases without and with the operator's keys
(18.8)."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest

from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.serde import MsgpackSerializer
from tests.test_cli_support import CHAT, cfg, run, run_json

GRAPH = "tests.test_cli_support:CHAT"


def _chat(saver: Any, turns: int, words: int = 1) -> Any:
    graph = CHAT.compile(checkpointer=saver)
    for turn in range(turns):
        graph.invoke({"messages": [f"hi {turn} " + "lorem ipsum " * words]}, cfg("chat"))
    return graph


def test_compressed_snapshots_show_and_count(tmp_path: Path) -> None:
    path = tmp_path / "big.db"
    with SqliteSaver.from_conn_string(path) as saver:  # the default: compress from 1 KiB
        graph = _chat(saver, 7, words=60)
        expected = graph.get_state(cfg("chat")).values
        history = list(graph.get_state_history(cfg("chat")))
    args = ["--url", str(path)]
    stored = run_json("stats", *args)
    messages = next(c for c in stored["channels"] if c["channel"] == "messages")
    assert messages["kind"] == "delta" and messages["snapshots"] >= 2
    assert stored["delta"]["snapshot_bytes"] > 0
    kinds = set()
    for snap in history:
        cid = snap.config["configurable"]["checkpoint_id"]
        shown = run_json("show", "chat", cid, *args)
        kinds.add(shown["channels"].get("messages", {}).get("kind"))
        if shown["channels"].get("messages", {}).get("kind") == "snapshot":
            assert shown["values"]["messages"] == snap.values["messages"]
        rebuilt = run_json("show", "chat", cid, *args, "--graph", GRAPH)
        assert rebuilt["values"].get("messages", []) == snap.values.get("messages", [])
    assert "snapshot" in kinds and "delta" in kinds
    head = run_json("show", "chat", *args, "--graph", GRAPH)
    assert head["values"]["messages"] == expected["messages"]


def test_diff_does_not_call_an_equal_value_changed(tmp_path: Path) -> None:
    from checkpointer.types import empty_checkpoint, make_config

    path = tmp_path / "eq.db"
    with SqliteSaver.from_conn_string(path) as saver:
        first = empty_checkpoint()
        first["channel_versions"] = {"needs_approval": "1", "n": "1"}
        first["channel_values"] = {"needs_approval": False, "n": 1}
        a = saver.put(make_config("t"), first, {"step": 0}, {"needs_approval": "1", "n": "1"})
        second = empty_checkpoint()
        second["channel_versions"] = {"needs_approval": "2", "n": "2"}
        second["channel_values"] = {"needs_approval": False, "n": 2}
        b = saver.put(a, second, {"step": 1}, {"needs_approval": "2", "n": "2"})
    data = run_json(
        "diff",
        "t",
        a["configurable"]["checkpoint_id"],
        b["configurable"]["checkpoint_id"],
        "--url",
        str(path),
    )
    assert [c["channel"] for c in data["channels"]] == ["n"]
    assert "needs_approval" in data["unchanged"]


@pytest.fixture()
def sealed(tmp_path: Path) -> tuple[list[str], bytes, Any]:
    pytest.importorskip("cryptography")
    from checkpointer.serde.encryption import EncryptedSerializer

    key = os.urandom(32)
    serde = EncryptedSerializer(MsgpackSerializer(), keys={"k1": key}, active_key_id="k1")
    path = tmp_path / "sealed.db"
    with SqliteSaver.from_conn_string(path, serde=serde) as saver:
        graph = _chat(saver, 5)
        expected = graph.get_state(cfg("chat")).values
    return ["--url", str(path)], key, expected


def test_encrypted_values_say_so_without_a_key(sealed: tuple[list[str], bytes, Any]) -> None:
    args, _key, _expected = sealed
    shown = run_json("show", "chat", *args)
    turn = shown["values"]["turn"]
    assert turn["__unloadable__"] == "encrypted (no key given)"
    kinds = []
    for entry in run_json("history", "chat", *args)["checkpoints"]:
        channels = run_json("show", "chat", entry["checkpoint_id"], *args)["channels"]
        if "messages" in channels:
            kinds.append(channels["messages"]["kind"])
    # Never "empty": a sealed stored value, or a delta channel whose seed is sealed.
    assert "empty" not in kinds and "delta" in kinds, kinds
    text = run("show", "chat", *args, "--no-pager")
    assert "encrypted (no key given)" in text.stdout and "unknown serialization" not in text.stdout


def test_encrypted_values_read_with_the_operators_keys(
    sealed: tuple[list[str], bytes, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args, key, expected = sealed
    encoded = base64.b64encode(key).decode()
    monkeypatch.setenv("CHECKPOINTER_KEYS", f"k1:{encoded}")
    shown = run_json("show", "chat", *args, "--graph", GRAPH)
    assert shown["values"] == {"messages": expected["messages"], "turn": expected["turn"]}
    monkeypatch.delenv("CHECKPOINTER_KEYS")
    key_file = tmp_path / "keys"
    key_file.write_text(f"# the app's keys\nk1={encoded}\n")
    from_file = run_json("show", "chat", *args, "--graph", GRAPH, "--key-file", str(key_file))
    assert from_file["values"] == shown["values"]
    history = run_json("history", "chat", *args, "--key-file", str(key_file))
    assert history["checkpoints"][0]["step"] == shown["step"]
