"""The stored form of an encrypted value: its header, and the inner tag sealed with it.

    version (1) | flags (1) | key id length (1) | key id | nonce (12) | ciphertext + GCM tag

The plaintext sealed is `tag length (1) | tag | bytes` of the inner serializer. Kept apart
from the serializer so that code which only looks at stored values (their key id, whether
they are bound: `reencryption_sql`, `encryption_audit`) depends on the layout alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from checkpointer.errors import ConfigError, DecryptionError, SerializationError

TAG_ENCRYPTED = "aesgcm"
FORMAT = 1
FLAG_BOUND = 0x01
NONCE = 12
GCM_TAG = 16
UNBOUND_AAD = b"checkpointer/unbound/v1"
KEY_SIZES = (16, 24, 32)


@dataclass(frozen=True, slots=True)
class SealedHeader:
    flags: int
    key_id: str
    raw: bytes
    """The header bytes exactly as stored (authenticated as associated data)."""

    @property
    def bound(self) -> bool:
        return bool(self.flags & FLAG_BOUND)


def parse_sealed(raw: bytes) -> tuple[SealedHeader, bytes, bytes]:
    """Header, nonce, ciphertext of a stored value; `DecryptionError` when malformed."""
    if len(raw) < 3:
        raise DecryptionError("encrypted value is truncated (no header)")
    version, flags, kid_len = raw[0], raw[1], raw[2]
    if version != FORMAT:
        raise DecryptionError(f"unknown encrypted value format {version}")
    if flags & ~FLAG_BOUND:
        raise DecryptionError(f"unknown encrypted value flags {flags:#x}")
    end = 3 + kid_len
    if kid_len == 0 or len(raw) < end + NONCE + GCM_TAG:
        raise DecryptionError("encrypted value is truncated")
    try:
        key_id = raw[3:end].decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecryptionError("encrypted value has a malformed key id") from exc
    header = SealedHeader(flags, key_id, bytes(raw[:end]))
    return header, bytes(raw[end : end + NONCE]), bytes(raw[end + NONCE :])


def pack_inner(tag: str, data: bytes) -> bytes:
    raw_tag = tag.encode("utf-8")
    if len(raw_tag) > 255:
        raise SerializationError(f"serialization tag too long to encrypt: {tag!r}")
    return bytes((len(raw_tag),)) + raw_tag + bytes(data)


def unpack_inner(plain: bytes) -> tuple[str, bytes]:
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


def check_key_id(key_id: Any) -> bytes:
    if not isinstance(key_id, str) or not key_id:
        raise ConfigError(f"key ids must be non-empty strings, got {key_id!r}")
    try:
        raw = key_id.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ConfigError(f"key id {key_id!r} is not valid UTF-8 text") from exc
    if len(raw) > 255:
        raise ConfigError(f"key id {key_id!r} is longer than 255 bytes")
    return raw
