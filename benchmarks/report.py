"""Writes the results: a markdown report and the same data as JSON.

The markdown opens with the targets (one row per targeted metric: ours, reference, ratio,
target, PASS/MISS), then every measured metric per workload, then how statements were
counted and anything that was skipped or looked wrong.
"""

from __future__ import annotations

import json
import os
import platform
import sqlite3
import subprocess
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

from benchmarks.graphs import VARIANTS
from benchmarks.results import METRICS, Row

PACKAGES = (
    "checkpointer",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "psycopg",
    "psycopg-pool",
    "aiosqlite",
    "sqlalchemy",
    "msgpack",
    "ormsgpack",
)


def environment(pg_version: str | None) -> dict[str, Any]:
    """Machine, interpreter, package versions and date: what the numbers depend on."""
    try:
        nproc = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        nproc = os.cpu_count() or 0
    cpu = ""
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(
                (ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), ""
            )
    except OSError:
        pass
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": nproc,
        "cpu": cpu,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "postgres": pg_version,
        "git_commit": _git_commit(),
        "packages": versions,
    }


def _git_commit() -> str:
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return "?"
    return out.stdout.strip() or "?"


def fmt(value: float | None) -> str:
    """Three significant digits, no exponent for the ranges we see."""
    if value is None:
        return "—"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    if magnitude >= 1:
        return f"{value:.2f}"
    if magnitude >= 0.01:
        return f"{value:.3f}"
    return f"{value:.2g}"


def fmt_ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def label(row: Row) -> str:
    text, unit = METRICS.get(row.metric, (row.metric, row.unit))
    return f"{text} ({unit})"


def _status(row: Row) -> str:
    return {"PASS": "**PASS**", "MISS": "**MISS**"}.get(row.status, row.status)


COLUMN_LABELS = {
    "memory": "memory",
    "sqlite": "SQLite (ours NORMAL)",
    "sqlite_full": "SQLite FULL sync",
    "async_sqlite": "async SQLite (ours FULL)",
    "postgres": "Postgres",
    "async_postgres": "async Postgres",
}


def _table(header: list[str], lines: Iterable[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(cells) + " |" for cells in lines]
    return out


def _cell(row: Row) -> list[str]:
    return [
        fmt(row.ours),
        fmt(row.ref),
        fmt_ratio(row.ratio),
        "" if row.target is None else str(row.target),
        _status(row),
    ]


def markdown(rows: list[Row], env: dict[str, Any], run: dict[str, Any], notes: list[str]) -> str:
    lines = ["# checkpointer benchmarks", ""]
    lines += [
        f"- date: {env['date']}; duration {run['duration_s'] / 60:.1f} min",
        f"- command: `{run['command']}`",
        f"- machine: {env['nproc']} cores (nproc), {env['cpu'] or 'unknown CPU'}, "
        f"{env['platform']}",
        f"- python {env['python']}, SQLite {env['sqlite']}, "
        f"PostgreSQL {env['postgres'] or 'not used'}",
        "- packages: " + ", ".join(f"{k} {v}" for k, v in env["packages"].items()),
        f"- checkpointer commit: {env['git_commit']} (working tree as run)",
        "",
        "Ratios are ours / reference of the medians of each side's samples, measured in the "
        "same run with the sides alternating. Lower is better, except throughput. Times are "
        "wall-clock on a shared, noisy machine: read the ratios, not the absolute values. "
        f"Large-N targets (stated for N = 1,000) are held at N = {run['large_n']}.",
        "",
    ]
    targeted = [r for r in rows if r.target is not None]
    counts = {
        s: sum(1 for r in targeted if r.status == s) for s in ("PASS", "MISS", "not measured")
    }
    lines += [
        "## Targets",
        "",
        f"{counts['PASS']} PASS, {counts['MISS']} MISS, {counts['not measured']} not measured.",
        "",
        "Summary: one line per targeted metric, one column per saver configuration; each cell "
        "is the ratio ours/reference (floors: ours/floor; growth and statement counts: our "
        "own value) and the verdict. The SQLite targets are held at equal durability (SQLite "
        "FULL sync, async SQLite with ours at FULL); the NORMAL column shows the ratio at our "
        "default, without a verdict. The targets are the table GOALS in benchmarks/targets.py; "
        "the full targets table follows.",
        "",
    ]
    lines += summary_table(targeted, rows)
    lines += ["", "### All targeted measurements", ""]
    lines += _table(
        [
            "workload",
            "backend",
            "variant",
            "N",
            "metric",
            "ours",
            "reference",
            "ratio",
            "target",
            "result",
        ],
        ([r.workload, r.backend, r.variant, _n(r), label(r), *_cell(r)] for r in targeted),
    )
    for workload, title in (
        ("chat", "Workload 1: chat thread through LangGraph"),
        ("floor", "Physical floors: ours against the raw driver (reference column = floor)"),
        ("growth", "Growth: one thread's reads as the store fills / as the thread grows"),
        ("concurrency", "Workload 2: concurrency"),
        (
            "runtime",
            "Workload 3: our runtime (checkpointer.graph + our SQLite) vs "
            "LangGraph + reference SQLite",
        ),
    ):
        mine = [r for r in rows if r.workload == workload]
        lines += ["", f"## {title}", ""]
        if not mine:
            lines.append("Not run (see notes).")
            continue
        if workload == "chat":
            for backend in dict.fromkeys(r.backend for r in mine):
                lines += ["", f"### {backend}", ""]
                lines += _table(
                    [
                        "variant",
                        "N",
                        "metric",
                        "ours",
                        "reference",
                        "ratio",
                        "target",
                        "result",
                        "samples",
                    ],
                    (
                        [
                            r.variant,
                            _n(r),
                            label(r),
                            *_cell(r),
                            f"{len(r.ours_samples)}/{len(r.ref_samples)}",
                        ]
                        for r in mine
                        if r.backend == backend
                    ),
                )
        else:
            lines += _table(
                [
                    "backend",
                    "variant",
                    "N",
                    "metric",
                    "ours",
                    "reference",
                    "ratio",
                    "target",
                    "result",
                    "setup",
                ],
                ([r.backend, r.variant, _n(r), label(r), *_cell(r), r.note] for r in mine),
            )
    lines += ["", "## How things were measured", ""]
    lines += [f"- {item}" for item in run["method"]]
    if notes:
        lines += ["", "## Notes", ""]
        lines += [f"- {note}" for note in notes]
    return "\n".join(lines) + "\n"


def summary_table(targeted: list[Row], rows: list[Row] | None = None) -> list[str]:
    """Targets pivoted: rows (workload, metric, variant, N), columns saver configurations.
    Untargeted rows of the same metric (our NORMAL SQLite column) show their ratio."""
    order = {name: i for i, name in enumerate(COLUMN_LABELS)}
    keys: dict[tuple[str, str, str, str], dict[str, Row]] = {}
    for row in targeted:
        keys.setdefault((row.workload, row.metric, row.variant, _n(row)), {})[row.backend] = row
    for row in rows or []:
        key = (row.workload, row.metric, row.variant, _n(row))
        if row.target is None and key in keys and row.backend in COLUMN_LABELS:
            keys[key].setdefault(row.backend, row)
    workloads = ("chat", "floor", "growth", "concurrency", "runtime")
    metric_order = {m: i for i, m in enumerate(METRICS)}
    variant_order = {v: i for i, v in enumerate(VARIANTS)}
    keys = dict(
        sorted(
            keys.items(),
            key=lambda kv: (
                workloads.index(kv[0][0]) if kv[0][0] in workloads else 99,
                int(kv[0][3] or 0),
                metric_order.get(kv[0][1], 99),
                variant_order.get(kv[0][2], 99),
            ),
        )
    )
    present = {b for cells in keys.values() for b in cells}
    backends = sorted(present, key=lambda b: (order.get(b, 99), b))
    lines = []
    for (workload, metric, variant, n), cells in keys.items():
        targets = [str(r.target) for r in cells.values() if r.target is not None]
        common = max(set(targets), key=targets.count)
        out = []
        for backend in backends:
            row = cells.get(backend)
            if row is None:
                out.append("")
                continue
            if row.status == "not measured":
                out.append("not measured")
                continue
            on_ours = row.target is not None and row.target.on_ours
            value = fmt(row.ours) if on_ours else fmt_ratio(row.ratio)
            if row.target is None:
                out.append(f"{value} (no target)")
                continue
            extra = f" ({row.target})" if str(row.target) != common else ""
            out.append(f"{value} {_status(row)}{extra}")
        label_text = METRICS.get(metric, (metric, ""))[0]
        lines.append([workload, label_text, variant, n, common, *out])
    header = [COLUMN_LABELS.get(b, b) for b in backends]
    return _table(["workload", "metric", "variant", "N", "target", *header], lines)


def _n(row: Row) -> str:
    return "" if row.n is None else str(row.n)


def write(
    out_dir: str,
    name: str,
    rows: list[Row],
    env: dict[str, Any],
    run: dict[str, Any],
    notes: list[str],
) -> tuple[str, str]:
    """Write `<name>.md` and `<name>.json` into `out_dir`; returns both paths."""
    os.makedirs(out_dir, exist_ok=True)
    md_path = os.path.join(out_dir, f"{name}.md")
    json_path = os.path.join(out_dir, f"{name}.json")
    with open(md_path, "w") as fh:
        fh.write(markdown(rows, env, run, notes))
    payload = {
        "environment": env,
        "run": run,
        "rows": [r.to_json() for r in rows],
        "notes": notes,
    }
    with open(json_path, "w") as fh:
        json.dump(payload, fh, indent=1, default=str)
        fh.write("\n")
    return md_path, json_path


def main_argv() -> str:
    return " ".join(["python -m benchmarks", *sys.argv[1:]])
