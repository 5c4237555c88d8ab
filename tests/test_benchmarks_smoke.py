"""The benchmark harness runs end to end on a tiny thread and writes a complete report.

Timings are not asserted (they mean nothing at N=5 on a shared machine); what is checked
is that every cell produced every metric on both sides, that every target got a verdict,
and that both sides built the same thread.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import psycopg
import pytest

pytest.importorskip("langgraph.checkpoint.sqlite")

from benchmarks.backends import _with_dbname
from benchmarks.cli import main, not_measured
from benchmarks.graphs import VARIANTS
from benchmarks.report import markdown
from benchmarks.results import METRICS
from benchmarks.targets import GOALS, expected_verdicts

# `sqlite` (ours NORMAL) and `sqlite_full` (ours FULL) run in one cell against one reference.
BACKENDS = ("memory", "sqlite", "sqlite_full")
ALWAYS = {"wall", "put", "get_state", "get_tuple", "list", "history"}
# Statements per step are not counted on SQLite: its builds run without the trace callback.
SQL_ONLY = {"bytes", "get_tuple_stmts", "get_state_stmts", "list_stmts"}


def test_harness_writes_a_complete_table(tmp_path: Path) -> None:
    argv = [
        "--n", "5",
        "--repeat", "1",
        "--backends", ",".join(BACKENDS),
        "--workloads", "chat,floor,growth,concurrency",
        "--processes", "2",
        "--process-steps", "3",
        "--growth-threads", "12",
        "--growth-steps", "3",
        "--growth-samples", "4",
        "--long-thread", "20",
        "--full-history",
        "--out", str(tmp_path),
        "--name", "smoke",
    ]  # fmt: skip
    assert main(argv) == 0

    data = json.loads((tmp_path / "smoke.json").read_text())
    md = (tmp_path / "smoke.md").read_text()
    rows = data["rows"]
    assert not [n for n in data["notes"] if n.startswith(("FAILED", "CHECK FAILED"))]

    for backend in BACKENDS:
        for variant in VARIANTS:
            cell = {
                r["metric"]: r
                for r in rows
                if r["workload"] == "chat" and r["backend"] == backend and r["variant"] == variant
            }
            expected = set(ALWAYS)
            if backend.startswith("sqlite"):
                expected |= SQL_ONLY | {"history_stmts"}
            if variant != "classic":
                expected.add("delta")
                if backend.startswith("sqlite"):
                    expected.add("delta_stmts")
            assert expected <= set(cell), (backend, variant, expected - set(cell))
            for metric in expected:
                row = cell[metric]
                assert row["ours"] is not None and row["ref"] is not None, row
                assert row["ratio"] is not None or row["ref"] == 0, row

    concurrency = {r["metric"]: r for r in rows if r["backend"] == "sqlite_processes"}
    assert set(concurrency) == {"throughput", "errors", "client_cpu"}
    assert concurrency["throughput"]["ours"] > 0 and concurrency["throughput"]["ref"] > 0

    # Floors: ours (the chat samples) against the raw driver's floor, at the run's N.
    floor = {(r["backend"], r["variant"], r["metric"]): r for r in rows if r["workload"] == "floor"}
    for column in ("sqlite", "sqlite_full"):
        for variant in VARIANTS:
            assert floor[(column, variant, "put_floor")]["ref"] > 0
        assert floor[(column, "delta_never", "delta_floor")]["ref"] > 0
    # Growth: each side's many-threads / one-thread ratio, and the long-thread one.
    growth = {r["metric"]: r for r in rows if r["workload"] == "growth"}
    for metric in ("tuple_growth", "list_growth", "list_step_growth"):
        assert growth[metric]["ours"] > 0 and growth[metric]["ref"] > 0, growth[metric]
        assert growth[metric]["status"] in ("PASS", "MISS")

    targeted = [r for r in rows if r["target"] is not None]
    assert targeted
    assert all(r["status"] in ("PASS", "MISS") for r in targeted), [
        (r["backend"], r["variant"], r["metric"], r["status"]) for r in targeted
    ]
    # Every issue-#17 verdict this run owes is there (nothing silently skipped).
    owed = expected_verdicts([*BACKENDS], VARIANTS, 5, ["chat", "floor", "growth"])
    have = {(r["workload"], r["backend"], r["variant"], r["n"], r["metric"]) for r in targeted}
    missing = [e for e in owed if (e.workload, e.column, e.variant, e.n, e.metric) not in have]
    assert owed and not missing, missing
    # Our NORMAL SQLite column is reported without verdicts on the equal-durability goals.
    assert not [
        r for r in targeted if r["backend"] == "sqlite" and r["metric"] in ("put", "get_state")
    ]
    # The markdown shows, per targeted metric, ours, reference, ratio, target and verdict.
    assert "| workload | backend | variant | N | metric | ours | reference | ratio | target |" in md
    section = md.split("### All targeted measurements", 1)[1].split("\n## ", 1)[0]
    target_lines = [ln for ln in section.splitlines() if ln.startswith("| chat |")]
    assert len(target_lines) == sum(1 for r in targeted if r["workload"] == "chat")
    assert "| SQLite (ours NORMAL) | SQLite FULL sync |" in md
    assert all(("PASS" in ln) or ("MISS" in ln) for ln in target_lines)
    for key in ("nproc", "python", "packages", "date"):
        assert data["environment"][key]


def test_a_column_that_could_not_run_says_not_measured() -> None:
    """A requested column with no measurement still gets its verdicts: "not measured"."""
    owed = expected_verdicts(["postgres"], ["classic"], 1000, ["chat", "floor"])
    assert {e.metric for e in owed} >= {"put", "get_tuple", "get_state", "list", "bytes"}
    rows = not_measured([], owed)
    assert rows and all(r.status == "not measured" for r in rows)
    env = {
        "date": "d", "nproc": 1, "cpu": "", "platform": "p", "python": "3",
        "sqlite": "3", "postgres": None, "git_commit": "x", "packages": {},
    }  # fmt: skip
    run = {"duration_s": 1.0, "command": "c", "large_n": 1000, "method": []}
    md = markdown(rows, env, run, [])
    assert f"0 PASS, 0 MISS, {len(rows)} not measured" in md
    assert "| Postgres |" in md and "not measured" in md.split("### All targeted")[0]


def test_every_goal_names_a_known_metric_and_column() -> None:
    columns = {"memory", "sqlite", "sqlite_full", "async_sqlite", "postgres", "async_postgres"}
    for goal in GOALS:
        assert goal.metric in METRICS, goal
        assert set(goal.variants) <= set(VARIANTS), goal
        if goal.workload in ("chat", "floor", "growth"):
            assert set(goal.columns) <= columns, goal


def test_pooled_concurrency_runs_alone_on_a_fresh_database(tmp_path: Path, pg_url: str) -> None:
    """`--workloads concurrency` on a database no other workload prepared: the run makes
    its own schemas (it used to fail with "no schema has been selected to create in")."""
    dbname = f"cp_bench_{uuid.uuid4().hex[:10]}"
    url = _with_dbname(pg_url, dbname)
    argv = [
        "--backends", "async_postgres",
        "--workloads", "concurrency",
        "--repeat", "1",
        "--threads", "2",
        "--thread-steps", "2",
        "--pool-size", "2",
        "--pg-latency-ms", "0",
        "--pg-url", url,
        "--out", str(tmp_path),
        "--name", "conc",
    ]  # fmt: skip
    try:
        assert main(argv) == 0
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')
    data = json.loads((tmp_path / "conc.json").read_text())
    assert not [n for n in data["notes"] if n.startswith("FAILED")], data["notes"]
    pooled = {r["metric"]: r for r in data["rows"] if r["backend"] == "async_postgres_pool"}
    assert pooled["throughput"]["ours"] > 0 and pooled["throughput"]["ref"] > 0
    assert pooled["errors"]["ours"] == 0 and pooled["errors"]["ref"] == 0
