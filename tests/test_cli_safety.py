"""The CLI does no harm: `export -o` never writes over its own database or an existing
file (issue 16.4), `import` refuses files whose header lists a thread it holds nothing of
(16.5) or that repeat a record (16.16), and read-only commands leave a file's bytes alone."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_cli_support import Db, assert_one_line_error, empty_db, make_db, run, run_json


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Db]:
    with make_db("sqlite", tmp_path_factory.mktemp("safety")) as made:
        yield made


def _digest(path: str | Path) -> tuple[str, int]:
    data = Path(path).read_bytes()
    return hashlib.sha256(data).hexdigest(), os.stat(path).st_mtime_ns


# --------------------------------------------------------------------------- 16.4
def test_export_never_writes_over_its_own_database(source: Db, tmp_path: Path) -> None:
    before = _digest(source.url)
    for output in (source.url, f"{source.url}-wal", f"{source.url}-shm"):
        assert_one_line_error(
            run("export", "chat", *source.args, "-o", output, "--force"), "database it reads"
        )
    # Another name for the same file (a hard link) is the same database.
    alias = tmp_path / "alias.db"
    os.link(source.url, alias)
    assert_one_line_error(
        run("export", "chat", *source.args, "-o", str(alias), "--force"), "database it reads"
    )
    link = tmp_path / "symlink.db"
    link.symlink_to(source.url)
    assert_one_line_error(
        run("export", "chat", "--url", str(link), "-o", source.url, "--force"),
        "database it reads",
    )
    assert _digest(source.url) == before
    assert run_json("threads", *source.args)["total"] == 4


def test_export_refuses_an_existing_file_unless_forced(source: Db, tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    out.write_text("precious\n")
    partial = tmp_path / "x.jsonl.partial"
    partial.write_text("also precious\n")
    assert_one_line_error(run("export", "chat", *source.args, "-o", str(out)), "--force")
    assert out.read_text() == "precious\n"
    result = run("export", "chat", *source.args, "-o", str(out), "--force")
    assert result.exit_code == 0, result.stderr
    assert json.loads(out.read_text().splitlines()[0])["threads"] == ["chat"]
    assert partial.read_text() == "also precious\n"  # never touched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.jsonl", "x.jsonl.partial"]
    to_dir = run("export", "chat", *source.args, "-o", str(tmp_path))
    assert to_dir.exit_code != 0 and "is a directory" in to_dir.stderr
    fresh = tmp_path / "new.jsonl"
    result = run("export", "chat", *source.args, "-o", str(fresh))
    assert result.exit_code == 0 and fresh.exists()
    # A failed export leaves nothing behind.
    failed = tmp_path / "failed.jsonl"
    assert_one_line_error(run("export", "nosuch", *source.args, "-o", str(failed)), "unknown")
    assert not failed.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial") and p != partial]


# --------------------------------------------------------------------------- 16.5 / 16.16
def _export_lines(db: Db, *threads: str) -> list[str]:
    result = run("export", *threads, *db.args)
    assert result.exit_code == 0, result.stderr
    return result.stdout.splitlines(keepends=True)


def test_replace_refuses_a_file_that_holds_nothing_of_a_listed_thread(
    source: Db, tmp_path: Path
) -> None:
    lines = _export_lines(source, "chat", "ask")
    header = json.loads(lines[0])
    # Keep the header (both threads) but drop every record of "ask"; fix the end counts.
    body = [json.loads(line) for line in lines[1:-1]]
    kept = [r for r in body if r["thread_id"] != "ask"]
    end = {
        "kind": "end",
        "threads": 2,
        **{k: sum(r["kind"] == k[:-1] for r in kept) for k in ("checkpoints", "blobs", "writes")},
    }
    path = tmp_path / "hollow.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [header, *kept, end]))
    with empty_db("sqlite", tmp_path) as target:
        assert run_json("import", "".join(_export_path(source, tmp_path)), *target.args)
        before = run_json("history", "ask", *target.args)["checkpoints"]
        assert_one_line_error(
            run("import", str(path), *target.args, "--replace"), "'ask'", "no checkpoint"
        )
        assert run_json("history", "ask", *target.args)["checkpoints"] == before


def _export_path(db: Db, tmp_path: Path) -> str:
    path = tmp_path / "full.jsonl"
    if not path.exists():
        path.write_text("".join(_export_lines(db, "chat", "ask")))
    return str(path)


def test_import_refuses_duplicate_records_instead_of_miscounting(
    source: Db, tmp_path: Path
) -> None:
    lines = _export_lines(source, "chat")
    at = next(i for i, line in enumerate(lines) if '"kind":"checkpoint"' in line)
    end = json.loads(lines[-1])
    end["checkpoints"] += 1
    doubled = [*lines[: at + 1], lines[at], *lines[at + 1 : -1], json.dumps(end) + "\n"]
    path = tmp_path / "dup.jsonl"
    path.write_text("".join(doubled))
    with empty_db("sqlite", tmp_path) as target:
        assert_one_line_error(run("import", str(path), *target.args), "1 duplicate checkpoints")
        assert run_json("threads", *target.args)["total"] == 0
        good = tmp_path / "good.jsonl"
        good.write_text("".join(lines))
        counts = run_json("import", str(good), *target.args)
        history = run_json("history", "chat", *target.args, "--all")["checkpoints"]
        assert counts["checkpoints"] == len(history) == json.loads(lines[-1])["checkpoints"]


# --------------------------------------------------------------------------- 18.4, 18.6, 18.7
def test_read_commands_change_no_file(source: Db, tmp_path: Path) -> None:
    import sqlite3

    plain = tmp_path / "plain.db"
    conn = sqlite3.connect(plain)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    empty = tmp_path / "empty.db"
    empty.touch()
    for path in (plain, empty):
        before = _digest(path)
        for command in ("threads", "stats"):
            result = run(command, "--url", str(path))
            assert result.exit_code != 0
        assert _digest(path) == before
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(path.name)) == [
            path.name
        ]
    before = _digest(source.url)
    head = run_json("history", "chat", *source.args)["checkpoints"]
    for args in (
        ["threads"],
        ["history", "chat", "--all"],
        ["show", "chat"],
        ["diff", "chat", head[-1]["checkpoint_id"], head[0]["checkpoint_id"]],
        ["stats"],
        ["export", "--all"],
    ):
        result = run(*args, *source.args)
        assert result.exit_code == 0, (args, result.stderr)
    assert _digest(source.url) == before


def test_json_errors_are_json(source: Db) -> None:
    result = run("show", "nosuch", *source.args, "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout) == {"error": {"message": result.stderr.strip()[7:]}}
    assert "unknown thread 'nosuch'" in result.stderr


def test_threads_offset(source: Db) -> None:
    everything = run_json("threads", *source.args, "--sort", "id")["threads"]
    page = run_json("threads", *source.args, "--sort", "id", "--offset", "1", "--limit", "2")
    assert page["threads"] == everything[1:3] and page["total"] == len(everything)


def test_copies_get_fresh_run_ids_and_delete_runs_takes_a_thread(tmp_path: Path) -> None:
    with make_db("sqlite", tmp_path) as db:
        history = run_json("history", "chat", *db.args)["checkpoints"]
        run_id = history[0]["run_id"]
        assert run_id
        run_json("copy", "chat", "chat-copy", *db.args)
        run_json("fork", "chat", history[1]["checkpoint_id"], "--to", "chat-fork", *db.args)
        for copy in ("chat-copy", "chat-fork"):
            copied = run_json("history", copy, *db.args, "--all")["checkpoints"]
            assert run_id not in {e["run_id"] for e in copied}
        n_copy = len(run_json("history", "chat-copy", *db.args, "--all")["checkpoints"])
        dry = run_json("delete-runs", run_id, "--thread", "chat", "--dry-run", *db.args)
        assert [t["thread_id"] for t in dry["threads"]] == ["chat"]
        assert_one_line_error(
            run("delete-runs", run_id, "--thread", "chat-copy", *db.args), "no checkpoint"
        )
        done = run_json("delete-runs", run_id, "--thread", "chat", *db.args)
        assert done["threads"][0]["checkpoints_removed"] > 0
        assert len(run_json("history", "chat-copy", *db.args, "--all")["checkpoints"]) == n_copy


def test_a_failed_import_leaves_no_new_database(source: Db, tmp_path: Path) -> None:
    lines = _export_lines(source, "chat")
    bad = tmp_path / "truncated.jsonl"
    bad.write_text("".join(lines[: len(lines) // 2]))
    target = tmp_path / "new.db"
    assert_one_line_error(run("import", str(bad), "--url", str(target)), "truncated")
    assert not target.exists() and not list(tmp_path.glob("new.db*"))
    existing = tmp_path / "existing.db"
    with empty_db("sqlite", tmp_path) as db:
        os.replace(db.url, existing)
    assert_one_line_error(run("import", str(bad), "--url", str(existing)), "truncated")
    assert existing.exists()  # a database that was there stays
