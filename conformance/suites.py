"""The four LangGraph test suites the runner runs, and which of their tests are in scope.

Versions live in `pins.toml` (one edit moves to a new release); this module says, per
suite, which test files exercise a checkpoint saver and which of our savers they run on.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
PINS = HERE / "pins.toml"
KNOWN_FAILURES = HERE / "known_failures.txt"
"""Tests that still fail on our savers, each with its cause: reported, not failing CI, until
fixed (a fixed one is reported too, to be taken off the list)."""
EXCLUDES = HERE / "excludes.txt"
CACHE = HERE / ".cache"


@dataclass(frozen=True)
class Suite:
    name: str
    distribution: str
    version: str
    #: Test files in scope; None: every file that uses the checkpointer fixtures.
    files: tuple[str, ...] | None
    #: Our saver a sync / an async test of this suite runs on (library suites); LangGraph's
    #: suite parametrizes its fixtures over every selected saver instead.
    sync_kind: str = ""
    async_kind: str = ""
    #: LangGraph's saver the suite tests, named as in the baseline report.
    baseline_kind: str = ""

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(k for k in (self.sync_kind, self.async_kind) if k))

    @property
    def tree(self) -> Path:
        """The cached, prepared copy of the suite: `tests/` and `pyproject.toml`."""
        return CACHE / f"{self.distribution}-{self.version}"


# The saver-generic test files of the checkpoint libraries. Their stores (test_store*,
# test_async_store, test_ttl), serializers (test_jsonplus, test_encrypted) and cache
# (test_redis_cache) tests are not about a checkpoint saver and are not run.
_SCOPE: dict[str, dict[str, object]] = {
    "langgraph": {"files": None},
    "checkpoint": {
        "files": ("tests/test_memory.py",),
        "sync_kind": "memory",
        "async_kind": "memory",
        "baseline_kind": "lg-memory",
    },
    "checkpoint-sqlite": {
        "files": (
            "tests/test_sqlite.py",
            "tests/test_aiosqlite.py",
            "tests/test_get_delta_channel_history.py",
            "tests/test_delta_parent_walk.py",
            "tests/test_delta_channel_migration.py",
            "tests/test_conformance_delta.py",
            "tests/test_writes_task_path_migration.py",
        ),
        "sync_kind": "sqlite",
        "async_kind": "async_sqlite",
        "baseline_kind": "lg-sqlite",
    },
    "checkpoint-postgres": {
        "files": (
            "tests/test_sync.py",
            "tests/test_async.py",
            "tests/test_delta_pagination.py",
            "tests/test_delta_plain_value_seed.py",
            "tests/test_prune.py",
            "tests/test_conformance_delta.py",
        ),
        "sync_kind": "postgres",
        "async_kind": "async_postgres",
        "baseline_kind": "lg-postgres",
    },
}


def load() -> dict[str, Suite]:
    pins = tomllib.loads(PINS.read_text())["suites"]
    out: dict[str, Suite] = {}
    for name, scope in _SCOPE.items():
        pin = pins[name]
        out[name] = Suite(
            name=name,
            distribution=pin["distribution"],
            version=pin["version"],
            **scope,  # type: ignore[arg-type]
        )
    return out


@dataclass(frozen=True)
class Exclude:
    suite: str
    pattern: str
    reason: str

    def matches(self, suite: str, nodeid: str) -> bool:
        """`pattern` is a node id; without `[...]` it covers every parametrization, and `*`
        matches any run of characters."""
        if suite != self.suite:
            return False
        import re

        target = nodeid if "[" in self.pattern else nodeid.split("[", 1)[0]
        regex = ".*".join(re.escape(part) for part in self.pattern.split("*"))
        return re.fullmatch(regex, target) is not None


def load_excludes(path: Path = EXCLUDES) -> list[Exclude]:
    """`suite node-id  # reason` lines; a line without a reason is an error."""
    out: list[Exclude] = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        body, sep, reason = line.partition("#")
        fields = body.split()
        if not sep or not reason.strip() or len(fields) != 2:
            raise ValueError(f"{path.name}:{number}: want 'suite node-id  # reason', got {raw!r}")
        out.append(Exclude(fields[0], fields[1], reason.strip()))
    return out
