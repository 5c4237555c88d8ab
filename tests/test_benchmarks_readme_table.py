"""The README's benchmark tables are rendered from the run they cite: bold exactly where a
target is met, empty where nothing was measured, and the README holds what latest.json
renders to (rerun `python -m benchmarks.readme_table --write README.md` after a run)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.readme_table import BEGIN, END, RESULTS, main, render, replace_between_markers

README = Path(__file__).parent.parent / "README.md"


def _row(backend: str, metric: str, variant: str, ratio: float, status: str = "") -> dict[str, Any]:
    return {
        "workload": "chat",
        "backend": backend,
        "variant": variant,
        "n": 1000,
        "metric": metric,
        "ours": ratio,
        "ref": 1.0,
        "ratio": ratio,
        "status": status,
    }


def _line(tables: str, label: str) -> list[str]:
    [line] = [ln for ln in tables.splitlines() if ln.startswith(f"| {label}")]
    return [cell.strip() for cell in line.strip("|").split("|")][1:]


def test_readme_holds_the_tables_of_the_latest_run() -> None:
    text = README.read_text()
    held = text[text.index(BEGIN) + len(BEGIN) : text.index(END)].strip()
    assert held == render(json.loads(RESULTS.read_text())["rows"]).strip()


def test_met_targets_are_bold_and_unmeasured_cells_empty() -> None:
    rows = [
        _row("memory", "put", "classic", 0.454, "PASS"),
        _row("sqlite", "put", "classic", 0.56),  # no target at our default
        _row("sqlite_full", "put", "classic", 0.84, "MISS"),
        _row("sqlite_full", "history", "classic", 0.44, "PASS"),
        _row("sqlite_full", "history", "delta_never", 0.19, "PASS"),
    ]
    tables = render(rows)
    memory, normal, full, async_sqlite, pg, async_pg = _line(tables, "put + put_writes, classic")
    assert (memory, normal, full) == ("**0.45**", "0.56", "0.84")
    assert async_sqlite == pg == async_pg == ""
    history = _line(tables, "`get_state_history`")
    assert history[2] == "**0.44** /  / **0.19**"  # the unmeasured variant keeps its place
    assert history[0] == ""


def test_statement_counts_name_the_reference_once() -> None:
    rows = []
    for backend in ("sqlite", "postgres"):
        for metric, variant, ref in (
            ("get_tuple_stmts", "delta100", 2),
            ("list_stmts", "delta100", 1003),
            ("delta_stmts", "delta_never", 2),
        ):
            row = _row(backend, metric, variant, 1 / ref, "PASS")
            row.update(ours=1, ref=ref)
            rows.append(row)
    cells = _line(render(rows), "statements")
    assert cells[1] == "**1 / 1 / 1** (ref 2 / 1,003 / 2)"
    assert cells[4] == "**1 / 1 / 1**"
    assert cells[0] == cells[2] == ""


def test_write_replaces_only_what_lies_between_the_markers(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"before\n{BEGIN}\nold table\n{END}\nafter\n")
    results = tmp_path / "run.json"
    results.write_text(json.dumps({"rows": [_row("memory", "put", "classic", 0.5, "PASS")]}))
    assert main([str(results), "--write", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith(f"before\n{BEGIN}\n") and text.endswith(f"{END}\nafter\n")
    assert "old table" not in text and "**0.50**" in text
    with pytest.raises(ValueError, match="markers"):
        replace_between_markers("no markers here", "table")
