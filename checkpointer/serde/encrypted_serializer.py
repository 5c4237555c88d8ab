"""`EncryptedSerializer`: AES-GCM around any serializer, each value bound to its location.

How values are sealed, why, and how keys rotate is told in `checkpointer.serde.encryption`;
the byte layout is in `encryption_format`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from checkpointer.errors import (
    ConfigError,
    DecryptionError,
    DeserializationError,
    PlaintextRefusedError,
)
from checkpointer.serde.base import Serializer
from checkpointer.serde.compression import decompress_typed
from checkpointer.serde.encryption_format import (
    FLAG_BOUND,
    FORMAT,
    KEY_SIZES,
    NONCE,
    TAG_ENCRYPTED,
    UNBOUND_AAD,
    check_key_id,
    pack_inner,
    parse_sealed,
    unpack_inner,
)
from checkpointer.serde.located import ValueLocation


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
            self._key_ids[key_id] = check_key_id(key_id)
            if not isinstance(key, bytes | bytearray) or len(key) not in KEY_SIZES:
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
        flags = FLAG_BOUND if location is not None else 0
        header = bytes((FORMAT, flags, len(raw_kid))) + raw_kid
        nonce = os.urandom(NONCE)
        aad = header + (location.aad() if location is not None else UNBOUND_AAD)
        sealed = self._ciphers[key_id].encrypt(nonce, pack_inner(tag, data), aad)
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
        header, nonce, sealed = parse_sealed(bytes(raw))
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
            aad = header.raw + UNBOUND_AAD
        try:
            plain = cipher.decrypt(nonce, sealed, aad)
        except _invalid_tag() as exc:
            raise DecryptionError(
                f"cannot decrypt value{where} with key {header.key_id!r}: wrong key, "
                "tampered bytes, or a value moved from another location"
            ) from exc
        return unpack_inner(plain)

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
        return parse_sealed(bytes(raw))[0].key_id

    def is_current(self, data: tuple[str, bytes], *, bind: bool) -> bool:
        """Whether a stored value is already encrypted under the active key (and bound to
        its location when `bind`)."""
        tag, raw = data
        if tag != TAG_ENCRYPTED:
            return False
        header = parse_sealed(bytes(raw))[0]
        return header.key_id == self.active_key_id and (header.bound or not bind)

    def reseal(
        self, data: tuple[str, bytes], location: ValueLocation, *, bind: bool
    ) -> tuple[str, bytes]:
        """`data` (encrypted under any configured key, bound or not, or plaintext) encrypted
        again under the active key, without deserializing the value itself."""
        if data[0] != TAG_ENCRYPTED:
            inner: tuple[str, bytes] = (data[0], bytes(data[1]))
        else:
            header = parse_sealed(bytes(data[1]))[0]
            opened = self._open(data, location if header.bound else None)
            assert opened is not None
            inner = opened
        return self._seal(inner, location if bind else None)
