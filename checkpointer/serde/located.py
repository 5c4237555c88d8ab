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

Every saver passes them (`passes_value_locations = True`, which `encryption.reencrypt`
reads to decide whether to bind):
- SQL savers (`sql/puts.py`): `put_op` / `put_writes_op` write each blob and write at its
  location, `decode_tuples` reads them back there (the blob's version comes with its row;
  a write's key is its task id and slot as the saver was given them, as PostgreSQL's
  `decode_write_key` returns them). `decode_delta_history` reads each seed at its blob
  location and each write at *its own* checkpoint, not the one being rebuilt. Snapshots
  stored by retention (`sql/lifecycle.py`) are written at their blob location.
- The in-memory saver does the same, and also stores checkpoint records through the
  serializer (`ValueLocation.checkpoint`); metadata is JSON text there as in SQL.
- Moves to another thread re-seal: `copy_thread` (both SQL dialects, the memory saver) and
  `transfer.fork_to_thread_plan` read each value at the source location and store it at the
  target's (`relocate`, in pages) when `is_located(serde)`; with a plain serializer they
  copy bytes in SQL as before. A fork inside its thread (`fork_in_place_plan`, a graph run
  from an old checkpoint) keeps every value's key; only its new record's seal (see
  `savers/sql/record_seal.py`, which also authenticates the SQL records) is made anew.
- Export/import carries values as stored: a location names no database, so an import
  elsewhere (same thread ids) reads back with the same keys.
- The command-line tools hold no keys: they read values without a location (encrypted
  ones show as unloadable) and refuse to copy bound values to another thread
  (`transfer.refuse_bound_values_plan`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, Literal, Protocol, runtime_checkable

from checkpointer.errors import (
    CorruptCiphertextError,
    CorruptValueError,
    DecryptionError,
    DeserializationError,
    PlaintextRefusedError,
    TypeNotAllowedError,
)
from checkpointer.serde.base import Serializer
from checkpointer.serde.compression import decompress_typed, fast_loader_of, load_typed

__all__ = [
    "LocatedSerializer",
    "LocationKind",
    "ValueLocation",
    "dumps_at",
    "is_located",
    "load_at",
    "loads_at",
    "relocate",
]

LocationKind = Literal["blob", "write", "checkpoint", "metadata", "record_seal"]

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

    @classmethod
    def record_seal(cls, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> ValueLocation:
        """The seal a SQL saver keeps in a checkpoint record (`sql/record_seal.py`)."""
        return cls("record_seal", str(thread_id), checkpoint_ns, checkpoint_id=checkpoint_id)

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

    def where(self) -> dict[str, str | None]:
        """The fields a `CorruptValueError` names."""
        return {
            "thread_id": self.thread_id,
            "checkpoint_ns": self.checkpoint_ns,
            "checkpoint_id": self.checkpoint_id,
            "channel": self.channel,
            "task_id": self.task_id,
            "version": self.version,
        }

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


def load_at(
    serde: Serializer, data: tuple[str, bytes], location: ValueLocation | None, **where: str | None
) -> Any:
    """What savers call to read a stored value: `loads_at` when given a location (pass None
    for serializers that do not bind: the plain path stays as cheap as `load_typed`).

    A value that cannot be read raises CorruptValueError naming `where`; one that does not
    decrypt there (tampered, moved from another row) `CorruptCiphertextError`, which is also
    a DecryptionError. A refused plaintext keeps its type: that is configuration, not damage.
    """
    if location is None:
        return load_typed(serde, data, **where)
    try:
        return loads_at(serde, data, location)
    except TypeNotAllowedError as exc:
        raise exc.at(**where) from exc.__cause__
    except (CorruptValueError, PlaintextRefusedError):
        raise
    except DecryptionError as exc:
        raise CorruptCiphertextError(str(exc), **where) from exc
    except DeserializationError as exc:
        raise CorruptValueError(str(exc), **where) from exc


def batch_loader(serde: Serializer) -> Callable[[tuple[str, bytes]], Any] | None:
    """The serializer's batch loader (`fast_loader_of`) for one read of many values; None
    when the serializer binds values to their location, each then read at its own.

    It raises on anything it cannot read without saying where: read that value again
    with `load_at`, which raises the located error."""
    return None if is_located(serde) else fast_loader_of(serde)


def plain_batch_loader(serde: Serializer) -> Callable[[Sequence[bytes]], list[Any] | None] | None:
    """The serializer's decoder of many msgpack-tagged payloads at once (a delta history's
    writes); None when it binds values to their location or has none. It returns None for
    a batch it cannot read in one go: each value then goes through `batch_loader`."""
    if is_located(serde):
        return None
    make = getattr(serde, "fast_batch_loader", None)
    return None if make is None else make()


def value_reader(serde: Serializer) -> Callable[..., Any]:
    """`load_at` for reading many values in one go (a page of checkpoints, a delta history).

    With a serializer that does not bind locations and offers a batch loader (msgpack),
    values decode through that; one it cannot read goes through `load_at`, which raises the
    located error. `read(data, location, **where)`: pass `location=None` when the serializer
    does not bind (`is_located`), to skip building one."""
    fast = batch_loader(serde)
    if fast is None:
        return partial(load_at, serde)

    def read(data: tuple[str, bytes], location: ValueLocation | None, **where: str | None) -> Any:
        try:
            return fast(data)
        except Exception:
            pass
        return load_at(serde, data, location, **where)

    return read


def relocate(
    serde: Serializer, data: tuple[str, bytes], source: ValueLocation, target: ValueLocation
) -> tuple[str, bytes]:
    """A stored value made readable at `target` instead of `source` (copies to another
    thread). Serializers with `relocate_typed` (the encrypting one) re-seal the bytes
    without deserializing the value; others are read at `source` and written at `target`.
    A value that cannot be read at `source` raises CorruptValueError naming it.
    """
    method = getattr(serde, "relocate_typed", None)
    try:
        if method is not None:
            return method(data, source, target)
        value = loads_at(serde, data, source)
    except TypeNotAllowedError as exc:
        raise exc.at(**source.where()) from exc.__cause__
    except (CorruptValueError, PlaintextRefusedError):
        raise
    except DecryptionError as exc:
        raise CorruptCiphertextError(str(exc), **source.where()) from exc
    except DeserializationError as exc:
        raise CorruptValueError(str(exc), **source.where()) from exc
    return dumps_at(serde, value, target)
