"""Encryption at rest: AES-GCM around the serializer, key rotation, location binding,
plaintext refusal, and re-encryption of a saver's stored values.

Every saver passes each value's location (thread, namespace, channel, version or
checkpoint/task) to the serializer, so a ciphertext moved to another row is refused with a
`CorruptValueError` naming the row, while the saver's own moves (copy_thread, a fork to a
new thread, export/import between databases) re-seal or keep values so they read back.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from checkpointer.errors import (
    CheckpointerError,
    ConfigError,
    CorruptCiphertextError,
    CorruptValueError,
    DecryptionError,
    DeserializationError,
    PlaintextRefusedError,
    ValueTooLarge,
)
from checkpointer.serde import MsgpackSerializer
from checkpointer.serde.compression import CompressingSerializer
from checkpointer.serde.encryption import (
    TAG_ENCRYPTED,
    EncryptedSerializer,
    areencrypt,
    iter_stored_values,
    reencrypt,
)
from checkpointer.serde.guard import SizeGuard
from checkpointer.serde.located import ValueLocation, dumps_at, is_located, loads_at
from tests import crash_worker as cw
from tests.conftest import PG_URL, drop_schema, require_postgres

K1, K2, K3 = os.urandom(32), os.urandom(16), os.urandom(24)
SECRET = "SECRET-MARKER-7f3a"
INNER = MsgpackSerializer()


def enc(**kwargs: Any) -> EncryptedSerializer:
    options: dict[str, Any] = {"keys": {"k1": K1}, "active_key_id": "k1"}
    options.update(kwargs)
    return EncryptedSerializer(INNER, **options)


WHERE = ValueLocation.write("thread-1", "", "cp-1", "task-1", 0, "messages")
BLOB = ValueLocation.blob("thread-1", "", "messages", "00000000000000000000000000000003.ab")
VALUES: list[Any] = [
    None,
    b"",
    b"\x00\xff",
    "",
    SECRET,
    {"messages": [SECRET, ("a", 1)], "n": 2**90},
    ValueError(SECRET),
    "\ud800",
]


# --------------------------------------------------------------- serializer
@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_round_trip_hides_value_and_type(value: Any) -> None:
    s = enc()
    for tag, data in (s.dumps_typed(value), s.dumps_typed_at(value, WHERE)):
        assert tag == TAG_ENCRYPTED  # None and bytes too: the stored tag tells nothing
        assert SECRET.encode() not in data
    assert repr(s.loads_typed(s.dumps_typed(value))) == repr(value)
    assert repr(s.loads_typed_at(s.dumps_typed_at(value, WHERE), WHERE)) == repr(value)


def test_every_encryption_uses_a_fresh_nonce() -> None:
    s = enc()
    outputs = {s.dumps_typed_at("same", WHERE)[1] for _ in range(50)}
    assert len(outputs) == 50


@pytest.mark.parametrize(
    "other",
    [
        replace(WHERE, thread_id="thread-2"),
        replace(WHERE, checkpoint_ns="sub"),
        replace(WHERE, checkpoint_id="cp-2"),
        replace(WHERE, task_id="task-2"),
        replace(WHERE, idx=1),
        replace(WHERE, channel="other"),
        replace(WHERE, kind="blob"),
        BLOB,
        replace(BLOB, version="00000000000000000000000000000004.ab"),
        ValueLocation.write("thread-1\x00", "", "cp-1", "task-1", 0, "messages"),
    ],
    ids=lambda loc: loc.describe(),
)
def test_value_moved_to_another_location_is_refused(other: ValueLocation) -> None:
    s = enc()
    data = s.dumps_typed_at({"x": SECRET}, WHERE)
    with pytest.raises(DecryptionError, match="moved from another location"):
        s.loads_typed_at(data, other)
    with pytest.raises(DecryptionError, match="bound to its storage location"):
        s.loads_typed(data)  # a saver that passes no location cannot read bound values


def test_location_fields_cannot_be_shifted_into_each_other() -> None:
    a = ValueLocation.write("ab", "", "c", "t", 0, "x")
    b = ValueLocation.write("a", "b", "c", "t", 0, "x")
    assert a.aad() != b.aad()
    assert (
        ValueLocation.blob("t", "", "c", "1").aad() != ValueLocation.blob("t", "", "c1", "").aad()
    )


def test_wrong_key_and_unknown_key_are_typed_errors() -> None:
    data = enc().dumps_typed_at(SECRET, WHERE)
    impostor = EncryptedSerializer(INNER, keys={"k1": os.urandom(32)}, active_key_id="k1")
    with pytest.raises(DecryptionError, match="wrong key"):
        impostor.loads_typed_at(data, WHERE)
    other = EncryptedSerializer(INNER, keys={"k9": K1}, active_key_id="k9")
    with pytest.raises(DecryptionError, match="'k1', which is not among"):
        other.loads_typed_at(data, WHERE)


def test_rotation_reads_old_keys_writes_the_active_one() -> None:
    old = enc()
    old_value = old.dumps_typed_at("v1", WHERE)
    rotated = enc(keys={"k1": K1, "k2": K2, "k3": K3}, active_key_id="k2")
    new_value = rotated.dumps_typed_at("v2", WHERE)
    assert rotated.key_id_of(old_value) == "k1" and rotated.key_id_of(new_value) == "k2"
    assert rotated.loads_typed_at(old_value, WHERE) == "v1"
    assert rotated.loads_typed_at(new_value, WHERE) == "v2"
    retired = enc(keys={"k2": K2}, active_key_id="k2")
    assert retired.loads_typed_at(new_value, WHERE) == "v2"
    with pytest.raises(DecryptionError, match="k1"):
        retired.loads_typed_at(old_value, WHERE)
    resealed = retired_after = rotated.reseal(old_value, WHERE, bind=True)
    assert retired.loads_typed_at(retired_after, WHERE) == "v1"
    assert rotated.is_current(resealed, bind=True)


def test_plaintext_is_refused_unless_migrating() -> None:
    for plain in (INNER.dumps_typed({"x": 1}), INNER.dumps_typed(None), ("bytes", b"raw")):
        with pytest.raises(PlaintextRefusedError, match="allow_plaintext"):
            enc().loads_typed_at(plain, WHERE)
        with pytest.raises(PlaintextRefusedError):
            enc().loads_typed(plain)
        migrating = enc(allow_plaintext=True)
        assert migrating.loads_typed_at(plain, WHERE) == INNER.loads_typed(plain)
        assert migrating.dumps_typed(1)[0] == TAG_ENCRYPTED  # writes stay encrypted


def test_unbound_values_are_accepted_unless_bound_is_required() -> None:
    unbound = enc().dumps_typed(SECRET)
    assert enc().loads_typed_at(unbound, WHERE) == SECRET
    with pytest.raises(PlaintextRefusedError, match="require_bound"):
        enc(require_bound=True).loads_typed_at(unbound, WHERE)


def test_every_tampered_byte_is_detected() -> None:
    s = enc(keys={"k1": K1, "k2": K1}, active_key_id="k1")
    tag, data = s.dumps_typed_at({"x": SECRET}, WHERE)
    for i in range(len(data)):
        for bit in (0x01, 0x80):
            forged = bytearray(data)
            forged[i] ^= bit
            with pytest.raises(DeserializationError):
                s.loads_typed_at((tag, bytes(forged)), WHERE)
    swapped = data.replace(b"k1", b"k2", 1)  # same key bytes, other id: still refused
    with pytest.raises(DecryptionError):
        s.loads_typed_at((tag, swapped), WHERE)
    unbound_claim = data[:1] + b"\x00" + data[2:]  # claim "unbound" to skip the location
    with pytest.raises(DecryptionError):
        s.loads_typed_at((tag, unbound_claim), WHERE)
    for cut in (0, 1, 3, 10, len(data) - 1):
        with pytest.raises(DecryptionError):
            s.loads_typed_at((tag, data[:cut]), WHERE)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"keys": {}, "active_key_id": "k"},
        {"keys": {"k": b"short"}, "active_key_id": "k"},
        {"keys": {"k": "a" * 32}, "active_key_id": "k"},
        {"keys": {"k": K1}, "active_key_id": "other"},
        {"keys": {"": K1}, "active_key_id": ""},
        {"keys": {"x" * 300: K1}, "active_key_id": "x" * 300},
        {"keys": {3: K1}, "active_key_id": 3},
    ],
    ids=["no keys", "short key", "text key", "unknown active", "empty id", "long id", "int id"],
)
def test_bad_key_configuration_is_refused(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        EncryptedSerializer(INNER, **kwargs)


def test_repr_never_shows_keys() -> None:
    text = repr(enc(keys={"k1": K1, "k2": K2}))
    assert K1.hex() not in text and repr(K1) not in text and "k2" in text


def test_compression_goes_inside_and_guards_compose() -> None:
    big = {"text": "abc" * 20_000}
    s = EncryptedSerializer(
        CompressingSerializer(MsgpackSerializer()), keys={"k": K1}, active_key_id="k"
    )
    tag, data = s.dumps_typed_at(big, WHERE)
    assert len(data) < 5_000  # compressed before encryption
    assert s.loads_typed_at((tag, data), WHERE) == big
    guarded = SizeGuard(s, 1_000)
    assert is_located(guarded) and is_located(s) and not is_located(INNER)
    with pytest.raises(ValueTooLarge, match="thread-1"):
        dumps_at(guarded, {"r": os.urandom(2_000)}, WHERE)
    assert loads_at(guarded, dumps_at(guarded, "ok", WHERE), WHERE) == "ok"
    assert dumps_at(INNER, "x", WHERE) == INNER.dumps_typed("x")  # plain serializers: as before


# ------------------------------------------------------------------- savers
def _open(kind: str, tmp_path: Path, serde: Any, name: str = "db") -> tuple[Any, str | None]:
    if kind == "memory":
        from checkpointer.savers.memory import InMemorySaver

        return InMemorySaver(serde=serde), None
    if kind == "sqlite":
        from checkpointer.savers.sqlite import SqliteSaver

        saver: Any = SqliteSaver(tmp_path / f"{name}.db", serde=serde)
        saver.setup()
        return saver, None
    require_postgres()
    from checkpointer.savers.postgres import PostgresSaver

    schema = f"cp_enc_{name}_{uuid.uuid4().hex[:8]}"
    saver = PostgresSaver(PG_URL, schema=schema, max_size=2, serde=serde)
    saver.setup()
    return saver, schema


class Store:
    """One database opened through serializers that change between steps."""

    def __init__(self, kind: str, tmp_path: Path) -> None:
        self.kind = kind
        self.tmp_path = tmp_path
        self.saver: Any = None
        self.schema: str | None = None

    def open(self, serde: Any) -> Any:
        if self.saver is not None and self.kind == "memory":
            self.saver.serde = serde  # the store lives in the saver object
            return self.saver
        if self.saver is not None:
            self.saver.close()
        if self.kind == "sqlite":
            from checkpointer.savers.sqlite import SqliteSaver

            self.saver = SqliteSaver(self.tmp_path / "store.db", serde=serde)
            self.saver.setup()
        elif self.kind == "postgres":
            from checkpointer.savers.postgres import PostgresSaver

            if self.schema is None:
                require_postgres()
                self.schema = f"cp_enc_{uuid.uuid4().hex[:10]}"
            self.saver = PostgresSaver(PG_URL, schema=self.schema, max_size=2, serde=serde)
            self.saver.setup()
        else:
            from checkpointer.savers.memory import InMemorySaver

            self.saver = InMemorySaver(serde=serde)
        return self.saver

    def close(self) -> None:
        if self.saver is not None and self.kind != "memory":
            self.saver.close()
        if self.schema is not None:
            drop_schema(self.schema)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = Store(request.param, tmp_path)
    try:
        yield s
    finally:
        s.close()


class SecretHooks(cw.Hooks):
    def node_ran(self, key: str) -> None:
        pass


def _states(saver: Any, thread_id: str = "t") -> list[dict[str, Any]]:
    graph = cw.build_graph(SecretHooks(None), saver)
    return [graph.get_state(t.config).values for t in saver.list(cw.thread_config(thread_id))]


def _run(saver: Any, thread_id: str = "t") -> list[dict[str, Any]]:
    graph = cw.build_graph(SecretHooks(None), saver)
    graph.invoke({"messages": [SECRET], "n": 0}, cw.thread_config(thread_id))
    return _states(saver, thread_id)


def _key_ids(saver: Any, serde: EncryptedSerializer) -> set[str | None]:
    return {serde.key_id_of(data) for _, data in iter_stored_values(saver)}


def test_saver_stores_only_ciphertext(store: Store) -> None:
    s = enc()
    saver = store.open(s)
    states = _run(saver)
    stored = list(iter_stored_values(saver))
    assert stored and all(tag == TAG_ENCRYPTED for _, (tag, _) in stored)
    assert all(SECRET.encode() not in data for _, (_, data) in stored)
    if store.kind == "sqlite":
        raw = Path(store.tmp_path / "store.db").read_bytes()
        wal = Path(str(store.tmp_path / "store.db") + "-wal")
        raw += wal.read_bytes() if wal.exists() else b""
        assert SECRET.encode() not in raw
    assert states[0]["messages"][0] == SECRET
    copy = enc()
    saver.copy_thread("t", "t-copy")  # moves values between threads: must stay readable
    assert _states(store.open(copy), "t-copy") == states


def test_rotation_then_retire_the_old_key(store: Store) -> None:
    old = enc()
    states = _run(store.open(old))
    both = enc(keys={"k1": K1, "k2": K2}, active_key_id="k2")
    saver = store.open(both)
    assert _states(saver) == states
    report = reencrypt(saver)
    assert report.rewritten == report.scanned > 0 and report.by_key == {"k1": report.scanned}
    assert _key_ids(saver, both) == {"k2"}
    again = reencrypt(saver)
    assert again.rewritten == 0 and again.by_key == {"k2": report.scanned}
    retired = enc(keys={"k2": K2}, active_key_id="k2")
    assert _states(store.open(retired)) == states


def test_plaintext_database_migrates_to_encrypted(store: Store) -> None:
    states = _run(store.open(MsgpackSerializer()))
    strict = enc()
    saver = store.open(strict)
    with pytest.raises(PlaintextRefusedError):
        _states(saver)
    migrating = enc(allow_plaintext=True)
    saver = store.open(migrating)
    assert _states(saver) == states
    dry = reencrypt(saver, dry_run=True)
    assert dry.plaintext == dry.scanned == dry.rewritten > 0
    assert _key_ids(saver, migrating) == {None}  # dry run changed nothing
    report = reencrypt(saver)
    assert report.plaintext == report.rewritten == dry.scanned
    assert _key_ids(saver, migrating) == {"k1"}
    assert _states(store.open(enc())) == states


class Unbinding:
    """An encrypting serializer as a saver that passes no locations sees it (what earlier
    versions wrote): every value is sealed unbound."""

    def __init__(self, inner: EncryptedSerializer) -> None:
        self.inner = inner

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        return self.inner.dumps_typed(obj)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self.inner.loads_typed(data)


def test_reencrypt_binds_values_written_without_locations(store: Store) -> None:
    s = enc()
    states = _run(store.open(Unbinding(s)))
    assert _states(store.open(s)) == states  # unbound values stay readable...
    with pytest.raises(PlaintextRefusedError, match="require_bound"):
        _states(store.open(enc(require_bound=True)))  # ...unless bound ones are required
    saver = store.open(s)
    report = reencrypt(saver)  # bind=None: the saver passes locations, so it binds
    assert report.rewritten == report.scanned > 0
    for location, data in iter_stored_values(saver):
        s.loads_typed_at(data, location)  # each decrypts at its own location only
        with pytest.raises(DecryptionError):
            s.loads_typed_at(data, replace(location, thread_id="elsewhere"))
    assert reencrypt(saver).rewritten == 0
    assert _states(store.open(enc(require_bound=True))) == states


def test_savers_bind_what_they_write(store: Store) -> None:
    s = enc()
    saver = store.open(s)
    assert saver.passes_value_locations is True
    _run(saver)
    stored = list(iter_stored_values(saver))
    assert stored and all(s.is_current(data, bind=True) for _, data in stored)
    assert reencrypt(saver).rewritten == 0
    # Delta histories read each write at the checkpoint it is pending on, not the target's.
    histories = [
        saver.get_delta_channel_history(config=t.config, channels=["messages"])["messages"]
        for t in saver.list(cw.thread_config("t"))
    ]
    assert max(len(h["writes"]) for h in histories) >= 2


def test_retention_snapshots_are_bound_where_they_are_stored(store: Store) -> None:
    """Compaction rebuilds delta values from ancestor writes and stores them as snapshots:
    read at each write's own location, written at the snapshot's."""
    from checkpointer.lifecycle import KeepLast

    s = enc()
    saver = store.open(s)
    graph = cw.build_graph(SecretHooks(None), saver)
    cw.run_phases(graph, "t")
    states, specs = _states(saver), graph.spec.channels
    for keep in range(1, len(states)):  # a cut that needs a snapshot rebuilt
        if (
            saver.apply_retention(KeepLast(keep), channels=specs, dry_run=True)
            .threads[0]
            .bytes_added
        ):
            break
    else:
        pytest.fail("no KeepLast here stores a snapshot")
    saver.apply_retention(KeepLast(keep), channels=specs)
    assert _states(saver) == states[:keep]
    assert _assert_bound_to(saver, s, "t") > 0


def test_reencrypt_of_selected_threads_and_bad_arguments(tmp_path: Path) -> None:
    store = Store("sqlite", tmp_path)
    try:
        saver = store.open(enc())
        _run(saver, "a")
        _run(saver, "b")
        rotated = enc(keys={"k1": K1, "k2": K2}, active_key_id="k2")
        saver = store.open(rotated)
        report = reencrypt(saver, thread_ids=["a"], batch_size=3)
        by_thread: dict[str, set[str | None]] = {}
        for location, data in iter_stored_values(saver):
            by_thread.setdefault(location.thread_id, set()).add(rotated.key_id_of(data))
        assert by_thread == {"a": {"k2"}, "b": {"k1"}}
        assert report.rewritten > 3  # several pages
        with pytest.raises(ConfigError):
            reencrypt(saver, batch_size=0)
        with pytest.raises(ConfigError, match="EncryptedSerializer"):
            reencrypt(store.open(MsgpackSerializer()))
    finally:
        store.close()


async def test_areencrypt_on_the_async_sqlite_saver(tmp_path: Path) -> None:
    from checkpointer.savers.sqlite import AsyncSqliteSaver, SqliteSaver

    with SqliteSaver.from_conn_string(tmp_path / "a.db", serde=enc()) as saver:
        states = await asyncio.to_thread(_run, saver)
    rotated = enc(keys={"k1": K1, "k2": K2}, active_key_id="k2")
    async with AsyncSqliteSaver.from_conn_string(tmp_path / "a.db", serde=rotated) as asaver:
        report = await areencrypt(asaver)
        assert report.rewritten == report.scanned > 0
    with SqliteSaver.from_conn_string(
        tmp_path / "a.db", serde=enc(keys={"k2": K2}, active_key_id="k2")
    ) as saver:
        assert _states(saver) == states


def test_reencrypt_leaves_rows_changed_meanwhile(tmp_path: Path) -> None:
    """A concurrent writer's change between read and rewrite is not overwritten."""
    store = Store("sqlite", tmp_path)
    try:
        saver = store.open(enc())
        _run(saver)
        rotated = enc(keys={"k1": K1, "k2": K2}, active_key_id="k2")
        saver = store.open(rotated)
        original = rotated.reseal

        def racing_reseal(data: Any, location: Any, *, bind: bool) -> Any:
            if location.kind == "blob" and location.channel == "n":
                conn = sqlite3.connect(tmp_path / "store.db", isolation_level=None)
                conn.execute(
                    "UPDATE checkpointer_blobs SET blob = blob || x'00' WHERE channel = 'n' "
                    "AND version = ?",
                    (location.version,),
                )
                conn.close()
            return original(data, location, bind=bind)

        rotated.reseal = racing_reseal  # type: ignore[method-assign]
        report = reencrypt(saver)
        assert report.skipped_changed >= 1
        assert report.rewritten + report.skipped_changed == report.scanned
    finally:
        store.close()


# ------------------------------------------------------------- moved values
def _overwrite(store: Store, location: ValueLocation, data: tuple[str, bytes]) -> None:
    """Put `data` into the row at `location`, as an attacker with write access could."""
    saver = store.saver
    if store.kind == "memory":
        if location.kind == "blob":
            assert location.channel is not None and location.version is not None
            key = (location.thread_id, location.checkpoint_ns, location.channel, location.version)
            saver._blobs[key] = data
            return
        stored = saver._threads[location.thread_id][location.checkpoint_ns]
        writes = stored[location.checkpoint_id].writes
        writes[(location.task_id, location.idx)].value = data
        return
    if location.kind == "blob":
        table, keys = "blobs", ("thread_id", "checkpoint_ns", "channel", "version")
        values: tuple[Any, ...] = (
            location.thread_id,
            location.checkpoint_ns,
            location.channel,
            location.version,
        )
    else:
        table, keys = "writes", ("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx")
        values = (
            location.thread_id,
            location.checkpoint_ns,
            location.checkpoint_id,
            location.task_id,
            location.idx,
        )
    where = " AND ".join(f"{k} = %s" for k in keys)
    if store.kind == "sqlite":
        conn = sqlite3.connect(store.tmp_path / "store.db", isolation_level=None)
        try:
            conn.execute(
                f"UPDATE checkpointer_{table} SET type = ?, blob = ? WHERE "
                + where.replace("%s", "?"),
                (*data, *values),
            )
        finally:
            conn.close()
        return
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(
            f'UPDATE "{store.schema}".checkpointer_{table} SET type = %s, blob = %s WHERE '
            + where.replace("task_id = %s", "task_id = %s::uuid"),
            (*data, *values),
        )


def _pick_move(
    stored: list[tuple[ValueLocation, tuple[str, bytes]]], move: str
) -> tuple[ValueLocation, tuple[str, bytes]]:
    """(victim row, the ciphertext put there): a value of another thread, channel, version
    (another checkpoint's value) or, for a pending write, another checkpoint."""
    mine = [(loc, data) for loc, data in stored if loc.thread_id == "t"]
    if move == "write-to-other-checkpoint":
        writes = [(loc, data) for loc, data in mine if loc.kind == "write"]
        victim = writes[0][0]
        source = next(d for loc, d in writes if loc.checkpoint_id != victim.checkpoint_id)
        return victim, source
    blobs = [(loc, data) for loc, data in mine if loc.kind == "blob"]
    victim = next(loc for loc, _ in blobs if loc.channel == "messages")
    if move == "blob-from-other-thread":
        source = next(
            d
            for loc, d in stored
            if loc.thread_id == "other" and loc.kind == "blob" and loc.channel == "messages"
        )
    elif move == "blob-to-other-channel":
        source = next(d for loc, d in blobs if loc.channel != "messages")
    else:
        source = next(
            d for loc, d in blobs if loc.channel == "messages" and loc.version != victim.version
        )
    return victim, source


MOVES = [
    "blob-from-other-thread",
    "blob-to-other-channel",
    "blob-to-other-version",
    "write-to-other-checkpoint",
]


@pytest.mark.parametrize("read_first", [False, True], ids=["cold", "read-before-move"])
@pytest.mark.parametrize("move", MOVES)
def test_ciphertext_moved_to_another_row_does_not_decrypt(
    store: Store, move: str, read_first: bool
) -> None:
    """Valid ciphertext of this very key, put into another row, is refused where it is read,
    with an error naming that row; the rows it was not put into stay readable. Read once
    before the move too: what a saver keeps of earlier reads (its value cache) never serves
    a value that would not decrypt where it now is."""
    saver = store.open(enc())
    _run(saver, "t")
    _run(saver, "other")
    if read_first:
        assert _states(saver, "t") and _states(saver, "t")
        assert len(getattr(saver, "value_cache", ())) == 0  # ciphertext is never cached
    victim, data = _pick_move(list(iter_stored_values(saver)), move)
    _overwrite(store, victim, data)
    read: list[Any] = []
    with pytest.raises(CorruptValueError) as caught:
        for tup in saver.list(cw.thread_config("t")):
            read.append(tup)
    error = caught.value
    assert isinstance(error, CorruptCiphertextError) and isinstance(error, DecryptionError)
    assert "moved from another location" in str(error)
    assert (error.thread_id, error.channel) == ("t", victim.channel)
    if victim.kind == "blob":
        assert error.version == victim.version
    else:
        assert (error.checkpoint_id, error.task_id) == (victim.checkpoint_id, victim.task_id)
    assert victim.channel in str(error) and "'t'" in str(error)
    assert _states(saver, "other")  # the thread the ciphertext came from is untouched


# --------------------------------------------------------------- copies, forks, exports
def _assert_bound_to(saver: Any, serde: EncryptedSerializer, thread_id: str) -> int:
    """Every value of `thread_id` decrypts at its own location, not at the same place in
    another thread; returns how many there are."""
    count = 0
    for location, data in iter_stored_values(saver):
        if location.thread_id != thread_id:
            continue
        serde.loads_typed_at(data, location)
        with pytest.raises(DecryptionError):
            serde.loads_typed_at(data, replace(location, thread_id=thread_id + "-elsewhere"))
        count += 1
    return count


def test_copy_thread_reseals_values_for_the_new_thread(store: Store) -> None:
    s = enc(keys={"k1": K1, "k2": K2}, active_key_id="k2")
    states = _run(store.open(enc()), "t")  # written under k1...
    saver = store.open(s)
    saver.copy_thread("t", "t-copy")  # ...copied under the active key, k2
    assert _states(saver, "t-copy") == states
    assert _assert_bound_to(saver, s, "t-copy") > 0
    copies = [data for loc, data in iter_stored_values(saver) if loc.thread_id == "t-copy"]
    assert {s.key_id_of(data) for data in copies} == {"k2"}
    saver.delete_thread("t")  # the copy stands on its own
    assert _states(saver, "t-copy") == states
    graph = cw.build_graph(SecretHooks(None), saver)
    graph.invoke({"messages": ["more"]}, cw.thread_config("t-copy"))  # and runs on
    assert graph.get_state(cw.thread_config("t-copy")).values["messages"][-1] == "join:3"


def test_graph_fork_under_encryption(store: Store) -> None:
    """A run from an earlier checkpoint (time travel) forks inside the thread: the fork's
    values are written at their own locations; both branches read back."""
    saver = store.open(enc())
    states = _run(saver, "t")
    graph = cw.build_graph(SecretHooks(None), saver)
    history = list(saver.list(cw.thread_config("t")))
    earlier = history[len(history) // 2].config
    graph.invoke({"messages": ["forked"]}, earlier)
    head = graph.get_state(cw.thread_config("t")).values
    assert "forked" in head["messages"]
    assert _states(saver, "t")[-len(states) :] == states  # the old branch is intact
    _assert_bound_to(saver, saver.serde, "t")


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_fork_to_a_new_thread_reseals_or_refuses(kind: str, tmp_path: Path) -> None:
    from checkpointer.savers.sql.plan import Op
    from checkpointer.savers.sql.transfer import fork_to_thread_plan

    store = Store(kind, tmp_path)
    try:
        s = enc()
        saver = store.open(s)
        _run(saver, "t")
        graph = cw.build_graph(SecretHooks(None), saver)
        history = list(saver.list(cw.thread_config("t")))
        at = history[2].config["configurable"]["checkpoint_id"]
        expected = graph.get_state(history[2].config).values
        # Without the keys (the command-line tools), bound values are not copied as bytes.
        with pytest.raises(CheckpointerError, match="bound to their thread"):
            saver._executor.run(Op(fork_to_thread_plan(saver._dialect, "t", "f", "", at), txn=True))
        assert not list(saver.list(cw.thread_config("f")))  # nothing half-copied
        result = saver._executor.run(
            Op(fork_to_thread_plan(saver._dialect, "t", "f", "", at, s), txn=True)
        )
        assert result.checkpoint_id == at
        assert graph.get_state(cw.thread_config("f")).values == expected
        assert _assert_bound_to(saver, s, "f") > 0
    finally:
        store.close()


@pytest.mark.parametrize(
    ("source_kind", "target_kind"),
    [("sqlite", "sqlite"), ("sqlite", "postgres"), ("postgres", "sqlite")],
)
def test_export_import_keeps_encrypted_values_readable(
    source_kind: str, target_kind: str, tmp_path: Path
) -> None:
    """Export carries the ciphertext as stored, bound to thread and row but not to the
    database, so an import elsewhere reads back with the same keys (and the file holds no
    plaintext)."""
    import io

    from checkpointer.export import export_threads, import_threads
    from checkpointer.inspect import Database

    source = Store(source_kind, tmp_path / "src")
    target = Store(target_kind, tmp_path / "dst")
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    try:
        states = _run(source.open(enc()), "t")
        target.open(enc())  # an empty, set-up database

        def url(store: Store) -> tuple[str, str | None]:
            if store.kind == "sqlite":
                return str(store.tmp_path / "store.db"), None
            return PG_URL, store.schema

        out = io.StringIO()
        with Database.open(url(source)[0], schema=url(source)[1]) as db:
            export_threads(db, ["t"], out)
        assert SECRET not in out.getvalue()
        with Database.open(url(target)[0], schema=url(target)[1]) as db:
            import_threads(db, out.getvalue().splitlines(keepends=True))
        assert _states(target.open(enc()), "t") == states
    finally:
        source.close()
        target.close()


async def test_async_copy_thread_reseals(tmp_path: Path) -> None:
    from checkpointer.savers.sqlite import AsyncSqliteSaver, SqliteSaver

    s = enc()
    with SqliteSaver.from_conn_string(tmp_path / "a.db", serde=s) as saver:
        states = await asyncio.to_thread(_run, saver)
    async with AsyncSqliteSaver.from_conn_string(tmp_path / "a.db", serde=s) as asaver:
        await asaver.acopy_thread("t", "t-copy")
    with SqliteSaver.from_conn_string(tmp_path / "a.db", serde=s) as saver:
        assert _states(saver, "t-copy") == states
        assert _assert_bound_to(saver, s, "t-copy") > 0


def test_plain_serializers_copy_rows_without_reading_them(tmp_path: Path) -> None:
    """The fast path stays: without a binding serializer copy_thread is the dialect's
    INSERT ... SELECT statements, no value is read or re-serialized."""
    from tests.conftest import StatementCounter

    store = Store("sqlite", tmp_path)
    try:
        saver = store.open(MsgpackSerializer())
        states = _run(saver)
        counter = StatementCounter(saver)
        saver.copy_thread("t", "t-copy")
        assert not any("SELECT checkpoint_ns, channel" in sql for sql in counter.statements)
        # Only the probe that the target holds no checkpoint yet reads anything.
        reads = [sql for sql in counter.statements if sql.lstrip().upper().startswith("SELECT")]
        assert [sql.split(" WHERE")[0] for sql in reads] == [
            "SELECT 1 FROM checkpointer_checkpoints"
        ]
        assert _states(saver, "t-copy") == states
    finally:
        store.close()


def test_tools_refuse_to_copy_bound_values(tmp_path: Path) -> None:
    """The command-line tools hold no keys: `copy` and `fork --to` refuse a thread whose
    values are bound to it (one clear error, nothing written) instead of making a copy that
    cannot be decrypted; a thread written without encryption copies as before."""
    from tests.test_cli_support import assert_one_line_error, run, run_json

    store = Store("sqlite", tmp_path)
    try:
        encrypted = store.open(enc())
        _run(encrypted, "t")
        head = next(iter(encrypted.list(cw.thread_config("t")))).config["configurable"]
        saver = store.open(MsgpackSerializer())
        _run(saver, "clear")
        url = ["--url", str(tmp_path / "store.db")]
        assert_one_line_error(run("copy", "t", "t2", *url), "bound to their thread")
        assert_one_line_error(
            run("fork", "t", head["checkpoint_id"], "--to", "t3", *url), "bound to their thread"
        )
        assert not list(saver.list(cw.thread_config("t2")))
        assert not list(saver.list(cw.thread_config("t3")))
        assert run_json("copy", "clear", "clear2", *url)["checkpoints"] > 0
        assert _states(saver, "clear2") == _states(saver, "clear")
    finally:
        store.close()


def test_reencrypt_keeps_the_write_keys_the_saver_was_given(store: Store) -> None:
    """LangGraph's negative-step task ids are stored shifted on PostgreSQL (uuid column);
    re-encryption binds each write to the key the saver reads it at, not the stored form."""
    from checkpointer.ids import next_channel_version
    from checkpointer.types import empty_checkpoint, make_config

    saver = store.open(enc())
    cp = empty_checkpoint()
    version = next_channel_version(None)
    cp["channel_values"], cp["channel_versions"] = {"x": SECRET}, {"x": version}
    config = saver.put(make_config("t"), cp, {}, {"x": version})
    task = "-0000001-1234-5678-9abc-def012345678"
    saver.put_writes(config, [("x", SECRET), ("__interrupt__", "stop")], task)
    saver.put_writes(config, [("x", SECRET)], "task-1")  # a name PostgreSQL keeps aside
    rotated = enc(keys={"k1": K1, "k2": K2}, active_key_id="k2")
    saver = store.open(rotated)
    report = reencrypt(saver)
    assert report.rewritten == report.scanned >= 4  # the memory saver: record, metadata too
    tup = store.open(enc(keys={"k2": K2}, active_key_id="k2")).get_tuple(config)
    assert sorted(tup.pending_writes) == sorted(
        [(task, "x", SECRET), (task, "__interrupt__", "stop"), ("task-1", "x", SECRET)]
    )


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_langgraph_scenarios_under_bound_encryption(kind: str, tmp_path: Path) -> None:
    """LangGraph through the drop-in, every value bound to its location: the same
    observable results as LangGraph's own saver (interrupts, forks, subgraphs, and the
    negative-step task ids of exit durability, which PostgreSQL stores shifted)."""
    pytest.importorskip("langgraph")
    from langgraph.checkpoint.memory import InMemorySaver as ReferenceSaver

    from checkpointer.langgraph import LangGraphSaver
    from tests.lg_graphs import SCENARIOS

    for name, run in sorted(SCENARIOS.items()):
        (tmp_path / name).mkdir()
        store = Store(kind, tmp_path / name)  # a fresh database each: scenarios share ids
        try:
            s = enc()
            saver = store.open(s)
            assert run(LangGraphSaver(saver)) == run(ReferenceSaver()), name
            stored = list(iter_stored_values(saver))
            assert stored and all(s.is_current(data, bind=True) for _, data in stored)
        finally:
            store.close()
