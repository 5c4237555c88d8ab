"""Portable JSONL export and import: a SQLite database moved to an empty PostgreSQL schema
reads back identically (every checkpoint, write and delta history); damaged files are
refused as a whole; `import-langgraph` moves threads from LangGraph's reference savers."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from checkpointer.export import (
    FORMAT,
    PLAIN_VERSION,
    VERSION,
    ExportFormatError,
    import_threads,
)
from checkpointer.inspect import Database, tool_serializer, with_langgraph_types
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.serde import MsgpackSerializer
from checkpointer.types import empty_checkpoint, make_config
from tests.test_cli_support import (
    Db,
    assert_one_line_error,
    cfg,
    empty_db,
    make_db,
    run,
    run_json,
)

THREADS = ["ask", "branch", "chat", "lg-ask", "lg-chat"]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Db]:
    """A SQLite database with our threads, LangGraph's, and a branch made by a fork."""
    with make_db("sqlite", tmp_path_factory.mktemp("export")) as made:
        history = run_json("history", "chat", *made.args)["checkpoints"]
        run_json("fork", "chat", history[2]["checkpoint_id"], "--to", "branch", *made.args)
        run_json("fork", "chat", history[4]["checkpoint_id"], *made.args)  # a second branch
        yield made


def _snapshot(db: Db) -> dict[str, Any]:
    """Everything a saver returns about every thread: tuples newest first (values,
    metadata, parents, pending writes in order) and each checkpoint's delta history."""
    serde = with_langgraph_types(tool_serializer())
    out: dict[str, Any] = {}
    with db.saver() as saver:
        saver.serde = serde  # type: ignore[assignment]
        for thread_id in THREADS:
            tuples = list(saver.list(cfg(thread_id)))
            out[thread_id] = [
                (
                    t.config,
                    t.checkpoint,
                    t.metadata,
                    t.parent_config,
                    t.pending_writes,
                    dict(saver.get_delta_channel_history(config=t.config, channels=["messages"])),
                    saver.get_tuple(t.config),
                )
                for t in tuples
            ]
    return out


def _export(db: Db, *extra: str) -> str:
    result = run("export", "--all", *db.args, *extra)
    assert result.exit_code == 0, result.stderr
    return result.stdout


def test_export_then_import_into_an_empty_postgres_schema_reproduces_everything(
    source: Db, tmp_path: Path
) -> None:
    text = _export(source)
    lines = text.splitlines()
    header = json.loads(lines[0])
    # No value of these threads is a tail row: the file stays readable by version 2.
    assert header["format"] == FORMAT and header["version"] == PLAIN_VERSION
    assert header["threads"] == THREADS and header["source"] == "sqlite"
    records = [json.loads(line) for line in lines[1:]]
    assert records[-1]["kind"] == "end"
    kinds = {r["kind"] for r in records}
    assert kinds == {"checkpoint", "blob", "write", "end"}
    write = next(r for r in records if r["kind"] == "write" and r["channel"] == "__interrupt__")
    assert write["idx"] == -3 and write["task_path"] and write["type"] == "msgpack"
    assert set(write) == {
        "kind",
        "thread_id",
        "checkpoint_ns",
        "checkpoint_id",
        "task_id",
        "task_path",
        "idx",
        "channel",
        "type",
        "data",
    }

    path = tmp_path / "backup.jsonl"
    path.write_text(text)
    with empty_db("postgres", tmp_path, migrated=False) as target:
        imported = run_json("import", str(path), *target.args)
        assert imported == {
            "threads": len(THREADS),
            "checkpoints": records[-1]["checkpoints"],
            "blobs": records[-1]["blobs"],
            "writes": records[-1]["writes"],
        }
        assert _snapshot(target) == _snapshot(source)
        # And back: the PostgreSQL copy exports to the very same records (jsonb may
        # reorder an object's keys, so compare them parsed).
        again = _export(target).splitlines()
        assert [json.loads(line) for line in again[1:]] == records
        assert_one_line_error(run("import", str(path), *target.args), "already exist", "--replace")
        replaced = run_json("import", str(path), *target.args, "--replace")
        assert replaced["checkpoints"] == imported["checkpoints"]
        assert _snapshot(target) == _snapshot(source)


def test_export_selected_threads_to_a_file(source: Db, tmp_path: Path) -> None:
    out = tmp_path / "chat.jsonl"
    result = run("export", "chat", "lg-chat", *source.args, "-o", str(out))
    assert result.exit_code == 0, result.stderr
    assert "exported 2 thread(s)" in result.stderr and result.stdout == ""
    header = json.loads(out.read_text().splitlines()[0])
    assert header["threads"] == ["chat", "lg-chat"]
    assert_one_line_error(run("export", "nope", *source.args), "unknown thread 'nope'")
    assert_one_line_error(run("export", *source.args), "--all")
    with empty_db("sqlite", tmp_path) as target:
        result = run("import", str(out), *target.args)
        assert result.exit_code == 0, result.stderr
        assert "imported 2 thread(s)" in result.stdout
        threads = run_json("threads", *target.args, "--sort", "id")["threads"]
        assert [t["thread_id"] for t in threads] == ["chat", "lg-chat"]


def test_damaged_files_are_refused_whole(source: Db, tmp_path: Path) -> None:
    lines = _export(source).splitlines(keepends=True)
    with empty_db("sqlite", tmp_path) as target, Database.open(target.url) as db:
        truncated = lines[: len(lines) // 2]
        with pytest.raises(ExportFormatError, match="truncated"):
            import_threads(db, truncated)
        assert run_json("threads", *target.args)["total"] == 0  # rolled back: nothing landed
        with pytest.raises(ExportFormatError, match="not a checkpointer export"):
            import_threads(db, ['{"hello": 1}\n'])
        newer = json.dumps({**json.loads(lines[0]), "version": VERSION + 1}) + "\n"
        with pytest.raises(ExportFormatError, match="not supported"):
            import_threads(db, [newer, *lines[1:]])
        corrupt = [*lines[:3], '{"kind": "blob", "thread_id": "chat"}\n', *lines[3:]]
        with pytest.raises(ExportFormatError, match="line 4"):
            import_threads(db, corrupt)
        # Records of a shape no saver could read back (hand-edited files) are refused too.
        at = next(i for i, line in enumerate(lines) if '"kind":"checkpoint"' in line)
        for field, value in (("checkpoint", {"channel_versions": [1]}), ("metadata", [1])):
            damaged = json.loads(lines[at])
            if field == "metadata":
                damaged["metadata"] = {"counters_since_delta_snapshot": value}
            else:
                damaged["checkpoint"] = {**damaged["checkpoint"], **value}
            edited = [*lines[:at], json.dumps(damaged) + "\n", *lines[at + 1 :]]
            with pytest.raises(ExportFormatError, match=f"line {at + 1}: {field}"):
                import_threads(db, edited)
        assert run_json("threads", *target.args)["total"] == 0

        bad = tmp_path / "bad.jsonl"
        bad.write_text("".join(truncated))
        assert_one_line_error(run("import", str(bad), *target.args), "truncated")
        assert_one_line_error(run("import", str(tmp_path / "none.jsonl"), *target.args), "no such")


def test_import_langgraph_reference_database(tmp_path: Path) -> None:
    pytest.importorskip("langgraph.checkpoint.sqlite")
    from langchain_core.messages import HumanMessage
    from langgraph.checkpoint.sqlite import SqliteSaver as ReferenceSqliteSaver

    from checkpointer.langgraph import LangGraphSaver
    from tests.lg_graphs import ChatFew, chat_graph

    reference = tmp_path / "reference.db"
    builder = chat_graph(ChatFew, 5)
    with ReferenceSqliteSaver.from_conn_string(str(reference)) as saver:
        builder.compile(checkpointer=saver).invoke(
            {"messages": [HumanMessage(content="hi", id="h")], "turn": 0}, cfg("ref")
        )
        expected = builder.compile(checkpointer=saver).get_state(cfg("ref")).values
    target = tmp_path / "ours.db"
    result = run_json("import-langgraph", str(reference), "--url", str(target))
    assert result["threads"] == 1 and result["thread_ids"] == ["ref"]
    assert result["checkpoints"] > 3 and result["writes"] > result["checkpoints"]
    db = Db("sqlite", str(target))
    with db.saver() as ours:
        graph = builder.compile(checkpointer=LangGraphSaver(ours))
        assert graph.get_state(cfg("ref")).values == expected
    assert run_json("history", "ref", *db.args)["checkpoints"][0]["nodes"] == ["chat"]
    assert_one_line_error(
        run("import-langgraph", str(tmp_path / "missing.db"), "--url", str(target)), "no such"
    )


def test_import_reads_standard_input(source: Db, tmp_path: Path) -> None:
    text = _export(source)
    with empty_db("sqlite", tmp_path) as target:
        from click.testing import CliRunner

        from checkpointer.cli import main

        result = CliRunner().invoke(main, ["import", "-", *target.args, "--json"], input=text)
        assert result.exit_code == 0, result.stderr
        assert json.loads(result.stdout)["threads"] == len(THREADS)
        assert io.StringIO(text).readline().startswith('{"format"')


def test_version_1_files_still_import(tmp_path: Path) -> None:
    """A file of version 1 (written before records could keep values inline: every value
    is a value row) imports, and its values read back."""
    path = tmp_path / "v2.db"
    saver = SqliteSaver(path, serde=_RowsOnly())
    saver.setup()
    cp = empty_checkpoint()
    cp["channel_versions"] = {"n": "1.x", "items": "1.x"}
    cp["channel_values"] = {"n": 7, "items": [1, 2]}
    saver.put(make_config("v1"), cp, {"step": 0}, {"n": "1.x", "items": "1.x"})
    saver.close()
    result = run("export", "--all", "--url", f"sqlite:///{path}")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines(keepends=True)
    header = json.loads(lines[0])
    assert header["version"] == PLAIN_VERSION == 2
    assert sum('"kind": "blob"' in line or '"kind":"blob"' in line for line in lines) == 2
    old = tmp_path / "v1.jsonl"
    old.write_text(json.dumps({**header, "version": 1}) + "\n" + "".join(lines[1:]))
    target = tmp_path / "target.db"
    with SqliteSaver.from_conn_string(target, setup=True):
        pass
    result = run("import", str(old), "--url", f"sqlite:///{target}")
    assert result.exit_code == 0, result.stderr
    with SqliteSaver.from_conn_string(target) as reader:
        got = reader.get_tuple(make_config("v1"))
    assert got is not None and got.checkpoint["channel_values"] == {"n": 7, "items": [1, 2]}


class _RowsOnly(MsgpackSerializer):
    """Stores every value as a value row, as savers did before inline values."""

    stores_scalars_inline = False


def test_task_ids_that_are_not_uuids_move_between_databases(tmp_path: Path) -> None:
    """Named task ids (a uuid-derived key and the name on PostgreSQL) export as the ids
    given, import exactly into either database, and export back the same."""
    with empty_db("sqlite", tmp_path) as source, empty_db("postgres", tmp_path) as target:
        with source.saver() as saver:
            config = saver.put(make_config("named"), empty_checkpoint(), {"step": -1}, {})
            for task_id in ("task-2", "task-1", "00000000-0000-0000-0000-000000000001"):
                saver.put_writes(config, [("x", task_id), ("__error__", "e")], task_id)
            want = saver.get_tuple(config)
        path = tmp_path / "named.jsonl"
        path.write_text(_export(source))
        run_json("import", str(path), *target.args)
        with target.saver() as pg:
            got = pg.get_tuple(config)
        assert got is not None and want is not None
        assert got.pending_writes == want.pending_writes
        assert [w[0] for w in got.pending_writes or []][::2] == [
            "00000000-0000-0000-0000-000000000001",
            "task-1",
            "task-2",
        ]
        back = _export(target).splitlines()[1:]
        assert [json.loads(line) for line in back] == [
            json.loads(line) for line in path.read_text().splitlines()[1:]
        ]
