"""Failures of a run, grouped by their error message (ids and addresses blanked), with the
savers each group hit: the starting point for conformance/FAILURES.md.

    python -m conformance.summarize [conformance/.cache/results.json] [--saver sqlite]
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from conformance import savers, suites

_NOISE = [
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"0x[0-9a-f]+"), "0x…"),
    (re.compile(r"\[(sync|async|exit)\]"), ""),
]


def normalize(message: str) -> str:
    first = message.strip().splitlines()[0] if message.strip() else "(no message)"
    for pattern, repl in _NOISE:
        first = pattern.sub(repl, first)
    return first[:220]


def groups(records: list[dict[str, Any]]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """message -> saver -> failed records."""
    out: dict[str, dict[str, list[dict[str, Any]]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        if r["outcome"] == "failed":
            out[normalize(r["message"])][r["saver"] or "?"].append(r)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.summarize")
    parser.add_argument("results", nargs="?", type=Path, default=suites.CACHE / "results.json")
    parser.add_argument("--saver", default="", help="only this saver kind")
    args = parser.parse_args(argv)
    records = json.loads(args.results.read_text())
    if args.saver:
        records = [r for r in records if r["saver"] == args.saver]
    order = [*savers.OURS, *savers.BASELINE]
    found = groups(records)
    for message, by_saver in sorted(found.items(), key=lambda kv: -sum(map(len, kv[1].values()))):
        total = sum(map(len, by_saver.values()))
        kinds = sorted(by_saver, key=lambda k: order.index(k) if k in order else len(order))
        print(f"\n## {total}x  {message}")
        print("   savers: " + ", ".join(f"{k} {len(by_saver[k])}" for k in kinds))
        where = {r["where"] for rs in by_saver.values() for r in rs if r.get("where")}
        if where:
            print("   raised at: " + ", ".join(sorted(where)[:4]))
        names = sorted({f"{r['suite']}: {r['nodeid']}" for rs in by_saver.values() for r in rs})
        for name in names[:6]:
            print(f"   - {name}")
        if len(names) > 6:
            print(f"   ... {len(names) - 6} more")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
