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
