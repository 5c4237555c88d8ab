"""Checkpoint records are authenticated under encryption (issue 16 item 8): the fields that
decide which value a checkpoint reads (channel versions, versions seen, inline values, the
parent id) are sealed with the record's location, so an edited record, a rollback to an
older sealed value among them, raises CorruptCiphertextError naming the checkpoint."""

from __future__ import annotations

import json
import os
import sqlite3
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from checkpointer.errors import CorruptCiphertextError, PlaintextRefusedError
from checkpointer.ids import new_checkpoint_id
from checkpointer.savers.sql.record_seal import SEAL_KEY
from checkpointer.serde.encryption import EncryptedSerializer, areencrypt
from checkpointer.serde.msgpack_serde import MsgpackSerializer
from checkpointer.types import (
    ChannelVersions,
    Checkpoint,
    RunnableConfig,
    empty_checkpoint,
    make_config,
)
from tests.conftest import ASYNC_KINDS, PG_URL, Harness, drop_schema, require_postgres

pytestmark = pytest.mark.asyncio

KEY = os.urandom(32)
SQL_KINDS = ("sqlite", "async_sqlite", "postgres", "async_postgres")


def enc(**kwargs: Any) -> EncryptedSerializer:
    return EncryptedSerializer(MsgpackSerializer(), keys={"k1": KEY}, active_key_id="k1", **kwargs)


class Db:
    """A saver of one kind over a database the test can also edit directly."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.path = tmp_path / f"{uuid.uuid4().hex}.db"
        self.schema: str | None = None
        if kind in ("postgres", "async_postgres"):
            require_postgres()
            self.schema = f"cp_seal_{uuid.uuid4().hex[:10]}"
        self.saver: Any = None

    async def open(self, serde: Any, setup: bool = True) -> Harness:
        await self.close_saver()
        if self.kind == "sqlite":
            from checkpointer.savers.sqlite import SqliteSaver

            self.saver = SqliteSaver(self.path, serde=serde)
            if setup:
                self.saver.setup()
        elif self.kind == "async_sqlite":
            from checkpointer.savers.sqlite import AsyncSqliteSaver

            self.saver = AsyncSqliteSaver(self.path, serde=serde)
            await self.saver.setup()
        elif self.kind == "postgres":
            from checkpointer.savers.postgres import PostgresSaver

            assert self.schema is not None
            self.saver = PostgresSaver(PG_URL, schema=self.schema, max_size=2, serde=serde)
            if setup:
                self.saver.setup()
        else:
            from checkpointer.savers.postgres import AsyncPostgresSaver

            assert self.schema is not None
            self.saver = AsyncPostgresSaver(PG_URL, schema=self.schema, max_size=2, serde=serde)
            await self.saver.setup()
        return Harness(self.saver, self.kind)

    async def close_saver(self) -> None:
        if self.saver is not None:
            if self.kind in ASYNC_KINDS:
                await self.saver.aclose()
            else:
                self.saver.close()
            self.saver = None

    def _rows(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        if self.schema is None:
            conn = sqlite3.connect(self.path, isolation_level=None)
            try:
                return conn.execute(sql.replace("%s", "?").replace("{s}", ""), params).fetchall()
            finally:
                conn.close()
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as pg:
            cur = pg.execute(sql.replace("{s}", f'"{self.schema}".'), params)
            return cur.fetchall() if cur.description else []

    def record(self, thread_id: str, checkpoint_id: str) -> tuple[dict[str, Any], str | None]:
        rows = self._rows(
            "SELECT checkpoint, parent_checkpoint_id FROM {s}checkpointer_checkpoints "
            "WHERE thread_id = %s AND checkpoint_id = %s",
            (thread_id, checkpoint_id),
        )
        record = rows[0][0]
        return (json.loads(record) if isinstance(record, str) else dict(record)), rows[0][1]

    def edit(
        self, thread_id: str, checkpoint_id: str, change: Callable[[dict[str, Any]], None]
    ) -> None:
        """Rewrite a stored record as someone with write access to the database could."""
        record, _ = self.record(thread_id, checkpoint_id)
        change(record)
        cast = "%s" if self.schema is None else "%s::jsonb"
        self._rows(
            f"UPDATE {{s}}checkpointer_checkpoints SET checkpoint = {cast} "
            "WHERE thread_id = %s AND checkpoint_id = %s",
            (json.dumps(record), thread_id, checkpoint_id),
        )

    def set_parent(self, thread_id: str, checkpoint_id: str, parent: str | None) -> None:
        self._rows(
            "UPDATE {s}checkpointer_checkpoints SET parent_checkpoint_id = %s "
            "WHERE thread_id = %s AND checkpoint_id = %s",
            (parent, thread_id, checkpoint_id),
        )

    async def close(self) -> None:
        await self.close_saver()
        if self.schema is not None:
            drop_schema(self.schema)


@pytest_asyncio.fixture(params=SQL_KINDS)
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Db]:
    d = Db(request.param, tmp_path)
    try:
        yield d
    finally:
        await d.close()


def _checkpoint(versions: dict[str, str], values: dict[str, Any], seen: Any) -> Checkpoint:
    cp = empty_checkpoint()
    cp["id"] = new_checkpoint_id()
    cp["channel_versions"] = dict(versions)
    cp["channel_values"] = dict(values)
    cp["versions_seen"] = seen
    return cp


async def _history(h: Harness, thread_id: str = "t") -> list[str]:
    """Three checkpoints; channel `a` is "old" at version 1, "new" from version 2 on."""
    config: RunnableConfig = make_config(thread_id, "")
    ids: list[str] = []
    steps: list[tuple[dict[str, str], dict[str, Any], ChannelVersions]] = [
        ({"a": "1", "b": "1"}, {"a": "old", "b": 0}, {"a": "1", "b": "1"}),
        ({"a": "2", "b": "1"}, {"a": "new"}, {"a": "2"}),
        ({"a": "2", "b": "2"}, {"b": 1}, {"b": "2"}),
    ]
    for versions, values, new in steps:
        cp = _checkpoint(versions, values, {"node": {"a": versions["a"]}})
        config = await h.put(config, cp, {"step": len(ids)}, new)
        ids.append(cp["id"])
    return ids


async def _refused(h: Harness, thread_id: str, checkpoint_id: str) -> None:
    for read in (
        h.get_tuple(make_config(thread_id, "", checkpoint_id)),
        h.get_tuple(make_config(thread_id, "")),
        h.list(make_config(thread_id, "")),
    ):
        with pytest.raises(CorruptCiphertextError) as caught:
            await read
        assert caught.value.checkpoint_id == checkpoint_id
        assert checkpoint_id in str(caught.value)


async def test_unedited_records_read_as_before_and_hold_a_seal(db: Db) -> None:
    h = await db.open(enc())
    ids = await _history(h)
    head = await h.get_tuple(make_config("t", ""))
    assert head is not None and head.checkpoint["id"] == ids[-1]
    assert head.checkpoint["channel_values"] == {"a": "new", "b": 1}
    assert SEAL_KEY not in head.checkpoint
    assert [t.checkpoint["channel_values"]["a"] for t in await h.list(make_config("t", ""))] == [
        "new",
        "new",
        "old",
    ]
    record, _ = db.record("t", ids[-1])
    assert isinstance(record[SEAL_KEY], list)


async def test_rolling_a_channel_back_to_an_older_sealed_version_is_refused(db: Db) -> None:
    """The issue's attack: the head's `a` pointed back at version 1 ("old")."""
    h = await db.open(enc())
    ids = await _history(h)
    db.edit("t", ids[-1], lambda r: r["channel_versions"].update(a="1"))
    await _refused(h, "t", ids[-1])
    # The other checkpoints still read.
    older = await h.get_tuple(make_config("t", "", ids[1]))
    assert older is not None and older.checkpoint["channel_values"]["a"] == "new"


async def test_edited_parent_and_versions_seen_are_refused(db: Db) -> None:
    h = await db.open(enc())
    ids = await _history(h)
    db.set_parent("t", ids[-1], ids[0])
    await _refused(h, "t", ids[-1])
    db.set_parent("t", ids[-1], ids[1])
    assert await h.get_tuple(make_config("t", "")) is not None  # restored: reads again
    db.edit("t", ids[-1], lambda r: r["versions_seen"]["node"].update(a="1"))
    await _refused(h, "t", ids[-1])


async def test_a_seal_copied_from_another_checkpoint_is_refused(db: Db) -> None:
    h = await db.open(enc())
    ids = await _history(h)
    other, _ = db.record("t", ids[1])
    db.edit("t", ids[-1], lambda r: r.update({SEAL_KEY: other[SEAL_KEY]}))
    await _refused(h, "t", ids[-1])


async def test_copy_thread_reseals_records_for_the_target(db: Db) -> None:
    h = await db.open(enc())
    ids = await _history(h)
    await h.copy_thread("t", "copy")
    head = await h.get_tuple(make_config("copy", ""))
    assert head is not None and head.checkpoint["channel_values"] == {"a": "new", "b": 1}
    assert db.record("copy", ids[-1])[0][SEAL_KEY] != db.record("t", ids[-1])[0][SEAL_KEY]
    db.edit("copy", ids[-1], lambda r: r["channel_versions"].update(a="1"))
    await _refused(h, "copy", ids[-1])


async def test_plain_serializers_store_no_seal(db: Db) -> None:
    h = await db.open(MsgpackSerializer())
    ids = await _history(h)
    assert all(SEAL_KEY not in db.record("t", i)[0] for i in ids)


async def test_unsealed_records_read_then_reencrypt_seals_them(db: Db) -> None:
    """Records written before seals existed: readable, refused with require_bound=True,
    sealed by reencrypt, then protected."""
    h = await db.open(enc())
    ids = await _history(h)
    for i in ids:
        db.edit("t", i, lambda r: r.pop(SEAL_KEY))
    head = await h.get_tuple(make_config("t", ""))
    assert head is not None and head.checkpoint["channel_values"]["a"] == "new"
    strict = await db.open(enc(require_bound=True))
    with pytest.raises(PlaintextRefusedError, match="not sealed"):
        await strict.get_tuple(make_config("t", ""))
    h = await db.open(enc())
    report = await areencrypt(db.saver)
    assert report.records_sealed == len(ids)
    assert (await areencrypt(db.saver)).records_sealed == 0  # idempotent
    strict = await db.open(enc(require_bound=True))
    head = await strict.get_tuple(make_config("t", ""))
    assert head is not None and head.checkpoint["channel_values"] == {"a": "new", "b": 1}
    db.edit("t", ids[-1], lambda r: r["channel_versions"].update(a="1"))
    await _refused(strict, "t", ids[-1])


async def test_reencrypt_refuses_to_seal_over_an_edited_record(db: Db) -> None:
    h = await db.open(enc())
    ids = await _history(h)
    db.edit("t", ids[-1], lambda r: r["channel_versions"].update(a="1"))
    with pytest.raises(CorruptCiphertextError):
        await areencrypt(db.saver)
    await _refused(h, "t", ids[-1])


async def test_delta_walk_verifies_every_record_it_passes(db: Db) -> None:
    """The delta history of the head takes `a`'s seed from its parent's record: pointing
    that record at the older version would replay from the old value."""
    h = await db.open(enc())
    ids = await _history(h)
    history = await h.delta(make_config("t", ""), ["a"])
    assert history["a"].get("seed") == "new"
    db.edit("t", ids[1], lambda r: r["channel_versions"].update(a="1"))
    with pytest.raises(CorruptCiphertextError) as caught:
        await h.delta(make_config("t", ""), ["a"])
    assert caught.value.checkpoint_id == ids[1]
    db.edit("t", ids[1], lambda r: r["channel_versions"].update(a="2"))
    db.set_parent("t", ids[-1], ids[0])  # skip the checkpoint holding the newer seed
    with pytest.raises(CorruptCiphertextError) as caught:
        await h.delta(make_config("t", ""), ["a"])
    assert caught.value.checkpoint_id == ids[-1]


# ------------------------------------------------------------------ 0005 -> 0006
@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_upgrade_from_0005_reads_unsealed_then_reencrypt_seals(
    kind: str, tmp_path: Path
) -> None:
    """A database written with encryption at 0005 (records without seals, same tables):
    refused until migrated, then read as before, sealed by reencrypt, then protected."""
    from checkpointer.errors import SchemaVersionError
    from checkpointer.savers.migrate import migrate
    from checkpointer.savers.sql.schema import SCHEMA_REVISION, VERSION_TABLE
    from tests.old_schema import back_to_0007

    db = Db(kind, tmp_path)
    try:
        h = await db.open(enc())
        ids = await _history(h)
        await db.close_saver()
        for i in ids:  # as 0005 code wrote them
            db.edit("t", i, lambda r: r.pop(SEAL_KEY))
        back_to_0007(lambda sql: db._rows(sql, ()), db.schema)
        db._rows("UPDATE {s}" + VERSION_TABLE + " SET version_num = '0005'", ())
        db._rows("DROP INDEX {s}checkpointer_checkpoints_parent_idx", ())  # from 0007
        stale = await db.open(enc(), setup=False)
        with pytest.raises(SchemaVersionError):  # this code reads 0007 databases only
            await stale.get_tuple(make_config("t", ""))
        await db.close_saver()
        url = f"sqlite:///{db.path}" if db.schema is None else PG_URL
        migrate(url, schema=db.schema)
        assert db._rows("SELECT version_num FROM {s}" + VERSION_TABLE, ()) == [(SCHEMA_REVISION,)]
        h = await db.open(enc())
        head = await h.get_tuple(make_config("t", ""))
        assert head is not None and head.checkpoint["channel_values"] == {"a": "new", "b": 1}
        assert (await areencrypt(db.saver)).records_sealed == len(ids)
        db.edit("t", ids[-1], lambda r: r["channel_versions"].update(a="1"))
        await _refused(h, "t", ids[-1])
    finally:
        await db.close()


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
async def test_fork_in_place_reseals_for_the_new_id_or_refuses(kind: str, tmp_path: Path) -> None:
    """The fork's record names a new checkpoint id: re-sealed with the keys, refused
    without them (the tools), never written unreadable."""
    from checkpointer.errors import CheckpointerError
    from checkpointer.savers.sql.plan import Op
    from checkpointer.savers.sql.transfer import fork_in_place_plan

    db = Db(kind, tmp_path)
    try:
        serde = enc()
        h = await db.open(serde)
        ids = await _history(h)
        saver = db.saver
        with pytest.raises(CheckpointerError, match="sealed"):
            saver._executor.run(Op(fork_in_place_plan(saver._dialect, "t", "", ids[1]), txn=True))
        assert [t.checkpoint["id"] for t in await h.list(make_config("t", ""))] == ids[::-1]
        plan = fork_in_place_plan(saver._dialect, "t", "", ids[1], serde=serde)
        result = saver._executor.run(Op(plan, txn=True))
        head = await h.get_tuple(make_config("t", ""))
        assert head is not None and head.checkpoint["id"] == result.checkpoint_id
        assert head.checkpoint["channel_values"] == {"a": "new", "b": 0}
        db.edit("t", result.checkpoint_id, lambda r: r["channel_versions"].update(a="1"))
        await _refused(h, "t", result.checkpoint_id)
    finally:
        await db.close()


async def test_memory_records_are_sealed_values() -> None:
    """The in-memory saver stores each record as one value sealed at its checkpoint: an
    older record put in the head's place (the rollback) does not open there."""
    from checkpointer.savers.memory import InMemorySaver

    saver = InMemorySaver(serde=enc())
    h = Harness(saver, "memory")
    ids = await _history(h)
    stored = saver._threads["t"][""]
    stored[ids[-1]].record = stored[ids[0]].record
    with pytest.raises(CorruptCiphertextError) as caught:
        await h.get_tuple(make_config("t", ""))
    assert caught.value.checkpoint_id == ids[-1]
