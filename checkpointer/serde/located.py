"""Location-aware serialization: an optional extension of the `Serializer` protocol.

A plain serializer sees only the value. An encrypting one should also bind each value to
*where it lives* (thread, namespace, channel, and the checkpoint version or task write it
belongs to), so that ciphertext copied to another row fails to decrypt instead of silently
becoming someone else's state. Savers pass that place as a `ValueLocation`:

    dumps_at(serde, value, ValueLocation.blob(thread_id, ns, channel, version))
    loads_at(serde, (tag, data), ValueLocation.write(thread_id, ns, checkpoint_id, task_id,
             idx, channel))

`dumps_at` / `loads_at` call `dumps_typed_at` / `loads_typed_at` when the serializer has
them (`LocatedSerializer`) and fall back to the plain methods otherwise, so a saver can call
them unconditionally and every existing serializer keeps working.

Which location each stored value gets is fixed here, once: a blob (a channel value) is keyed
by its version, not by a checkpoint, because one blob serves every checkpoint that did not
change that channel; a pending write by its checkpoint, task and index. The database itself
is not part of a location, so export/import between databases keeps values readable.

Wiring (savers; once done, set `passes_value_locations = True` on the saver classes, which
`encryption.reencrypt` reads to decide whether to bind):
- `sql/core.py put_op`: each blob `dumps_at(serde, v, ValueLocation.blob(thread_id, ns,
  channel, version_text(version)))`; `put_writes_op`: `ValueLocation.write(thread_id, ns,
  checkpoint_id, task_id, write_idx(channel, position), channel)` (the task id as given,
  which is what PostgreSQL returns as `task_id::text`).
- `decode_tuples`: blob rows need their version (select `bl.version` in the spare column
  `b` of the blob branch of `_tuples_sql`); write rows already carry task id, idx, channel.
- `decode_delta_history`: takes thread id and namespace from the config (pass them from
  `_p_delta_history`); seed rows need the blob version and write rows the checkpoint id
  (add both to the recursive statement's select lists).
- `sql/lifecycle.py` (snapshots stored by retention) and `memory.py` `put`, `put_writes`,
  `_load`, `list` (metadata filter), `_materialize`: the same kinds; the memory saver also
  stores records and metadata through the serializer (`ValueLocation.checkpoint/metadata`).
- Copies to another thread (`copy_thread` in both SQL dialects and the memory saver,
  `transfer.fork_to_thread_plan`, an import that renames threads) copy ciphertext bound to
  the source thread: when `is_located(serde)` they must decode at the source location and
  encode at the target (in pages), not `INSERT ... SELECT` the bytes.
- Readers of raw rows (`inspect.py`, `savers/sql/inspect.py`): `loads_at` with the row's key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from checkpointer.serde.base import Serializer
from checkpointer.serde.compression import decompress_typed

__all__ = [
    "LocatedSerializer",
    "LocationKind",
    "ValueLocation",
    "dumps_at",
    "is_located",
    "loads_at",
]

LocationKind = Literal["blob", "write", "checkpoint", "metadata"]

_AAD_PREFIX = b"checkpointer/location/v1"


def _field(value: str | int | None) -> bytes:
    """Length-prefixed field: no separator can be forged from inside a value (ids may hold
    any character, NUL and lone surrogates included)."""
    if value is None:
        return b"\xff\xff\xff\xff"
    raw = str(value).encode("utf-8", "surrogatepass")
    return len(raw).to_bytes(4, "big") + raw


@dataclass(frozen=True, slots=True)
class ValueLocation:
    """Where one stored value lives. Build it with the class methods, which fix the fields
    each kind uses; the same value read back must be given the same location."""

    kind: LocationKind
    thread_id: str
    checkpoint_ns: str
    channel: str | None = None
    version: str | None = None
    checkpoint_id: str | None = None
    task_id: str | None = None
    idx: int | None = None

    @classmethod
    def blob(cls, thread_id: str, checkpoint_ns: str, channel: str, version: str) -> ValueLocation:
        """A channel value: the key of the blob table (thread, ns, channel, version)."""
        return cls("blob", str(thread_id), checkpoint_ns, channel=channel, version=str(version))

    @classmethod
    def write(
        cls,
        thread_id: str,
        checkpoint_ns: str,
        checkpoint_id: str,
        task_id: str,
        idx: int,
        channel: str,
    ) -> ValueLocation:
        """A pending write: the key of the writes table plus its channel."""
        return cls(
            "write",
            str(thread_id),
            checkpoint_ns,
            channel=channel,
            checkpoint_id=checkpoint_id,
            task_id=str(task_id),
            idx=int(idx),
        )

    @classmethod
    def checkpoint(cls, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> ValueLocation:
        """A checkpoint record stored through the serializer (the in-memory saver does)."""
        return cls("checkpoint", str(thread_id), checkpoint_ns, checkpoint_id=checkpoint_id)

    @classmethod
    def metadata(cls, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> ValueLocation:
        """Checkpoint metadata stored through the serializer (the in-memory saver does)."""
        return cls("metadata", str(thread_id), checkpoint_ns, checkpoint_id=checkpoint_id)

    def aad(self) -> bytes:
        """Canonical bytes naming this location (AES-GCM associated data)."""
        return b"".join(
            (
                _AAD_PREFIX,
                _field(self.kind),
                _field(self.thread_id),
                _field(self.checkpoint_ns),
                _field(self.channel),
                _field(self.version),
                _field(self.checkpoint_id),
                _field(self.task_id),
                _field(self.idx),
            )
        )

    def describe(self) -> str:
        parts = [f"thread {self.thread_id!r}"]
        if self.checkpoint_ns:
            parts.append(f"namespace {self.checkpoint_ns!r}")
        if self.checkpoint_id is not None:
            parts.append(f"checkpoint {self.checkpoint_id}")
        if self.task_id is not None:
            parts.append(f"task {self.task_id} idx {self.idx}")
        if self.channel is not None:
            parts.append(f"channel {self.channel!r}")
        if self.version is not None:
            parts.append(f"version {self.version}")
        return f"{self.kind} at " + ", ".join(parts)


@runtime_checkable
class LocatedSerializer(Serializer, Protocol):
    """A serializer that can bind values to their location (see module docstring)."""

    def dumps_typed_at(self, obj: Any, location: ValueLocation) -> tuple[str, bytes]: ...

    def loads_typed_at(self, data: tuple[str, bytes], location: ValueLocation) -> Any: ...


def is_located(serde: Any) -> bool:
    """Whether `serde` binds values to their location (`binds_location`). Savers must then
    re-encode, not copy, values that move: `copy_thread` changes every value's thread."""
    return getattr(serde, "binds_location", False) is True


def dumps_at(serde: Serializer, obj: Any, location: ValueLocation) -> tuple[str, bytes]:
    """What a saver calls to store `obj` at `location`."""
    method = getattr(serde, "dumps_typed_at", None)
    if method is not None:
        return method(obj, location)
    return serde.dumps_typed(obj)


def loads_at(serde: Serializer, data: tuple[str, bytes], location: ValueLocation) -> Any:
    """What a saver calls to read the value stored at `location` (compression undone first,
    as `compression.load_typed` does)."""
    method = getattr(serde, "loads_typed_at", None)
    if method is not None:
        return method(decompress_typed(data), location)
    return serde.loads_typed(decompress_typed(data))
