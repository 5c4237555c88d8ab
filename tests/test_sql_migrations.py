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
from checkpointer.savers.postgres import AsyncPostgresSaver, PostgresSaver
from checkpointer.savers.sql import migration as migrate_module
from checkpointer.savers.sql.migration import (
    alembic_config,
    check_revision,
    migrate,
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
from checkpointer.serde import default_serializer
from checkpointer.types import make_config


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
    assert all(";" not in s.rstrip(";") for s in statements)


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
        diff = compare_metadata(context, build_metadata())
    engine.dispose()
    assert diff == []


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
        for statement in split_statements(render_upgrade_sql("sqlite", None, None, oldest)):
            conn.execute(statement)
        _write_rows_at_first_revision(conn.execute, "?")
    migrate(f"sqlite:///{path}")
    with SqliteSaver.from_conn_string(path) as saver:
        _assert_old_rows_read_back(saver.get_tuple(make_config("old-thread")))


# ------------------------------------------------------------------ PostgreSQL
def _pg_version(pg_url: str, schema: str) -> list[tuple[str]]:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        return conn.execute(f'SELECT version_num FROM "{schema}".{VERSION_TABLE}').fetchall()


def test_pg_unsetup_and_newer_schema_raise(pg_url: str, pg_schema: str) -> None:
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as saver:
        with pytest.raises(SchemaVersionError, match="checkpointer migrate --url URL"):
            saver.get_tuple(make_config("t"))
        saver.setup()
        saver.setup()
        assert saver.get_tuple(make_config("t")) is None
    assert _pg_version(pg_url, pg_schema) == [(SCHEMA_REVISION,)]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'UPDATE "{pg_schema}".{VERSION_TABLE} SET version_num = %s', ("9999",))
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema, pool=False) as saver:
        with pytest.raises(SchemaVersionError, match="newer"):
            saver.get_tuple(make_config("t"))
        with pytest.raises(SchemaVersionError, match="newer"):
            saver.setup()


async def test_async_pg_unsetup_raises(pg_url: str, pg_schema: str) -> None:
    async with AsyncPostgresSaver.from_conn_string(pg_url, schema=pg_schema) as saver:
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
            diff = compare_metadata(context, build_metadata(pg_schema))
    finally:
        engine.dispose()
    assert diff == []


def test_pg_upgrade_from_oldest_revision_keeps_data(pg_url: str, pg_schema: str) -> None:
    oldest = KNOWN_REVISIONS[0]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{pg_schema}"')
        for statement in split_statements(
            render_upgrade_sql("postgresql", pg_schema, None, oldest)
        ):
            conn.execute(statement)
        _write_rows_at_first_revision(conn.execute, "%s", pg_schema)
    migrate(pg_url, schema=pg_schema)
    with PostgresSaver.from_conn_string(pg_url, schema=pg_schema) as saver:
        _assert_old_rows_read_back(saver.get_tuple(make_config("old-thread")))
