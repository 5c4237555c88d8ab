"""Schema versioning: Alembic scripts, setup(), migrate(), and SchemaVersionError."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory

from checkpointer.errors import SchemaVersionError
from checkpointer.ids import next_channel_version, task_id_for
from checkpointer.savers.migrate import migrate
from checkpointer.savers.postgres import AsyncPostgresSaver, PostgresSaver
from checkpointer.savers.sql import migration as migrate_module
from checkpointer.savers.sql.migration import (
    alembic_config,
    check_revision,
    render_upgrade_sql,
    script_location,
    split_statements,
)
from checkpointer.savers.sql.schema import (
    KNOWN_REVISIONS,
    SCHEMA_REVISION,
    VERSION_TABLE,
    build_metadata,
)
from checkpointer.savers.sqlite import AsyncSqliteSaver, SqliteSaver
from checkpointer.serde import MsgpackSerializer, default_serializer
from checkpointer.types import empty_checkpoint, make_config
from tests.old_schema import back_to_0007


def test_scripts_are_found_and_head_matches_code() -> None:
    location = script_location()
    assert (location / "env.py").is_file()
    scripts = ScriptDirectory.from_config(alembic_config("sqlite", None))
    assert scripts.get_current_head() == SCHEMA_REVISION
    history = [rev.revision for rev in scripts.walk_revisions()][::-1]
    assert tuple(history) == KNOWN_REVISIONS


@pytest.mark.parametrize("dialect", ["sqlite", "postgresql"])
def test_offline_sql_is_plain_transactional_ddl(dialect: str) -> None:
    script = render_upgrade_sql(dialect, "public" if dialect == "postgresql" else None, None)
    assert "CONCURRENTLY" not in script.upper()
    assert VERSION_TABLE in script
    assert "checkpointer_checkpoints" in script
    statements = split_statements(script)
    # One statement each; only a trigger's body holds `;` of its own, between BEGIN and END.
    for statement in statements:
        body = "\n".join(line for line in statement.splitlines() if not line.startswith("--"))
        body = body.strip().rstrip(";")
        if body.startswith("CREATE TRIGGER"):
            assert body.endswith("; END"), statement
            assert ";" not in body[: body.index(" BEGIN ")], statement
        else:
            assert ";" not in body, statement


def test_migrate_sql_returns_script_without_touching_anything(tmp_path: Path) -> None:
    path = tmp_path / "never.db"
    script = migrate(f"sqlite:///{path}", sql=True)
    assert script is not None and "CREATE TABLE checkpointer_writes" in script
    assert not path.exists()
    pg_script = migrate("postgresql://nobody@127.0.0.1:1/none", sql=True, schema="My Schema")
    assert pg_script is not None
    assert 'CREATE SCHEMA IF NOT EXISTS "My Schema"' in pg_script
    assert '"My Schema".checkpointer_blobs' in pg_script


def test_check_revision_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SchemaVersionError, match="setup"):
        check_revision(None, where="db")
    with pytest.raises(SchemaVersionError, match="newer") as newer:
        check_revision("9999", where="db")
    assert "upgrade" in str(newer.value)
    # Pretend this code is one revision ahead: the database is then "older".
    monkeypatch.setattr(migrate_module, "SCHEMA_REVISION", "0002")
    monkeypatch.setattr(migrate_module, "KNOWN_REVISIONS", ("0001", "0002"))
    with pytest.raises(SchemaVersionError, match="checkpointer migrate --url URL"):
        check_revision("0001", where="db")


# ------------------------------------------------------------------ SQLite
def _not_version_table(obj: Any, name: str | None, type_: str, reflected: bool, other: Any) -> bool:
    return name != VERSION_TABLE


def test_sqlite_unsetup_database_raises(tmp_path: Path) -> None:
    with SqliteSaver.from_conn_string(tmp_path / "x.db", setup=False) as saver:
        with pytest.raises(SchemaVersionError, match="checkpointer migrate --url URL"):
            saver.get_tuple(make_config("t"))
        saver.setup()
        assert saver.get_tuple(make_config("t")) is None


async def test_async_sqlite_unsetup_database_raises(tmp_path: Path) -> None:
    async with AsyncSqliteSaver.from_conn_string(tmp_path / "x.db", setup=False) as saver:
        with pytest.raises(SchemaVersionError):
            await saver.aget_tuple(make_config("t"))
        await saver.setup()
        assert await saver.aget_tuple(make_config("t")) is None


def test_sqlite_setup_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    for _ in range(3):
        with SqliteSaver.from_conn_string(path, setup=True) as saver:
            saver.setup()
    with sqlite3.connect(path) as conn:
        assert conn.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchall() == [
            (SCHEMA_REVISION,)
        ]


def test_sqlite_newer_schema_raises(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    with SqliteSaver.from_conn_string(path, setup=True):
        pass
    with sqlite3.connect(path) as conn:
        conn.execute(f"UPDATE {VERSION_TABLE} SET version_num = '9999'")
    with SqliteSaver.from_conn_string(path, setup=False) as saver:
        with pytest.raises(SchemaVersionError, match="newer"):
            saver.get_tuple(make_config("t"))
        with pytest.raises(SchemaVersionError, match="newer"):
            saver.setup()


def test_sqlite_schema_matches_metadata(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    migrate(str(path))
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"include_object": _not_version_table})
        diff = compare_metadata(context, build_metadata("sqlite"))
    engine.dispose()
    assert diff == []


def _sqlite_at_revision(conn: sqlite3.Connection, revision: str) -> None:
    """The tables as code at `revision` made them, in an empty SQLite database."""
    for statement in split_statements(render_upgrade_sql("sqlite", None, None, revision)):
        conn.execute(statement)


def _pg_at_revision(conn: psycopg.Connection[Any], schema: str, revision: str) -> None:
    """`schema`, created, with the tables as code at `revision` made them."""
    conn.execute(f'CREATE SCHEMA "{schema}"')
    for statement in split_statements(render_upgrade_sql("postgresql", schema, None, revision)):
        conn.execute(statement)


def _write_rows_at_first_revision(execute: Any, placeholder: str, schema: str = "") -> None:
    """Rows as revision 0001 lays them out, written without the saver (a database left by
    an older release). Later revisions must upgrade them in place."""
    serde = default_serializer()
    prefix = f'"{schema}".' if schema else ""
    p = placeholder
    blob_type, blob = serde.dumps_typed({"kept": [1, 2]})
    write_type, write = serde.dumps_typed("pending")
    record = json.dumps(
        {
            "v": 4,
            "ts": "2024-01-01T00:00:00+00:00",
            "channel_versions": {"state": "1"},
            "versions_seen": {},
            "updated_channels": None,
        }
    )
    execute(
        f"INSERT INTO {prefix}checkpointer_checkpoints (thread_id, checkpoint_ns, checkpoint_id,"
        f" parent_checkpoint_id, run_id, checkpoint, metadata) VALUES ({p}, {p}, {p}, {p}, {p},"
        f" {p}, {p})",
        (
            "old-thread",
            "",
            "cp-1",
            None,
            "run-1",
            record,
            json.dumps({"step": 1, "run_id": "run-1"}),
        ),
    )
    execute(
        f"INSERT INTO {prefix}checkpointer_blobs (thread_id, checkpoint_ns, channel, version,"
        f" type, blob) VALUES ({p}, {p}, {p}, {p}, {p}, {p})",
        ("old-thread", "", "state", "1", blob_type, blob),
    )
    execute(
        f"INSERT INTO {prefix}checkpointer_writes (thread_id, checkpoint_ns, checkpoint_id,"
        f" task_id, idx, task_path, channel, type, blob) VALUES ({p}, {p}, {p}, {p}, {p}, {p},"
        f" {p}, {p}, {p})",
        ("old-thread", "", "cp-1", str(uuid.UUID(int=1)), 0, "", "state", write_type, write),
    )


def _assert_old_rows_read_back(tup: Any) -> None:
    assert tup is not None
    assert tup.checkpoint["channel_values"] == {"state": {"kept": [1, 2]}}
    assert tup.metadata == {"step": 1, "run_id": "run-1"}
    assert tup.pending_writes == [(str(uuid.UUID(int=1)), "state", "pending")]


def test_sqlite_upgrade_from_oldest_revision_keeps_data(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    oldest = KNOWN_REVISIONS[0]
    with sqlite3.connect(path) as conn:
        _sqlite_at_revision(conn, oldest)
        _write_rows_at_first_revision(conn.execute, "?")
    migrate(f"sqlite:///{path}")
    with SqliteSaver.from_conn_string(path) as saver:
        _assert_old_rows_read_back(saver.get_tuple(make_config("old-thread")))


# ------------------------------------------------------------------ PostgreSQL
def _pg_version(pg_url: str, schema: str) -> list[tuple[str]]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        return conn.execute(f'SELECT version_num FROM "{schema}".{VERSION_TABLE}').fetchall()


def test_pg_unsetup_and_newer_schema_raise(pg_url: str, pg_schema: str) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, setup=False) as saver:
        with pytest.raises(SchemaVersionError, match="checkpointer migrate --url URL"):
            saver.get_tuple(make_config("t"))
        saver.setup()
        saver.setup()
        assert saver.get_tuple(make_config("t")) is None
    assert _pg_version(pg_url, pg_schema) == [(SCHEMA_REVISION,)]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'UPDATE "{pg_schema}".{VERSION_TABLE} SET version_num = %s', ("9999",))
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, pool=False, setup=False) as saver:
        with pytest.raises(SchemaVersionError, match="newer"):
            saver.get_tuple(make_config("t"))
        with pytest.raises(SchemaVersionError, match="newer"):
            saver.setup()
    opening = PostgresSaver.from_conn_string(pg_url, schema=pg_schema, pool=False)
    with pytest.raises(SchemaVersionError, match="newer"):  # set up on open by default
        opening.__enter__()


def test_pg_from_conn_string_sets_up_by_default_like_sqlite(pg_url: str, pg_schema: str) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, pool=False) as saver:
        assert saver.get_tuple(make_config("t")) is None
    assert _pg_version(pg_url, pg_schema) == [(SCHEMA_REVISION,)]


async def test_async_pg_unsetup_raises(pg_url: str, pg_schema: str) -> None:
    async with AsyncPostgresSaver.from_conn_string(pg_url, schema=pg_schema, setup=False) as saver:
        with pytest.raises(SchemaVersionError):
            await saver.aget_tuple(make_config("t"))
        await saver.setup()
        assert await saver.aget_tuple(make_config("t")) is None


def test_pg_schema_matches_metadata(pg_url: str, pg_schema: str) -> None:
    migrate(pg_url, schema=pg_schema)
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with engine.connect() as conn:
            context = MigrationContext.configure(
                conn,
                opts={
                    "include_schemas": True,
                    "include_object": _not_version_table,
                    "include_name": lambda name, type_, parent: (
                        type_ != "schema" or name == pg_schema
                    ),
                },
            )
            diff = compare_metadata(context, build_metadata("postgresql", pg_schema))
    finally:
        engine.dispose()
    assert diff == []


def test_pg_upgrade_from_oldest_revision_keeps_data(pg_url: str, pg_schema: str) -> None:
    oldest = KNOWN_REVISIONS[0]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        _pg_at_revision(conn, pg_schema, oldest)
        _write_rows_at_first_revision(conn.execute, "%s", pg_schema)
    migrate(pg_url, schema=pg_schema)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as saver:
        _assert_old_rows_read_back(saver.get_tuple(make_config("old-thread")))


# ------------------------------------------------------------------ 0001 -> 0002
def _write_threads_at_0001(execute: Any, placeholder: str, schema: str = "") -> None:
    """More rows as revision 0001 lays them out: a two-checkpoint thread with a subgraph
    namespace, timestamps in several ISO spellings (one unreadable), and a thread that
    only has pending writes (they arrived before their checkpoint)."""
    serde = default_serializer()
    prefix = f'"{schema}".' if schema else ""
    p = placeholder

    def record(ts: str) -> str:
        return json.dumps(
            {"v": 4, "ts": ts, "channel_versions": {"state": "1"}, "versions_seen": {}}
        )

    rows = [
        ("old-thread-2", "", "cp-a", None, "2024-02-01T10:00:00.5+01:00"),
        ("old-thread-2", "", "cp-b", "cp-a", "2024-02-02T00:00:00Z"),
        ("old-thread-2", "sub:1", "cp-z", None, "yesterday"),
    ]
    for thread_id, ns, checkpoint_id, parent, ts in rows:
        execute(
            f"INSERT INTO {prefix}checkpointer_checkpoints (thread_id, checkpoint_ns, "
            "checkpoint_id, parent_checkpoint_id, run_id, checkpoint, metadata) VALUES "
            f"({p}, {p}, {p}, {p}, {p}, {p}, {p})",
            (thread_id, ns, checkpoint_id, parent, None, record(ts), json.dumps({"step": 0})),
        )
    blob_type, blob = serde.dumps_typed("value" * 50)
    for ns in ("", "sub:1"):
        execute(
            f"INSERT INTO {prefix}checkpointer_blobs (thread_id, checkpoint_ns, channel, "
            f"version, type, blob) VALUES ({p}, {p}, {p}, {p}, {p}, {p})",
            ("old-thread-2", ns, "state", "1", blob_type, blob),
        )
    write_type, write = serde.dumps_typed(["early"] * 10)
    execute(
        f"INSERT INTO {prefix}checkpointer_writes (thread_id, checkpoint_ns, checkpoint_id, "
        f"task_id, idx, task_path, channel, type, blob) VALUES ({p}, {p}, {p}, {p}, {p}, {p}, "
        f"{p}, {p}, {p})",
        ("only-writes", "", "cp-next", str(uuid.UUID(int=2)), 0, "", "state", write_type, write),
    )


def _assert_summaries_backfilled(saver: Any) -> None:
    """Backfilled summaries equal recomputed ones, and say what the rows say."""
    from datetime import UTC, datetime

    backfilled = {s.thread_id: s for s in saver.list_threads(limit=None)}
    assert set(backfilled) == {"old-thread", "old-thread-2", "only-writes"}
    saver.refresh_thread_summaries()
    recomputed = {s.thread_id: s for s in saver.list_threads(limit=None)}
    for thread_id, summary in backfilled.items():
        exact = recomputed[thread_id]
        assert (summary.checkpoint_count, summary.bytes, summary.head_checkpoint_id) == (
            exact.checkpoint_count,
            exact.bytes,
            exact.head_checkpoint_id,
        )
        assert summary.pinned == 0 and summary.ttl is None and summary.expires_at is None
    old, two, writes_only = (backfilled[t] for t in ("old-thread", "old-thread-2", "only-writes"))
    assert (old.checkpoint_count, old.head_checkpoint_id) == (1, "cp-1")
    assert old.created_at == old.updated_at == datetime(2024, 1, 1, tzinfo=UTC)
    assert (two.checkpoint_count, two.head_checkpoint_id) == (3, "cp-b")
    assert two.created_at == datetime(2024, 2, 1, 9, 0, 0, 500000, tzinfo=UTC)
    assert two.updated_at == datetime(2024, 2, 2, tzinfo=UTC)
    assert two.bytes > 2 * len("value" * 50)
    assert (writes_only.checkpoint_count, writes_only.head_checkpoint_id) == (0, None)
    assert writes_only.bytes > 0
    # The upgraded database keeps working: writes move the summary on.
    tup = saver.get_tuple(make_config("old-thread-2"))
    assert tup is not None and tup.checkpoint["channel_values"] == {"state": "value" * 50}
    checkpoint = dict(tup.checkpoint, id="cp-c")
    saver.put(tup.config, checkpoint, {"step": 1}, {})
    [after] = saver.list_threads(thread_ids=["old-thread-2"])
    assert (after.checkpoint_count, after.head_checkpoint_id) == (4, "cp-c")
    assert after.updated_at > two.updated_at


def test_sqlite_upgrade_to_0002_backfills_thread_summaries(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        _sqlite_at_revision(conn, "0001")
        _write_rows_at_first_revision(conn.execute, "?")
        _write_threads_at_0001(conn.execute, "?")
    migrate(f"sqlite:///{path}")
    with SqliteSaver.from_conn_string(path, setup=False) as saver:
        _assert_old_rows_read_back(saver.get_tuple(make_config("old-thread")))
        _assert_summaries_backfilled(saver)


def test_pg_upgrade_to_0002_backfills_thread_summaries(pg_url: str, pg_schema: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        _pg_at_revision(conn, pg_schema, "0001")
        _write_rows_at_first_revision(conn.execute, "%s", pg_schema)
        _write_threads_at_0001(conn.execute, "%s", pg_schema)
    migrate(pg_url, schema=pg_schema)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as saver:
        _assert_old_rows_read_back(saver.get_tuple(make_config("old-thread")))
        _assert_summaries_backfilled(saver)


class _RowsOnly(MsgpackSerializer):
    """Writes as revision 0002 did: every value, small scalars too, as a value row."""

    stores_scalars_inline = False


def test_sqlite_upgrade_to_0003_reads_0002_rows_and_goes_on_inline(tmp_path: Path) -> None:
    """A thread written before 0003 (scalars in value rows), upgraded, then continued:
    old and new checkpoints read back, unchanged scalars still come from their rows, and a
    delta channel's seed is found across both formats."""
    path = tmp_path / "old.db"
    with SqliteSaver.from_conn_string(path, setup=True, serde=_RowsOnly()) as old:
        chain = _ScalarChain(old, "t")
        chain.step(values={"n": 1, "flag": True, "seed": ["a"]}, writes=[("seed", "b")])
        chain.step(values={"n": 2}, writes=[("seed", "c")])
    with sqlite3.connect(path) as conn:
        back_to_0007(conn.execute)
        conn.execute(f"UPDATE {VERSION_TABLE} SET version_num = '0002'")
        conn.execute("ALTER TABLE checkpointer_writes DROP COLUMN task_name")  # from 0005
        conn.execute("DROP INDEX checkpointer_checkpoints_parent_idx")  # from 0007
        assert conn.execute("SELECT count(*) FROM checkpointer_blobs").fetchone()[0] == 4
    with (
        pytest.raises(SchemaVersionError),  # this code reads 0003 databases only
        SqliteSaver.from_conn_string(path, setup=False) as stale,
    ):
        stale.get_tuple(make_config("t"))
    migrate(f"sqlite:///{path}")
    with SqliteSaver.from_conn_string(path, setup=False) as saver:
        assert _version(path) == [(SCHEMA_REVISION,)]
        chain.saver = saver
        chain.step(values={"n": 3}, writes=[("seed", "d")])  # flag: unchanged, in a row
        chain.step(values={"word": "new"}, writes=[])
        states = [t.checkpoint["channel_values"] for t in saver.list(make_config("t"))][::-1]
        assert states == [
            {"n": 1, "flag": True, "seed": ["a"]},
            {"n": 2, "flag": True},
            {"n": 3, "flag": True},
            {"n": 3, "flag": True, "word": "new"},
        ]  # seed moved on with no value stored: its history is the writes since ["a"]
        history = saver.get_delta_channel_history(config=chain.head, channels=["seed"])
        assert history["seed"]["seed"] == ["a"]
        assert [w[2] for w in history["seed"]["writes"]] == ["b", "c", "d"]
    with sqlite3.connect(path) as conn:
        # The two new checkpoints added no value row: n, word (and flag, carried) are inline.
        assert conn.execute("SELECT count(*) FROM checkpointer_blobs").fetchone()[0] == 4


def _version(path: Path) -> list[tuple[str]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(f"SELECT version_num FROM {VERSION_TABLE}").fetchall()


class _ScalarChain:
    """Puts checkpoints the way a runtime does, passing only the changed values."""

    def __init__(self, saver: Any, thread_id: str) -> None:
        self.saver = saver
        self.head = make_config(thread_id)
        self.versions: dict[str, str] = {}
        self.step_no = 0

    def step(self, *, values: dict[str, Any], writes: list[tuple[str, Any]]) -> None:
        """`values` get new versions; so does `seed` (a delta channel: written, not stored)."""
        new = {ch: next_channel_version(self.versions.get(ch)) for ch in {*values, "seed"}}
        self.versions.update(new)
        checkpoint = empty_checkpoint()
        checkpoint["channel_versions"] = dict(self.versions)
        checkpoint["channel_values"] = dict(values)
        self.head = self.saver.put(self.head, checkpoint, {"step": self.step_no}, new)
        if writes:
            self.saver.put_writes(self.head, writes, task_id_for(self.step_no, "t"))
        self.step_no += 1


# ------------------------------------------------------------------ 0003 -> 0004
def test_sqlite_upgrade_to_0004_hands_summaries_to_triggers(tmp_path: Path) -> None:
    """Summaries kept by 0003's statements go on exactly under 0004's triggers: new
    checkpoints, values, writes, a re-saved checkpoint and a replaced write all count."""
    from datetime import UTC, datetime

    from checkpointer.savers.sql.sqlite_dialect import SqliteDialect
    from checkpointer.savers.sql.summaries import refresh_summaries_stmts
    from checkpointer.types import ERROR

    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        _sqlite_at_revision(conn, "0003")
        _write_threads_at_0001(conn.execute, "?")
        for stmt in refresh_summaries_stmts(SqliteDialect(), ["old-thread-2"], datetime.now(UTC)):
            if "checkpointer_stored_channels" not in stmt.sql:  # a table of 0012
                conn.execute(stmt.sql, stmt.params)  # what 0003's writes had kept up to date
        assert _triggers(conn) == []
    migrate(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:
        assert len(_triggers(conn)) == 8  # 0004's six, 0008's one, 0012's one
    with SqliteSaver.from_conn_string(path, setup=False) as saver:
        [before] = saver.list_threads(thread_ids=["old-thread-2"])
        tup = saver.get_tuple(make_config("old-thread-2"))
        assert tup is not None
        config = saver.put(tup.config, dict(tup.checkpoint, id="cp-c"), {"step": 1}, {})
        versions = {"state": next_channel_version("1")}
        cp = dict(tup.checkpoint, id="cp-d", channel_versions=versions)
        cp["channel_values"] = {"state": ["grown"] * 40}
        parent = config
        config = saver.put(parent, cp, {"step": 2}, versions)
        saver.put(parent, cp, {"step": 2, "note": "re-saved " * 30}, versions)
        task = task_id_for(3, "node")
        saver.put_writes(config, [("state", ["w"] * 30)], task)
        saver.put_writes(config, [(ERROR, "short")], task)
        saver.put_writes(config, [(ERROR, "a longer error " * 20)], task)  # replaces
        [kept] = saver.list_threads(thread_ids=["old-thread-2"])
        saver.refresh_thread_summaries(["old-thread-2"])
        [exact] = saver.list_threads(thread_ids=["old-thread-2"])
        assert (kept.checkpoint_count, kept.bytes, kept.head_checkpoint_id) == (
            exact.checkpoint_count,
            exact.bytes,
            exact.head_checkpoint_id,
        )
        assert kept.checkpoint_count == before.checkpoint_count + 2
        assert kept.head_checkpoint_id == "cp-d"
        assert kept.bytes > before.bytes


def _triggers(conn: sqlite3.Connection) -> list[str]:
    rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' ORDER BY name")
    return [r[0] for r in rows]


# ------------------------------------------------------------------ 0004 -> 0005
def _upgrade_from_0004_and_name_a_task(saver: Any) -> None:
    """A thread written at 0004 reads back unchanged after the upgrade; then a task id
    that is not a UUID is stored and read back exactly beside the old UUID one."""
    _assert_old_rows_read_back(saver.get_tuple(make_config("old-thread")))
    config = make_config("old-thread", "", "cp-1")
    saver.put_writes(config, [("state", "named")], "task-1")
    tup = saver.get_tuple(config)
    assert tup.pending_writes == [
        (str(uuid.UUID(int=1)), "state", "pending"),
        ("task-1", "state", "named"),
    ]


def test_sqlite_upgrade_to_0005_keeps_writes_and_takes_any_task_id(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        _sqlite_at_revision(conn, "0004")
        _write_rows_at_first_revision(conn.execute, "?")
    with (
        SqliteSaver.from_conn_string(path, setup=False) as saver,
        pytest.raises(SchemaVersionError, match="older"),
    ):
        saver.get_tuple(make_config("old-thread"))
    migrate(f"sqlite:///{path}")
    assert _version(path) == [(SCHEMA_REVISION,)]
    with SqliteSaver.from_conn_string(path, setup=False) as saver:
        _upgrade_from_0004_and_name_a_task(saver)


def test_pg_upgrade_to_0005_keeps_writes_and_takes_any_task_id(pg_url: str, pg_schema: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        _pg_at_revision(conn, pg_schema, "0004")
        _write_rows_at_first_revision(conn.execute, "%s", pg_schema)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, pool=False) as saver:
        _upgrade_from_0004_and_name_a_task(saver)  # set up (upgraded) on open
    assert _pg_version(pg_url, pg_schema) == [(SCHEMA_REVISION,)]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        rows = conn.execute(
            f'SELECT task_id::text, task_name FROM "{pg_schema}".checkpointer_writes '
            "ORDER BY task_name NULLS FIRST"
        ).fetchall()
    assert rows[0] == (str(uuid.UUID(int=1)), None)  # UUID ids: stored as before
    assert rows[1][1] == "task-1" and uuid.UUID(rows[1][0])


# ------------------------------------------------------------------ 0006 -> 0007
def _upgrade_from_0006_and_check_the_parent_rule(saver: Any) -> None:
    """A thread written at 0006 reads back unchanged after the upgrade; then the parent
    rule of 0007 holds on it: a child of an unsaved parent is taken, that parent (named by
    a stored checkpoint) is refused, and a child of an old row is an ordinary put."""
    from checkpointer.errors import ParentLoopError

    _assert_old_rows_read_back(saver.get_tuple(make_config("old-thread")))
    child = empty_checkpoint()
    child["id"] = "cp-2"
    saver.put(make_config("old-thread", "", "cp-1"), child, {}, {})
    orphan = empty_checkpoint()
    orphan["id"] = "cp-9"
    saver.put(make_config("old-thread", "", "cp-never-saved"), orphan, {}, {})
    late = empty_checkpoint()
    late["id"] = "cp-never-saved"
    with pytest.raises(ParentLoopError, match="cp-never-saved"):
        saver.put(make_config("old-thread"), late, {}, {})
    ids = [t.config["configurable"]["checkpoint_id"] for t in saver.list(make_config("old-thread"))]
    assert ids == ["cp-9", "cp-2", "cp-1"]
    tup = saver.get_tuple(make_config("old-thread", "", "cp-2"))
    assert tup.parent_config["configurable"]["checkpoint_id"] == "cp-1"


def test_sqlite_upgrade_to_0007_indexes_parents(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        _sqlite_at_revision(conn, "0006")
        _write_rows_at_first_revision(conn.execute, "?")
    with (
        SqliteSaver.from_conn_string(path, setup=False) as saver,
        pytest.raises(SchemaVersionError, match="older"),
    ):
        saver.get_tuple(make_config("old-thread"))
    migrate(f"sqlite:///{path}")
    assert _version(path) == [(SCHEMA_REVISION,)]
    with sqlite3.connect(path) as conn:
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT 1 FROM checkpointer_checkpoints WHERE thread_id = 't' "
            "AND checkpoint_ns = '' AND parent_checkpoint_id = 'p'"
        ).fetchall()
    assert any("checkpointer_checkpoints_parent_idx" in str(row) for row in plan), plan
    with SqliteSaver.from_conn_string(path, setup=False) as saver:
        _upgrade_from_0006_and_check_the_parent_rule(saver)


def test_pg_upgrade_to_0007_indexes_parents(pg_url: str, pg_schema: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        _pg_at_revision(conn, pg_schema, "0006")
        _write_rows_at_first_revision(conn.execute, "%s", pg_schema)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, pool=False) as saver:
        _upgrade_from_0006_and_check_the_parent_rule(saver)  # set up (upgraded) on open
    assert _pg_version(pg_url, pg_schema) == [(SCHEMA_REVISION,)]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        indexes = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
            (pg_schema, "checkpointer_checkpoints_parent_idx"),
        ).fetchall()
    assert len(indexes) == 1
    assert "(parent_checkpoint_id, thread_id, checkpoint_ns)" in indexes[0][0]  # as of 0009


def test_sqlite_upgrade_to_0009_reorders_the_parent_index(tmp_path: Path) -> None:
    """A database at 0008 gets the parent index led by the parent id; its rows read back
    unchanged and the parent rule still finds children through the index."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        _sqlite_at_revision(conn, "0008")
        _write_rows_at_first_revision(conn.execute, "?")
    migrate(f"sqlite:///{path}")
    assert _version(path) == [(SCHEMA_REVISION,)]
    with sqlite3.connect(path) as conn:
        (sql,) = conn.execute(
            "SELECT sql FROM sqlite_master WHERE name = 'checkpointer_checkpoints_parent_idx'"
        ).fetchone()
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT 1 FROM checkpointer_checkpoints WHERE thread_id = 't' "
            "AND checkpoint_ns = '' AND parent_checkpoint_id = 'p'"
        ).fetchall()
    assert "(parent_checkpoint_id, thread_id, checkpoint_ns)" in sql
    assert any("checkpointer_checkpoints_parent_idx" in str(row) for row in plan), plan
    with SqliteSaver.from_conn_string(path, setup=False) as saver:
        _upgrade_from_0006_and_check_the_parent_rule(saver)


def test_pg_upgrade_to_0009_reorders_the_parent_index(pg_url: str, pg_schema: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        _pg_at_revision(conn, pg_schema, "0008")
        _write_rows_at_first_revision(conn.execute, "%s", pg_schema)
        before = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
            (pg_schema, "checkpointer_checkpoints_parent_idx"),
        ).fetchall()
    assert "(thread_id, checkpoint_ns, parent_checkpoint_id)" in before[0][0]
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, pool=False) as saver:
        _upgrade_from_0006_and_check_the_parent_rule(saver)  # set up (upgraded) on open
    assert _pg_version(pg_url, pg_schema) == [(SCHEMA_REVISION,)]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        after = conn.execute(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = %s AND indexname = %s",
            (pg_schema, "checkpointer_checkpoints_parent_idx"),
        ).fetchall()
    assert "(parent_checkpoint_id, thread_id, checkpoint_ns)" in after[0][0]
