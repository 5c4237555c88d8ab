"""The demo on a throwaway SQLite file: it must show what it claims, in seconds."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console

from checkpointer.demo import DemoReport, run_demo


@pytest.fixture(scope="module")
def report_and_output(tmp_path_factory: pytest.TempPathFactory) -> tuple[DemoReport, str]:
    db = tmp_path_factory.mktemp("demo") / "demo.db"
    out = io.StringIO()
    report = run_demo(db_path=str(db), console=Console(file=out, width=120))
    assert db.exists()
    return report, out.getvalue()


def test_crash_resume_does_not_rerun_the_finished_task(
    report_and_output: tuple[DemoReport, str],
) -> None:
    report, _ = report_and_output
    assert not report.finished_task_rerun
    assert report.runs_after_resume["retrieve"] == report.runs_at_crash["retrieve"]
    assert report.crashed_task_rerun
    assert report.runs_after_resume["draft"] == report.runs_at_crash["draft"] + 1


def test_approval_pauses_and_resumes(report_and_output: tuple[DemoReport, str]) -> None:
    report, _ = report_and_output
    assert report.approval_paused_before == ("approve",)
    assert report.approved


def test_fork_leaves_the_original_branch_intact(report_and_output: tuple[DemoReport, str]) -> None:
    report, _ = report_and_output
    assert report.original_intact
    assert report.fork_messages < report.original_messages
    assert report.checkpoints > report.history_rows  # the fork's checkpoints are extra


def test_delta_storage_beats_full_snapshots(report_and_output: tuple[DemoReport, str]) -> None:
    report, _ = report_and_output
    assert 0 < report.delta_bytes < report.full_snapshot_bytes
    assert report.savings > 5
    assert report.history_delta_calls <= 1


def test_prints_the_story_quickly(report_and_output: tuple[DemoReport, str]) -> None:
    report, output = report_and_output
    for text in ("draft crashed", "resumed", "paused before", "history", "forked", "figures"):
        assert text in output
    assert report.turns >= 30 and report.messages > 2 * report.turns
    assert report.elapsed_seconds < 10


def test_rejects_two_targets(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="either"):
        run_demo(
            db_path=str(tmp_path / "x.db"),
            url="postgresql://x",
            console=Console(file=io.StringIO()),
        )


def test_runs_in_memory_too() -> None:
    report = run_demo(url="memory", console=Console(file=io.StringIO()), turns=12)
    assert report.backend == "memory"
    assert not report.finished_task_rerun and report.original_intact


@pytest.mark.parametrize("how", ["search_path", "option"])
def test_the_demo_on_postgres_writes_to_the_schema_asked_for(how: str) -> None:
    """`demo --url postgresql://...?options=-csearch_path%3DS` (or `--schema S`) writes into
    S, as the CLI reads it, not into public."""
    import uuid

    import psycopg
    from click.testing import CliRunner

    from checkpointer.cli import main
    from checkpointer.inspect import open_reader
    from tests.conftest import PG_URL, require_postgres

    require_postgres()
    schema = f"cp_demo_{uuid.uuid4().hex[:10]}"
    args = (
        ["--url", f"{PG_URL}?options=-csearch_path%3D{schema}"]
        if how == "search_path"
        else ["--url", PG_URL, "--schema", schema]
    )
    try:
        result = CliRunner().invoke(main, ["demo", *args], env={"CHECKPOINTER_SCHEMA": None})
        assert result.exit_code == 0, result.output
        with open_reader(PG_URL, schema=schema) as reader:
            threads = reader.all_thread_ids()
        assert len(threads) == 1 and threads[0].startswith("demo-")
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            in_public = conn.execute(
                "SELECT COUNT(*) FROM information_schema.tables "
                "WHERE table_schema = 'public' AND table_name = 'checkpoints'"
            ).fetchone()
            if in_public and in_public[0]:
                found = conn.execute(
                    "SELECT COUNT(*) FROM public.checkpoints WHERE thread_id = %s", (threads[0],)
                ).fetchone()
                assert found is not None and found[0] == 0
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
