"""pytest plugin loaded into each suite's run (`-p conformance.plugin`): keeps the tests in
scope, drops the excluded ones, and writes one JSON line per test (saver, outcome, message)
to `$CONFORMANCE_RESULTS` for the runner to count.

Works under pytest-xdist: workers collect and select, the controller records outcomes.
"""

from __future__ import annotations

import inspect
import json
import os
import re
from pathlib import Path
from typing import Any

import pytest

from conformance import suites

_FIXTURES = ("sync_checkpointer", "async_checkpointer")
_SAVER_PROP = "conformance_saver"
_STATIC_PROP = "conformance_static_saver"
# A frame in our library, in pytest's long, short or native traceback styles.
_OUR_FRAME = re.compile(r"(?:^|[\s\"])(?:[^\s\"]*/)?(checkpointer/[\w/]+\.py)(?::|\", line )(\d+)")


def _suite() -> suites.Suite:
    return suites.load()[os.environ["CONFORMANCE_SUITE"]]


def _selected() -> set[str]:
    return {k for k in os.environ.get("CONFORMANCE_SAVERS", "").split(",") if k}


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _write(records: list[dict[str, Any]]) -> None:
    path = os.environ.get("CONFORMANCE_RESULTS")
    if not path or not records:
        return
    with Path(path).open("a") as out:
        for record in records:
            out.write(json.dumps(record) + "\n")


def _static_kind(suite: suites.Suite, item: pytest.Item) -> str:
    """The saver a test runs on, known before it runs."""
    callspec = getattr(item, "callspec", None)
    if callspec is not None:
        for name in _FIXTURES:
            if name in callspec.params:
                return str(callspec.params[name])
    if os.environ.get("CONFORMANCE_BASELINE") == "1":
        return suite.baseline_kind
    func = getattr(item, "obj", None)
    return suite.async_kind if inspect.iscoroutinefunction(func) else suite.sync_kind


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    suite = _suite()
    excludes = suites.load_excludes()
    selected = _selected()
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    excluded: list[dict[str, Any]] = []
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if suite.files is None and not any(f in fixtures for f in _FIXTURES):
            dropped.append(item)  # not a saver test
            continue
        kind = _static_kind(suite, item)
        if selected and kind not in selected:
            dropped.append(item)
            continue
        rule = next((e for e in excludes if e.matches(suite.name, item.nodeid)), None)
        if rule is not None:
            dropped.append(item)
            excluded.append(
                {
                    "suite": suite.name,
                    "nodeid": item.nodeid,
                    "saver": kind,
                    "outcome": "excluded",
                    "message": rule.reason,
                }
            )
            continue
        item.user_properties.append((_STATIC_PROP, kind))
        keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker in (None, "gw0"):
        _write(excluded)


class _Recorder:
    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}

    def add(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        savers = [v for k, v in report.user_properties if k == _SAVER_PROP]
        record = self.records.setdefault(
            report.nodeid,
            {
                "suite": os.environ["CONFORMANCE_SUITE"],
                "nodeid": report.nodeid,
                "saver": None,
                "outcome": "passed",
                "message": "",
                "where": "",
                "duration": 0.0,
            },
        )
        record["saver"] = savers[0] if savers else props.get(_STATIC_PROP, record["saver"])
        record["duration"] += report.duration
        if report.skipped and record["outcome"] == "passed":
            record["outcome"] = "skipped"
            record["message"] = _message(report)
        elif report.failed and record["outcome"] != "failed":
            record["outcome"] = "failed"
            record["message"] = (f"[{report.when}] " if report.when != "call" else "") + _message(
                report
            )
            record["where"] = _our_frame(report)


def _message(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # a skip: (path, line, reason)
        return str(longrepr[2])
    crash = getattr(longrepr, "reprcrash", None)
    if crash is not None and getattr(crash, "message", None):
        return str(crash.message)
    text = str(longrepr).strip().splitlines()
    return text[-1] if text else ""


def _our_frame(report: pytest.TestReport) -> str:
    """The deepest frame of our library in the traceback: where the failure surfaced."""
    matches = _OUR_FRAME.findall(str(report.longrepr))
    return f"{matches[-1][0]}:{matches[-1][1]}" if matches else ""


_RECORDER = _Recorder()


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _RECORDER.add(report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _is_worker(session.config):
        return
    _write(list(_RECORDER.records.values()))
