"""Keys for reading an encrypted database from the command line.

An operator reads their own encrypted data by giving the keys the application uses:

    export CHECKPOINTER_KEYS="2025-06:BASE64KEY,2025-01:BASE64KEY"
    export CHECKPOINTER_KEY_FILE=/run/secrets/checkpointer-keys   # or --key-file

A key file holds one `key_id:base64` (or `key_id=base64`) per line; blank lines and `#`
comments are skipped. Keys are never printed. Without keys, encrypted values show as
"encrypted (no key given)".
"""

from __future__ import annotations

import base64
import binascii
import os
from typing import Any

from checkpointer.errors import ConfigError

KEYS_ENV = "CHECKPOINTER_KEYS"
KEY_FILE_ENV = "CHECKPOINTER_KEY_FILE"


def parse_keys(text: str, *, source: str) -> dict[str, bytes]:
    """`key_id:base64` entries separated by commas or lines."""
    keys: dict[str, bytes] = {}
    for n, entry in enumerate(text.replace(",", "\n").splitlines(), start=1):
        entry = entry.strip()
        if not entry or entry.startswith("#"):
            continue
        sep = ":" if ":" in entry else "="
        key_id, _, encoded = entry.partition(sep)
        if not key_id.strip() or not encoded.strip():
            raise ConfigError(f"{source}, entry {n}: expected key_id:base64key")
        try:
            keys[key_id.strip()] = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ConfigError(f"{source}, key {key_id.strip()!r}: not valid base64") from exc
    return keys


def configured_keys(key_file: str | None = None) -> dict[str, bytes]:
    """Keys from `key_file` (or $CHECKPOINTER_KEY_FILE) and $CHECKPOINTER_KEYS."""
    keys: dict[str, bytes] = {}
    path = key_file or os.environ.get(KEY_FILE_ENV)
    if path:
        try:
            with open(path, encoding="utf-8") as f:
                keys.update(parse_keys(f.read(), source=f"key file {path!r}"))
        except OSError as exc:
            raise ConfigError(f"cannot read key file {path!r}: {exc.strerror}") from exc
    if os.environ.get(KEYS_ENV):
        keys.update(parse_keys(os.environ[KEYS_ENV], source=f"${KEYS_ENV}"))
    return keys


def keys_serializer(inner: Any, key_file: str | None = None) -> Any:
    """An `EncryptedSerializer` over `inner` holding the configured keys (plaintext
    accepted: the tools read mixed databases), or None when no key is configured."""
    keys = configured_keys(key_file)
    if not keys:
        return None
    from checkpointer.serde.encryption import EncryptedSerializer

    return EncryptedSerializer(
        inner, keys=keys, active_key_id=next(iter(keys)), allow_plaintext=True
    )
