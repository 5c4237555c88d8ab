"""SQLite's thread summaries kept by triggers that update the row in place (schema revision
0013): whatever mix of writes arrives, the kept summary equals one recomputed from the
rows, and a database written at 0012 upgrades and keeps counting exactly."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointer.ids import next_channel_version, task_id_for
from checkpointer.savers.sql.schema import SCHEMA_REVISION, VERSION_TABLE
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.types import ERROR, empty_checkpoint, make_config
from tests.old_schema import back_to

SUMMARY_TRIGGERS = (
    "checkpointer_checkpoints_ai",
    "checkpointer_blobs_ai",
    "checkpointer_writes_ai",
)


def _trigger_sql(path: Path) -> dict[str, str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'")
        return {name: sql for name, sql in rows if name in SUMMARY_TRIGGERS}


def _summaries(saver: SqliteSaver) -> list[tuple[Any, ...]]:
    return [
        (s.thread_id, s.head_checkpoint_id, s.checkpoint_count, s.bytes)
        for s in saver.list_threads(sort="id", limit=None)
    ]


def _assert_kept_equals_recomputed(saver: SqliteSaver) -> None:
    kept = _summaries(saver)
    saver.refresh_thread_summaries([s[0] for s in kept])
    assert kept == _summaries(saver)


class Writer:
    """Puts and writes on a few threads, in any order a caller may send them: new threads
    started by a checkpoint or by early writes, subgraph namespaces, value rows, re-saved
    checkpoints and replaced special writes."""

    def __init__(self, saver: SqliteSaver) -> None:
        self.saver = saver
        self.heads: dict[tuple[str, str], dict[str, Any]] = {}
        self.serial = 0

    def _id(self) -> str:
        self.serial += 1
        return f"cp-{self.serial:05d}"

    def put(self, thread: str, ns: str, value: Any) -> None:
        cp = empty_checkpoint()
        cp["id"] = self._id()
        version = next_channel_version(None)
        cp["channel_versions"] = {"state": version}
        cp["channel_values"] = {"state": value}
        parent = self.heads.get((thread, ns), make_config(thread, ns))
        config = self.saver.put(parent, cp, {"step": self.serial}, {"state": version})
        self.heads[(thread, ns)] = config

    def reput(self, thread: str, ns: str, note: str) -> None:
        head = self.heads.get((thread, ns))
        tup = self.saver.get_tuple(head) if head is not None else None
        if tup is None:
            return
        parent = tup.parent_config or make_config(thread, ns)
        metadata: Any = {**tup.metadata, "note": note}
        self.saver.put(parent, tup.checkpoint, metadata, {})

    def write(self, thread: str, ns: str, values: list[Any], special: bool) -> None:
        config = self.heads.get((thread, ns)) or make_config(thread, ns, self._id())
        channel = ERROR if special else "state"
        task = task_id_for(self.serial, "node")
        self.saver.put_writes(config, [(channel, v) for v in values], task)


_VALUES = st.one_of(
    st.integers(-5, 5), st.text(max_size=20), st.lists(st.text(max_size=30), max_size=6)
)
_OPS = st.lists(
    st.tuples(
        st.sampled_from(["put", "reput", "write", "special"]),
        st.sampled_from(["a", "b", "c"]),
        st.sampled_from(["", "sub"]),
        st.lists(_VALUES, min_size=1, max_size=3),
    ),
    min_size=1,
    max_size=25,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_OPS)
def test_kept_summaries_equal_recomputed_ones(tmp_path_factory: Any, ops: list[Any]) -> None:
    path = tmp_path_factory.mktemp("summaries") / "t.db"
    with SqliteSaver.from_conn_string(path) as saver:
        writer = Writer(saver)
        for kind, thread, ns, values in ops:
            if kind == "put":
                writer.put(thread, ns, values[0])
            elif kind == "reput":
                writer.reput(thread, ns, str(values[0]) * 7)
            else:
                writer.write(thread, ns, values, special=kind == "special")
        _assert_kept_equals_recomputed(saver)


def _write_some(saver: SqliteSaver, start: int) -> None:
    writer = Writer(saver)
    writer.serial = start
    writer.write("early", "", ["before any checkpoint"], special=False)  # a new thread's row
    for step in range(4):
        writer.put("main", "", ["x" * 40] * (step + 1))  # a value row each
        writer.write("main", "", [step, "y" * 30], special=False)
        writer.put("main", "sub", step)  # inline, and no head for a subgraph
    writer.write("main", "", ["boom"], special=True)
    writer.write("main", "", ["a longer boom " * 9], special=True)  # replaces
    writer.reput("main", "", "re-saved")


def test_upgrade_from_0012_keeps_summaries_exact(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with SqliteSaver.from_conn_string(path) as saver:
        _write_some(saver, 0)
        written = _summaries(saver)
    new_bodies = _trigger_sql(path)
    assert all("changes()=0" in sql for sql in new_bodies.values()), new_bodies

    def execute(sql: str) -> Any:
        with sqlite3.connect(path) as conn:
            return conn.execute(sql).fetchall()

    back_to("0012", execute)
    assert execute(f"SELECT version_num FROM {VERSION_TABLE}") == [("0012",)]
    old_bodies = _trigger_sql(path)
    assert set(old_bodies) == set(SUMMARY_TRIGGERS)
    assert all("ON CONFLICT(thread_id)DO UPDATE" in sql for sql in old_bodies.values())

    with SqliteSaver.from_conn_string(path) as saver:  # setup() upgrades
        assert execute(f"SELECT version_num FROM {VERSION_TABLE}") == [(SCHEMA_REVISION,)]
        assert _trigger_sql(path) == new_bodies
        assert _summaries(saver) == written
        _write_some(saver, 1000)
        _assert_kept_equals_recomputed(saver)
        [main] = saver.list_threads(thread_ids=["main"])
        assert main.checkpoint_count == 16  # 4 root and 4 subgraph puts a round, 2 rounds
        roots = [
            t.config["configurable"]["checkpoint_id"] for t in saver.list(make_config("main", ""))
        ]
        assert main.head_checkpoint_id == max(roots) > "cp-01000"
