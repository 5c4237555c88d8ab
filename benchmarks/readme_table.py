"""The README's compact benchmark tables, rendered from a run's JSON.

    python -m benchmarks.readme_table                       # print, from results/latest.json
    python -m benchmarks.readme_table --write README.md     # replace the tables in place

Each cell is a ratio (ours / reference, or ours / floor), **bold** where its target is met;
several variants of one metric share a cell, separated by " / ". The README holds the
output between `BEGIN` and `END` marker comments, so a run and the README's numbers cannot
drift apart by hand edits (a test renders latest.json and compares).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results" / "latest.json"
BEGIN = "<!-- benchmark tables: BEGIN (python -m benchmarks.readme_table --write README.md) -->"
END = "<!-- benchmark tables: END -->"

COLUMNS = (
    ("memory", "memory"),
    ("sqlite", "SQLite NORMAL"),
    ("sqlite_full", "SQLite FULL"),
    ("async_sqlite", "async SQLite"),
    ("postgres", "Postgres"),
    ("async_postgres", "async Postgres"),
)

# (label, [(workload, metric, variant), ...]): one line of the main table.
LINES: tuple[tuple[str, tuple[tuple[str, str, str], ...]], ...] = (
    (
        "put + put_writes, classic [≤ 0.8; PG ≤ 0.7; memory ≤ 1]",
        (("chat", "put", "classic"),),
    ),
    ("put + put_writes, delta every 100", (("chat", "put", "delta100"),)),
    ("`get_tuple` at the head, classic [≤ 0.8]", (("chat", "get_tuple", "classic"),)),
    ("`get_tuple` at the head, delta every 100 [≤ 0.8]", (("chat", "get_tuple", "delta100"),)),
    (
        "`get_state` at the head, classic [≤ 0.7; memory ≤ 0.6]",
        (("chat", "get_state", "classic"),),
    ),
    (
        "`get_state` at the head, delta every 100 [≤ 0.5; memory ≤ 0.6]",
        (("chat", "get_state", "delta100"),),
    ),
    (
        "`get_state_history`, classic / every 100 / never [≤ 0.5]",
        tuple(("chat", "history", v) for v in ("classic", "delta100", "delta_never")),
    ),
    (
        "saver `list`, classic / every 100 / never [≤ 0.5]",
        tuple(("chat", "list", v) for v in ("classic", "delta100", "delta_never")),
    ),
    ("`get_delta_channel_history`, depth 1,001 [≤ 0.3]", (("chat", "delta", "delta_never"),)),
    ("bytes on disk, classic [SQLite ≤ 0.35, PG ≤ 0.5]", (("chat", "bytes", "classic"),)),
    (
        "bytes on disk, delta every 100 / never [≤ 1]",
        (("chat", "bytes", "delta100"), ("chat", "bytes", "delta_never")),
    ),
    (
        "put vs raw-driver floor, classic / every 100 [≤ 2]",
        (("floor", "put_floor", "classic"), ("floor", "put_floor", "delta100")),
    ),
    ("delta history vs raw-driver floor [≤ 2]", (("floor", "delta_floor", "delta_never"),)),
    (
        "wide state (no target): put / `get_tuple` / `get_state` / `list` / delta history",
        tuple(("chat", m, "wide") for m in ("put", "get_tuple", "get_state", "list", "delta")),
    ),
)

STATEMENTS = (
    ("chat", "get_tuple_stmts", "delta100"),
    ("chat", "list_stmts", "delta100"),
    ("chat", "delta_stmts", "delta_never"),
)
"""The statements line: our counts, one statement each (the reference's beside the first)."""


Index = dict[tuple[str, str, str, str], dict[str, Any]]


def index(rows: Sequence[dict[str, Any]]) -> Index:
    """Rows by (workload, backend, metric, variant); the largest N where several ran."""
    out: Index = {}
    for row in sorted(rows, key=lambda r: r.get("n") or 0):
        out[(row["workload"], row["backend"], row["metric"], row["variant"])] = row
    return out


def _ratio(row: dict[str, Any] | None) -> str:
    if row is None or row.get("ratio") is None:
        return ""
    text = f"{row['ratio']:.2f}"
    return f"**{text}**" if row.get("status") == "PASS" else text


def _joined(parts: list[str]) -> str:
    return " / ".join(parts) if any(parts) else ""


def _count(row: dict[str, Any] | None, field: str) -> str:
    value = None if row is None else row.get(field)
    return "-" if value is None else f"{value:,.0f}"


def _statements(rows: Index, backend: str, first: bool) -> str:
    found = [rows.get((w, backend, m, v)) for w, m, v in STATEMENTS]
    if not any(found):
        return ""
    ours = " / ".join(_count(r, "ours") for r in found)
    passed = all(r is not None and r.get("status") == "PASS" for r in found)
    cell = f"**{ours}**" if passed else ours
    if first:
        cell += f" (ref {' / '.join(_count(r, 'ref') for r in found)})"
    return cell


def _line(label: str, cells: Sequence[str]) -> str:
    return "| " + " | ".join([label, *cells]) + " |"


def main_table(rows: Index) -> list[str]:
    """One line per entry of `LINES`, the statements line before the wide state's."""
    header = ["metric", *(name for _, name in COLUMNS)]
    out = [_line(header[0], header[1:]), _line("---", ["---"] * len(COLUMNS))]
    for label, parts in LINES:
        out.append(
            _line(
                label,
                [
                    _joined([_ratio(rows.get((w, backend, m, v))) for w, m, v in parts])
                    for backend, _ in COLUMNS
                ],
            )
        )
    cells, first = [], True
    for backend, _ in COLUMNS:
        cell = _statements(rows, backend, first)
        first = first and not cell
        cells.append(cell)
    out.insert(len(out) - 1, _line("statements: `get_tuple` / `list` / delta history [1]", cells))
    return out


def _value(rows: Index, key: tuple[str, str, str, str], field: str, spec: str) -> str:
    row = rows.get(key)
    if row is None or row.get(field) is None:
        return "?"
    text = format(row[field], spec)
    return f"**{text}**" if field == "ratio" and row.get("status") == "PASS" else text


def other_table(rows: Index) -> list[str]:
    def g(backend: str, metric: str, field: str = "ours", spec: str = ".2f") -> str:
        value = _value(rows, ("growth", backend, metric, "delta100"), field, spec)
        if field == "ours" and metric.endswith("growth"):  # a target on our own value
            row = rows.get(("growth", backend, metric, "delta100"))
            if row is not None and row.get("status") == "PASS":
                return f"**{value}**"
        return value

    def c(backend: str, field: str, spec: str = ".2f") -> str:
        return _value(rows, ("concurrency", backend, "throughput", "delta100"), field, spec)

    errors = [
        rows.get(("concurrency", b, "errors", "delta100"))
        for b in ("async_postgres_pool", "async_postgres_pool+1ms")
    ]
    no_errors = all(r is not None and r.get("ours") == 0 for r in errors)
    runtime = [
        _value(rows, ("runtime", "sqlite", "runtime_history", v), "ratio", ".2f")
        for v in ("delta100", "delta_never")
    ]
    lines = [
        "| other workloads | result [target] |",
        "| --- | --- |",
        "| growth: `get_tuple` / `list` at 10,000 threads vs 1 | "
        f"SQLite {g('sqlite', 'tuple_growth')} / {g('sqlite', 'list_growth')}, "
        f"Postgres {g('postgres', 'tuple_growth')} / {g('postgres', 'list_growth')} [≤ 1.5] "
        f"(reference {g('sqlite', 'tuple_growth', 'ref')} / {g('sqlite', 'list_growth', 'ref')}"
        f" and {g('postgres', 'tuple_growth', 'ref')} / {g('postgres', 'list_growth', 'ref')}) |",
        "| growth: `list` per checkpoint, 10,000 steps vs 1,000 (delta every 100) | "
        f"SQLite {g('sqlite', 'list_step_growth')}, Postgres {g('postgres', 'list_step_growth')}"
        f" (reference {g('sqlite', 'list_step_growth', 'ref')} and "
        f"{g('postgres', 'list_step_growth', 'ref')}) [≤ 1.5]; per checkpoint at 10,000 steps "
        f"ours {g('sqlite', 'list_per_ckpt_long', 'ours', '.0f')} / "
        f"{g('postgres', 'list_per_ckpt_long', 'ours', '.0f')} µs, reference "
        f"{g('sqlite', 'list_per_ckpt_long', 'ref', '.0f')} / "
        f"{g('postgres', 'list_per_ckpt_long', 'ref', '.0f')}; the store "
        f"{g('sqlite', 'long_store_bytes', 'ours', '.0f')} / "
        f"{g('postgres', 'long_store_bytes', 'ours', '.0f')} MB, reference "
        f"{g('sqlite', 'long_store_bytes', 'ref', '.0f')} / "
        f"{g('postgres', 'long_store_bytes', 'ref', '.0f')} MB |",
        "| our runtime's `get_state_history` over 1,000 delta checkpoints vs LangGraph + "
        f"reference SQLite | {runtime[0]} (every 100) and {runtime[1]} (never) [≤ 0.1] |",
        "| 16 threads through one pooled async Postgres saver | "
        f"{c('async_postgres_pool', 'ratio')}x the reference's throughput, "
        f"{'**0 errors**' if no_errors else 'errors'}; with 1 ms of latency "
        f"{c('async_postgres_pool+1ms', 'ratio')}x [≥ 3x] |",
    ]
    return lines


def render(rows: Sequence[dict[str, Any]]) -> str:
    found = index(rows)
    return "\n".join([*main_table(found), "", *other_table(found)]) + "\n"


def replace_between_markers(text: str, tables: str) -> str:
    """`text` with what lies between the markers replaced by `tables`."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"the markers are missing: {BEGIN!r} ... {END!r}")
    return text[: start + len(BEGIN)] + "\n\n" + tables + "\n" + text[end:]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.readme_table")
    parser.add_argument("results", nargs="?", default=str(RESULTS), help="a run's JSON")
    parser.add_argument("--write", metavar="README", help="replace the tables in this file")
    args = parser.parse_args(argv)
    tables = render(json.loads(Path(args.results).read_text())["rows"])
    if args.write is None:
        sys.stdout.write(tables)
        return 0
    path = Path(args.write)
    path.write_text(replace_between_markers(path.read_text(), tables))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
