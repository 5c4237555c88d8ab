"""The benchmark harness runs end to end on a tiny thread and writes a complete report.

Timings are not asserted (they mean nothing at N=5 on a shared machine); what is checked
is that every cell produced every metric on both sides, that every target got a verdict,
and that both sides built the same thread.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.sqlite")

from benchmarks.cli import main
from benchmarks.graphs import VARIANTS

BACKENDS = ("memory", "sqlite")
ALWAYS = {"wall", "put", "get_state", "get_tuple", "list", "history"}
# Statements per step are not counted on SQLite: its builds run without the trace callback.
SQL_ONLY = {"bytes", "get_tuple_stmts", "get_state_stmts", "list_stmts"}


def test_harness_writes_a_complete_table(tmp_path: Path) -> None:
    argv = [
        "--n", "5",
        "--repeat", "1",
        "--backends", ",".join(BACKENDS),
        "--workloads", "chat,concurrency",
        "--processes", "2",
        "--process-steps", "3",
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
            if backend == "sqlite":
                expected |= SQL_ONLY | {"history_stmts"}
            if variant != "classic":
                expected.add("delta")
                if backend == "sqlite":
                    expected.add("delta_stmts")
            assert expected <= set(cell), (backend, variant, expected - set(cell))
            for metric in expected:
                row = cell[metric]
                assert row["ours"] is not None and row["ref"] is not None, row
                assert row["ratio"] is not None or row["ref"] == 0, row

    concurrency = {r["metric"]: r for r in rows if r["backend"] == "sqlite_processes"}
    assert set(concurrency) == {"throughput", "errors", "client_cpu"}
    assert concurrency["throughput"]["ours"] > 0 and concurrency["throughput"]["ref"] > 0

    targeted = [r for r in rows if r["target"] is not None]
    assert targeted
    assert all(r["status"] in ("PASS", "MISS") for r in targeted), [
        (r["backend"], r["variant"], r["metric"], r["status"]) for r in targeted
    ]
    # The markdown shows, per targeted metric, ours, reference, ratio, target and verdict.
    assert "| workload | backend | variant | N | metric | ours | reference | ratio | target |" in md
    section = md.split("### All targeted measurements", 1)[1].split("\n## ", 1)[0]
    target_lines = [ln for ln in section.splitlines() if ln.startswith("| chat |")]
    assert len(target_lines) == sum(1 for r in targeted if r["workload"] == "chat")
    assert all(("PASS" in ln) or ("MISS" in ln) for ln in target_lines)
    for key in ("nproc", "python", "packages", "date"):
        assert data["environment"][key]
