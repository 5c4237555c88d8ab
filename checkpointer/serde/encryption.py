"""Encryption at rest: AES-GCM around any serializer, with key rotation and location binding.

    serde = EncryptedSerializer(
        MsgpackSerializer(),
        keys={"2025-01": key_a, "2025-06": key_b},   # 16, 24 or 32 random bytes each
        active_key_id="2025-06",                     # new values are encrypted with this one
    )
    saver = PostgresSaver(url, serde=serde)

Every value, `None` included, is stored as the tag `"aesgcm"` and the bytes

    version (1) | flags (1) | key id length (1) | key id | nonce (12) | ciphertext + GCM tag

so the database shows neither the values nor their types. The key id travels with each
value: old values stay readable while `keys` still holds their key, and `reencrypt(saver)`
rewrites everything under the active key so an old key can be retired.

Associated data: the header above, plus the value's location (`ValueLocation`: thread,
namespace, channel, and version or checkpoint/task), which every saver passes through
`dumps_typed_at` / `loads_typed_at`. A value copied to another row then fails to decrypt
(`CorruptCiphertextError`, a `DecryptionError` naming the row) instead of silently
becoming another thread's state; the savers' own moves to another thread (`copy_thread`, a
fork to a new thread) re-seal each value for its new place (`relocate_typed`). Values
written without a location ("unbound", flag bit 0 clear, by earlier versions) stay
readable unless `require_bound=True`; `reencrypt(saver)` binds them.

Plaintext is refused on load (`PlaintextRefusedError`): an attacker who can write to the
database must not be able to inject unencrypted state. `allow_plaintext=True` accepts it,
for migrating an existing database; run `reencrypt(saver)` and then turn it off.

Compression, if wanted, goes inside: `EncryptedSerializer(CompressingSerializer(...))`
(ciphertext does not compress). Needs `cryptography`
(`pip install "superstep-checkpointer[crypto]"`).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Generator, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from checkpointer.errors import (
    ConfigError,
    DecryptionError,
    DeserializationError,
    PlaintextRefusedError,
    SerializationError,
)
from checkpointer.serde.base import Serializer
from checkpointer.serde.compression import decompress_typed
from checkpointer.serde.located import ValueLocation

__all__ = [
    "TAG_ENCRYPTED",
    "EncryptedSerializer",
    "ReencryptReport",
    "areencrypt",
    "bound_values_stmts",
    "reencrypt",
]

TAG_ENCRYPTED = "aesgcm"
_FORMAT = 1
_FLAG_BOUND = 0x01
_NONCE = 12
_GCM_TAG = 16
_UNBOUND_AAD = b"checkpointer/unbound/v1"
_KEY_SIZES = (16, 24, 32)


def _aesgcm() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "EncryptedSerializer needs the 'cryptography' package: "
            "pip install 'superstep-checkpointer[crypto]'"
        ) from exc
    return AESGCM


def _invalid_tag() -> type[Exception]:
    from cryptography.exceptions import InvalidTag

    return InvalidTag


@dataclass(frozen=True, slots=True)
class _Header:
    flags: int
    key_id: str
    raw: bytes
    """The header bytes exactly as stored (authenticated as associated data)."""

    @property
    def bound(self) -> bool:
        return bool(self.flags & _FLAG_BOUND)


def _parse(raw: bytes) -> tuple[_Header, bytes, bytes]:
    """Header, nonce, ciphertext of a stored value; `DecryptionError` when malformed."""
    if len(raw) < 3:
        raise DecryptionError("encrypted value is truncated (no header)")
    version, flags, kid_len = raw[0], raw[1], raw[2]
    if version != _FORMAT:
        raise DecryptionError(f"unknown encrypted value format {version}")
    if flags & ~_FLAG_BOUND:
        raise DecryptionError(f"unknown encrypted value flags {flags:#x}")
    end = 3 + kid_len
    if kid_len == 0 or len(raw) < end + _NONCE + _GCM_TAG:
        raise DecryptionError("encrypted value is truncated")
    try:
        key_id = raw[3:end].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecryptionError("encrypted value has a malformed key id") from exc
    header = _Header(flags, key_id, bytes(raw[:end]))
    return header, bytes(raw[end : end + _NONCE]), bytes(raw[end + _NONCE :])


def _pack_inner(tag: str, data: bytes) -> bytes:
    raw_tag = tag.encode("utf-8")
    if len(raw_tag) > 255:
        raise SerializationError(f"serialization tag too long to encrypt: {tag!r}")
    return bytes((len(raw_tag),)) + raw_tag + bytes(data)


def _unpack_inner(plain: bytes) -> tuple[str, bytes]:
    if not plain:
        raise DecryptionError("decrypted value is empty (no inner tag)")
    n = plain[0]
    if len(plain) < 1 + n:
        raise DecryptionError("decrypted value is malformed (inner tag cut short)")
    try:
        tag = plain[1 : 1 + n].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecryptionError("decrypted value has a malformed inner tag") from exc
    return tag, plain[1 + n :]


def _check_key_id(key_id: Any) -> bytes:
    if not isinstance(key_id, str) or not key_id:
        raise ConfigError(f"key ids must be non-empty strings, got {key_id!r}")
    try:
        raw = key_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(f"key id {key_id!r} is not valid UTF-8 text") from exc
    if len(raw) > 255:
        raise ConfigError(f"key id {key_id!r} is longer than 255 bytes")
    return raw


class EncryptedSerializer:
    """AES-GCM encryption around `inner` (default: the shared msgpack serializer)."""

    binds_location = True
    """Tells savers to pass `ValueLocation`s (see `checkpointer.serde.located`)."""

    stores_scalars_inline = False
    """Every value is sealed, small scalars too: none goes into a checkpoint record."""

    def __init__(
        self,
        inner: Serializer | None = None,
        *,
        keys: Mapping[str, bytes],
        active_key_id: str,
        allow_plaintext: bool = False,
        require_bound: bool = False,
    ) -> None:
        if inner is None:
            from checkpointer.serde.msgpack_serde import default_serializer

            inner = default_serializer()
        aesgcm = _aesgcm()
        if not isinstance(keys, Mapping) or not keys:
            raise ConfigError("keys must be a non-empty dict of key id -> key bytes")
        self._ciphers: dict[str, Any] = {}
        self._key_ids: dict[str, bytes] = {}
        for key_id, key in keys.items():
            self._key_ids[key_id] = _check_key_id(key_id)
            if not isinstance(key, bytes | bytearray) or len(key) not in _KEY_SIZES:
                raise ConfigError(
                    f"key {key_id!r} must be 16, 24 or 32 bytes (AES-128/192/256), got "
                    + (f"{len(key)} bytes" if isinstance(key, bytes | bytearray) else repr(key))
                )
            self._ciphers[key_id] = aesgcm(bytes(key))
        if active_key_id not in self._ciphers:
            raise ConfigError(
                f"active_key_id {active_key_id!r} is not among the configured keys "
                f"{sorted(self._ciphers)}"
            )
        self.inner = inner
        self.active_key_id = active_key_id
        self.allow_plaintext = allow_plaintext
        self.require_bound = require_bound

    def __repr__(self) -> str:
        # Never the keys themselves.
        return (
            f"EncryptedSerializer({self.inner!r}, key_ids={sorted(self._ciphers)}, "
            f"active_key_id={self.active_key_id!r}, allow_plaintext={self.allow_plaintext})"
        )

    @property
    def key_ids(self) -> frozenset[str]:
        return frozenset(self._ciphers)

    def __getattr__(self, name: str) -> Any:
        # register(), with_types() ... of the wrapped serializer stay usable.
        if name in ("inner", "_ciphers", "_key_ids"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    # ------------------------------------------------------------------ encoding
    def _seal(self, inner: tuple[str, bytes], location: ValueLocation | None) -> tuple[str, bytes]:
        tag, data = inner
        key_id = self.active_key_id
        raw_kid = self._key_ids[key_id]
        flags = _FLAG_BOUND if location is not None else 0
        header = bytes((_FORMAT, flags, len(raw_kid))) + raw_kid
        nonce = os.urandom(_NONCE)
        aad = header + (location.aad() if location is not None else _UNBOUND_AAD)
        sealed = self._ciphers[key_id].encrypt(nonce, _pack_inner(tag, data), aad)
        return TAG_ENCRYPTED, header + nonce + sealed

    def _open(
        self, data: tuple[str, bytes], location: ValueLocation | None
    ) -> tuple[str, bytes] | None:
        """The inner `(tag, bytes)` of a stored value, or None for accepted plaintext."""
        if not isinstance(data, tuple | list) or len(data) != 2:
            raise DeserializationError(f"expected a (tag, bytes) pair, got {type(data).__name__}")
        tag, raw = data
        where = f" ({location.describe()})" if location is not None else ""
        if tag != TAG_ENCRYPTED:
            if self.allow_plaintext:
                return None
            raise PlaintextRefusedError(
                f"refusing an unencrypted value (tag {tag!r}){where}: this serializer only "
                "reads encrypted data; to migrate a plaintext database pass "
                "allow_plaintext=True and run reencrypt(saver)"
            )
        if not isinstance(raw, bytes | bytearray | memoryview):
            raise DecryptionError(f"expected bytes for an encrypted value, got {type(raw)}")
        header, nonce, sealed = _parse(bytes(raw))
        cipher = self._ciphers.get(header.key_id)
        if cipher is None:
            raise DecryptionError(
                f"value{where} is encrypted with key {header.key_id!r}, which is not among "
                f"the configured keys {sorted(self._ciphers)}"
            )
        if header.bound:
            if location is None:
                raise DecryptionError(
                    "value is bound to its storage location, but none was given: read it "
                    "through a saver that passes locations (loads_typed_at)"
                )
            aad = header.raw + location.aad()
        else:
            if location is not None and self.require_bound:
                raise PlaintextRefusedError(
                    f"value{where} is encrypted without a location binding and "
                    "require_bound=True; run reencrypt(saver, bind=True)"
                )
            aad = header.raw + _UNBOUND_AAD
        try:
            plain = cipher.decrypt(nonce, sealed, aad)
        except _invalid_tag() as exc:
            raise DecryptionError(
                f"cannot decrypt value{where} with key {header.key_id!r}: wrong key, "
                "tampered bytes, or a value moved from another location"
            ) from exc
        return _unpack_inner(plain)

    def _decode(self, data: tuple[str, bytes], location: ValueLocation | None) -> Any:
        inner = self._open(data, location)
        return self.inner.loads_typed(decompress_typed(data if inner is None else inner))

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """Encrypt without a location (savers that do not pass one)."""
        return self._seal(self.inner.dumps_typed(obj), None)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self._decode(data, None)

    def dumps_typed_at(self, obj: Any, location: ValueLocation) -> tuple[str, bytes]:
        """Encrypt bound to `location`: it only decrypts when read back from there."""
        return self._seal(self.inner.dumps_typed(obj), location)

    def loads_typed_at(self, data: tuple[str, bytes], location: ValueLocation) -> Any:
        return self._decode(data, location)

    def relocate_typed(
        self, data: tuple[str, bytes], source: ValueLocation, target: ValueLocation
    ) -> tuple[str, bytes]:
        """A value stored at `source` sealed again for `target` under the active key (what a
        copy to another thread needs), without deserializing the value itself."""
        data = decompress_typed(data)
        inner = self._open(data, source)
        return self._seal((data[0], bytes(data[1])) if inner is None else inner, target)

    # ----------------------------------------------------------------- inspection
    def key_id_of(self, data: tuple[str, bytes]) -> str | None:
        """The key id a stored value is encrypted with (None: plaintext); no key needed."""
        tag, raw = data
        if tag != TAG_ENCRYPTED:
            return None
        return _parse(bytes(raw))[0].key_id

    def is_current(self, data: tuple[str, bytes], *, bind: bool) -> bool:
        """Whether a stored value is already encrypted under the active key (and bound to
        its location when `bind`)."""
        tag, raw = data
        if tag != TAG_ENCRYPTED:
            return False
        header = _parse(bytes(raw))[0]
        return header.key_id == self.active_key_id and (header.bound or not bind)

    def reseal(
        self, data: tuple[str, bytes], location: ValueLocation, *, bind: bool
    ) -> tuple[str, bytes]:
        """`data` (encrypted under any configured key, bound or not, or plaintext) encrypted
        again under the active key, without deserializing the value itself."""
        if data[0] != TAG_ENCRYPTED:
            inner: tuple[str, bytes] = (data[0], bytes(data[1]))
        else:
            header = _parse(bytes(data[1]))[0]
            opened = self._open(data, location if header.bound else None)
            assert opened is not None
            inner = opened
        return self._seal(inner, location if bind else None)


# --------------------------------------------------------------------- re-encryption
@dataclass
class ReencryptReport:
    """What `reencrypt` found and did."""

    scanned: int = 0
    rewritten: int = 0
    plaintext: int = 0
    """Values that were stored unencrypted (now encrypted, unless dry run)."""
    by_key: dict[str, int] = field(default_factory=dict)
    """Encrypted values found per key id, before rewriting."""
    records_sealed: int = 0
    """Checkpoint records given a seal under the active key (SQL savers, when binding)."""
    skipped_changed: int = 0
    """Rows changed by a concurrent writer between read and rewrite (left as they were)."""
    dry_run: bool = False


def _find_encrypted(serde: Any) -> EncryptedSerializer:
    seen = 0
    while serde is not None and seen < 16:
        if isinstance(serde, EncryptedSerializer):
            return serde
        serde = getattr(serde, "__dict__", {}).get("inner")
        seen += 1
    raise ConfigError(
        "reencrypt needs an EncryptedSerializer (the saver's serde, or passed as serializer=)"
    )


def _tally(report: ReencryptReport, enc: EncryptedSerializer, data: tuple[str, bytes]) -> None:
    report.scanned += 1
    key_id = enc.key_id_of(data)
    if key_id is None:
        report.plaintext += 1
    else:
        report.by_key[key_id] = report.by_key.get(key_id, 0) + 1


def reencrypt(
    saver: Any,
    serializer: EncryptedSerializer | None = None,
    *,
    thread_ids: Sequence[str] | None = None,
    bind: bool | None = None,
    batch_size: int = 500,
    dry_run: bool = False,
) -> ReencryptReport:
    """Rewrite every stored value that is not encrypted under the active key (plaintext,
    older keys, or unbound when `bind`) so that old keys can be retired.

    Values are re-sealed, never deserialized, so no class allowlist is involved. Each page
    of rows is rewritten in one transaction with a compare-and-swap on the old bytes: a row a
    concurrent writer changed meanwhile is left alone (and counted). `bind=None` binds
    values to their location only if the saver passes locations when it reads
    (`saver.passes_value_locations`); otherwise the saver could not read them back.

    Works on the in-memory saver and the sync SQL savers; use `areencrypt` for async ones.
    """
    enc, bind_, threads = _prepare(saver, serializer, thread_ids, bind, batch_size)
    report = ReencryptReport(dry_run=dry_run)
    if _is_memory(saver):
        _reencrypt_memory(saver, enc, bind_, threads, report, dry_run)
        return report
    drive = getattr(saver, "_drive", None)
    if drive is None or not hasattr(saver, "_dialect"):
        raise ConfigError(
            f"reencrypt does not know how to reach the rows of {type(saver).__name__}"
            + ("; use areencrypt for async savers" if hasattr(saver, "_adrive") else "")
        )
    drive(_records_program(saver._dialect, enc, bind_, threads, batch_size, report, dry_run))
    for table in ("blobs", "writes"):
        drive(_sql_program(saver._dialect, table, enc, bind_, threads, batch_size, report, dry_run))
    return report


async def areencrypt(
    saver: Any,
    serializer: EncryptedSerializer | None = None,
    *,
    thread_ids: Sequence[str] | None = None,
    bind: bool | None = None,
    batch_size: int = 500,
    dry_run: bool = False,
) -> ReencryptReport:
    """`reencrypt` for the async SQL savers (and any saver `reencrypt` handles)."""
    adrive = getattr(saver, "_adrive", None)
    if adrive is None:
        return reencrypt(
            saver,
            serializer,
            thread_ids=thread_ids,
            bind=bind,
            batch_size=batch_size,
            dry_run=dry_run,
        )
    enc, bind_, threads = _prepare(saver, serializer, thread_ids, bind, batch_size)
    report = ReencryptReport(dry_run=dry_run)
    await adrive(_records_program(saver._dialect, enc, bind_, threads, batch_size, report, dry_run))
    for table in ("blobs", "writes"):
        await adrive(
            _sql_program(saver._dialect, table, enc, bind_, threads, batch_size, report, dry_run)
        )
    return report


def _prepare(
    saver: Any,
    serializer: EncryptedSerializer | None,
    thread_ids: Sequence[str] | None,
    bind: bool | None,
    batch_size: int,
) -> tuple[EncryptedSerializer, bool, list[str] | None]:
    enc = serializer if serializer is not None else _find_encrypted(getattr(saver, "serde", None))
    if not isinstance(enc, EncryptedSerializer):
        enc = _find_encrypted(enc)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size must be a positive int, got {batch_size!r}")
    bind_ = bool(getattr(saver, "passes_value_locations", False)) if bind is None else bind
    if isinstance(thread_ids, str):
        thread_ids = [thread_ids]
    threads = None if thread_ids is None else [str(t) for t in dict.fromkeys(thread_ids)]
    return enc, bind_, threads


def _is_memory(saver: Any) -> bool:
    from checkpointer.savers.memory import InMemorySaver

    return isinstance(saver, InMemorySaver)


def _reencrypt_memory(
    saver: Any,
    enc: EncryptedSerializer,
    bind: bool,
    threads: list[str] | None,
    report: ReencryptReport,
    dry_run: bool,
) -> None:
    """The in-memory saver's stores, under its lock (it serializes checkpoint records
    through the serializer too)."""
    wanted = None if threads is None else set(threads)

    def visit(data: tuple[str, bytes], location: ValueLocation) -> tuple[str, bytes]:
        _tally(report, enc, data)
        if enc.is_current(data, bind=bind):
            return data
        if dry_run:
            report.rewritten += 1
            return data
        report.rewritten += 1
        return enc.reseal(data, location, bind=bind)

    with saver._lock:
        for key, data in list(saver._blobs.items()):
            thread_id, ns, channel, version = key
            if wanted is None or thread_id in wanted:
                saver._blobs[key] = visit(data, ValueLocation.blob(thread_id, ns, channel, version))
        for thread_id, namespaces in saver._threads.items():
            if wanted is not None and thread_id not in wanted:
                continue
            for ns, namespace in namespaces.items():
                for checkpoint_id, stored in namespace.items():
                    stored.record = visit(
                        stored.record, ValueLocation.checkpoint(thread_id, ns, checkpoint_id)
                    )
                    _visit_writes(stored.writes, thread_id, ns, checkpoint_id, visit)
        for (thread_id, ns, checkpoint_id), writes in saver._orphan_writes.items():
            if wanted is None or thread_id in wanted:
                _visit_writes(writes, thread_id, ns, checkpoint_id, visit)


def _visit_writes(writes: Any, thread_id: str, ns: str, checkpoint_id: str, visit: Any) -> None:
    for write in writes.values():
        write.value = visit(
            write.value,
            ValueLocation.write(
                thread_id, ns, checkpoint_id, write.task_id, write.idx, write.channel
            ),
        )


_TABLES: dict[str, tuple[tuple[str, ...], str]] = {
    # table -> (primary key columns in order, extra columns read)
    "blobs": (("thread_id", "checkpoint_ns", "channel", "version"), "base_version"),
    "writes": (("thread_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx"), "channel"),
}


def _sql_program(
    d: Any,
    table: str,
    enc: EncryptedSerializer,
    bind: bool,
    threads: list[str] | None,
    batch_size: int,
    report: ReencryptReport,
    dry_run: bool,
) -> Generator[Any, Any, None]:
    """Page through one table by primary key; rewrite each page in one transaction."""
    from checkpointer.savers.sql.plan import Op, Stmt, single

    name = d.blobs if table == "blobs" else d.writes
    pk, extra = _TABLES[table]
    pg = d.name == "postgresql"

    def col(c: str) -> str:
        # The key as stored (a named task's derived uuid on PostgreSQL); the id the saver
        # was given is read beside it, for the value's location.
        return f"CAST({c} AS text)" if (pg and c == "task_id") else c

    def param(c: str, p: str) -> str:
        return f"CAST({d.p(p)} AS uuid)" if (pg and c == "task_id") else d.p(p)

    given = [d.task_id_text("task_id")] if table == "writes" else []
    select_cols = ", ".join(
        [*(col(c) for c in pk), *([extra] if extra else []), *given, "type", "blob"]
    )
    after_cond = f"({', '.join(pk)}) > ({', '.join(param(c, f'a{i}') for i, c in enumerate(pk))})"
    where_key = " AND ".join(f"{c} = {param(c, f'k{i}')}" for i, c in enumerate(pk))
    # A tail row (`savers/sql/tails.py`) is sealed whole: it stops being a tail.
    whole = ", base_version = NULL" if table == "blobs" else ""
    update = (
        f"UPDATE {name} SET type = {d.p('nt')}, blob = {d.p('nb')}{whole} "
        f"WHERE {where_key} AND type = {d.p('ot')} AND blob = {d.p('ob')}"
    )
    after: tuple[Any, ...] | None = None
    while True:
        conds: list[str] = []
        params: dict[str, Any] = {"limit": batch_size}
        if threads is not None:
            conds.append(d.in_list("thread_id", "threads"))
            params["threads"] = d.list_param(threads)
        if after is not None:
            conds.append(after_cond)
            params.update({f"a{i}": v for i, v in enumerate(after)})
        sql = (
            f"SELECT {select_cols} FROM {name}"
            + (" WHERE " + " AND ".join(conds) if conds else "")
            + f" ORDER BY {', '.join(pk)} LIMIT {d.p('limit')}"
        )
        rows = yield Op(single(Stmt(sql, params, fetch=True)))
        if not rows:
            return
        bases = (yield Op(_tail_bases_plan(d, rows))) if table == "blobs" else {}
        updates: list[dict[str, Any]] = []
        for row in rows:
            key = tuple(row[: len(pk)])
            data = (row[-2], bytes(row[-1]))
            _tally(report, enc, data)
            if enc.is_current(data, bind=bind):
                continue
            sealing = data
            if table == "blobs":
                location = ValueLocation.blob(key[0], key[1], key[2], key[3])
                if row[4] is not None:
                    sealing = _whole_tail(enc, key, data, bases)
            else:
                # The task id and slot as the saver was given them (PostgreSQL stores some
                # LangGraph task ids shifted into idx): the location it reads them at.
                task_id, idx = d.decode_write_key(row[6], key[4])
                location = ValueLocation.write(key[0], key[1], key[2], task_id, idx, row[5])
            new_tag, new_blob = enc.reseal(sealing, location, bind=bind)
            report.rewritten += 1
            updates.append(
                {
                    **{f"k{i}": v for i, v in enumerate(key)},
                    "nt": new_tag,
                    "nb": new_blob,
                    "ot": data[0],
                    "ob": data[1],
                }
            )
        if updates and not dry_run:
            changed = yield Op(_cas_plan(Stmt, update, updates), txn=True)
            report.skipped_changed += len(updates) - changed
            report.rewritten -= len(updates) - changed
        if len(rows) < batch_size:
            return
        after = tuple(rows[-1][: len(pk)])


def _tail_bases_plan(d: Any, rows: Sequence[Any]) -> Any:
    """The bases of the tail rows among a page of blob rows (key, base_version, ...)."""
    from checkpointer.savers.sql.tails import bases_plan

    keys = [(r[0], r[1], r[2], r[3]) for r in rows if r[4] is not None]
    if not keys:
        return {}
    return (yield from bases_plan(d, keys))


def _whole_tail(
    enc: EncryptedSerializer, key: tuple[Any, ...], data: tuple[str, bytes], bases: Any
) -> tuple[str, bytes]:
    """A plaintext tail row (`savers/sql/tails.py`) as its whole value's plaintext pair,
    joined from bytes with its base (opened first if already sealed, as an earlier page of
    this run does to it). Encrypted rows are always whole: only the plain msgpack
    serializer writes tails, and this keeps it so."""
    from checkpointer.savers.sql.tails import join_whole, missing_base

    thread_id, ns, channel, version = (str(k) for k in key[:4])
    where = {"thread_id": thread_id, "checkpoint_ns": ns, "channel": channel, "version": version}
    found = bases.get((thread_id, ns, channel, version))
    if found is None:
        raise missing_base((thread_id, ns, channel, version), where)
    base_version, base = found
    if base[0] == TAG_ENCRYPTED:
        header = _parse(bytes(base[1]))[0]
        at = ValueLocation.blob(thread_id, ns, channel, base_version)
        opened = enc._open(base, at if header.bound else None)
        assert opened is not None
        base = opened
    return join_whole(base, data, where)


def _records_program(
    d: Any,
    enc: EncryptedSerializer,
    bind: bool,
    threads: list[str] | None,
    batch_size: int,
    report: ReencryptReport,
    dry_run: bool,
) -> Generator[Any, Any, None]:
    """Move the small values SQL savers keep inline in checkpoint records (plaintext, see
    `savers/sql/inline.py`) into sealed value rows, and, when binding, seal each record
    (`savers/sql/record_seal.py`) under the active key, page by page: a record that has a
    seal is checked first, one without is sealed as it stands. Each record is rewritten in
    the transaction that stores its moved values, compare-and-swap on its old text."""
    import json

    from checkpointer.savers.sql.inline import RECORD_KEY as INLINE_KEY
    from checkpointer.savers.sql.inline import inline_at_versions, stored_form
    from checkpointer.savers.sql.inspect import json_doc
    from checkpointer.savers.sql.plan import Op, Stmt, each, single
    from checkpointer.savers.sql.record_seal import SEAL_KEY, make_seal, verify_record

    key = "(thread_id, checkpoint_ns, checkpoint_id)"
    update = (
        f"UPDATE {d.checkpoints} SET checkpoint = {d.json_param('new')} "
        f"WHERE thread_id = {d.p('t')} AND checkpoint_ns = {d.p('ns')} "
        f"AND checkpoint_id = {d.p('cid')} AND checkpoint = {d.json_param('old')}"
    )
    after: tuple[Any, ...] | None = None
    while True:
        # Without binding only records holding inline values need a visit.
        conds = [] if bind else [d.record_has_inline("checkpoint")]
        params: dict[str, Any] = {"limit": batch_size}
        if threads is not None:
            conds.append(d.in_list("thread_id", "threads"))
            params["threads"] = d.list_param(threads)
        if after is not None:
            conds.append(f"{key} > ({d.p('a0')}, {d.p('a1')}, {d.p('a2')})")
            params.update(a0=after[0], a1=after[1], a2=after[2])
        rows = yield Op(
            single(
                Stmt(
                    f"SELECT thread_id, checkpoint_ns, checkpoint_id, checkpoint, "
                    f"parent_checkpoint_id FROM {d.checkpoints}"
                    + (f" WHERE {' AND '.join(conds)}" if conds else "")
                    + f" ORDER BY {key[1:-1]} LIMIT {d.p('limit')}",
                    params,
                    fetch=True,
                )
            )
        )
        if not rows:
            return
        for thread_id, ns, cid, record, parent_id in rows:
            fields = json_doc(record)
            where = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": cid}
            seal = fields.get(SEAL_KEY)
            if seal is not None:  # never re-seal an edited record: check it first
                verify_record(enc, thread_id, ns, cid, dict(fields), parent_id)
            moved = inline_at_versions(fields, where)
            reseal = bind and (
                bool(moved)
                or seal is None
                or enc.key_id_of((seal[0], base64.b64decode(seal[1]))) != enc.active_key_id
            )
            if not moved and not reseal:
                continue
            sealed = []
            for channel, version, value in moved:
                data = stored_form(value)
                _tally(report, enc, data)
                location = ValueLocation.blob(thread_id, ns, channel, version)
                sealed.append((ns, channel, version, *enc.reseal(data, location, bind=bind)))
            report.rewritten += len(moved)
            report.records_sealed += reseal
            if dry_run:
                continue
            fields.pop(INLINE_KEY, None)
            fields.pop(SEAL_KEY, None)
            if reseal:
                fields[SEAL_KEY] = make_seal(enc, thread_id, ns, cid, fields, parent_id)
            old = record if isinstance(record, str) else json.dumps(record)
            new = json.dumps(fields, ensure_ascii=False, separators=(",", ":"))
            changed = yield Op(
                _move_inline_plan(
                    Stmt,
                    [d.insert_blobs(thread_id, sealed)] if sealed else [],
                    update,
                    {"new": new, "old": old, "t": thread_id, "ns": ns, "cid": cid},
                    each,
                ),
                txn=True,
            )
            if not changed:
                report.skipped_changed += len(moved) + reseal
                report.rewritten -= len(moved)
                report.records_sealed -= reseal
        if len(rows) < batch_size:
            return
        after = tuple(rows[-1][:3])


def _move_inline_plan(
    stmt: Any, inserts: list[Any], update: str, params: dict[str, Any], each: Any
) -> Any:
    """Store the sealed values, then rewrite the record if it is unchanged; a record a
    writer changed meanwhile keeps its values (the rows stored stay unused)."""
    yield from each(inserts)
    rows = yield stmt(update + " RETURNING 1", params, fetch=True)
    return len(rows)


def _cas_plan(stmt: Any, update: str, updates: list[dict[str, Any]]) -> Any:
    """Run the compare-and-swap updates one by one, counting the rows they changed."""
    changed = 0
    returning = update + " RETURNING 1"
    for params in updates:
        rows = yield stmt(returning, params, fetch=True)
        changed += len(rows)
    return changed


def iter_stored_values(saver: Any) -> Iterator[tuple[ValueLocation, tuple[str, bytes]]]:
    """Every stored value with its location, as the storage holds it (for audits and tests):
    blobs and pending writes of the sync SQL savers; also records of the in-memory saver.
    Metadata is JSON text in every saver (filterable, so never encrypted)."""
    if _is_memory(saver):
        with saver._lock:
            items: list[tuple[ValueLocation, tuple[str, bytes]]] = [
                (ValueLocation.blob(*key), data) for key, data in saver._blobs.items()
            ]
            for thread_id, namespaces in saver._threads.items():
                for ns, namespace in namespaces.items():
                    for checkpoint_id, stored in namespace.items():
                        items.append(
                            (ValueLocation.checkpoint(thread_id, ns, checkpoint_id), stored.record)
                        )
                        for w in stored.writes.values():
                            items.append(
                                (
                                    ValueLocation.write(
                                        thread_id, ns, checkpoint_id, w.task_id, w.idx, w.channel
                                    ),
                                    w.value,
                                )
                            )
        yield from items
        return
    from checkpointer.savers.sql.plan import Op, Stmt, single

    d = saver._dialect
    rows = saver._drive(
        _one_op(
            Op(
                single(
                    Stmt(
                        f"SELECT thread_id, checkpoint_ns, channel, version, type, blob "
                        f"FROM {d.blobs}",
                        (),
                        fetch=True,
                    )
                )
            )
        )
    )
    for t, ns, ch, v, tag, blob in rows:
        yield ValueLocation.blob(t, ns, ch, v), (tag, bytes(blob))
    rows = saver._drive(
        _one_op(
            Op(
                single(
                    Stmt(
                        f"SELECT thread_id, checkpoint_ns, checkpoint_id, "
                        f"{d.task_id_text('task_id')}, idx, channel, type, blob FROM {d.writes}",
                        (),
                        fetch=True,
                    )
                )
            )
        )
    )
    for t, ns, cid, task_id, idx, ch, tag, blob in rows:
        task, slot = d.decode_write_key(task_id, idx)
        yield ValueLocation.write(t, ns, cid, task, slot, ch), (tag, bytes(blob))
    from checkpointer.savers.sql.inline import inline_at_versions, stored_form
    from checkpointer.savers.sql.inspect import json_doc

    rows = saver._drive(
        _one_op(
            Op(
                single(
                    Stmt(
                        f"SELECT thread_id, checkpoint_ns, checkpoint_id, checkpoint "
                        f"FROM {d.checkpoints} WHERE {d.record_has_inline('checkpoint')}",
                        (),
                        fetch=True,
                    )
                )
            )
        )
    )
    for t, ns, cid, record in rows:
        where = {"thread_id": t, "checkpoint_ns": ns, "checkpoint_id": cid}
        for channel, version, value in inline_at_versions(json_doc(record), where):
            yield ValueLocation.blob(t, ns, channel, version), stored_form(value)


def _one_op(op: Any) -> Generator[Any, Any, Any]:
    result = yield op
    return result


def bound_values_stmts(d: Any, thread_id: str) -> list[Any]:
    """Statements (blobs, writes) that return a row when the thread holds a value encrypted
    and bound to its location: its header's flags byte (the second) is exactly the bound
    flag. Read in SQL, without a key, by tools that must not copy such values as bytes."""
    from checkpointer.savers.sql.plan import Stmt

    params = {"t": thread_id, "tag": TAG_ENCRYPTED, "flag": bytes((_FLAG_BOUND,))}
    return [
        Stmt(
            f"SELECT 1 FROM {table} WHERE thread_id = {d.p('t')} AND type = {d.p('tag')} "
            f"AND substr(blob, 2, 1) = {d.p('flag')} LIMIT 1",
            params,
            fetch=True,
        )
        for table in (d.blobs, d.writes)
    ]
