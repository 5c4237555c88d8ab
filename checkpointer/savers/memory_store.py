"""The in-memory saver's storage: what a database's tables would hold, as Python objects.

A checkpoint row (`StoredCheckpoint`) keeps its record serialized, its metadata as JSON text
and its pending writes (`StoredWrite`) beside it; values live in one blob dict keyed by
(thread, namespace, channel, version), shared by every checkpoint that points at them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from json.encoder import encode_basestring
from operator import attrgetter
from typing import Any

from checkpointer.savers.base import (
    _c_make_encoder,
    _refuse_json,
    dumps_json,
    loads_json,
    metadata_counters_as_pairs,
)
from checkpointer.savers.metadata import MAX_METADATA_DEPTH
from checkpointer.savers.retention import delta_channels_of
from checkpointer.serde.located import ValueLocation
from checkpointer.types import ChannelVersions

Typed = tuple[str, bytes]
"""A value as the serializer stored it: (tag, bytes)."""
BlobKey = tuple[str, str, str, str]  # thread, namespace, channel, version
BlobSizes = dict[tuple[str, str], dict[tuple[str, str], int]]
"""(thread, namespace) -> (channel, version) -> bytes of the stored value."""


@dataclass(slots=True)
class StoredWrite:
    task_id: str
    idx: int
    channel: str
    value: Typed
    task_path: str


@dataclass(slots=True)
class StoredCheckpoint:
    """A checkpoint row: the record without its values, which live in the blob store."""

    record: Typed
    metadata: str  # JSON text, as the SQL savers store it: one encoding, the same round trip
    parent_id: str | None
    channel_versions: ChannelVersions
    run_id: str | None
    writes: dict[tuple[str, int], StoredWrite] = field(default_factory=dict)
    ts: str | None = None
    pinned: bool = False
    delta_channels: frozenset[str] = frozenset()


@dataclass(slots=True)
class ThreadMeta:
    """What the SQL savers keep in their summary table: first and last write, TTL."""

    created_at: datetime
    updated_at: datetime
    ttl: timedelta | None = None

    @property
    def expires_at(self) -> datetime | None:
        return None if self.ttl is None else self.updated_at + self.ttl


class Namespace(dict[str, StoredCheckpoint]):
    """A namespace's checkpoints by id, knowing its newest id: the head, where every read
    without an id starts, and `max` over a long thread costs more than the read itself.

    The head is kept (None: not known yet) as either absent or newer than every id here:
    an added id newer than it replaces it, and `head()` recomputes it if it was deleted.
    """

    __slots__ = ("_children", "_head")

    def __init__(self) -> None:
        super().__init__()
        self._head: str | None = None
        # How many checkpoints name each parent id (None: not counted yet). Kept by
        # `__setitem__`, dropped by every other change and counted again when asked. A
        # plain dict read with `get` (in C), not a Counter (`__missing__` is Python).
        self._children: dict[str, int] | None = None

    def __setitem__(self, checkpoint_id: str, stored: StoredCheckpoint) -> None:
        children = self._children
        if children is not None:
            old = self.get(checkpoint_id)
            if old is not None and old.parent_id is not None:
                children[old.parent_id] -= 1
            parent_id = stored.parent_id
            if parent_id is not None:
                children[parent_id] = children.get(parent_id, 0) + 1
        super().__setitem__(checkpoint_id, stored)
        head = self._head
        if head is not None and checkpoint_id > head:
            self._head = checkpoint_id

    def __delitem__(self, checkpoint_id: str) -> None:
        self._children = None
        super().__delitem__(checkpoint_id)

    def pop(self, *args: Any) -> Any:
        self._children = None
        return super().pop(*args)

    def popitem(self) -> tuple[str, StoredCheckpoint]:
        self._children = None
        return super().popitem()

    def clear(self) -> None:
        self._children = None
        super().clear()

    def update(self, *args: Any, **kwargs: Any) -> None:
        super().update(*args, **kwargs)
        self._head = None
        self._children = None

    def setdefault(self, checkpoint_id: str, stored: StoredCheckpoint) -> StoredCheckpoint:
        self._head = None
        self._children = None
        return super().setdefault(checkpoint_id, stored)

    def __ior__(self, other: Any) -> Namespace:  # type: ignore[override,misc]
        self._head = None
        self._children = None
        return super().__ior__(other)

    def is_named_as_parent(self, checkpoint_id: str) -> bool:
        """Whether a checkpoint stored here names `checkpoint_id` as its parent (the loop
        rule of `put`, see `sql/parents.py`)."""
        children = self._children
        if children is None:
            children = self._children = {}
            for stored in self.values():
                parent_id = stored.parent_id
                if parent_id is not None:
                    children[parent_id] = children.get(parent_id, 0) + 1
        return children.get(checkpoint_id, 0) > 0

    def head(self) -> str:
        """The newest checkpoint id (ValueError when there is none, as `max`)."""
        head = self._head
        if head is None or head not in self:
            head = self._head = max(self)
        return head


def write_location(
    thread_id: str, ns: str, checkpoint_id: str, write: StoredWrite
) -> ValueLocation:
    return ValueLocation.write(
        thread_id, ns, checkpoint_id, write.task_id, write.idx, write.channel
    )


_encode_json: Callable[[Any, int], Sequence[str]] | None = (
    None
    if _c_make_encoder is None
    else _c_make_encoder(None, _refuse_json, encode_basestring, None, ":", ",", True, False, False)
)
"""CPython's C encoder with `dumps_json`'s settings (compact, sorted keys, no NaN, other
types refused), built once and stateless: no circular-reference markers, so any thread may
call it without `dumps_json`'s per-thread wrapper (half its cost on a put's metadata). A
circular value recurses until RecursionError, and is then refused by `dumps_json`."""


def metadata_json(metadata: Mapping[str, Any]) -> str:
    """`dumps_json(metadata)`: the same text for what it stores, its errors (raised by
    `dumps_json` itself) for what it refuses."""
    if _encode_json is not None and type(metadata) is dict:
        try:
            text = "".join(_encode_json(metadata, 0))
            # The two checks `dumps_json` adds: UTF-8 (only non-ASCII text can fail it)
            # and nesting (bounded by the bracket count).
            if not text.isascii():
                text.encode("utf-8")
        except Exception:
            pass  # refused, or a lone surrogate: `dumps_json` says how
        else:
            if text.count("{") + text.count("[") <= MAX_METADATA_DEPTH:
                return text
    return dumps_json(metadata if type(metadata) is dict else dict(metadata))


def stored_metadata(stored: StoredCheckpoint) -> dict[str, Any]:
    """A checkpoint's metadata, decoded as the SQL savers decode theirs."""
    return metadata_counters_as_pairs(loads_json(stored.metadata))


WRITE_ORDER = attrgetter("task_path", "task_id", "idx")
"""The order the runtime applies a checkpoint's pending writes in (empty paths first)."""


def ordered_writes(writes: Mapping[tuple[str, int], StoredWrite]) -> list[StoredWrite]:
    """A checkpoint's pending writes in `WRITE_ORDER` (most have one or none)."""
    if len(writes) < 2:
        return list(writes.values())
    return sorted(writes.values(), key=WRITE_ORDER)


def delta_channels_fast(counters: Any) -> frozenset[str]:
    """`delta_channels_of`, without its checks for the two shapes every put brings."""
    if counters is None:
        return frozenset()
    if type(counters) is dict:
        return frozenset(map(str, counters))
    return delta_channels_of(counters)


def run_id_of(metadata: Mapping[str, Any]) -> str | None:
    value = metadata.get("run_id")
    return None if value is None else str(value)
