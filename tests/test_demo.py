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
