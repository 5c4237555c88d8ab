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

The pieces, each in a module of its own, all imported from here:

- `encrypted_serializer`: `EncryptedSerializer`, the seal and the open of one value;
- `encryption_format`: the stored byte layout above, read without a key;
- `reencryption`: `reencrypt` / `areencrypt`, and the pass over the in-memory saver;
- `reencryption_sql`: the SQL savers' re-encryption programs, page by page;
- `reencryption_report`: `ReencryptReport`, what a re-encryption found and did;
- `encryption_audit`: stored values and their locations, as audits and tools read them.
"""

from __future__ import annotations

from checkpointer.serde.encrypted_serializer import EncryptedSerializer
from checkpointer.serde.encryption_audit import bound_values_stmts

# Importable from here as it always was, though never in `__all__`.
from checkpointer.serde.encryption_audit import iter_stored_values as iter_stored_values
from checkpointer.serde.encryption_format import TAG_ENCRYPTED
from checkpointer.serde.reencryption import areencrypt, reencrypt
from checkpointer.serde.reencryption_report import ReencryptReport

__all__ = [
    "TAG_ENCRYPTED",
    "EncryptedSerializer",
    "ReencryptReport",
    "areencrypt",
    "bound_values_stmts",
    "reencrypt",
]
