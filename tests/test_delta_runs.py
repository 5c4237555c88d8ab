"""Delta history by runs (revision 0008, `savers/sql/delta_runs.py`) answers exactly as
the in-memory saver's pointer walk: random trees of puts, forks, writes that arrive
before their checkpoint, stored values (None included, and snapshots stored as tails of
one another) and unchanged channels. The range
statement must answer on its own for threads the saver wrote, and fall back to the
pointer walk, with the same answer, where the numbers cannot be trusted."""

from __future__ import annotations

import itertools
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checkpointer.channels.markers import DeltaSnapshot
from checkpointer.errors import CorruptHistoryError
from checkpointer.ids import new_checkpoint_id, task_id_for
from checkpointer.savers.memory import InMemorySaver
from checkpointer.savers.migrate import migrate
from checkpointer.savers.sql import programs as saver_module
from checkpointer.savers.sql.delta import order_runs_rows
from checkpointer.savers.sql.plan import Stmt
from checkpointer.savers.sqlite import SqliteSaver
from checkpointer.types import empty_checkpoint, make_config
from tests.conftest import PG_URL, drop_schema, require_postgres
from tests.old_schema import back_to_0007

CHANNELS = ("m", "n")
SNAPSHOT_HEAD = ["h" * 400] * 12
"""The first items of every snapshot: past `tails.MIN_BASE_BYTES`, so a later, longer
snapshot of the channel is stored as a tail of an earlier one (on any branch)."""


@st.composite
def trees(draw: Any) -> list[dict[str, Any]]:
    """Steps: each puts one checkpoint under a random earlier one (or a new root), after
    the writes of a task on its parent, and sometimes writes pending on it before it is
    stored. Per channel: a new version or the parent's, and whether a value is stored."""
    count = draw(st.integers(min_value=1, max_value=14))
    steps = []
    for number in range(count):
        parent = None if number == 0 else draw(st.integers(0, number - 1) | st.none())
        if number > 0 and parent is None and draw(st.booleans()):
            parent = number - 1  # mostly chains, so runs are long
        channels = {}
        for channel in CHANNELS:
            channels[channel] = (
                draw(st.booleans()),  # a new version
                draw(st.sampled_from(["none", "value", "null", "snapshot"])),  # what is stored
                draw(st.lists(st.integers(0, 9), max_size=2)),  # writes on the parent
            )
        steps.append(
            {
                "parent": parent,
                "channels": channels,
                "early": draw(st.lists(st.sampled_from(CHANNELS), max_size=2)),
            }
        )
    return steps


def drive(saver: Any, steps: list[dict[str, Any]], thread: str, ids: list[str]) -> list[Any]:
    """Put the tree; the config of every checkpoint, in put order."""
    configs: list[Any] = []
    versions_of: list[dict[str, str]] = []
    counter = itertools.count(1)
    for number, step in enumerate(steps):
        parent = step["parent"]
        parent_config = make_config(thread) if parent is None else configs[parent]
        versions = {} if parent is None else dict(versions_of[parent])
        if parent is not None:
            for channel, (_, _, values) in step["channels"].items():
                writes = [(channel, v) for v in values]
                if writes:
                    saver.put_writes(parent_config, writes, task_id_for(number, channel))
        own = make_config(thread, "", ids[number])
        for i, channel in enumerate(step["early"]):  # pending on a checkpoint not stored yet
            saver.put_writes(own, [(channel, f"early-{number}-{i}")], task_id_for(number, "x"))
        checkpoint = empty_checkpoint()
        checkpoint["id"] = ids[number]
        new_versions = {}
        for channel, (bump, stored, _) in step["channels"].items():
            if bump or channel not in versions:
                versions[channel] = f"{number:03d}.{next(counter)}"
                new_versions[channel] = versions[channel]
                if stored == "snapshot":  # large and growing: stored as tails (0011)
                    items = [f"{channel}{i}" for i in range(number + 1)]
                    checkpoint["channel_values"][channel] = DeltaSnapshot(SNAPSHOT_HEAD + items)
                elif stored != "none":
                    value = None if stored == "null" else [channel, number]
                    checkpoint["channel_values"][channel] = value
        checkpoint["channel_versions"] = dict(versions)
        configs.append(saver.put(parent_config, checkpoint, {"step": number}, new_versions))
        versions_of.append(versions)
    return configs


@contextmanager
def walks_counted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """How many histories the saver read by the pointer walk instead of by runs."""
    walks = [0]
    original = saver_module.delta_history_stmt

    def counted(*args: Any, **kwargs: Any) -> Any:
        walks[0] += 1
        return original(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(saver_module, "delta_history_stmt", counted)
        yield walks


@contextmanager
def pointer_walk_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Every history by the pointer walk: the runs statement always asks for it."""
    with monkeypatch.context() as patch:
        patch.setattr(saver_module, "delta_runs_stmt", lambda d, **_: Stmt("SELECT -2", fetch=True))
        yield


def histories(saver: Any, configs: list[Any]) -> list[Any]:
    return [saver.get_delta_channel_history(config=c, channels=CHANNELS) for c in configs]


_counter = itertools.count()
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@SETTINGS
@given(steps=trees())
def test_sqlite_runs_answer_as_the_memory_walk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steps: list[Any]
) -> None:
    ids = [new_checkpoint_id() for _ in steps]
    want = histories(memory := InMemorySaver(), drive(memory, steps, "t", ids))
    path = tmp_path / f"runs-{next(_counter)}.db"
    with SqliteSaver.from_conn_string(str(path)) as sqlite:
        configs = drive(sqlite, steps, "t", ids)
        sqlite.copy_thread("t", "copy")
        copies = [make_config("copy", "", c["configurable"]["checkpoint_id"]) for c in configs]
        with walks_counted(monkeypatch) as walks:
            assert histories(sqlite, configs) == want
            assert histories(sqlite, copies) == want  # a copy keeps its numbers
        assert walks == [0]  # every history came from the ranges
        # Numbers that cannot be trusted: the pointer walk answers, the same.
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE checkpointer_checkpoints SET seq = NULL WHERE rowid % 3 = 0")
        assert histories(sqlite, configs) == want


@SETTINGS
@given(steps=trees())
def test_sqlite_runs_answer_as_the_memory_walk_whatever_order_rows_come_in(
    monkeypatch: pytest.MonkeyPatch, steps: list[Any]
) -> None:
    """The statement leaves its rows unordered (`delta_runs.delta_runs_sql`):
    with SQLite returning unordered rows in reverse (`reverse_unordered_selects`), and
    in the order it happens to use, the writes still come oldest first, per checkpoint in
    (task_path, task_id, idx) order (several tasks, several writes each)."""
    ids = [new_checkpoint_id() for _ in steps]
    want = histories(memory := InMemorySaver(), drive(memory, steps, "t", ids))
    for reverse in (True, False):
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        conn.execute(f"PRAGMA reverse_unordered_selects = {int(reverse)}")
        with SqliteSaver(conn) as sqlite:
            sqlite.setup()
            configs = drive(sqlite, steps, "t", ids)
            with walks_counted(monkeypatch) as walks:
                assert histories(sqlite, configs) == want
            assert walks == [0]


_ROW_KINDS = (0, 1, 4)  # a seed, a write, a seed's base (`delta_sql` row kinds)


@st.composite
def unordered_rows(draw: Any) -> list[tuple[Any, ...]]:
    """Rows as the range statement returns them, in any order: (kind, depth, channel,
    task_path, task_id, idx, ...), several writes often sharing a checkpoint (a depth),
    task paths and ids of any text."""
    text = st.text(min_size=0, max_size=3)
    rows = draw(
        st.lists(
            st.tuples(
                st.sampled_from(_ROW_KINDS),
                st.integers(0, 5),
                st.sampled_from(CHANNELS),
                text,
                text,
                st.integers(-3, 3),
            ),
            max_size=25,
            unique_by=lambda row: row[:6],
        )
    )
    return [(*row, f"value-{number}") for number, row in enumerate(rows)]


@given(rows=unordered_rows(), data=st.data())
def test_rows_are_ordered_whatever_order_they_arrive_in(rows: list[Any], data: Any) -> None:
    """Both databases return the range statement's rows unordered (`delta_runs_sql`):
    whatever order they arrive in, each channel's writes come out oldest first (larger
    depth first), per checkpoint in (task_path, task_id, idx) order, Python's order of
    str, the bytewise one of both databases."""
    arrived = data.draw(st.permutations(rows))
    ordered = order_runs_rows(list(arrived))
    assert sorted(ordered) == sorted(rows)
    for channel in CHANNELS:
        writes = [row for row in ordered if row[0] == 1 and row[2] == channel]
        assert writes == sorted(writes, key=lambda row: (-row[1], row[3], row[4], row[5]))


@pytest.fixture(scope="module")
def pg_saver() -> Iterator[Any]:
    from checkpointer.savers.postgres import PostgresSaver

    require_postgres()
    schema = f"cp_runs_{next(_counter)}_{new_checkpoint_id()[:8]}"
    try:
        with PostgresSaver.from_conn_string(PG_URL, schema=schema, pool=False) as saver:
            yield saver
    finally:
        drop_schema(schema)


@settings(
    max_examples=20,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=trees())
def test_postgres_runs_answer_as_the_memory_walk(
    pg_saver: Any, monkeypatch: pytest.MonkeyPatch, steps: list[Any]
) -> None:
    ids = [new_checkpoint_id() for _ in steps]
    thread = f"t{next(_counter)}"
    want = histories(memory := InMemorySaver(), drive(memory, steps, thread, ids))
    configs = drive(pg_saver, steps, thread, ids)
    with walks_counted(monkeypatch) as walks:
        assert histories(pg_saver, configs) == want
    assert walks == [0]


def unnumber(
    execute: Any, table: str, mark: str, thread: str, ids: list[str], picks: list[int]
) -> None:
    """Clear the seq of every write pending on the picked checkpoints: what PostgreSQL
    leaves when a write commits while its checkpoint's put is in flight (each sees the
    other's row only once both have committed). `execute(sql, params)` runs one statement
    whose placeholder is `mark`."""
    for pick in sorted(set(picks)):
        execute(
            f"UPDATE {table} SET seq = NULL WHERE thread_id = {mark} AND checkpoint_id = {mark}",
            (thread, ids[pick % len(ids)]),
        )


@SETTINGS
@given(steps=trees(), picks=st.lists(st.integers(0, 13), min_size=1, max_size=3))
def test_sqlite_writes_without_a_number_are_read_by_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steps: list[Any], picks: list[int]
) -> None:
    """Writes stored without a seq are placed by their checkpoint's number: the ranges
    still answer, exactly as the memory walk, without falling back to the pointer walk."""
    ids = [new_checkpoint_id() for _ in steps]
    want = histories(memory := InMemorySaver(), drive(memory, steps, "t", ids))
    path = tmp_path / f"unnumbered-{next(_counter)}.db"
    with SqliteSaver.from_conn_string(str(path)) as sqlite:
        configs = drive(sqlite, steps, "t", ids)
        with sqlite3.connect(path) as conn:
            unnumber(conn.execute, "checkpointer_writes", "?", "t", ids, picks)
        with walks_counted(monkeypatch) as walks:
            assert histories(sqlite, configs) == want
        assert walks == [0]


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=trees(), picks=st.lists(st.integers(0, 13), min_size=1, max_size=3))
def test_postgres_writes_without_a_number_are_read_by_runs(
    pg_saver: Any, monkeypatch: pytest.MonkeyPatch, steps: list[Any], picks: list[int]
) -> None:
    import psycopg

    ids = [new_checkpoint_id() for _ in steps]
    thread = f"t{next(_counter)}"
    want = histories(memory := InMemorySaver(), drive(memory, steps, thread, ids))
    configs = drive(pg_saver, steps, thread, ids)
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        unnumber(conn.execute, pg_saver._dialect.writes, "%s", thread, ids, picks)
    with walks_counted(monkeypatch) as walks:
        assert histories(pg_saver, configs) == want
    assert walks == [0]


def test_postgres_langgraph_threads_are_read_by_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Through LangGraph, a thread's first writes and its first checkpoint reach the saver
    concurrently; on PostgreSQL those writes often end up without a number (about half the
    threads, measured). Every history must still come from the ranges, equal to the walk."""
    from checkpointer.langgraph import LangGraphSaver
    from checkpointer.savers.postgres import PostgresSaver
    from tests.lg_graphs import ChatMany, chat_graph

    require_postgres()
    schema = f"cp_lg_runs_{new_checkpoint_id()[:8]}"
    try:
        with PostgresSaver.from_conn_string(PG_URL, schema=schema) as saver:
            graph = chat_graph(ChatMany, 4).compile(checkpointer=LangGraphSaver(saver))
            heads = []
            for i in range(8):
                config: Any = {"configurable": {"thread_id": f"lg-{i}"}}
                graph.invoke({"messages": [], "turn": 0, "mood": "new"}, config)
                head = saver.get_tuple(config)
                assert head is not None
                heads.append(head.config)
            with walks_counted(monkeypatch) as walks:
                got = [
                    saver.get_delta_channel_history(config=h, channels=["messages"]) for h in heads
                ]
            assert walks == [0]
            assert got == walked_histories(saver, heads, monkeypatch)
            assert all(len(h["messages"]["writes"]) == 5 for h in got)
    finally:
        drop_schema(schema)


async def test_async_postgres_langgraph_threads_are_read_by_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same through `ainvoke` and the async saver."""
    from checkpointer.langgraph import LangGraphSaver
    from checkpointer.savers.postgres import AsyncPostgresSaver
    from tests.lg_graphs import ChatMany, chat_graph

    require_postgres()
    schema = f"cp_lg_aruns_{new_checkpoint_id()[:8]}"
    try:
        async with AsyncPostgresSaver.from_conn_string(PG_URL, schema=schema) as saver:
            graph = chat_graph(ChatMany, 4).compile(checkpointer=LangGraphSaver(saver))
            heads = []
            for i in range(8):
                config: Any = {"configurable": {"thread_id": f"lg-{i}"}}
                await graph.ainvoke({"messages": [], "turn": 0, "mood": "new"}, config)
                head = await saver.aget_tuple(config)
                assert head is not None
                heads.append(head.config)

            async def read() -> list[Any]:
                return [
                    await saver.aget_delta_channel_history(config=h, channels=["messages"])
                    for h in heads
                ]

            with walks_counted(monkeypatch) as walks:
                got = await read()
            assert walks == [0]
            with pointer_walk_only(monkeypatch):
                saver._history_reuse.forget()
                assert got == await read()
            assert all(len(h["messages"]["writes"]) == 5 for h in got)
    finally:
        drop_schema(schema)


def walked_histories(saver: Any, heads: list[Any], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Each head's message history by the pointer walk."""
    with pointer_walk_only(monkeypatch):
        saver._history_reuse.forget()
        return [saver.get_delta_channel_history(config=h, channels=["messages"]) for h in heads]


def test_a_loop_inside_a_run_is_refused(tmp_path: Path) -> None:
    """A parent pointer edited around the saver, inside a run: the ranges no longer match
    the pointers, so the pointer walk runs and reports the loop."""
    steps = [
        {"parent": i - 1 if i else None, "channels": _no_seed(), "early": []} for i in range(6)
    ]
    ids = [new_checkpoint_id() for _ in steps]
    path = tmp_path / "loop.db"
    with SqliteSaver.from_conn_string(str(path)) as sqlite:
        configs = drive(sqlite, steps, "t", ids)
        with sqlite3.connect(path) as conn:
            conn.execute(
                "UPDATE checkpointer_checkpoints SET parent_checkpoint_id = ? "
                "WHERE checkpoint_id = ?",
                (ids[4], ids[2]),
            )
        with pytest.raises(CorruptHistoryError):
            sqlite.get_delta_channel_history(config=configs[-1], channels=CHANNELS)


@st.composite
def tampers(draw: Any) -> list[tuple[str, int, int | None, int]]:
    """Edits around the saver, by put order (indexes wrap around the tree): a parent
    pointer moved to another checkpoint (or cleared); a run_start set to another
    checkpoint's seq plus -1, 0 or 1 (reversed and overlapping runs), or cleared; a seq
    cleared (a hole, an unnumbered checkpoint).

    Not generated: a checkpoint given another number (once the one holding it moved or was
    cleared, no repeat is left to see), its pending writes keeping their own. The checks
    compare checkpoints' numbers with their parent pointers, not writes' numbers with
    their checkpoint's, which would cost a probe per write; the runs then miss those
    writes (README, "Delta history reads by runs")."""
    pointer = st.tuples(
        st.just("parent_checkpoint_id"), st.integers(0, 13), st.integers(0, 13) | st.none()
    ).map(lambda e: (*e, 0))
    run_start = st.tuples(
        st.just("run_start"),
        st.integers(0, 13),
        st.integers(0, 13) | st.none(),
        st.integers(-1, 1),
    )
    seq = st.tuples(st.just("seq"), st.integers(0, 13), st.none(), st.just(0))
    return draw(st.lists(pointer | pointer | run_start | seq, min_size=1, max_size=3))


def answers(saver: Any, configs: list[Any]) -> list[Any]:
    """Each checkpoint's histories, or the type of the error reading them raised."""
    out: list[Any] = []
    for config in configs:
        try:
            out.append(saver.get_delta_channel_history(config=config, channels=CHANNELS))
        except CorruptHistoryError as exc:
            out.append(type(exc))
    return out


@settings(SETTINGS, max_examples=100)
@given(steps=trees(), edits=tampers())
def test_tampered_numbers_and_pointers_answer_as_the_pointer_walk(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    steps: list[Any],
    edits: list[tuple[str, int, int | None, int]],
) -> None:
    """Whatever was edited around the saver, the ranges answer exactly as the pointer walk
    (which is what `checks_sql` must guarantee: it asks for the walk wherever the numbers
    and the pointers disagree), loops included."""
    ids = [new_checkpoint_id() for _ in steps]
    path = tmp_path / f"tamper-{next(_counter)}.db"
    with SqliteSaver.from_conn_string(str(path)) as sqlite:
        configs = drive(sqlite, steps, "t", ids)
        with sqlite3.connect(path) as conn:
            for column, at, to, delta in edits:
                value: Any = None
                if to is not None and column == "parent_checkpoint_id":
                    value = ids[to % len(ids)]
                elif to is not None:
                    (value,) = conn.execute(
                        "SELECT seq + ? FROM checkpointer_checkpoints WHERE checkpoint_id = ?",
                        (delta, ids[to % len(ids)]),
                    ).fetchone()
                conn.execute(
                    f"UPDATE checkpointer_checkpoints SET {column} = ? WHERE checkpoint_id = ?",
                    (value, ids[at % len(ids)]),
                )
        assert answers(sqlite, configs) == walked(sqlite, configs, monkeypatch)


def walked(saver: Any, configs: list[Any], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """`answers`, every history by the pointer walk."""
    with pointer_walk_only(monkeypatch):
        return answers(saver, configs)


def test_a_reordered_run_answers_as_its_pointers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parent pointers edited inside a run into another order of the same checkpoints (no
    loop, no hole, every seq once, run_start untouched): the writes come in the pointers'
    order, not the numbers'."""
    steps = [
        {"parent": i - 1 if i else None, "channels": _no_seed(), "early": []} for i in range(7)
    ]
    ids = [new_checkpoint_id() for _ in steps]
    path = tmp_path / "reordered.db"
    with SqliteSaver.from_conn_string(str(path)) as sqlite:
        configs = drive(sqlite, steps, "t", ids)
        before = answers(sqlite, configs)
        with sqlite3.connect(path) as conn:
            for child, parent in ((5, 3), (3, 4), (4, 2)):
                conn.execute(
                    "UPDATE checkpointer_checkpoints SET parent_checkpoint_id = ? "
                    "WHERE checkpoint_id = ?",
                    (ids[parent], ids[child]),
                )
        by_runs = answers(sqlite, configs)
        assert by_runs == walked(sqlite, configs, monkeypatch)
        assert by_runs[6] != before[6]  # the same writes, in another order


def test_a_reversed_run_is_walked(tmp_path: Path) -> None:
    """A run_start edited above its checkpoint's seq: the runs must not count backwards
    forever (they did: the read never returned), and the pointer walk answers."""
    steps = [
        {"parent": i - 1 if i else None, "channels": _no_seed(), "early": []} for i in range(6)
    ]
    ids = [new_checkpoint_id() for _ in steps]
    want = histories(memory := InMemorySaver(), drive(memory, steps, "t", ids))
    path = tmp_path / "reversed.db"
    with SqliteSaver.from_conn_string(str(path)) as sqlite:
        configs = drive(sqlite, steps, "t", ids)
        with sqlite3.connect(path) as conn:
            conn.execute(
                "UPDATE checkpointer_checkpoints SET run_start = 4 WHERE checkpoint_id = ?",
                (ids[3],),
            )
        assert histories(sqlite, configs) == want


@pytest.mark.parametrize(
    "edits",
    [
        [("run_start", 3, 4)],  # reversed: the runs must not count backwards forever
        [("parent_checkpoint_id", 5, 3), ("parent_checkpoint_id", 3, 4)],  # reordered
        [("parent_checkpoint_id", 2, 4)],  # a loop inside a run
        [("seq", 2, 3)],  # a repeated seq
    ],
)
def test_postgres_tampered_runs_answer_as_the_pointer_walk(
    monkeypatch: pytest.MonkeyPatch, edits: list[tuple[str, int, int]]
) -> None:
    """PostgreSQL checks its spans by another statement (`delta_runs.broken_span`): the
    same edits around the saver answer as its pointer walk."""
    import psycopg

    from checkpointer.savers.postgres import PostgresSaver

    require_postgres()
    steps = [
        {"parent": i - 1 if i else None, "channels": _no_seed(), "early": []} for i in range(7)
    ]
    ids = [new_checkpoint_id() for _ in steps]
    schema = f"cp_tamper_{new_checkpoint_id()[:8]}"
    try:
        with PostgresSaver.from_conn_string(PG_URL, schema=schema, pool=False) as saver:
            configs = drive(saver, steps, "t", ids)
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                for column, at, to in edits:
                    value: Any = ids[to] if column == "parent_checkpoint_id" else to
                    conn.execute(
                        f'UPDATE "{schema}".checkpointer_checkpoints SET {column} = %s '
                        "WHERE checkpoint_id = %s",
                        (value, ids[at]),
                    )
            assert answers(saver, configs) == walked(saver, configs, monkeypatch)
    finally:
        drop_schema(schema)


def _no_seed() -> dict[str, Any]:
    return {channel: (True, "none", [1]) for channel in CHANNELS}


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_upgrade_from_0007_numbers_old_threads(kind: str, tmp_path: Path) -> None:
    """Threads written at 0007 (no numbers) read as before the upgrade, by runs after it
    (the migration numbers them), and go on by runs with new checkpoints."""
    from checkpointer.savers.postgres import PostgresSaver

    steps = [
        {"parent": parent, "channels": channels, "early": early}
        for parent, channels, early in [
            (None, {"m": (True, "value", []), "n": (True, "none", [])}, []),
            (0, {"m": (True, "none", [1, 2]), "n": (True, "null", [3])}, ["m"]),
            (1, {"m": (True, "none", [4]), "n": (False, "none", [5])}, []),
            (1, {"m": (False, "value", [6]), "n": (True, "none", [])}, ["n"]),  # a fork
            (3, {"m": (True, "none", [7]), "n": (True, "none", [8, 9])}, []),
            (2, {"m": (True, "none", [0]), "n": (True, "value", [1])}, ["m"]),
        ]
    ]
    ids = [new_checkpoint_id() for _ in steps]
    more = [new_checkpoint_id() for _ in steps]
    want = histories(memory := InMemorySaver(), drive(memory, steps, "t", ids))
    memory_more = drive(memory, steps, "u", more)
    schema = None if kind == "sqlite" else f"cp_up_{new_checkpoint_id()[:8]}"
    url = f"sqlite:///{tmp_path / 'old.db'}" if schema is None else PG_URL

    def open_saver() -> Any:
        if schema is None:
            return SqliteSaver.from_conn_string(str(tmp_path / "old.db"), setup=False)
        return PostgresSaver.from_conn_string(PG_URL, schema=schema, pool=False, setup=False)

    def execute(sql: str) -> None:
        if schema is None:
            with sqlite3.connect(tmp_path / "old.db") as conn:
                conn.execute(sql)
        else:
            import psycopg

            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(sql)

    if schema is not None:
        require_postgres()
    try:
        migrate(url, schema=schema)
        with open_saver() as saver:
            configs = drive(saver, steps, "t", ids)
            before = [t.checkpoint for t in saver.list(make_config("t"))]
        back_to_0007(execute, schema)
        migrate(url, schema=schema)
        with open_saver() as saver, pytest.MonkeyPatch.context() as patch:
            walks = [0]
            original = saver_module.delta_history_stmt

            def counted(*args: Any, **kwargs: Any) -> Any:
                walks[0] += 1
                return original(*args, **kwargs)

            patch.setattr(saver_module, "delta_history_stmt", counted)
            assert histories(saver, configs) == want
            assert [t.checkpoint for t in saver.list(make_config("t"))] == before
            assert walks == [0]  # numbered by the migration
            configs_more = drive(saver, steps, "u", more)
            assert histories(saver, configs_more) == histories(memory, memory_more)
            assert walks == [0]
    finally:
        if schema is not None:
            drop_schema(schema)
