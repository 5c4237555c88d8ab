"""Run LangGraph's own test suites against our savers and count the results per saver.

    python -m conformance                         # our five savers, every suite
    python -m conformance --baseline              # ... and LangGraph's savers on the same tests
    python -m conformance --savers sqlite,postgres -k "interrupt" -- -x
    python -m conformance --install               # first install the pinned LangGraph releases

Exit status 1 when a selected test fails that `known_failures.txt` does not list (or a suite
could not run); the listed ones are counted and shown with their causes.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from conformance import fetch, savers, suites

ROOT = suites.HERE.parent
_LABELS = {
    "memory": "memory",
    "sqlite": "SQLite",
    "async_sqlite": "async SQLite",
    "postgres": "Postgres",
    "async_postgres": "async Postgres",
    "lg-memory": "LangGraph InMemorySaver",
    "lg-sqlite": "LangGraph (Async)SqliteSaver",
    "lg-postgres": "LangGraph (Async)PostgresSaver",
}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m conformance",
        description="LangGraph's own test suites on our savers (wrapped in LangGraphSaver).",
    )
    parser.add_argument(
        "--savers",
        default=",".join(savers.OURS),
        help=f"comma-separated, from {', '.join(savers.OURS)} (default: all)",
    )
    parser.add_argument(
        "--baseline",
        action="store_true",
        help="also run LangGraph's own savers on the same tests",
    )
    parser.add_argument(
        "--suites",
        default="",
        help="comma-separated, from langgraph, checkpoint, checkpoint-sqlite, "
        "checkpoint-postgres (default: all)",
    )
    parser.add_argument("-k", dest="keyword", default="", help="pytest -k expression")
    parser.add_argument(
        "-n",
        "--jobs",
        type=int,
        default=2,
        help="pytest-xdist workers for LangGraph's suite (default 2; 1: no xdist)",
    )
    parser.add_argument(
        "--rerun",
        type=int,
        default=50,
        metavar="N",
        help="rerun the failures once, when there are at most N of them (default 50; 0: never), "
        "to tell flaky tests from failing ones",
    )
    parser.add_argument(
        "--install",
        action="store_true",
        help="pip-install the pinned LangGraph releases when others are installed",
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=suites.CACHE / "results.json",
        help="where to write every test's outcome (JSON)",
    )
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    return parser.parse_args(argv)


def check_versions(all_suites: dict[str, suites.Suite], install: bool) -> None:
    wrong = []
    for suite in all_suites.values():
        try:
            have = importlib.metadata.version(suite.distribution)
        except importlib.metadata.PackageNotFoundError:
            have = None
        if have != suite.version:
            wrong.append((suite, have))
    if not wrong:
        return
    wanted = [f"{s.distribution}=={s.version}" for s, _ in wrong]
    if not install:
        lines = [f"  {s.distribution}: installed {have}, pinned {s.version}" for s, have in wrong]
        sys.exit(
            "The tests belong to the pinned releases; the installed ones differ:\n"
            + "\n".join(lines)
            + "\nRerun with --install (or: pip install "
            + " ".join(wanted)
            + ")"
        )
    print("installing", " ".join(wanted), flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", *wanted], check=True)


def _langgraph_files(tree: Path) -> list[str]:
    """LangGraph's test files that use its checkpointer fixtures (collecting only these
    saves most of the collection time)."""
    out = []
    for path in sorted((tree / "tests").glob("test_*.py")):
        text = path.read_text()
        if "sync_checkpointer" in text or "async_checkpointer" in text:
            out.append(str(path.relative_to(tree)))
    return out


def _pg_database(action: str, name: str) -> None:
    import psycopg

    with psycopg.connect(savers.PG_URL, autocommit=True) as conn:
        if action == "create":
            conn.execute(f'CREATE DATABASE "{name}"')
        else:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _read(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_suite(
    suite: suites.Suite,
    kinds: list[str],
    *,
    baseline: bool,
    args: argparse.Namespace,
    results: Path,
    log: Path,
) -> int:
    """Run one suite on `kinds`, then its failures once more on their own: a test that
    passes the second time is counted `flaky` (reported, not failing the run). Appends
    the outcomes to `results` and returns pytest's exit status of the first session."""
    tree = fetch.prepare(suite)
    files = list(suite.files) if suite.files is not None else _langgraph_files(tree)
    base = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "conformance.plugin",
        "-p",
        "no:cacheprovider",
        "-o",
        "addopts=",
        "-q",
        "--tb=short",
        "-W",
        "ignore::DeprecationWarning",
    ]
    if _has("pytest_randomly"):
        base += ["-p", "no:randomly"]
    env = dict(os.environ)
    env.update(
        CONFORMANCE_SUITE=suite.name,
        CONFORMANCE_SAVERS=",".join(kinds),
        CONFORMANCE_BASELINE="1" if baseline else "0",
        CHECKPOINTER_TEST_PG_URL=savers.PG_URL,
        NO_DOCKER="true",  # LangGraph's suite: no Redis or Postgres stores and caches
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p),
    )
    env.pop("LANGGRAPH_STRICT_MSGPACK", None)
    parallel = ["-n", str(args.jobs)] if suite.files is None and args.jobs > 1 else []
    if parallel and not _has("xdist"):
        parallel = []
    first = [*base, *parallel]
    if args.keyword:
        first += ["-k", args.keyword]
    first += [*files, *args.pytest_args]

    label = f"{suite.distribution} {suite.version}" + (" (baseline)" if baseline else "")
    print(f"running {label} on {', '.join(kinds)} ... ", end="", flush=True)
    started = time.monotonic()
    database = ""
    if suite.name == "checkpoint-postgres":
        database = f"lgsuites_{uuid.uuid4().hex[:12]}"
        _pg_database("create", database)
        env["CONFORMANCE_PG_DB"] = database
    session = log.with_suffix(".jsonl")
    again = log.with_suffix(".rerun.jsonl")
    session.unlink(missing_ok=True)
    again.unlink(missing_ok=True)
    try:
        with log.open("w") as out:
            out.write(" ".join(first) + "\n")
            out.flush()
            env["CONFORMANCE_RESULTS"] = str(session)
            code = subprocess.run(first, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT)
            records = _read(session)
            failed = [r["nodeid"] for r in records if r["outcome"] == "failed"]
            # Only a handful of failures may be flakes worth telling apart; many mean the run
            # fails anyway, and rerunning them all would double its time.
            if failed and len(failed) <= args.rerun:
                out.write(f"\n===== rerunning the {len(failed)} failures once =====\n")
                out.flush()
                env["CONFORMANCE_RESULTS"] = str(again)
                subprocess.run(
                    [*base, *parallel, *failed],
                    cwd=tree,
                    env=env,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                )
    finally:
        if database:
            _pg_database("drop", database)
    passed_again = {r["nodeid"] for r in _read(again) if r["outcome"] == "passed"}
    with results.open("a") as merged:
        for record in records:
            if record["outcome"] == "failed" and record["nodeid"] in passed_again:
                record["outcome"] = "flaky"
            merged.write(json.dumps(record) + "\n")
    shown = log.relative_to(ROOT) if log.is_relative_to(ROOT) else log
    print(f"{time.monotonic() - started:.0f} s (log: {shown})", flush=True)
    return code.returncode


def _counts(records: list[dict[str, Any]]) -> dict[tuple[str, str], Counter[str]]:
    counts: dict[tuple[str, str], Counter[str]] = defaultdict(Counter)
    for r in records:
        counts[(r["suite"], r["saver"] or "?")][r["outcome"]] += 1
    return counts


def _line(kind: str, c: Counter[str]) -> str:
    text = f"{_LABELS.get(kind, kind)}: {c['passed']} passed, {c['failed']} failed"
    if c["flaky"]:
        text += f", {c['flaky']} flaky (failed, then passed on rerun)"
    if c["skipped"]:
        text += f", {c['skipped']} skipped"
    if c["excluded"]:
        text += f" ({c['excluded']} excluded)"
    return text


def report(all_suites: dict[str, suites.Suite], records: list[dict[str, Any]]) -> None:
    counts = _counts(records)
    order = [*savers.OURS, *savers.BASELINE]
    for suite in all_suites.values():
        rows = sorted((kind, c) for (name, kind), c in counts.items() if name == suite.name)
        if not rows:
            continue
        rows.sort(key=lambda row: order.index(row[0]) if row[0] in order else len(order))
        print(f"\n{suite.distribution} {suite.version}:")
        for kind, c in rows:
            print(f"  {_line(kind, c)}")


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    all_suites = suites.load()
    chosen = [s for s in args.suites.split(",") if s] or list(all_suites)
    unknown = [s for s in chosen if s not in all_suites]
    kinds = [k for k in args.savers.split(",") if k]
    bad = [k for k in kinds if k not in savers.OURS]
    if unknown or bad:
        sys.exit(f"unknown suite(s) {unknown} or saver(s) {bad}")
    suites.load_excludes()  # a malformed list fails before anything runs
    check_versions(all_suites, args.install)

    logs = args.results.parent / f"{args.results.stem}-logs"
    logs.mkdir(parents=True, exist_ok=True)
    raw = args.results.with_suffix(".jsonl")
    raw.unlink(missing_ok=True)
    started = time.monotonic()
    failed_runs: list[str] = []
    for name in chosen:
        suite = all_suites[name]
        if suite.files is None:
            # LangGraph's fixtures take every selected saver as a param.
            runs = [(kinds, False)]
            if args.baseline:
                runs.append((list(savers.BASELINE), True))
        else:
            mine = [k for k in suite.kinds if k in kinds]
            runs = [(mine, False)] if mine else []
            if args.baseline:
                runs.append(([suite.baseline_kind], True))
        for run_kinds, baseline in runs:
            log = logs / f"{name}{'-baseline' if baseline else ''}.log"
            code = run_suite(suite, run_kinds, baseline=baseline, args=args, results=raw, log=log)
            if code not in (0, 1):
                failed_runs.append(f"{name} (pytest exit {code}, see {log})")
    records = _read(raw)
    args.results.write_text(json.dumps(records, indent=1))
    report({n: all_suites[n] for n in chosen}, records)
    elapsed = time.monotonic() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        f"\n{len(records)} results in {elapsed:.0f} s wall, "
        f"{usage.ru_utime + usage.ru_stime:.0f} s CPU; every outcome: {args.results}"
    )
    new_failures = report_known(records, suites.load_excludes(suites.KNOWN_FAILURES))
    for problem in failed_runs:
        print(f"suite did not run cleanly: {problem}")
    return 1 if new_failures or failed_runs else 0


def report_known(records: list[dict[str, Any]], known: list[suites.Exclude]) -> int:
    """Print the failures `known` lists (with their causes) apart from the others, and the
    listed tests that passed (to be taken off the list). Returns how many failures are not
    listed: those fail the run."""
    known_failed: list[tuple[str, str]] = []
    new: list[str] = []
    for r in records:
        if r["outcome"] != "failed":
            continue
        entry = next((k for k in known if k.matches(r["suite"], r["nodeid"])), None)
        if entry is None:
            new.append(f"{r['suite']} {r['nodeid']}")
        else:
            known_failed.append((r["nodeid"], entry.reason))
    fixed = sorted(
        f"{r['suite']} {r['nodeid']}"
        for r in records
        if r["outcome"] == "passed" and any(k.matches(r["suite"], r["nodeid"]) for k in known)
    )
    if known_failed:
        causes = Counter(reason for _, reason in known_failed)
        print(f"\n{len(known_failed)} known failures (conformance/known_failures.txt), by cause:")
        for reason, count in causes.most_common():
            print(f"  {count:4d}  {reason}")
    if fixed:
        print(f"\n{len(fixed)} listed as known failures now pass (take them off the list):")
        for line in fixed:
            print(f"  {line}")
    if new:
        print(f"\n{len(new)} failures not listed as known (these fail the run):")
        for line in new:
            print(f"  {line}")
    return len(new)
