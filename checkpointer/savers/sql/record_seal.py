"""Authenticated checkpoint records for serializers that bind values to their location.

Values are sealed where they live (`serde/located.py`), but which value a checkpoint reads
is decided by its record: `channel_versions` picks the blob row of each channel,
`versions_seen` decides which tasks run next, and the parent id decides where history
continues. The record is plaintext JSON, so editing a version to an older (still validly
sealed) blob of the same thread would roll a channel back silently.

With a located serializer (`is_located`), `put` therefore stores in the record, under
`SEAL_KEY`, a digest (SHA-256 of a canonical JSON of those fields and the parent id)
encrypted by the serializer at `ValueLocation.record_seal(thread, ns, checkpoint)`. Reads
by a located serializer open it there and compare: any edit of those fields, a seal copied
from another checkpoint, or a record moved to another thread raises
`CorruptCiphertextError` naming the checkpoint. Records without a seal (written before it
existed) stay readable unless the serializer has `require_bound=True`. Moves to another
thread re-seal (`reseal_records_plan`); export/import carries the seal as stored.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from checkpointer.errors import CorruptCiphertextError, PlaintextRefusedError
from checkpointer.savers.sql.inline import RECORD_KEY as INLINE_KEY
from checkpointer.serde.base import Serializer
from checkpointer.serde.located import ValueLocation, dumps_at, load_at

__all__ = ["SEAL_KEY", "make_seal", "record_verifier", "verify_record"]

SEAL_KEY = "__seal__"
"""The record key holding the seal: `[tag, base64 of the sealed digest]`."""


def record_digest(fields: Mapping[str, Any], parent_id: str | None) -> bytes:
    """SHA-256 of what decides which values a checkpoint reads, in a canonical form that
    survives a JSON round trip through either database (sorted keys, compact)."""
    payload = {
        "channel_versions": fields.get("channel_versions"),
        "versions_seen": fields.get("versions_seen"),
        "inline": fields.get(INLINE_KEY),
        "parent": parent_id,
    }
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def make_seal(
    serde: Serializer,
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    fields: Mapping[str, Any],
    parent_id: str | None,
) -> list[str]:
    """The seal of a record (`fields` without `SEAL_KEY`) at its checkpoint's location."""
    tag, data = dumps_at(
        serde,
        record_digest(fields, parent_id),
        ValueLocation.record_seal(thread_id, ns, checkpoint_id),
    )
    return [tag, base64.b64encode(data).decode("ascii")]


def _refuse(message: str, thread_id: str, ns: str, checkpoint_id: str) -> CorruptCiphertextError:
    return CorruptCiphertextError(
        f"checkpoint record of thread {thread_id!r}, namespace {ns!r}, checkpoint "
        f"{checkpoint_id!r}: {message}",
        thread_id=thread_id,
        checkpoint_ns=ns,
        checkpoint_id=checkpoint_id,
    )


def verify_record(
    serde: Serializer,
    thread_id: str,
    ns: str,
    checkpoint_id: str,
    fields: dict[str, Any],
    parent_id: str | None,
) -> None:
    """Check and remove the seal of a parsed record; raise CorruptCiphertextError naming
    the checkpoint when it does not match (PlaintextRefusedError for a record without one
    when the serializer has `require_bound=True`)."""
    seal = fields.pop(SEAL_KEY, None)
    if seal is None:
        if getattr(serde, "require_bound", False) is True:
            raise PlaintextRefusedError(
                f"checkpoint record of thread {thread_id!r}, namespace {ns!r}, checkpoint "
                f"{checkpoint_id!r} is not sealed and require_bound=True; run "
                "reencrypt(saver, bind=True)"
            )
        return
    where = {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}
    if (
        type(seal) is not list
        or len(seal) != 2
        or not isinstance(seal[0], str)
        or not isinstance(seal[1], str)
    ):
        raise _refuse("its seal is malformed", thread_id, ns, checkpoint_id)
    try:
        data = base64.b64decode(seal[1].encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as exc:
        raise _refuse("its seal is malformed", thread_id, ns, checkpoint_id) from exc
    key_id_of = getattr(serde, "key_id_of", None)
    if key_id_of is not None and key_id_of((seal[0], data)) is None:
        # A plaintext "seal" would pass under allow_plaintext=True: anyone can write one.
        raise _refuse("its seal is not encrypted", thread_id, ns, checkpoint_id)
    location = ValueLocation.record_seal(thread_id, ns, checkpoint_id)
    try:
        digest = load_at(serde, (seal[0], data), location, **where)
    except CorruptCiphertextError as exc:
        raise _refuse(f"its seal does not open here ({exc})", thread_id, ns, checkpoint_id) from exc
    if digest != record_digest(fields, parent_id):
        raise _refuse(
            "it was edited after it was written (channel_versions, versions_seen, inline "
            "values or parent id do not match its seal)",
            thread_id,
            ns,
            checkpoint_id,
        )


def record_verifier(
    serde: Serializer, thread_id: str, ns: str, checkpoint_id: str, parent_id: str | None
) -> Callable[[dict[str, Any]], None]:
    """`verify_record` for one checkpoint, as `decode_checkpoint` takes it."""

    def verify(fields: dict[str, Any]) -> None:
        verify_record(serde, thread_id, ns, checkpoint_id, fields, parent_id)

    return verify


def resealed(
    serde: Serializer,
    fields: dict[str, Any],
    source: str,
    target: str,
    ns: str,
    checkpoint_id: str,
    parent_id: str | None,
) -> dict[str, Any] | None:
    """`fields` (a parsed record of thread `source`) sealed for thread `target`, or None
    when it holds no seal. The seal is checked at the source first, so a move never
    launders an edited record into a valid one."""
    if SEAL_KEY not in fields:
        return None
    fields = dict(fields)
    verify_record(serde, source, ns, checkpoint_id, fields, parent_id)
    fields[SEAL_KEY] = make_seal(serde, target, ns, checkpoint_id, fields, parent_id)
    return fields
