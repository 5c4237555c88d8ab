"""Identifiers: checkpoint ids, task ids that carry their superstep, channel versions.

- Checkpoint ids are UUIDv7 strings, strictly increasing within a process, so sorting ids
  sorts checkpoints by creation (a single process never goes backwards, even if the wall
  clock does).
- Task ids are RFC 9562 version-8 UUIDs whose first group is `step + 2` in hex. Steps start
  at -2 (the stub before input), so the first group is never negative and plain string or
  `uuid` ordering (`ORDER BY task_id, idx`) is chronological, for steps up to 2**32 - 3.
- Channel versions are `"<12-digit counter>.<16 hex random>"`: the counter orders versions
  of one channel, the random tail keeps two forks' versions of the same counter distinct.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import threading
import time
import uuid

MIN_STEP = -2
MAX_STEP = 0xFFFF_FFFF + MIN_STEP
_STEP_BIAS = -MIN_STEP

_lock = threading.Lock()
_last_ms = 0
_last_seq = 0


def new_checkpoint_id() -> str:
    """A fresh UUIDv7 string, greater than every id this process made before."""
    global _last_ms, _last_seq
    with _lock:
        now_ms = time.time_ns() // 1_000_000
        if now_ms > _last_ms:
            _last_ms, _last_seq = now_ms, secrets.randbits(10)
        else:
            # Same millisecond, or the clock stepped back: keep counting from the last id.
            _last_seq += 1
            if _last_seq >= 1 << 12:
                _last_ms, _last_seq = _last_ms + 1, 0
        ms, seq = _last_ms, _last_seq
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= seq << 64
    value |= 0b10 << 62
    value |= int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    return str(uuid.UUID(int=value))


def task_id_for(step: int, *parts: str) -> str:
    """Deterministic task id for a task of `step`, named by `parts` (namespace, node, path).

    The same step and parts always give the same id, so a resumed run finds the writes its
    crashed predecessor saved under that id.
    """
    if not MIN_STEP <= step <= MAX_STEP:
        raise ValueError(f"step {step} is outside the encodable range {MIN_STEP}..{MAX_STEP}")
    digest = hashlib.sha256("\x00".join((str(step), *parts)).encode("utf-8", "surrogatepass"))
    tail = int.from_bytes(digest.digest()[:12], "big")  # 96 bits below the step group
    value = ((step + _STEP_BIAS) << 96) | tail
    value &= ~(0xF << 76)
    value |= 0x8 << 76  # version 8: custom layout, still an RFC 9562 UUID
    value &= ~(0b11 << 62)
    value |= 0b10 << 62  # RFC variant
    return str(uuid.UUID(int=value))


def superstep_of(task_id: str) -> int:
    """The step encoded in a task id made by `task_id_for`."""
    try:
        parsed = uuid.UUID(task_id)
    except (ValueError, AttributeError, TypeError) as exc:
        raise ValueError(f"not a task id: {task_id!r}") from exc
    if parsed.version != 8:
        raise ValueError(f"task id {task_id!r} does not encode a superstep (not version 8)")
    return (parsed.int >> 96) - _STEP_BIAS


def channel_version_counter(version: str | int | float | None) -> int:
    """The ordering counter of a channel version (0 for none)."""
    if version is None:
        return 0
    if isinstance(version, int | float):
        return int(version)
    try:
        return int(version.split(".", 1)[0])
    except ValueError as exc:
        raise ValueError(f"unrecognised channel version {version!r}") from exc


VERSION_COUNTER_DIGITS = 12
"""Zero padding of a version's counter, so versions compare as strings. Older checkpoints
(and LangGraph's own savers) pad to 32 digits; such a version sorts below every 12-digit
version with a higher counter, so a thread written by either continues correctly."""


def next_channel_version(current: str | int | float | None) -> str:
    """The version after `current`: higher counter, random tail unique across forks.

    Versions are stored in every checkpoint record (once per channel, and again per node in
    `versions_seen`), so they are kept short: 12 digits and 64 random bits."""
    counter = channel_version_counter(current) + 1
    return f"{counter:0{VERSION_COUNTER_DIGITS}d}.{secrets.token_hex(8)}"
