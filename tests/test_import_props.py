"""Hostile export files: `import_threads` (what `checkpointer import` runs) on a valid export
mutated at random (lines dropped, repeated or swapped, fields replaced by wrong types, odd
ids, deep or huge values, truncated or garbage lines), with and without `replace`.

Each import must finish within a time bound and either import or raise one of the library's
own errors; whatever it does, the thread that was already in the target database reads back
exactly as before, and a refused import leaves nothing of the file behind. Value bytes are
imported as stored (they may be ciphertext), so a value damaged in the file is refused when
read, with a typed error naming its thread.
"""

from __future__ import annotations

import io
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from checkpointer.errors import CheckpointerError, CorruptValueError
from checkpointer.export import export_threads, import_threads
from checkpointer.ids import new_checkpoint_id, task_id_for
from checkpointer.inspect import Database
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.types import empty_checkpoint, make_config
from tests.test_fuzz import example_settings

CALL_LIMIT_S = 60.0
"""A generous bound: an import of a few dozen lines that takes longer is a hang."""

HOSTILE_VALUES: list[Any] = [
    None,
    5,
    -1,
    1.5,
    True,
    "",
    "\x00",
    "a" * 2_000,
    "\ud800",
    [],
    ["a", "b"],
    {},
    {"configurable": None},
    {"x": {"x": {"x": {"x": {}}}}},
]


def _thread(saver: SqliteSaver, thread_id: str, steps: int) -> None:
    """A short thread: values that change, and pending writes under UUID and plain ids."""
    config = make_config(thread_id)
    parent = None
    for step in range(steps):
        checkpoint = empty_checkpoint()
        checkpoint["id"] = new_checkpoint_id()
        version = f"{step + 1:012d}.0"
        checkpoint["channel_versions"] = {"messages": version, "turn": version}
        checkpoint["channel_values"] = {
            "messages": [f"m{i}" for i in range(step + 1)],
            "turn": step,
        }
        config = saver.put(
            config if parent else make_config(thread_id),
            checkpoint,
            {"step": step, "source": "loop"},
            {"messages": version, "turn": version},
        )
        saver.put_writes(config, [("messages", [f"w{step}"])], task_id_for(step, "node"))
        parent = config


def _state(saver: SqliteSaver, thread_id: str) -> list[Any]:
    """What a reader sees of a thread: every tuple, newest first."""
    return [
        (t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
        for t in saver.list(make_config(thread_id))
    ]


@pytest.fixture(scope="module")
def export_lines(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    path = tmp_path_factory.mktemp("src") / "src.db"
    with SqliteSaver.from_conn_string(path) as saver:
        _thread(saver, "chat", 4)
    out = io.StringIO()
    with Database.open(str(path)) as db:
        export_threads(db, ["chat"], out)
    return out.getvalue().splitlines(keepends=True)


@pytest.fixture
def target(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / f"{uuid.uuid4().hex}.db"
    with SqliteSaver.from_conn_string(path) as saver:
        _thread(saver, "keep", 3)
    yield path


def _mutations(lines: list[str]) -> st.SearchStrategy[list[str]]:
    """A valid file changed in one to three places."""
    n = len(lines)

    def change(draw: st.DrawFn, current: list[str]) -> list[str]:
        kind = draw(st.sampled_from(["drop", "repeat", "swap", "field", "cut", "garbage"]))
        if not current:
            return ['{"kind": "header"}\n']
        i = draw(st.integers(0, len(current) - 1))
        if kind == "drop":
            return current[:i] + current[i + 1 :]
        if kind == "repeat":
            return [*current[: i + 1], current[i], *current[i + 1 :]]
        if kind == "swap":
            j = draw(st.integers(0, len(current) - 1))
            swapped = list(current)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            return swapped
        if kind == "cut":
            line = current[i]
            return [*current[:i], line[: draw(st.integers(0, max(len(line) - 1, 0)))] + "\n"]
        if kind == "garbage":
            junk = draw(st.sampled_from(["\n", "[]\n", "null\n", "{\n", '{"kind": 5}\n']))
            return [*current[:i], junk, *current[i:]]
        try:
            record = json.loads(current[i])
        except ValueError:
            return current
        if not isinstance(record, dict) or not record:
            return current
        key = draw(st.sampled_from(sorted(record)))
        record[key] = draw(st.sampled_from(HOSTILE_VALUES))
        text = json.dumps(record, ensure_ascii=False) if key != "data" else json.dumps(record)
        return [*current[:i], text + "\n", *current[i + 1 :]]

    @st.composite
    def mutated(draw: st.DrawFn) -> list[str]:
        current = list(lines)
        for _ in range(draw(st.integers(1, 3))):
            current = change(draw, current)
        return current

    assert n > 2
    return mutated()


def test_hostile_export_files_import_or_fail_typed_and_lose_nothing(
    export_lines: list[str], tmp_path: Path
) -> None:
    pool = ThreadPoolExecutor(max_workers=1)
    seen: dict[str, int] = {}

    @example_settings(40)
    @given(lines=_mutations(export_lines), replace=st.booleans(), as_name=st.booleans())
    def check(lines: list[str], replace: bool, as_name: bool) -> None:
        path = tmp_path / f"{uuid.uuid4().hex}.db"
        with SqliteSaver.from_conn_string(path) as saver:
            _thread(saver, "keep", 3)
            if as_name:  # the file's thread is already there: replace or refusal decide
                _thread(saver, "chat", 2)
            before_keep = _state(saver, "keep")
            before_chat = _state(saver, "chat")

        def run() -> Any:
            with Database.open(str(path)) as db:
                return import_threads(db, lines, replace=replace)

        outcome: Any
        try:
            outcome = pool.submit(run).result(timeout=CALL_LIMIT_S)
        except FutureTimeout:
            pytest.fail(f"import did not return within {CALL_LIMIT_S} s")
        except CheckpointerError as exc:
            outcome = exc
        # Anything else (TypeError, KeyError, sqlite3 errors...) propagates and fails.
        seen[type(outcome).__name__] = seen.get(type(outcome).__name__, 0) + 1

        with SqliteSaver.from_conn_string(path) as saver:
            assert _state(saver, "keep") == before_keep  # never touched by the file
            if isinstance(outcome, CheckpointerError):
                assert _state(saver, "chat") == before_chat  # refused: nothing landed
            else:
                # Imported: the thread reads back. Value bytes are carried as stored (they may
                # be ciphertext, which an import cannot check), so a value damaged in the
                # file is refused when read, as a typed error naming where it is.
                try:
                    assert len(_state(saver, "chat")) >= 1
                except CorruptValueError as exc:
                    assert exc.thread_id == "chat"

    try:
        check()
    finally:
        pool.shutdown(wait=True)
    # Both sides were exercised: some files imported, some were refused.
    assert seen.get("TransferCounts", 0) > 0 and len(seen) > 1, seen


def test_the_unmutated_file_imports(export_lines: list[str], target: Path) -> None:
    """The control: the same file, untouched, imports and reads back."""
    with Database.open(str(target)) as db:
        counts = import_threads(db, export_lines)
    assert counts.checkpoints == 4
    with SqliteSaver.from_conn_string(target) as saver:
        assert [
            t.checkpoint["channel_values"]["turn"] for t in saver.list(make_config("chat"))
        ] == [
            3,
            2,
            1,
            0,
        ]
